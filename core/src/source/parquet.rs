//! `from_parquet(path)`: Parquet files read with arrow-rs' Parquet reader.
//!
//! The splits are the files' row groups, dealt round-robin to subtasks, so
//! the subtasks of a source share even one large file. A subtask's offset is
//! an entry list (FLIP-147 redistribution) with one entry `(file index, row
//! group, rows of that group already emitted)` per row group it has not
//! read to its end, so a restore re-opens each row group and skips exactly
//! the rows already emitted, in whichever subtask it lands at another
//! parallelism. Offsets of older checkpoints (files as splits: `(file index,
//! rows of the file)` entries, or the position among the subtask's files)
//! still restore. A subtask reads its files interleaved, a batch of each in
//! turn (`super::next_split`), and the row groups of one file in order
//! (DESIGN.md "Event time per split"): a file stays the unit of event time,
//! so one file's event time never runs ahead of another's.
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
use bytes::{Buf, Bytes};
use parking_lot::Mutex;
use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReader,
    ParquetRecordBatchReaderBuilder,
};
use parquet::arrow::ProjectionMask;
use parquet::errors::ParquetError;
use parquet::file::metadata::ParquetMetaData;
use parquet::file::reader::{ChunkReader, Length};

use super::{
    decode_positions, encode_positions, next_split, SourceFactory, SourcePoll, SourceReader,
};
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
        // Set once: every split of the file has the one footer.
        self.chunks.capacity.get_or_init(|| 2 * columns.max(1));
        self.chunks.ranges.get_or_init(|| ranges);
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
        self.buf.advance(n);
        Ok(n)
    }
}

/// One file of the source: its path and its footer, read once when the
/// source is built (every split of the file reuses it).
struct FileMeta {
    path: PathBuf,
    meta: ArrowReaderMetadata,
}

impl FileMeta {
    fn row_groups(&self) -> usize {
        self.meta.metadata().num_row_groups()
    }

    fn group_rows(&self, group: usize) -> u64 {
        self.meta.metadata().row_group(group).num_rows().max(0) as u64
    }
}

/// Factory of Parquet readers over a fixed, ordered list of files.
pub struct ParquetSource {
    /// The source's name, for errors.
    name: String,
    files: Arc<Vec<FileMeta>>,
    /// The schema of the batches: the files' or the projected columns'.
    schema: SchemaRef,
    options: Arc<StorageOptions>,
    /// The top-level columns read (indices into the files' schema, in
    /// file order); `None`: all of them.
    projection: Option<Arc<Vec<usize>>>,
}

fn open_input(name: &str, path: &PathBuf, options: &StorageOptions) -> Result<ParquetInput> {
    let file = ObjectFile::open(path, options).map_err(|e| Error::io(name, path, &e))?;
    Ok(ParquetInput::new(file))
}

fn read_footer(name: &str, path: &PathBuf, options: &StorageOptions) -> Result<FileMeta> {
    let input = open_input(name, path, options)?;
    let meta = ArrowReaderMetadata::load(&input, ArrowReaderOptions::default()).map_err(|e| {
        Error::Io {
            operator: name.to_string(),
            path: path.clone(),
            message: format!("not a readable Parquet file: {e}"),
            source: Some(Arc::new(e)),
        }
    })?;
    Ok(FileMeta {
        path: path.clone(),
        meta,
    })
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
        let first = read_footer(name, first, &options)?;
        let schema = first.meta.schema().clone();
        let mut files = vec![first];
        for p in &paths[1..] {
            let file = read_footer(name, p, &options)?;
            let s = file.meta.schema();
            if s.fields() != schema.fields() {
                return Err(Error::schema(
                    name,
                    format!(
                        "Parquet file '{}' has schema {s:?} but '{}' has {schema:?}",
                        p.display(),
                        files[0].path.display()
                    ),
                ));
            }
            files.push(file);
        }
        Ok(ParquetSource {
            name: name.to_string(),
            files: Arc::new(files),
            schema,
            options: Arc::new(options),
            projection: None,
        })
    }

    /// Reads only the top-level `columns` (projection pushdown: the other
    /// columns' chunks are neither fetched nor decoded). The batches hold
    /// them in the files' column order.
    pub fn with_columns(mut self, columns: &[String]) -> Result<Self> {
        let full = self.files[0].meta.schema().clone();
        let mut indices = Vec::with_capacity(columns.len());
        for name in columns {
            let Some((i, _)) = full.column_with_name(name) else {
                let known: Vec<&str> = full.fields().iter().map(|f| f.name().as_str()).collect();
                return Err(Error::schema(
                    &self.name,
                    format!("the Parquet files have no column '{name}' (they have {known:?})"),
                ));
            };
            indices.push(i);
        }
        indices.sort_unstable();
        indices.dedup();
        if indices.is_empty() {
            return Err(Error::graph(&self.name, "from_parquet: no columns to read"));
        }
        self.schema = Arc::new(
            full.project(&indices)
                .map_err(|e| Error::arrow(&self.name, &e))?,
        );
        self.projection = Some(Arc::new(indices));
        Ok(self)
    }

    /// Every row group of every file, in order: `(file, row group)`.
    fn splits(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.files
            .iter()
            .enumerate()
            .flat_map(|(f, file)| (0..file.row_groups()).map(move |g| (f, g)))
    }
}

impl SourceFactory for ParquetSource {
    fn create(&self, ctx: &OperatorContext, batch_size: usize) -> Result<Box<dyn SourceReader>> {
        let p = ctx.parallelism.max(1);
        // Row groups are the splits, dealt round-robin: one large file is
        // read by every subtask.
        let mine = self
            .splits()
            .enumerate()
            .filter(|(i, _)| i % p == ctx.subtask_index)
            .map(|(_, (f, g))| (f, g, 0))
            .collect();
        let mut reader = ParquetReader {
            files: self.files.clone(),
            options: self.options.clone(),
            projection: self.projection.clone(),
            open_files: Vec::new(),
            open: Vec::new(),
            last: None,
            batch_size: batch_size.max(1),
            limit: batch_size.max(1),
            name: self.name.clone(),
            subtask: ctx.subtask_index,
            parallelism: p,
        };
        reader.set_splits(mine);
        Ok(Box::new(reader))
    }

    fn schema(&self) -> Option<SchemaRef> {
        Some(self.schema.clone())
    }

    /// Every row group not read to its end is an entry `(file index, row
    /// group, rows emitted)`.
    fn redistribution(&self) -> Redistribution {
        Redistribution::EvenSplit
    }
}

/// A row group of a file: its index and the rows already emitted.
#[derive(Clone, Copy, Debug, PartialEq)]
struct GroupSplit {
    group: usize,
    rows: u64,
}

/// The row groups of one file that a subtask reads, in file order, the
/// first one open. A file is the unit of event time (its split id is its
/// index, as when files were the splits): its row groups are read one
/// after the other, files interleaved.
struct FileSplits {
    index: usize,
    groups: VecDeque<GroupSplit>,
    /// The rows of the first group, known once it is open.
    total: u64,
    reader: Option<ParquetRecordBatchReader>,
    /// Rows read from the group but not emitted yet (a batch cut to the
    /// row limit); `rows` counts emitted rows only, so the offset is exact.
    rest: Option<RecordBatch>,
}

/// One subtask's reader: its files are read interleaved, a batch of each
/// in turn (FLIP-27 per-split event time, DESIGN.md "Event time per
/// split"), each file named by its index in the source's list.
pub struct ParquetReader {
    /// Every file of the source, in order.
    files: Arc<Vec<FileMeta>>,
    options: Arc<StorageOptions>,
    /// The columns read (see [`ParquetSource::with_columns`]).
    projection: Option<Arc<Vec<usize>>>,
    /// The files this subtask has row groups of not read to their end.
    open_files: Vec<FileSplits>,
    /// `open[i]` is the index of `open_files[i]`.
    open: Vec<u64>,
    /// The file of the last batch.
    last: Option<u64>,
    batch_size: usize,
    /// The most rows a batch holds now (`limit_batch_rows`).
    limit: usize,
    /// The source's name, for errors.
    name: String,
    subtask: usize,
    parallelism: usize,
}

impl ParquetReader {
    fn malformed() -> Error {
        Error::checkpoint(None, "the Parquet source's offset is malformed")
    }

    fn too_few_files(&self, index: u64) -> Error {
        Error::checkpoint(
            None,
            format!(
                "the Parquet source has {} files, fewer than its checkpointed file index {index}",
                self.files.len()
            ),
        )
    }

    /// Reads exactly `splits` (file, row group, rows already emitted) from
    /// now on.
    fn set_splits(&mut self, mut splits: Vec<(usize, usize, u64)>) {
        splits.sort_unstable_by_key(|&(f, g, _)| (f, g));
        let mut files: Vec<FileSplits> = Vec::new();
        for (index, group, rows) in splits {
            let split = GroupSplit { group, rows };
            match files.last_mut() {
                Some(f) if f.index == index => f.groups.push_back(split),
                _ => files.push(FileSplits {
                    index,
                    groups: VecDeque::from([split]),
                    total: u64::MAX,
                    reader: None,
                    rest: None,
                }),
            }
        }
        self.open = files.iter().map(|f| f.index as u64).collect();
        self.open_files = files;
    }

    /// The row groups of file `index` after the first `rows` of the file.
    fn after_rows(&self, index: usize, rows: u64) -> Result<Vec<(usize, usize, u64)>> {
        let file = &self.files[index];
        let mut skip = rows;
        let mut out = Vec::new();
        for group in 0..file.row_groups() {
            let n = file.group_rows(group);
            if skip >= n {
                skip -= n;
            } else {
                out.push((index, group, skip));
                skip = 0;
            }
        }
        if skip > 0 {
            return Err(Error::checkpoint(
                None,
                format!(
                    "Parquet file '{}' has fewer rows than its checkpointed offset {rows}",
                    file.path.display()
                ),
            ));
        }
        Ok(out)
    }

    /// Opens the first row group of `f` (the footer is the one read when
    /// the source was built).
    fn open_group(
        name: &str,
        files: &[FileMeta],
        options: &StorageOptions,
        projection: Option<&[usize]>,
        batch_size: usize,
        f: &mut FileSplits,
    ) -> Result<()> {
        let Some(split) = f.groups.front().copied() else {
            return Ok(());
        };
        let file = &files[f.index];
        let io = |e: ParquetError| Error::Io {
            operator: name.to_string(),
            path: file.path.clone(),
            message: e.to_string(),
            source: Some(Arc::new(e)),
        };
        if split.group >= file.row_groups() {
            return Err(Error::checkpoint(
                None,
                format!(
                    "Parquet file '{}' has {} row groups, fewer than its checkpointed row group {}",
                    file.path.display(),
                    file.row_groups(),
                    split.group
                ),
            ));
        }
        let total = file.group_rows(split.group);
        if split.rows > total {
            return Err(Error::checkpoint(
                None,
                format!(
                    "row group {} of Parquet file '{}' has {total} rows, fewer than its \
                     checkpointed offset {}",
                    split.group,
                    file.path.display(),
                    split.rows
                ),
            ));
        }
        let input = open_input(name, &file.path, options)?;
        input.know_chunks(file.meta.metadata());
        let mut builder =
            ParquetRecordBatchReaderBuilder::new_with_metadata(input, file.meta.clone())
                .with_row_groups(vec![split.group])
                .with_batch_size(batch_size)
                .with_offset(split.rows as usize);
        if let Some(columns) = projection {
            let mask = ProjectionMask::roots(builder.parquet_schema(), columns.iter().copied());
            builder = builder.with_projection(mask);
        }
        let reader = builder.build().map_err(io)?;
        f.total = total;
        f.reader = Some(reader);
        Ok(())
    }

    /// The first row group of the file at `pos` was read to its end: the
    /// next one opens on its turn, or the file is dropped.
    fn next_group(&mut self, pos: usize) {
        let f = &mut self.open_files[pos];
        f.groups.pop_front();
        f.reader = None;
        f.rest = None;
        f.total = u64::MAX;
        if f.groups.is_empty() {
            self.open_files.remove(pos);
            self.open.remove(pos);
        }
    }
}

impl SourceReader for ParquetReader {
    fn poll_next(&mut self) -> Result<SourcePoll> {
        // The file whose row group has emitted the fewest rows reads next
        // (a batch of each in turn), chosen from the offset alone.
        while let Some(pos) = next_split(self.open_files.iter().map(|f| {
            let rows = f.groups.front().map_or(0, |g| g.rows);
            (rows, f.index as u64)
        })) {
            let f = &mut self.open_files[pos];
            if f.reader.is_none() {
                Self::open_group(
                    &self.name,
                    &self.files,
                    &self.options,
                    self.projection.as_deref().map(Vec::as_slice),
                    self.batch_size,
                    f,
                )?;
            }
            let Some(reader) = f.reader.as_mut() else {
                self.next_group(pos);
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
                    let Some(split) = f.groups.front_mut() else {
                        return Err(Self::malformed());
                    };
                    split.rows += batch.num_rows() as u64;
                    self.last = Some(f.index as u64);
                    if split.rows >= f.total {
                        self.next_group(pos);
                    }
                    return Ok(SourcePoll::Batch(batch));
                }
                Some(Err(e)) => {
                    return Err(Error::Io {
                        operator: self.name.clone(),
                        path: self.files[f.index].path.clone(),
                        message: e.to_string(),
                        source: Some(Arc::new(e)),
                    })
                }
                None => self.next_group(pos),
            }
        }
        Ok(SourcePoll::End)
    }

    fn limit_batch_rows(&mut self, rows: usize) {
        self.limit = rows.clamp(1, self.batch_size);
    }

    fn offset(&self) -> Vec<u8> {
        let entries: Vec<Vec<u8>> = self
            .open_files
            .iter()
            .flat_map(|f| {
                f.groups
                    .iter()
                    .map(|g| encode_positions(&[f.index as u64, g.group as u64, g.rows]))
            })
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
            // An offset of the oldest checkpoints: (position among the
            // subtask's files when files were dealt round-robin, rows
            // emitted of that file); the files before it were read to
            // their end.
            let pos = decode_positions(offset, 2).ok_or_else(Self::malformed)?;
            let dealt: Vec<usize> = (0..self.files.len())
                .filter(|i| i % self.parallelism == self.subtask)
                .collect();
            let first = usize::try_from(pos[0]).unwrap_or(usize::MAX);
            if first > dealt.len() {
                return Err(Error::checkpoint(
                    None,
                    format!(
                        "the Parquet source has {} files, fewer than its checkpointed file index {}",
                        dealt.len(),
                        pos[0]
                    ),
                ));
            }
            let mut splits = Vec::new();
            for (n, &index) in dealt[first..].iter().enumerate() {
                splits.extend(self.after_rows(index, if n == 0 { pos[1] } else { 0 })?);
            }
            self.set_splits(splits);
            return Ok(());
        };
        let mut splits = Vec::with_capacity(entries.len());
        for e in entries {
            // (file, row group, rows) since row groups are the splits;
            // (file, rows of the file) in checkpoints from before.
            let p = decode_positions(&e, 3)
                .or_else(|| decode_positions(&e, 2))
                .ok_or_else(Self::malformed)?;
            let index = usize::try_from(p[0]).unwrap_or(usize::MAX);
            if index >= self.files.len() {
                return Err(self.too_few_files(p[0]));
            }
            match p[1..] {
                [group, rows] => {
                    splits.push((index, usize::try_from(group).unwrap_or(usize::MAX), rows))
                }
                [rows] => splits.extend(self.after_rows(index, rows)?),
                _ => return Err(Self::malformed()),
            }
        }
        self.set_splits(splits);
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

    /// A file of `values` in row groups of `group` rows.
    fn write_groups(path: &std::path::Path, values: std::ops::Range<i64>, group: usize) {
        let batch = RecordBatch::try_from_iter([(
            "v",
            Arc::new(Int64Array::from_iter_values(values)) as arrow::array::ArrayRef,
        )])
        .unwrap();
        let props = parquet::file::properties::WriterProperties::builder()
            .set_max_row_group_row_count(Some(group))
            .build();
        let mut w =
            ArrowWriter::try_new(File::create(path).unwrap(), batch.schema(), Some(props)).unwrap();
        w.write(&batch).unwrap();
        w.close().unwrap();
    }

    fn ctx_of(subtask: usize, parallelism: usize) -> OperatorContext {
        OperatorContext {
            subtask_index: subtask,
            parallelism,
            ..ctx()
        }
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

    #[test]
    fn test_the_row_groups_of_one_file_are_shared_by_the_subtasks() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.parquet");
        write_groups(&a, 0..1000, 100);
        let src = ParquetSource::new("files", vec![a]).unwrap();
        let mut all = Vec::new();
        for subtask in 0..3 {
            let mut r = src.create(&ctx_of(subtask, 3), 64).unwrap();
            let mine = drain(r.as_mut());
            // 10 row groups dealt round-robin: 4, 3 and 3 of them.
            assert_eq!(mine.len(), if subtask == 0 { 400 } else { 300 });
            all.extend(mine);
        }
        all.sort_unstable();
        assert_eq!(all, (0..1000).collect::<Vec<i64>>());
    }

    #[test]
    fn test_an_offset_inside_a_row_group_restores_exactly_at_another_parallelism() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a.parquet"), dir.path().join("b.parquet"));
        write_groups(&a, 0..500, 70);
        write_groups(&b, 1000..1300, 70);
        let src = ParquetSource::new("files", vec![a, b]).unwrap();
        let mut seen = Vec::new();
        let mut offsets = Vec::new();
        for subtask in 0..2 {
            let mut r = src.create(&ctx_of(subtask, 2), 32).unwrap();
            for _ in 0..5 {
                if let SourcePoll::Batch(batch) = r.poll_next().unwrap() {
                    seen.extend(batch.column(0).as_primitive::<Int64Type>().values().iter());
                }
            }
            offsets.push(r.offset());
        }
        // FLIP-147: the entries of both old subtasks dealt over three.
        let entries: Vec<Vec<u8>> = offsets
            .iter()
            .flat_map(|o| decode_entries(o).unwrap())
            .collect();
        for subtask in 0..3 {
            let share: Vec<Vec<u8>> = entries.iter().skip(subtask).step_by(3).cloned().collect();
            let mut r = src.create(&ctx_of(subtask, 3), 32).unwrap();
            r.seek(&encode_entries(&share)).unwrap();
            seen.extend(drain(r.as_mut()));
        }
        seen.sort_unstable();
        assert_eq!(seen, (0..500).chain(1000..1300).collect::<Vec<i64>>());
    }

    #[test]
    fn test_an_offset_of_files_as_splits_restores_into_row_groups() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a.parquet"), dir.path().join("b.parquet"));
        write_groups(&a, 0..500, 70);
        write_groups(&b, 1000..1300, 70);
        let src = ParquetSource::new("files", vec![a, b]).unwrap();
        // Before row groups were splits: (file, rows of the file emitted).
        let old = encode_entries(&[encode_positions(&[0, 155]), encode_positions(&[1, 0])]);
        let mut r = src.create(&ctx(), 32).unwrap();
        r.seek(&old).unwrap();
        assert_eq!(
            drain(r.as_mut()),
            (155..500).chain(1000..1300).collect::<Vec<i64>>()
        );
        // The oldest offsets: position among the subtask's files, rows.
        let mut r = src.create(&ctx(), 32).unwrap();
        r.seek(&encode_positions(&[1, 10])).unwrap();
        assert_eq!(drain(r.as_mut()), (1010..1300).collect::<Vec<i64>>());
        // An offset beyond the file is an error naming the file.
        let mut r = src.create(&ctx(), 32).unwrap();
        let err = r
            .seek(&encode_entries(&[encode_positions(&[0, 501])]))
            .unwrap_err();
        assert!(err.to_string().contains("a.parquet"), "{err}");
    }

    #[test]
    fn test_columns_project_the_batches_and_an_offset_restores_under_them() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.parquet");
        let v: arrow::array::ArrayRef = Arc::new(Int64Array::from_iter_values(0..100));
        let w: arrow::array::ArrayRef = Arc::new(Int64Array::from_iter_values(100..200));
        let batch = RecordBatch::try_from_iter([("v", v), ("w", w)]).unwrap();
        let mut out =
            ArrowWriter::try_new(File::create(&a).unwrap(), batch.schema(), None).unwrap();
        out.write(&batch).unwrap();
        out.close().unwrap();
        let src = ParquetSource::new("files", vec![a.clone()]).unwrap();
        let err = src.with_columns(&["x".into()]).err().unwrap().to_string();
        assert!(err.contains("'x'") && err.contains("files"), "{err}");
        let src = ParquetSource::new("files", vec![a]).unwrap();
        let src = src.with_columns(&["w".into()]).unwrap();
        assert_eq!(src.schema().unwrap().fields().len(), 1);
        let mut r = src.create(&ctx(), 30).unwrap();
        let SourcePoll::Batch(first) = r.poll_next().unwrap() else {
            panic!("a batch");
        };
        assert_eq!(first.schema().field(0).name(), "w");
        let mut restored = src.create(&ctx(), 30).unwrap();
        restored.seek(&r.offset()).unwrap();
        let rest = drain(restored.as_mut());
        assert_eq!(
            rest,
            (130..200).collect::<Vec<i64>>(),
            "column w after its first 30 rows"
        );
    }

    #[test]
    fn test_a_seek_reads_on_in_the_order_the_writer_of_the_offset_did() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b, c) = (
            dir.path().join("a.parquet"),
            dir.path().join("b.parquet"),
            dir.path().join("c.parquet"),
        );
        write(&a, 0..50);
        write_groups(&b, 100..170, 30);
        write(&c, 200..230);
        let src = ParquetSource::new("files", vec![a, b, c]).unwrap();
        crate::source::assert_seek_replays_the_same_batches(
            &|| src.create(&ctx(), 8).unwrap(),
            None,
        );
    }
}
