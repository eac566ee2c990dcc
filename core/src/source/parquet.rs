//! `from_parquet(path)`: Parquet files read with arrow-rs' Parquet reader.
//!
//! Files are dealt round-robin to subtasks; a subtask's offset is (index of
//! its current file, rows of that file already emitted), so a restore
//! re-opens the file and skips exactly the rows already emitted.

use std::fs::File;
use std::path::PathBuf;

use arrow::datatypes::SchemaRef;
use parquet::arrow::arrow_reader::{ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder};

use super::{decode_positions, encode_positions, SourceFactory, SourcePoll, SourceReader};
use crate::error::{Error, Result};
use crate::operator::OperatorContext;

/// Factory of Parquet readers over a fixed, ordered list of files.
pub struct ParquetSource {
    paths: Vec<PathBuf>,
    schema: SchemaRef,
}

fn open_builder(path: &PathBuf) -> Result<ParquetRecordBatchReaderBuilder<File>> {
    let file = File::open(path).map_err(|e| Error::io("", path, &e))?;
    ParquetRecordBatchReaderBuilder::try_new(file).map_err(|e| Error::Io {
        operator: String::new(),
        path: path.clone(),
        message: format!("not a readable Parquet file: {e}"),
    })
}

impl ParquetSource {
    /// A source over `paths` (at least one); every file must have the schema
    /// of the first.
    pub fn new(paths: Vec<PathBuf>) -> Result<Self> {
        let Some(first) = paths.first() else {
            return Err(Error::graph(
                "",
                "from_parquet found no Parquet files to read",
            ));
        };
        let schema = open_builder(first)?.schema().clone();
        for p in &paths[1..] {
            let s = open_builder(p)?.schema().clone();
            if s.fields() != schema.fields() {
                return Err(Error::schema(
                    "",
                    format!(
                        "Parquet file '{}' has schema {s:?} but '{}' has {schema:?}",
                        p.display(),
                        first.display()
                    ),
                ));
            }
        }
        Ok(ParquetSource { paths, schema })
    }
}

impl SourceFactory for ParquetSource {
    fn create(&self, ctx: &OperatorContext, batch_size: usize) -> Result<Box<dyn SourceReader>> {
        let p = ctx.parallelism.max(1);
        let mine = self
            .paths
            .iter()
            .enumerate()
            .filter(|(i, _)| i % p == ctx.subtask_index)
            .map(|(_, path)| path.clone())
            .collect();
        Ok(Box::new(ParquetReader {
            files: mine,
            file: 0,
            rows_in_file: 0,
            reader: None,
            batch_size: batch_size.max(1),
        }))
    }

    fn schema(&self) -> Option<SchemaRef> {
        Some(self.schema.clone())
    }
}

/// One subtask's reader.
pub struct ParquetReader {
    files: Vec<PathBuf>,
    file: usize,
    rows_in_file: u64,
    reader: Option<ParquetRecordBatchReader>,
    batch_size: usize,
}

impl ParquetReader {
    fn open_current(&mut self) -> Result<()> {
        let path = &self.files[self.file];
        let builder = open_builder(path)?;
        let total = builder.metadata().file_metadata().num_rows() as u64;
        if self.rows_in_file > total {
            return Err(Error::checkpoint(
                None,
                format!(
                    "Parquet file '{}' has {total} rows, fewer than its checkpointed offset {}",
                    path.display(),
                    self.rows_in_file
                ),
            ));
        }
        let reader = builder
            .with_batch_size(self.batch_size)
            .with_offset(self.rows_in_file as usize)
            .build()
            .map_err(|e| Error::Io {
                operator: String::new(),
                path: path.clone(),
                message: e.to_string(),
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
                    self.rows_in_file += batch.num_rows() as u64;
                    return Ok(SourcePoll::Batch(batch));
                }
                Some(Err(e)) => {
                    return Err(Error::Io {
                        operator: String::new(),
                        path: self.files[self.file].clone(),
                        message: e.to_string(),
                    })
                }
                None => {
                    self.reader = None;
                    self.file += 1;
                    self.rows_in_file = 0;
                }
            }
        }
    }

    fn offset(&self) -> Vec<u8> {
        encode_positions(&[self.file as u64, self.rows_in_file])
    }

    fn seek(&mut self, offset: &[u8]) -> Result<()> {
        let pos = decode_positions(offset, 2)
            .ok_or_else(|| Error::checkpoint(None, "the Parquet source's offset is malformed"))?;
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
        self.rows_in_file = pos[1];
        self.reader = None;
        Ok(())
    }
}
