//! The feedback channel of a loop: a never-blocking, spilling FIFO queue.
//!
//! Implements section "II - Cyclic Flow Control and Physical Implementation of
//! Feedback Channels" of the seed `FLIP-15-scoped-loops-and-termination.txt`:
//! loop head and tail operators are replaced by one special channel per loop
//! head subtask, written by every loop tail subtask and read by that head.
//! Deadlock freedom needs one resource of the cyclic backpressure graph to be
//! "infinite", so [`FeedbackQueue::push`] never waits for the consumer: above
//! the memory limit batches go to disk. [`FeedbackQueue::is_above_threshold`]
//! is the signal the seed's "adaptive" input priority (feedback first only
//! while the feedback queue is over its memory budget) reads. FLIP-16 loop
//! logging and FLIP-15 termination tokens rely on control events keeping their
//! place among the records, so the queue is FIFO over everything.
//!
//! # Segments and the spill format
//!
//! The queue is a FIFO of *segments*, each either in memory or a spill file.
//! A pushed event goes into the last segment when it fits, so once anything
//! is spilled every later event waits behind it:
//!
//! * a data batch goes into the open spill segment at the tail if there is one
//!   (and it has the batch's schema); else into memory if the buffered
//!   batches plus this one stay within `memory_limit` bytes (measured with
//!   `RecordBatch::get_array_memory_size`); else a new spill segment is opened.
//!   Hence `memory_bytes() <= memory_limit` at all times;
//! * a control event (barrier, watermark, termination token, EndOfData, ...)
//!   goes into the open spill segment at the tail if there is one, else into
//!   memory. Control events are not counted in `memory_bytes`.
//!
//! A spill segment is one file `<spill_dir>/feedback-<loop>-<pid>-<queue>-<n>.arrows`
//! holding one Arrow IPC *stream* (schema message, record batches, end of
//! stream marker) of the segment's data batches, all of one schema (a batch
//! of another schema closes the segment and opens a new file). The order of
//! data and control events within a segment is kept in a tiny side index held
//! in memory: a list of entries `Batches(n)` (the next `n` batches of the
//! file) and `Control(event)`. Runs of batches are one entry, so the index
//! grows only with the number of control events, which are few and small.
//!
//! The consumer seals a spill segment (writes the end of stream marker and
//! flushes) when it reaches it, then reads it back batch by batch without
//! holding the producers' lock, and deletes the file as soon as the last
//! entry was read. Files still on disk are deleted by [`FeedbackQueue::close`]
//! and on drop. Producers write spill files while holding the queue's lock, so
//! a producer may wait for another producer's disk write, never for the
//! consumer.
//!
//! # Overtaking barriers (unaligned checkpoints)
//!
//! [`FeedbackQueue::push_overtaking`] is the feedback channel's part of
//! FLIP-76 (DESIGN.md "Unaligned checkpoints", "Loops"): the tail seals the
//! open spill segment, appends the barrier in-band (the *marker*, always in
//! memory) and puts it in the queue's priority slot. The head takes it from
//! there ([`FeedbackQueue::take_priority`]) before it reads the queue and asks
//! [`FeedbackQueue::overtaken`] for what is queued before the marker: the
//! batches in memory (shared, not copied) and, for spilled ones, runs of
//! batches of spill files ([`Overtaken::Spilled`]) that refer to the file
//! (kept on disk while referred to) and are read only when the checkpoint is
//! written, off the task thread. The head still reads and processes all of it
//! in order; the marker is then a no-op.
//!
//! # Waking the consumer
//!
//! Nothing here waits on a timer. [`FeedbackQueue::ready`] is a `Receiver<()>` holding
//! at most one token; every push (and `close`) puts one there. A consumer
//! receives the token (e.g. in its `crossbeam_channel::Select`), then calls
//! [`FeedbackQueue::try_pop`] until it returns `None`: a push after that last
//! `None` leaves a new token, so no event is ever missed.

use std::collections::VecDeque;
use std::fs::{self, File};
use std::io::{self, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use arrow::ipc::reader::StreamReader;
use arrow::ipc::writer::StreamWriter;
use arrow::record_batch::RecordBatch;
use crossbeam_channel::{Receiver, Sender};
use parking_lot::Mutex;

use crate::error::{Error, Result};
use crate::event::{Barrier, Event};

/// Distinguishes the spill files of queues of one process.
static NEXT_QUEUE_ID: AtomicU64 = AtomicU64::new(0);

/// Counters readable without taking the queue's locks.
#[derive(Default)]
struct Stats {
    len_events: AtomicUsize,
    memory_bytes: AtomicUsize,
    spilled_events_pending: AtomicUsize,
    spilled_bytes_total: AtomicU64,
    spill_files_written: AtomicU64,
    /// An overtaking barrier waits in the priority slot (read without the
    /// lock on every step of the head).
    priority: std::sync::atomic::AtomicBool,
}

/// A multi-producer, single-consumer FIFO of events that never blocks its
/// writers and spills data batches to disk above a memory limit. Share it
/// with `Arc`.
pub struct FeedbackQueue {
    name: String,
    spill_dir: PathBuf,
    file_prefix: String,
    memory_limit: usize,
    shared: Mutex<Shared>,
    reader: Mutex<Option<SpillReader>>,
    ready_tx: Sender<()>,
    ready_rx: Receiver<()>,
    stats: Arc<Stats>,
}

struct Shared {
    segments: VecDeque<Segment>,
    next_file: u64,
    closed: bool,
    /// The newest overtaking barrier the consumer has not taken yet.
    priority: Option<Barrier>,
}

enum Segment {
    Memory(VecDeque<(Event, usize)>),
    Spill(Box<SpillWriter>),
}

/// One entry of a spill segment's side index.
enum SpillEntry {
    /// The next `n` record batches of the file.
    Batches(usize),
    /// A control event (never `Event::Data`).
    Control(Event),
}

/// A spill file that is deleted when dropped (unless already removed):
/// shared by its segment and by what an overtaking barrier captured of it.
pub struct SpillFile {
    path: PathBuf,
}

impl SpillFile {
    /// Deletes the file now if nobody else refers to it; else the last
    /// reference deletes it when dropped.
    fn release(file: Arc<SpillFile>) -> io::Result<()> {
        match Arc::try_unwrap(file) {
            Ok(f) => f.remove(),
            Err(_) => Ok(()),
        }
    }

    fn remove(mut self) -> io::Result<()> {
        let path = std::mem::take(&mut self.path);
        match fs::remove_file(&path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }
}

impl Drop for SpillFile {
    fn drop(&mut self) {
        if !self.path.as_os_str().is_empty() {
            // Drop cannot report: the queue's own deletions go through
            // `release`, which does. This is the last reader of a file let
            // go (an overtaken run written into a checkpoint, an attempt
            // torn down); a file left is a temporary file, never data.
            let _ = fs::remove_file(&self.path);
        }
    }
}

/// Counts the bytes written into spill files.
struct CountingWriter {
    inner: BufWriter<File>,
    stats: Arc<Stats>,
}

impl Write for CountingWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.stats
            .spilled_bytes_total
            .fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// A spill segment being written (open) or waiting to be read (sealed).
/// Field order matters: the writer (and its file handle) drops before the
/// file is deleted.
struct SpillWriter {
    writer: Option<StreamWriter<CountingWriter>>,
    schema: SchemaRef,
    index: VecDeque<SpillEntry>,
    file: Arc<SpillFile>,
}

/// The spill segment the consumer is reading.
struct SpillReader {
    reader: StreamReader<BufReader<File>>,
    index: VecDeque<SpillEntry>,
    /// Batches of the file read so far.
    read: usize,
    file: Arc<SpillFile>,
}

/// Part of what an overtaking barrier overtook in a feedback queue, in
/// queue order (see the module docs).
#[derive(Clone)]
pub enum Overtaken {
    /// A batch queued in memory (its buffers are shared).
    Batch(RecordBatch),
    /// `count` batches of a sealed spill file after its first `skip`.
    Spilled {
        file: Arc<SpillFile>,
        skip: usize,
        count: usize,
    },
}

impl Overtaken {
    /// Appends the batches to `out`, reading a spill file if need be (on a
    /// checkpoint writer thread); errors name `operator`.
    pub fn read_into(&self, operator: &str, out: &mut Vec<RecordBatch>) -> Result<()> {
        let (file, skip, count) = match self {
            Overtaken::Batch(b) => {
                out.push(b.clone());
                return Ok(());
            }
            Overtaken::Spilled { file, skip, count } => (file, *skip, *count),
        };
        let io = |message: String| Error::Io {
            operator: operator.to_string(),
            path: file.path.clone(),
            message,
            source: None,
        };
        let handle = File::open(&file.path)
            .map_err(|e| io(format!("cannot open a feedback spill file: {e}")))?;
        let reader = StreamReader::try_new(BufReader::new(handle), None)
            .map_err(|e| io(format!("the feedback spill file is corrupt: {e}")))?;
        let mut got = 0;
        for batch in reader.skip(skip).take(count) {
            out.push(batch.map_err(|e| io(format!("the feedback spill file is corrupt: {e}")))?);
            got += 1;
        }
        if got < count {
            return Err(io(
                "the feedback spill file is corrupt: it ends before all its batches were read"
                    .to_string(),
            ));
        }
        Ok(())
    }
}

impl FeedbackQueue {
    /// A queue for the loop head subtask `name` (used in error messages, e.g.
    /// `"loop 'collatz' head 0"`), spilling into `spill_dir` (created on the
    /// first spill) once more than `memory_limit` bytes of batches are
    /// buffered.
    pub fn new(
        name: impl Into<String>,
        spill_dir: impl Into<PathBuf>,
        memory_limit: usize,
    ) -> Self {
        let name = name.into();
        let readable: String = name
            .chars()
            .take(32)
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        let file_prefix = format!(
            "feedback-{readable}-{}-{}",
            std::process::id(),
            NEXT_QUEUE_ID.fetch_add(1, Ordering::Relaxed)
        );
        let (ready_tx, ready_rx) = crossbeam_channel::bounded(1);
        FeedbackQueue {
            name,
            spill_dir: spill_dir.into(),
            file_prefix,
            memory_limit,
            shared: Mutex::new(Shared {
                segments: VecDeque::new(),
                next_file: 0,
                closed: false,
                priority: None,
            }),
            reader: Mutex::new(None),
            ready_tx,
            ready_rx,
            stats: Arc::new(Stats::default()),
        }
    }

    /// The name given at construction.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The directory spill files are written to.
    pub fn spill_dir(&self) -> &Path {
        &self.spill_dir
    }

    /// The memory budget in bytes.
    pub fn memory_limit(&self) -> usize {
        self.memory_limit
    }

    /// Appends `event`. Never waits for the consumer; fails only when the
    /// queue was closed or a spill file cannot be written.
    pub fn push(&self, event: Event) -> Result<()> {
        {
            let mut shared = self.shared.lock();
            if shared.closed {
                return Err(Error::operator(
                    self.name.clone(),
                    "an event was written to the loop's feedback queue after it was closed",
                ));
            }
            match event {
                Event::Data(batch) => self.push_batch(&mut shared, batch)?,
                control => self.push_control(&mut shared, control)?,
            }
            self.stats.len_events.fetch_add(1, Ordering::AcqRel);
        }
        // Full means a token is already waiting: the consumer will look.
        let _ = self.ready_tx.try_send(());
        Ok(())
    }

    fn push_batch(&self, shared: &mut Shared, batch: RecordBatch) -> Result<()> {
        if let Some(Segment::Spill(tail)) = shared.segments.back_mut() {
            if tail.writer.is_some() {
                if same_schema(&tail.schema, &batch.schema()) {
                    return self.append_spilled(tail, batch);
                }
                self.seal(tail)?;
                return self.spill_new_segment(shared, batch);
            }
        }
        let size = batch.get_array_memory_size();
        let memory = self.stats.memory_bytes.load(Ordering::Acquire);
        if memory.saturating_add(size) <= self.memory_limit {
            self.stats.memory_bytes.fetch_add(size, Ordering::AcqRel);
            memory_tail(shared).push_back((Event::Data(batch), size));
            Ok(())
        } else {
            self.spill_new_segment(shared, batch)
        }
    }

    fn push_control(&self, shared: &mut Shared, event: Event) -> Result<()> {
        if let Some(Segment::Spill(tail)) = shared.segments.back_mut() {
            if tail.writer.is_some() {
                tail.index.push_back(SpillEntry::Control(event));
                self.stats
                    .spilled_events_pending
                    .fetch_add(1, Ordering::AcqRel);
                return Ok(());
            }
        }
        memory_tail(shared).push_back((event, 0));
        Ok(())
    }

    fn spill_new_segment(&self, shared: &mut Shared, batch: RecordBatch) -> Result<()> {
        fs::create_dir_all(&self.spill_dir).map_err(|e| {
            self.io_error(
                &self.spill_dir,
                format!("cannot create the feedback spill directory: {e}"),
            )
        })?;
        let path = self
            .spill_dir
            .join(format!("{}-{}.arrows", self.file_prefix, shared.next_file));
        shared.next_file += 1;
        let handle = File::create(&path).map_err(|e| {
            self.io_error(&path, format!("cannot create a feedback spill file: {e}"))
        })?;
        let file = Arc::new(SpillFile { path });
        self.stats
            .spill_files_written
            .fetch_add(1, Ordering::Relaxed);
        let schema = batch.schema();
        let out = CountingWriter {
            inner: BufWriter::new(handle),
            stats: Arc::clone(&self.stats),
        };
        let writer = StreamWriter::try_new(out, &schema).map_err(|e| {
            self.io_error(
                &file.path,
                format!("cannot write a feedback spill file: {e}"),
            )
        })?;
        let mut segment = SpillWriter {
            writer: Some(writer),
            schema,
            index: VecDeque::new(),
            file,
        };
        self.append_spilled(&mut segment, batch)?;
        shared.segments.push_back(Segment::Spill(Box::new(segment)));
        Ok(())
    }

    fn append_spilled(&self, segment: &mut SpillWriter, batch: RecordBatch) -> Result<()> {
        let Some(writer) = segment.writer.as_mut() else {
            return Err(Error::operator(
                self.name.clone(),
                "internal error: a batch was appended to a sealed feedback spill segment",
            ));
        };
        writer.write(&batch).map_err(|e| {
            self.io_error(
                &segment.file.path,
                format!("cannot write a feedback spill file: {e}"),
            )
        })?;
        match segment.index.back_mut() {
            Some(SpillEntry::Batches(n)) => *n += 1,
            _ => segment.index.push_back(SpillEntry::Batches(1)),
        }
        self.stats
            .spilled_events_pending
            .fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    /// Writes the end-of-stream marker and flushes the file.
    fn seal(&self, segment: &mut SpillWriter) -> Result<()> {
        let Some(writer) = segment.writer.take() else {
            return Ok(());
        };
        let path = &segment.file.path;
        let mut out = writer.into_inner().map_err(|e| {
            self.io_error(path, format!("cannot finish a feedback spill file: {e}"))
        })?;
        out.flush()
            .map_err(|e| self.io_error(path, format!("cannot flush a feedback spill file: {e}")))
    }

    /// Takes the next event, `None` when the queue is empty. Only one thread
    /// (the loop head subtask) may consume.
    pub fn try_pop(&self) -> Result<Option<Event>> {
        let mut reader = self.reader.lock();
        loop {
            if let Some(current) = reader.as_mut() {
                if let Some(event) = self.read_next(current)? {
                    self.stats
                        .spilled_events_pending
                        .fetch_sub(1, Ordering::AcqRel);
                    self.stats.len_events.fetch_sub(1, Ordering::AcqRel);
                    return Ok(Some(event));
                }
                if let Some(done) = reader.take() {
                    let path = done.file.path.clone();
                    drop(done.reader);
                    SpillFile::release(done.file).map_err(|e| {
                        self.io_error(&path, format!("cannot delete a feedback spill file: {e}"))
                    })?;
                }
                continue;
            }
            let mut shared = self.shared.lock();
            match shared.segments.front_mut() {
                None => return Ok(None),
                Some(Segment::Memory(events)) => {
                    let Some((event, size)) = events.pop_front() else {
                        shared.segments.pop_front();
                        continue;
                    };
                    if events.is_empty() {
                        shared.segments.pop_front();
                    }
                    self.stats.memory_bytes.fetch_sub(size, Ordering::AcqRel);
                    self.stats.len_events.fetch_sub(1, Ordering::AcqRel);
                    return Ok(Some(event));
                }
                Some(Segment::Spill(segment)) => {
                    self.seal(segment)?;
                    let Some(Segment::Spill(segment)) = shared.segments.pop_front() else {
                        continue;
                    };
                    drop(shared);
                    *reader = Some(self.open_reader(*segment)?);
                }
            }
        }
    }

    fn open_reader(&self, segment: SpillWriter) -> Result<SpillReader> {
        let SpillWriter { index, file, .. } = segment;
        let handle = File::open(&file.path).map_err(|e| {
            self.io_error(
                &file.path,
                format!("cannot open a feedback spill file: {e}"),
            )
        })?;
        let reader = StreamReader::try_new(BufReader::new(handle), None).map_err(|e| {
            self.io_error(
                &file.path,
                format!("the feedback spill file is corrupt: {e}"),
            )
        })?;
        Ok(SpillReader {
            reader,
            index,
            read: 0,
            file,
        })
    }

    fn read_next(&self, current: &mut SpillReader) -> Result<Option<Event>> {
        match current.index.front_mut() {
            None => Ok(None),
            Some(SpillEntry::Control(_)) => match current.index.pop_front() {
                Some(SpillEntry::Control(event)) => Ok(Some(event)),
                _ => Ok(None),
            },
            Some(SpillEntry::Batches(n)) => {
                *n -= 1;
                if *n == 0 {
                    current.index.pop_front();
                }
                current.read += 1;
                match current.reader.next() {
                    Some(Ok(batch)) => Ok(Some(Event::Data(batch))),
                    Some(Err(e)) => Err(self.io_error(
                        &current.file.path,
                        format!("the feedback spill file is corrupt: {e}"),
                    )),
                    None => Err(self.io_error(
                        &current.file.path,
                        "the feedback spill file is corrupt: it ends before all its batches \
                         were read"
                            .to_string(),
                    )),
                }
            }
        }
    }

    /// Appends the unaligned barrier `barrier` as an in-band marker and puts
    /// it in the priority slot, ahead of everything queued (FLIP-76; module
    /// docs). The open spill segment is sealed first, so everything before
    /// the marker is readable by a checkpoint writer.
    pub fn push_overtaking(&self, barrier: Barrier) -> Result<()> {
        {
            let mut shared = self.shared.lock();
            if shared.closed {
                return Err(Error::operator(
                    self.name.clone(),
                    "a barrier was written to the loop's feedback queue after it was closed",
                ));
            }
            if let Some(Segment::Spill(tail)) = shared.segments.back_mut() {
                self.seal(tail)?;
            }
            memory_tail(&mut shared).push_back((Event::Barrier(barrier), 0));
            self.stats.len_events.fetch_add(1, Ordering::AcqRel);
            if shared.priority.is_none_or(|p| p.id < barrier.id) {
                shared.priority = Some(barrier);
            }
            self.stats.priority.store(true, Ordering::Release);
        }
        // Full: a token already waits. Disconnected: the consumer is gone.
        let _ = self.ready_tx.try_send(());
        Ok(())
    }

    /// Takes the overtaking barrier waiting in the priority slot. Only the
    /// consumer calls this; one atomic load when there is none.
    #[inline]
    pub fn take_priority(&self) -> Option<Barrier> {
        if !self.stats.priority.load(Ordering::Acquire) {
            return None;
        }
        let mut shared = self.shared.lock();
        self.stats.priority.store(false, Ordering::Release);
        shared.priority.take()
    }

    /// What is queued before the in-band marker of barrier `id`, in order,
    /// without taking it off the queue; `None` when the marker is not
    /// queued (the consumer read it already). Spilled batches are referred
    /// to, not read. Only the consumer calls this.
    pub fn overtaken(&self, id: u64) -> Result<Option<Vec<Overtaken>>> {
        let reader = self.reader.lock();
        let mut shared = self.shared.lock();
        let mut out = Vec::new();
        let is_marker = |e: &Event| matches!(e, Event::Barrier(b) if b.id == id);
        if let Some(r) = reader.as_ref() {
            if spilled_before_marker(&r.file, r.read, &r.index, &is_marker, &mut out) {
                return Ok(Some(out));
            }
        }
        for segment in shared.segments.iter_mut() {
            match segment {
                Segment::Memory(events) => {
                    for (event, _) in events.iter() {
                        match event {
                            Event::Data(b) => out.push(Overtaken::Batch(b.clone())),
                            e if is_marker(e) => return Ok(Some(out)),
                            _ => {}
                        }
                    }
                }
                Segment::Spill(s) => {
                    // A segment before the marker was sealed by
                    // `push_overtaking`; seal defensively (idempotent).
                    self.seal(s)?;
                    if spilled_before_marker(&s.file, 0, &s.index, &is_marker, &mut out) {
                        return Ok(Some(out));
                    }
                }
            }
        }
        Ok(None)
    }

    /// Receives a token whenever events were pushed since the consumer last
    /// received one; see the module docs for the wake-up protocol.
    pub fn ready(&self) -> &Receiver<()> {
        &self.ready_rx
    }

    /// Number of events queued (in memory and on disk).
    pub fn len_events(&self) -> usize {
        self.stats.len_events.load(Ordering::Acquire)
    }

    /// Whether no event is queued.
    pub fn is_empty(&self) -> bool {
        self.len_events() == 0
    }

    /// Bytes of batches buffered in memory (never above the memory limit).
    pub fn memory_bytes(&self) -> usize {
        self.stats.memory_bytes.load(Ordering::Acquire)
    }

    /// Bytes written to spill files since the queue was created.
    pub fn spilled_bytes_total(&self) -> u64 {
        self.stats.spilled_bytes_total.load(Ordering::Relaxed)
    }

    /// Spill files created since the queue was created.
    pub fn spill_files_written(&self) -> u64 {
        self.stats.spill_files_written.load(Ordering::Relaxed)
    }

    /// Whether the queue is over its memory budget: events wait on disk, or
    /// memory is full. The "adaptive" input priority reads the feedback input
    /// first exactly while this holds.
    pub fn is_above_threshold(&self) -> bool {
        self.stats.spilled_events_pending.load(Ordering::Acquire) > 0
            || (self.memory_bytes() > 0 && self.memory_bytes() >= self.memory_limit)
    }

    /// Drops every queued event, deletes all spill files and refuses further
    /// pushes. Idempotent; also done on drop (ignoring deletion errors).
    pub fn close(&self) -> Result<()> {
        let mut reader = self.reader.lock();
        let mut shared = self.shared.lock();
        shared.closed = true;
        let mut files = Vec::new();
        if let Some(current) = reader.take() {
            drop(current.reader);
            files.push(current.file);
        }
        for segment in shared.segments.drain(..) {
            if let Segment::Spill(mut spill) = segment {
                drop(spill.writer.take());
                files.push(spill.file);
            }
        }
        self.stats.len_events.store(0, Ordering::Release);
        self.stats.memory_bytes.store(0, Ordering::Release);
        self.stats
            .spilled_events_pending
            .store(0, Ordering::Release);
        drop(shared);
        drop(reader);
        // Full: a token already waits. Disconnected: the consumer is gone.
        let _ = self.ready_tx.try_send(());
        let mut first_error = None;
        for file in files {
            let path = file.path.clone();
            if let Err(e) = SpillFile::release(file) {
                first_error.get_or_insert_with(|| {
                    self.io_error(&path, format!("cannot delete a feedback spill file: {e}"))
                });
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Whether `close` was called.
    pub fn is_closed(&self) -> bool {
        self.shared.lock().closed
    }

    fn io_error(&self, path: &Path, message: String) -> Error {
        Error::Io {
            operator: self.name.clone(),
            path: path.to_path_buf(),
            message,
            source: None,
        }
    }
}

impl std::fmt::Debug for FeedbackQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FeedbackQueue")
            .field("name", &self.name)
            .field("len_events", &self.len_events())
            .field("memory_bytes", &self.memory_bytes())
            .field("memory_limit", &self.memory_limit)
            .field("spill_files_written", &self.spill_files_written())
            .finish()
    }
}

/// Adds the runs of batches of a spill segment's index (from batch `read`
/// of `file` on) to `out` up to the event `is_marker` accepts; true when it
/// was found.
fn spilled_before_marker(
    file: &Arc<SpillFile>,
    read: usize,
    index: &VecDeque<SpillEntry>,
    is_marker: &impl Fn(&Event) -> bool,
    out: &mut Vec<Overtaken>,
) -> bool {
    let mut at = read;
    for entry in index {
        match entry {
            SpillEntry::Batches(n) => {
                out.push(Overtaken::Spilled {
                    file: Arc::clone(file),
                    skip: at,
                    count: *n,
                });
                at += n;
            }
            SpillEntry::Control(e) if is_marker(e) => return true,
            SpillEntry::Control(_) => {}
        }
    }
    false
}

/// The in-memory segment at the tail, created when the tail is on disk.
fn memory_tail(shared: &mut Shared) -> &mut VecDeque<(Event, usize)> {
    if !matches!(shared.segments.back(), Some(Segment::Memory(_))) {
        shared.segments.push_back(Segment::Memory(VecDeque::new()));
    }
    match shared.segments.back_mut() {
        Some(Segment::Memory(events)) => events,
        // The branch above just pushed a memory segment.
        _ => unreachable!("invariant: the tail segment is in memory"),
    }
}

fn same_schema(a: &SchemaRef, b: &SchemaRef) -> bool {
    Arc::ptr_eq(a, b) || a == b
}

#[cfg(test)]
mod tests {
    use super::*;

    type TestResult = std::result::Result<(), Box<dyn std::error::Error>>;
    use crate::event::{Activity, TerminationToken};
    use arrow::array::{ArrayRef, Int64Array};

    fn batch(n: i64) -> RecordBatch {
        let a: ArrayRef = Arc::new(Int64Array::from_iter_values(0..n));
        RecordBatch::try_from_iter([("value", a)]).expect("a valid batch")
    }

    /// Rows of a popped event (`usize::MAX` when the queue was empty).
    fn rows(event: Option<Event>) -> usize {
        event.map_or(usize::MAX, |e| e.num_rows())
    }

    fn files_in(dir: &Path) -> usize {
        fs::read_dir(dir).map_or(0, |d| d.count())
    }

    #[test]
    fn test_in_memory_queue_is_fifo_and_never_spills_under_the_limit() -> TestResult {
        let dir = tempfile::tempdir()?;
        let q = FeedbackQueue::new("loop 'l' head 0", dir.path().join("spill"), 1 << 20);
        q.push(Event::Data(batch(3)))?;
        q.push(Event::Watermark(7))?;
        q.push(Event::Data(batch(5)))?;
        assert_eq!(q.len_events(), 3);
        assert!(q.memory_bytes() > 0);
        assert_eq!(rows(q.try_pop()?), 3);
        assert!(matches!(q.try_pop()?, Some(Event::Watermark(7))));
        assert_eq!(rows(q.try_pop()?), 5);
        assert!(q.try_pop()?.is_none());
        assert_eq!(q.spill_files_written(), 0);
        assert_eq!(q.memory_bytes(), 0);
        assert!(!dir.path().join("spill").exists());
        Ok(())
    }

    #[test]
    fn test_spilled_control_events_keep_their_place() -> TestResult {
        let dir = tempfile::tempdir()?;
        let q = FeedbackQueue::new("loop 'l' head 0", dir.path(), 0);
        let token = TerminationToken {
            loop_id: 1,
            round: 2,
            activity: Activity::Idle,
        };
        q.push(Event::Data(batch(4)))?;
        q.push(Event::Termination(token))?;
        q.push(Event::Data(batch(6)))?;
        q.push(Event::EndOfData { drain: true })?;
        assert!(q.is_above_threshold());
        assert_eq!(q.spill_files_written(), 1);
        assert_eq!(rows(q.try_pop()?), 4);
        assert!(matches!(q.try_pop()?, Some(Event::Termination(t)) if t == token));
        assert_eq!(rows(q.try_pop()?), 6);
        assert!(matches!(
            q.try_pop()?,
            Some(Event::EndOfData { drain: true })
        ));
        assert!(q.try_pop()?.is_none());
        assert_eq!(files_in(dir.path()), 0);
        assert!(!q.is_above_threshold());
        Ok(())
    }

    #[test]
    fn test_push_after_close_fails_and_close_deletes_files() -> TestResult {
        let dir = tempfile::tempdir()?;
        let q = FeedbackQueue::new("loop 'l' head 0", dir.path(), 0);
        q.push(Event::Data(batch(4)))?;
        assert_eq!(files_in(dir.path()), 1);
        q.close()?;
        assert_eq!(files_in(dir.path()), 0);
        assert_eq!(q.len_events(), 0);
        let err = q.push(Event::Watermark(1)).unwrap_err();
        assert!(err.to_string().contains("loop 'l' head 0"), "{err}");
        Ok(())
    }

    #[test]
    fn test_unwritable_spill_dir_is_an_io_error_naming_the_loop_and_path() -> TestResult {
        let dir = tempfile::tempdir()?;
        let blocker = dir.path().join("not-a-dir");
        fs::write(&blocker, b"x")?;
        let q = FeedbackQueue::new("loop 'l' head 1", blocker.join("spill"), 0);
        let err = q.push(Event::Data(batch(4))).unwrap_err();
        match &err {
            Error::Io { operator, path, .. } => {
                assert_eq!(operator, "loop 'l' head 1");
                assert!(path.starts_with(&blocker));
            }
            other => panic!("unexpected {other:?}"),
        }
        Ok(())
    }

    #[test]
    fn test_corrupt_spill_file_is_an_io_error() -> TestResult {
        let dir = tempfile::tempdir()?;
        let q = FeedbackQueue::new("loop 'l' head 0", dir.path(), 0);
        q.push(Event::Data(batch(4)))?;
        q.push(Event::Watermark(3))?;
        // Seal by making the consumer reach the segment, but corrupt it first:
        // sealing flushes, so truncate after a seal done through a schema change.
        let other: ArrayRef = Arc::new(arrow::array::StringArray::from(vec!["a"]));
        q.push(Event::Data(RecordBatch::try_from_iter([("s", other)])?))?;
        let first = fs::read_dir(dir.path())?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .min()
            .ok_or("no spill file")?;
        fs::write(&first, b"garbage")?;
        let err = q.try_pop().unwrap_err();
        match &err {
            Error::Io { path, message, .. } => {
                assert_eq!(path, &first);
                assert!(message.contains("corrupt"), "{message}");
            }
            other => panic!("unexpected {other:?}"),
        }
        Ok(())
    }
}
