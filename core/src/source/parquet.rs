//! `from_parquet(path)`: Parquet files read with arrow-rs' Parquet reader.
//!
//! Files are dealt round-robin to subtasks; a subtask's offset is an entry
//! list (FLIP-147 redistribution) with one entry `(file index, rows of that
//! file already emitted)` per file it has not read to its end, so a restore
//! re-opens each file and skips exactly the rows already emitted, in
//! whichever subtask the file lands at another parallelism. Offsets of
//! older checkpoints (position among the subtask's files, rows) still
//! restore at the same parallelism. A subtask reads its files interleaved,
//! a batch of each in turn (DESIGN.md "Event time per split"), so one
//! file's event time never runs ahead of another's.
//!
//! Files are local paths or object store URIs (DESIGN.md "Where the data
//! lives"): an object is read by byte ranges through [`ObjectFile`] (the
//! footer, then each column chunk), never downloaded whole first.

use std::collections::VecDeque;
use std::io::Read;
use std::ops::Range;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use bytes::Bytes;
use parking_lot::Mutex;
use parquet::arrow::arrow_reader::{ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder};
use parquet::errors::ParquetError;
use parquet::file::metadata::ParquetMetaData;
use parquet::file::reader::{ChunkReader, Length};

use super::{decode_positions, encode_positions, SourceFactory, SourcePoll, SourceReader};
use crate::error::{Error, Result};
use crate::operator::OperatorContext;
use crate::state::{decode_entries, encode_entries, Redistribution};
use crate::store::{ObjectFile, StorageOptions};

/// Bytes fetched at a time when the Parquet reader streams pages outside
/// the column chunks the footer lists (it never should).
const READ_AHEAD: usize = 1 << 20;

/// A Parquet file as the reader sees it: byte ranges of a local file or an
/// object. Of an object, every column chunk the reader touches is fetched
/// whole with one request and kept while it is read (the page reader asks
/// for one page header at a time: a request each would cost a round trip
/// per page).
#[derive(Clone)]
struct ParquetInput {
    file: Arc<ObjectFile>,
    chunks: Arc<ChunkCache>,
}

/// The column chunks of an object (from its footer) and the ones fetched.
#[derive(Default)]
struct ChunkCache {
    /// Byte ranges of every column chunk, sorted by start.
    ranges: OnceLock<Vec<Range<u64>>>,
    /// Fetched chunks, oldest first, at most `capacity` of them.
    held: Mutex<VecDeque<(u64, Bytes)>>,
    capacity: OnceLock<usize>,
}

impl ParquetInput {
    fn new(file: ObjectFile) -> Self {
        ParquetInput {
            file: Arc::new(file),
            chunks: Arc::new(ChunkCache::default()),
        }
    }

    /// Tells the cache where the column chunks are (once the footer is read).
    fn know_chunks(&self, metadata: &ParquetMetaData) {
        if self.file.is_local() {
            return;
        }
        let mut ranges: Vec<Range<u64>> = metadata
            .row_groups()
            .iter()
            .flat_map(|rg| rg.columns().iter())
            .map(|c| {
                let (start, len) = c.byte_range();
                start..start + len
            })
            .collect();
        ranges.sort_by_key(|r| r.start);
        let columns = metadata
            .row_groups()
            .first()
            .map_or(1, |rg| rg.num_columns());
        let _ = self.chunks.capacity.set(2 * columns.max(1));
        let _ = self.chunks.ranges.set(ranges);
    }

    /// The fetched column chunk holding byte `at` and where it starts.
    fn chunk_at(&self, at: u64) -> std::io::Result<Option<(u64, Bytes)>> {
        let Some(ranges) = self.chunks.ranges.get() else {
            return Ok(None);
        };
        let i = ranges.partition_point(|r| r.start <= at);
        let Some(range) = i.checked_sub(1).map(|i| &ranges[i]) else {
            return Ok(None);
        };
        if at >= range.end {
            return Ok(None);
        }
        let mut held = self.chunks.held.lock();
        if let Some((start, bytes)) = held.iter().find(|(s, _)| *s == range.start) {
            return Ok(Some((*start, bytes.clone())));
        }
        let len = (range.end - range.start) as usize;
        let bytes = self.file.read_range(range.start, len)?;
        held.push_back((range.start, bytes.clone()));
        if held.len() > self.chunks.capacity.get().copied().unwrap_or(1) {
            held.pop_front();
        }
        Ok(Some((range.start, bytes)))
    }
}

fn external(e: std::io::Error) -> ParquetError {
    ParquetError::External(Box::new(e))
}

impl Length for ParquetInput {
    fn len(&self) -> u64 {
        self.file.size()
    }
}

impl ChunkReader for ParquetInput {
    type T = RangeRead;

    fn get_read(&self, start: u64) -> parquet::errors::Result<RangeRead> {
        let (pos, buf) = match self.chunk_at(start).map_err(external)? {
            Some((chunk, bytes)) => (
                chunk + bytes.len() as u64,
                bytes.slice((start - chunk) as usize..),
            ),
            None => (start, Bytes::new()),
        };
        Ok(RangeRead {
            file: self.file.clone(),
            pos,
            buf,
        })
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<Bytes> {
        if let Some((chunk, bytes)) = self.chunk_at(start).map_err(external)? {
            let from = (start - chunk) as usize;
            if from + length <= bytes.len() {
                return Ok(bytes.slice(from..from + length));
            }
        }
        let bytes = self.file.read_range(start, length).map_err(external)?;
        if bytes.len() < length {
            return Err(ParquetError::EOF(format!(
                "{} bytes wanted at {start}, {} left",
                length,
                bytes.len()
            )));
        }
        Ok(bytes)
    }
}

/// Reads a file from a position on: first what is already fetched, then
/// [`READ_AHEAD`] bytes per request.
struct RangeRead {
    file: Arc<ObjectFile>,
    pos: u64,
    buf: Bytes,
}

impl Read for RangeRead {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        if self.buf.is_empty() {
            self.buf = self.file.read_range(self.pos, READ_AHEAD.max(out.len()))?;
            self.pos += self.buf.len() as u64;
        }
        let n = out.len().min(self.buf.len());
        out[..n].copy_from_slice(&self.buf[..n]);
        let _ = self.buf.split_to(n);
        Ok(n)
    }
}

/// Factory of Parquet readers over a fixed, ordered list of files.
pub struct ParquetSource {
    /// The source's name, for errors.
    name: String,
    paths: Arc<Vec<PathBuf>>,
    schema: SchemaRef,
    options: Arc<StorageOptions>,
}

fn open_builder(
    name: &str,
    path: &PathBuf,
    options: &StorageOptions,
) -> Result<ParquetRecordBatchReaderBuilder<ParquetInput>> {
    let file = ObjectFile::open(path, options).map_err(|e| Error::io(name, path, &e))?;
    let input = ParquetInput::new(file);
    let builder =
        ParquetRecordBatchReaderBuilder::try_new(input.clone()).map_err(|e| Error::Io {
            operator: name.to_string(),
            path: path.clone(),
            message: format!("not a readable Parquet file: {e}"),
            source: Some(Arc::new(e)),
        })?;
    input.know_chunks(builder.metadata());
    Ok(builder)
}

impl ParquetSource {
    /// Source `name` over local `paths` (at least one); every file must
    /// have the schema of the first.
    pub fn new(name: &str, paths: Vec<PathBuf>) -> Result<Self> {
        Self::new_with(name, paths, StorageOptions::new())
    }

    /// [`new`](Self::new) over paths that may be object store URIs, reached
    /// with `options`.
    pub fn new_with(name: &str, paths: Vec<PathBuf>, options: StorageOptions) -> Result<Self> {
        let Some(first) = paths.first() else {
            return Err(Error::graph(
                name,
                "from_parquet found no Parquet files to read",
            ));
        };
        let schema = open_builder(name, first, &options)?.schema().clone();
        for p in &paths[1..] {
            let s = open_builder(name, p, &options)?.schema().clone();
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
            options: Arc::new(options),
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
        let mut reader = ParquetReader {
            paths: self.paths.clone(),
            options: self.options.clone(),
            files: Vec::new(),
            open: Vec::new(),
            cursor: 0,
            last: None,
            batch_size: batch_size.max(1),
            limit: batch_size.max(1),
            name: self.name.clone(),
        };
        reader.set_files(mine);
        Ok(Box::new(reader))
    }

    fn schema(&self) -> Option<SchemaRef> {
        Some(self.schema.clone())
    }

    /// Every file not read to its end is an entry `(file index, rows emitted)`.
    fn redistribution(&self) -> Redistribution {
        Redistribution::EvenSplit
    }
}

/// One file of a subtask: its index in the source's list, the rows already
/// emitted, and its reader once its turn came.
struct FileSplit {
    index: usize,
    rows: u64,
    /// The file's row count, known once it is open.
    total: u64,
    reader: Option<ParquetRecordBatchReader>,
    /// Rows read from the file but not emitted yet (a batch cut to the
    /// row limit); `rows` counts emitted rows only, so the offset is exact.
    rest: Option<RecordBatch>,
}

/// One subtask's reader: its files are read interleaved, a batch of each
/// in turn (FLIP-27 per-split event time, DESIGN.md "Event time per
/// split"), each file named by its index in the source's list.
pub struct ParquetReader {
    /// Every file of the source, in order.
    paths: Arc<Vec<PathBuf>>,
    options: Arc<StorageOptions>,
    /// The files this subtask has not read to their end.
    files: Vec<FileSplit>,
    /// `open[i]` is the index of `files[i]`.
    open: Vec<u64>,
    /// The position in `files` of the file to read next.
    cursor: usize,
    /// The file of the last batch.
    last: Option<u64>,
    batch_size: usize,
    /// The most rows a batch holds now (`limit_batch_rows`).
    limit: usize,
    /// The source's name, for errors.
    name: String,
}

impl ParquetReader {
    fn malformed() -> Error {
        Error::checkpoint(None, "the Parquet source's offset is malformed")
    }

    /// Reads exactly `files` (index, rows already emitted) from now on.
    fn set_files(&mut self, files: Vec<(usize, u64)>) {
        self.files = files
            .into_iter()
            .map(|(index, rows)| FileSplit {
                index,
                rows,
                total: u64::MAX,
                reader: None,
                rest: None,
            })
            .collect();
        self.open = self.files.iter().map(|f| f.index as u64).collect();
        self.cursor = 0;
    }

    fn open_file(
        name: &str,
        paths: &[PathBuf],
        options: &StorageOptions,
        f: &mut FileSplit,
        batch_size: usize,
    ) -> Result<()> {
        let path = &paths[f.index];
        let builder = open_builder(name, path, options)?;
        let total = builder.metadata().file_metadata().num_rows() as u64;
        if f.rows > total {
            return Err(Error::checkpoint(
                None,
                format!(
                    "Parquet file '{}' has {total} rows, fewer than its checkpointed offset {}",
                    path.display(),
                    f.rows
                ),
            ));
        }
        let reader = builder
            .with_batch_size(batch_size)
            .with_offset(f.rows as usize)
            .build()
            .map_err(|e| Error::Io {
                operator: name.to_string(),
                path: path.clone(),
                message: e.to_string(),
                source: Some(Arc::new(e)),
            })?;
        f.total = total;
        f.reader = Some(reader);
        Ok(())
    }

    /// Drops the file at `pos` (read to its end); the next one moves up.
    fn retire(&mut self, pos: usize) {
        self.files.remove(pos);
        self.open.remove(pos);
        self.cursor = pos;
    }
}

impl SourceReader for ParquetReader {
    fn poll_next(&mut self) -> Result<SourcePoll> {
        while !self.files.is_empty() {
            let pos = self.cursor % self.files.len();
            let f = &mut self.files[pos];
            if f.reader.is_none() {
                Self::open_file(&self.name, &self.paths, &self.options, f, self.batch_size)?;
            }
            let Some(reader) = f.reader.as_mut() else {
                continue;
            };
            let next = match f.rest.take() {
                Some(rest) => Some(Ok(rest)),
                None => reader.next(),
            };
            match next {
                Some(Ok(mut batch)) => {
                    if batch.num_rows() > self.limit {
                        // Zero-copy: the rest keeps sharing the buffers.
                        f.rest = Some(batch.slice(self.limit, batch.num_rows() - self.limit));
                        batch = batch.slice(0, self.limit);
                    }
                    f.rows += batch.num_rows() as u64;
                    self.last = Some(f.index as u64);
                    if f.rows >= f.total {
                        self.retire(pos);
                    } else {
                        self.cursor = pos + 1;
                    }
                    return Ok(SourcePoll::Batch(batch));
                }
                Some(Err(e)) => {
                    return Err(Error::Io {
                        operator: self.name.clone(),
                        path: self.paths[f.index].clone(),
                        message: e.to_string(),
                        source: Some(Arc::new(e)),
                    })
                }
                None => self.retire(pos),
            }
        }
        Ok(SourcePoll::End)
    }

    fn limit_batch_rows(&mut self, rows: usize) {
        self.limit = rows.clamp(1, self.batch_size);
    }

    fn offset(&self) -> Vec<u8> {
        let entries: Vec<Vec<u8>> = self
            .files
            .iter()
            .map(|f| encode_positions(&[f.index as u64, f.rows]))
            .collect();
        encode_entries(&entries)
    }

    fn last_split(&self) -> Option<u64> {
        self.last
    }

    fn open_splits(&self) -> &[u64] {
        &self.open
    }

    fn seek(&mut self, offset: &[u8]) -> Result<()> {
        let Some(entries) = decode_entries(offset) else {
            // An offset of an older checkpoint: (position among the
            // subtask's files, rows emitted of that file); the files before
            // it were read to their end.
            let pos = decode_positions(offset, 2).ok_or_else(Self::malformed)?;
            let mine: Vec<(usize, u64)> = self.files.iter().map(|f| (f.index, f.rows)).collect();
            if pos[0] as usize > mine.len() {
                return Err(Error::checkpoint(
                    None,
                    format!(
                        "the Parquet source has {} files, fewer than its checkpointed file index {}",
                        mine.len(),
                        pos[0]
                    ),
                ));
            }
            let mut left: Vec<(usize, u64)> = mine[pos[0] as usize..].to_vec();
            if let Some(f) = left.first_mut() {
                f.1 = pos[1];
            }
            self.set_files(left);
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
        self.set_files(files);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{AsArray, Int64Array};
    use arrow::datatypes::Int64Type;
    use parquet::arrow::ArrowWriter;
    use std::fs::File;

    fn ctx() -> OperatorContext {
        OperatorContext {
            name: "files".into(),
            uid: "files".into(),
            subtask_index: 0,
            parallelism: 1,
            max_parallelism: 128,
            key_groups: 0..128,
            attempt: 0,
        }
    }

    fn write(path: &std::path::Path, values: std::ops::Range<i64>) {
        let batch = RecordBatch::try_from_iter([(
            "v",
            Arc::new(Int64Array::from_iter_values(values)) as arrow::array::ArrayRef,
        )])
        .unwrap();
        let mut w =
            ArrowWriter::try_new(File::create(path).unwrap(), batch.schema(), None).unwrap();
        w.write(&batch).unwrap();
        w.close().unwrap();
    }

    fn drain(r: &mut dyn SourceReader) -> Vec<i64> {
        let mut out = Vec::new();
        while let SourcePoll::Batch(b) = r.poll_next().unwrap() {
            out.extend(b.column(0).as_primitive::<Int64Type>().values().iter());
        }
        out.sort_unstable();
        out
    }

    #[test]
    fn test_a_row_limit_cuts_batches_and_a_restore_reads_exactly_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a.parquet"), dir.path().join("b.parquet"));
        write(&a, 0..50);
        write(&b, 100..150);
        let src = ParquetSource::new("files", vec![a, b]).unwrap();
        let mut r = src.create(&ctx(), 32).unwrap();
        r.limit_batch_rows(5);
        let mut seen = Vec::new();
        for _ in 0..3 {
            let SourcePoll::Batch(batch) = r.poll_next().unwrap() else {
                panic!("a batch");
            };
            assert_eq!(batch.num_rows(), 5, "cut to the limit");
            seen.extend(batch.column(0).as_primitive::<Int64Type>().values().iter());
        }
        // Rows read from a file but not emitted (the rest of a cut batch)
        // are not in the offset: a restore reads them again.
        let offset = r.offset();
        let mut restored = src.create(&ctx(), 32).unwrap();
        restored.seek(&offset).unwrap();
        let mut all = seen.clone();
        all.extend(drain(restored.as_mut()));
        all.sort_unstable();
        assert_eq!(all, (0..50).chain(100..150).collect::<Vec<i64>>());
        // The original reader, the limit lifted, goes on exactly as well.
        r.limit_batch_rows(usize::MAX);
        let mut rest = seen;
        rest.extend(drain(r.as_mut()));
        rest.sort_unstable();
        assert_eq!(rest, (0..50).chain(100..150).collect::<Vec<i64>>());
    }
}
