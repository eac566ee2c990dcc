//! `from_parquet(path)`: Parquet files read with arrow-rs' Parquet reader.
//!
//! Files are dealt round-robin to subtasks; a subtask's offset is an entry
//! list (FLIP-147 redistribution) with one entry `(file index, rows of that
//! file already emitted)` per file it has not read to its end, so a restore
//! re-opens each file and skips exactly the rows already emitted, in
//! whichever subtask the file lands at another parallelism. Offsets of
//! older checkpoints (position among the subtask's files, rows) still
//! restore at the same parallelism.

use std::fs::File;
use std::path::PathBuf;
use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use parquet::arrow::arrow_reader::{ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder};

use super::{decode_positions, encode_positions, SourceFactory, SourcePoll, SourceReader};
use crate::error::{Error, Result};
use crate::operator::OperatorContext;
use crate::state::{decode_entries, encode_entries, Redistribution};

/// Factory of Parquet readers over a fixed, ordered list of files.
pub struct ParquetSource {
    /// The source's name, for errors.
    name: String,
    paths: Arc<Vec<PathBuf>>,
    schema: SchemaRef,
}

fn open_builder(name: &str, path: &PathBuf) -> Result<ParquetRecordBatchReaderBuilder<File>> {
    let file = File::open(path).map_err(|e| Error::io(name, path, &e))?;
    ParquetRecordBatchReaderBuilder::try_new(file).map_err(|e| Error::Io {
        operator: name.to_string(),
        path: path.clone(),
        message: format!("not a readable Parquet file: {e}"),
        source: Some(Arc::new(e)),
    })
}

impl ParquetSource {
    /// Source `name` over `paths` (at least one); every file must have the
    /// schema of the first.
    pub fn new(name: &str, paths: Vec<PathBuf>) -> Result<Self> {
        let Some(first) = paths.first() else {
            return Err(Error::graph(
                name,
                "from_parquet found no Parquet files to read",
            ));
        };
        let schema = open_builder(name, first)?.schema().clone();
        for p in &paths[1..] {
            let s = open_builder(name, p)?.schema().clone();
            if s.fields() != schema.fields() {
                return Err(Error::schema(
                    name,
                    format!(
                        "Parquet file '{}' has schema {s:?} but '{}' has {schema:?}",
                        p.display(),
                        first.display()
                    ),
                ));
            }
        }
        Ok(ParquetSource {
            name: name.to_string(),
            paths: Arc::new(paths),
            schema,
        })
    }
}

impl SourceFactory for ParquetSource {
    fn create(&self, ctx: &OperatorContext, batch_size: usize) -> Result<Box<dyn SourceReader>> {
        let p = ctx.parallelism.max(1);
        let mine = (0..self.paths.len())
            .filter(|i| i % p == ctx.subtask_index)
            .map(|i| (i, 0))
            .collect();
        Ok(Box::new(ParquetReader {
            paths: self.paths.clone(),
            files: mine,
            file: 0,
            reader: None,
            batch_size: batch_size.max(1),
            name: self.name.clone(),
        }))
    }

    fn schema(&self) -> Option<SchemaRef> {
        Some(self.schema.clone())
    }

    /// Every file not read to its end is an entry `(file index, rows emitted)`.
    fn redistribution(&self) -> Redistribution {
        Redistribution::EvenSplit
    }
}

/// One subtask's reader.
pub struct ParquetReader {
    /// Every file of the source, in order.
    paths: Arc<Vec<PathBuf>>,
    /// The files this subtask reads (indices into `paths`), each with the
    /// rows already emitted.
    files: Vec<(usize, u64)>,
    /// The position in `files` of the file being read.
    file: usize,
    reader: Option<ParquetRecordBatchReader>,
    batch_size: usize,
    /// The source's name, for errors.
    name: String,
}

impl ParquetReader {
    fn malformed() -> Error {
        Error::checkpoint(None, "the Parquet source's offset is malformed")
    }

    fn open_current(&mut self) -> Result<()> {
        let (index, rows) = self.files[self.file];
        let path = &self.paths[index];
        let builder = open_builder(&self.name, path)?;
        let total = builder.metadata().file_metadata().num_rows() as u64;
        if rows > total {
            return Err(Error::checkpoint(
                None,
                format!(
                    "Parquet file '{}' has {total} rows, fewer than its checkpointed offset {rows}",
                    path.display(),
                ),
            ));
        }
        let reader = builder
            .with_batch_size(self.batch_size)
            .with_offset(rows as usize)
            .build()
            .map_err(|e| Error::Io {
                operator: self.name.clone(),
                path: path.clone(),
                message: e.to_string(),
                source: Some(Arc::new(e)),
            })?;
        self.reader = Some(reader);
        Ok(())
    }
}

impl SourceReader for ParquetReader {
    fn poll_next(&mut self) -> Result<SourcePoll> {
        loop {
            if self.file >= self.files.len() {
                return Ok(SourcePoll::End);
            }
            if self.reader.is_none() {
                self.open_current()?;
            }
            let Some(reader) = self.reader.as_mut() else {
                continue;
            };
            match reader.next() {
                Some(Ok(batch)) => {
                    self.files[self.file].1 += batch.num_rows() as u64;
                    return Ok(SourcePoll::Batch(batch));
                }
                Some(Err(e)) => {
                    return Err(Error::Io {
                        operator: self.name.clone(),
                        path: self.paths[self.files[self.file].0].clone(),
                        message: e.to_string(),
                        source: Some(Arc::new(e)),
                    })
                }
                None => {
                    self.reader = None;
                    self.file += 1;
                }
            }
        }
    }

    fn offset(&self) -> Vec<u8> {
        let entries: Vec<Vec<u8>> = self.files[self.file.min(self.files.len())..]
            .iter()
            .map(|(i, rows)| encode_positions(&[*i as u64, *rows]))
            .collect();
        encode_entries(&entries)
    }

    fn seek(&mut self, offset: &[u8]) -> Result<()> {
        self.reader = None;
        let Some(entries) = decode_entries(offset) else {
            // An offset of an older checkpoint: (position among the
            // subtask's files, rows emitted of that file).
            let pos = decode_positions(offset, 2).ok_or_else(Self::malformed)?;
            if pos[0] as usize > self.files.len() {
                return Err(Error::checkpoint(
                    None,
                    format!(
                        "the Parquet source has {} files, fewer than its checkpointed file index {}",
                        self.files.len(),
                        pos[0]
                    ),
                ));
            }
            self.file = pos[0] as usize;
            if let Some(f) = self.files.get_mut(self.file) {
                f.1 = pos[1];
            }
            return Ok(());
        };
        let mut files = Vec::with_capacity(entries.len());
        for e in entries {
            let f = decode_positions(&e, 2).ok_or_else(Self::malformed)?;
            let index = usize::try_from(f[0]).unwrap_or(usize::MAX);
            if index >= self.paths.len() {
                return Err(Error::checkpoint(
                    None,
                    format!(
                        "the Parquet source has {} files, fewer than its checkpointed file index {}",
                        self.paths.len(),
                        f[0]
                    ),
                ));
            }
            files.push((index, f[1]));
        }
        self.files = files;
        self.file = 0;
        Ok(())
    }
}
