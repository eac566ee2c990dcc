//! Channels between subtasks and their flow control (DESIGN.md "Runtime").
//!
//! Regular channels are bounded: a full channel blocks its writer, which is
//! how backpressure travels upstream. Each (producer subtask, consumer
//! subtask) pair of an edge gets its own channel, so a consumer can block one
//! channel during barrier alignment and track EndOfData per channel.
//!
//! # In-flight data is bounded by time, not by batch count
//!
//! An aligned checkpoint barrier waits behind every batch queued before it,
//! so what bounds a barrier's delay is how long the consumer needs to work
//! through a channel's queue. A fixed number of batches says nothing about
//! that: eight batches of 8,192 rows in front of a slow Python function are
//! many seconds. Channels therefore follow Flink's buffer debloating
//! (FLIP-183):
//!
//! * the consumer task measures its own throughput, in bytes of input taken
//!   per second of *busy* time (time it spent waiting for input does not
//!   count), with a [`ThroughputMeter`];
//! * from it, a [`FlowPolicy`] sets every input channel's byte budget to
//!   about `throughput × target / live channels`, so all the data queued in
//!   front of a barrier is about `target` of work (between a floor and a
//!   ceiling);
//! * the writer blocks while the queued bytes plus the next batch exceed the
//!   budget, or the channel holds `max_events` events. An empty channel
//!   always takes one event, so a batch larger than the budget still moves
//!   (progress is always possible);
//! * a batch much larger than the budget is cut into zero-copy slices of
//!   about the budget's size ([`RecordBatch::slice`] shares the buffers), so
//!   a producer of huge batches does not put seconds of work in front of a
//!   barrier in one event.
//!
//! Before the first measurement a channel holds one event (and whatever more
//! fits into the floor) and cuts nothing; a fast consumer's first
//! measurement arrives after a few batches and lifts the budget to the
//! ceiling, so fast jobs keep their full buffers (`max_events` batches).
//!
//! The budget logic ([`ThroughputMeter`], [`FlowPolicy`]) is pure: time is
//! passed in, like the other protocol kernels.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::record_batch::RecordBatch;
use crossbeam_channel::{Receiver, Sender, TryRecvError};
use parking_lot::{Condvar, Mutex};

use crate::event::{Barrier, Event};

/// Default number of events a regular channel holds before its writer blocks.
pub const DEFAULT_CHANNEL_CAPACITY: usize = 8;

/// Default time of work a consumer may have queued on its input channels
/// (FLIP-183's debloat target); a job with checkpoints uses at most its
/// checkpoint interval.
pub const DEFAULT_IN_FLIGHT_TARGET: Duration = Duration::from_secs(1);

/// The smallest byte budget of a channel (and so the smallest slice a large
/// batch is cut into).
pub const MIN_BUDGET_BYTES: usize = 4 * 1024;

/// The largest byte budget of a channel.
pub const MAX_BUDGET_BYTES: usize = 64 << 20;

/// How often a consumer folds its measurement into its throughput.
pub const UPDATE_PERIOD: Duration = Duration::from_millis(50);

/// Before its first measurement a meter closes its window after this many
/// events (or [`UPDATE_PERIOD`]), so a fast consumer leaves the small
/// initial budget within its first few batches.
const FIRST_WINDOW_EVENTS: u32 = 8;

/// The least busy time a window with input counts (a consumer that was
/// busier than its input allowed for less than this is simply fast).
const MIN_BUSY: Duration = Duration::from_millis(1);

/// Weight of a new measurement in the throughput's moving average.
const SMOOTHING: f64 = 0.5;

/// A batch is cut into slices of at least this many rows.
pub const MIN_SLICE_ROWS: usize = 256;

/// What an event costs in a channel's byte budget: a batch's memory size,
/// control events nothing.
pub fn event_bytes(event: &Event) -> usize {
    match event {
        Event::Data(b) => batch_bytes(b),
        _ => 0,
    }
}

/// A batch's memory size (at least 1, so a batch is never free).
pub fn batch_bytes(batch: &RecordBatch) -> usize {
    batch.get_array_memory_size().max(1)
}

/// A consumer task's throughput: bytes of input taken per second of busy
/// time, smoothed over windows of [`UPDATE_PERIOD`].
#[derive(Debug, Clone)]
pub struct ThroughputMeter {
    window_start: Instant,
    window_bytes: u64,
    window_events: u32,
    window_idle: Duration,
    rate: Option<f64>,
}

impl ThroughputMeter {
    /// A meter whose first window starts at `now`.
    pub fn new(now: Instant) -> Self {
        ThroughputMeter {
            window_start: now,
            window_bytes: 0,
            window_events: 0,
            window_idle: Duration::ZERO,
            rate: None,
        }
    }

    /// The consumer took `bytes` of input (call [`Self::update`] first, so
    /// the bytes count in the window in which they are processed).
    #[inline]
    pub fn on_consumed(&mut self, bytes: usize) {
        self.window_bytes += bytes as u64;
        self.window_events += 1;
    }

    /// The consumer waited `idle` for input.
    #[inline]
    pub fn on_idle(&mut self, idle: Duration) {
        self.window_idle += idle;
    }

    /// The smoothed throughput in bytes per busy second, once measured.
    pub fn rate(&self) -> Option<f64> {
        self.rate
    }

    /// Closes the window when it is at least [`UPDATE_PERIOD`] old (the
    /// first window also after [`FIRST_WINDOW_EVENTS`] events) and returns
    /// the new throughput; `None` while the window is open or when the
    /// consumer took nothing in it (nothing learned: the old throughput
    /// stays).
    pub fn update(&mut self, now: Instant) -> Option<f64> {
        let elapsed = now.saturating_duration_since(self.window_start);
        let first_done = self.rate.is_none() && self.window_events >= FIRST_WINDOW_EVENTS;
        if elapsed < UPDATE_PERIOD && !(first_done && elapsed >= MIN_BUSY) {
            return None;
        }
        let busy = elapsed.saturating_sub(self.window_idle);
        let bytes = self.window_bytes;
        self.window_start = now;
        self.window_bytes = 0;
        self.window_events = 0;
        self.window_idle = Duration::ZERO;
        if bytes == 0 {
            return None;
        }
        // A consumer that took input and was hardly busy is fast: count at
        // least MIN_BUSY, so its budget rises instead of staying unmeasured.
        let busy = busy.max(MIN_BUSY);
        let sample = bytes as f64 / busy.as_secs_f64();
        let rate = match self.rate {
            None => sample,
            Some(old) => old + SMOOTHING * (sample - old),
        };
        self.rate = Some(rate);
        Some(rate)
    }
}

/// Turns a consumer's throughput into the byte budget of each of its input
/// channels.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FlowPolicy {
    /// Time of work the queued input may hold.
    pub target: Duration,
    pub min_bytes: usize,
    pub max_bytes: usize,
}

impl Default for FlowPolicy {
    fn default() -> Self {
        FlowPolicy {
            target: DEFAULT_IN_FLIGHT_TARGET,
            min_bytes: MIN_BUDGET_BYTES,
            max_bytes: MAX_BUDGET_BYTES,
        }
    }
}

impl FlowPolicy {
    /// The policy of a job: its target, at most the checkpoint interval
    /// (so a barrier waits about one interval of work at a hop).
    pub fn for_job(target: Duration, checkpoint_interval: Option<Duration>) -> Self {
        let target = match checkpoint_interval {
            Some(i) => target.min(i),
            None => target,
        };
        FlowPolicy {
            target,
            ..FlowPolicy::default()
        }
    }

    /// Bytes each of `channels` live input channels may queue for a
    /// consumer taking `rate` bytes per busy second.
    pub fn budget(&self, rate: f64, channels: usize) -> usize {
        let share = rate * self.target.as_secs_f64() / channels.max(1) as f64;
        if !share.is_finite() || share >= self.max_bytes as f64 {
            return self.max_bytes;
        }
        (share as usize).clamp(self.min_bytes, self.max_bytes)
    }
}

/// How many slices of about `budget` bytes a batch of `bytes` bytes and
/// `rows` rows is cut into (1: sent whole). Slices keep at least
/// [`MIN_SLICE_ROWS`] rows.
pub fn slices_for(bytes: usize, rows: usize, budget: usize) -> usize {
    if bytes <= budget || rows < 2 * MIN_SLICE_ROWS {
        return 1;
    }
    bytes
        .div_ceil(budget.max(1))
        .min(rows / MIN_SLICE_ROWS)
        .max(1)
}

/// What a channel holds now.
#[derive(Debug, Default)]
struct Queued {
    bytes: usize,
    events: usize,
    /// The consumer dropped its end.
    closed: bool,
    /// The producer waits for space.
    waiting: bool,
}

impl Queued {
    /// Whether an event of `bytes` may join: an empty channel takes
    /// anything; else within `max_events`, and a batch within `budget`
    /// (control events cost no bytes).
    #[inline]
    fn fits(&self, bytes: usize, max_events: usize, budget: usize) -> bool {
        self.events == 0
            || (self.events < max_events && (bytes == 0 || self.bytes + bytes <= budget))
    }
}

/// The state a channel's two ends share.
#[derive(Debug)]
pub struct Gate {
    queued: Mutex<Queued>,
    space: Condvar,
    budget: AtomicUsize,
    /// The consumer set a budget from a measurement: only then are large
    /// batches cut (the initial budget is a guess).
    measured: AtomicBool,
    max_events: usize,
    /// Barriers that overtook the queue (FLIP-76).
    priority: Arc<PrioritySlot>,
}

/// Barriers that overtook a channel's queue (FLIP-76), oldest first: the
/// consumer looks here before it reads the queue. A local channel's gate
/// holds it; a remote channel's reader thread fills it.
#[derive(Debug, Default)]
pub struct PrioritySlot {
    queue: Mutex<std::collections::VecDeque<Barrier>>,
    /// Lets the consumer look without taking the lock.
    any: AtomicBool,
}

impl PrioritySlot {
    /// Publishes `barrier` (after its in-band marker was queued).
    pub fn push(&self, barrier: Barrier) {
        self.queue.lock().push_back(barrier);
        self.any.store(true, Ordering::Release);
    }

    /// The oldest barrier not taken yet; one atomic load when none.
    #[inline]
    pub fn take(&self) -> Option<Barrier> {
        if !self.any.load(Ordering::Acquire) {
            return None;
        }
        let mut q = self.queue.lock();
        let b = q.pop_front();
        if q.is_empty() {
            self.any.store(false, Ordering::Release);
        }
        b
    }
}

impl Gate {
    fn new(max_events: usize, budget: usize) -> Self {
        Gate {
            queued: Mutex::new(Queued::default()),
            space: Condvar::new(),
            budget: AtomicUsize::new(budget),
            measured: AtomicBool::new(false),
            max_events: max_events.max(1),
            priority: Arc::default(),
        }
    }

    /// The budget batches are cut to: none before the first measurement.
    fn slice_budget(&self) -> usize {
        if self.measured.load(Ordering::Relaxed) {
            self.budget()
        } else {
            usize::MAX
        }
    }

    /// The byte budget the consumer set.
    pub fn budget(&self) -> usize {
        self.budget.load(Ordering::Relaxed)
    }

    /// The consumer sets a new byte budget.
    pub fn set_budget(&self, bytes: usize) {
        self.measured.store(true, Ordering::Relaxed);
        let old = self.budget.swap(bytes, Ordering::Relaxed);
        if bytes > old {
            let q = self.queued.lock();
            if q.waiting {
                self.space.notify_all();
            }
        }
    }

    /// Bytes and events queued now.
    pub fn queued(&self) -> (usize, usize) {
        let q = self.queued.lock();
        (q.bytes, q.events)
    }

    /// Waits until an event of `bytes` fits; false when the consumer is gone.
    fn acquire(&self, bytes: usize) -> bool {
        let mut q = self.queued.lock();
        loop {
            if q.closed {
                return false;
            }
            if q.fits(bytes, self.max_events, self.budget()) {
                q.bytes += bytes;
                q.events += 1;
                q.waiting = false;
                return true;
            }
            q.waiting = true;
            self.space.wait(&mut q);
        }
    }

    /// Takes the space of a control event without waiting: an overtaking
    /// barrier's in-band marker must not wait behind the data it overtakes.
    fn acquire_forced(&self) -> bool {
        let mut q = self.queued.lock();
        if q.closed {
            return false;
        }
        q.events += 1;
        true
    }

    fn release(&self, bytes: usize) {
        let mut q = self.queued.lock();
        q.bytes = q.bytes.saturating_sub(bytes);
        q.events = q.events.saturating_sub(1);
        if q.waiting {
            self.space.notify_all();
        }
    }

    fn close(&self) {
        let mut q = self.queued.lock();
        q.closed = true;
        self.space.notify_all();
    }
}

/// One element of a channel: an event and what it costs in the budget.
pub type Item = (Event, usize);

/// The consumer of a channel is gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Disconnected;

/// Writing end of a channel. Used by one producer task.
#[derive(Debug)]
pub struct EventSender {
    tx: Sender<Item>,
    gate: Arc<Gate>,
}

impl EventSender {
    /// Sends `event`, blocking while the channel is over its budget; a batch
    /// much larger than the budget goes as several zero-copy slices.
    pub fn send(&self, event: Event) -> Result<(), Disconnected> {
        let Event::Data(batch) = &event else {
            return self.send_sized(event, 0);
        };
        let bytes = batch_bytes(batch);
        let rows = batch.num_rows();
        let pieces = slices_for(bytes, rows, self.gate.slice_budget());
        if pieces == 1 {
            return self.send_sized(event, bytes);
        }
        let per = rows.div_ceil(pieces);
        let mut offset = 0;
        while offset < rows {
            let len = per.min(rows - offset);
            let slice = batch.slice(offset, len);
            let slice_bytes = (bytes * len / rows).max(1);
            self.send_sized(Event::Data(slice), slice_bytes)?;
            offset += len;
        }
        Ok(())
    }

    /// The byte budget the consumer measured, `None` before its first
    /// measurement. A source sizes its batches by it (see
    /// [`crate::source::SourceReader::limit_batch_rows`]).
    pub fn measured_budget(&self) -> Option<usize> {
        self.gate
            .measured
            .load(Ordering::Relaxed)
            .then(|| self.gate.budget())
    }

    /// Sends an unaligned barrier that overtakes the data queued in the
    /// channel (FLIP-76): it goes in-band, without waiting for space, as
    /// the marker of where it stood in the stream, and into the gate's
    /// priority slot, which the consumer looks at before the queue. What
    /// was queued before the marker is the data the barrier overtook.
    pub fn send_overtaking(&self, barrier: Barrier) -> Result<(), Disconnected> {
        if !self.gate.acquire_forced() {
            return Err(Disconnected);
        }
        // The marker first: a consumer that sees the priority barrier finds
        // its marker in the queue.
        self.tx.send((Event::Barrier(barrier), 0)).map_err(|_| {
            self.gate.release(0);
            Disconnected
        })?;
        self.gate.priority.push(barrier);
        Ok(())
    }

    fn send_sized(&self, event: Event, bytes: usize) -> Result<(), Disconnected> {
        if !self.gate.acquire(bytes) {
            return Err(Disconnected);
        }
        self.tx.send((event, bytes)).map_err(|_| {
            self.gate.release(bytes);
            Disconnected
        })
    }

    /// Sends without waiting for space; `Err` with the event when the
    /// channel is over its budget (or the consumer is gone).
    #[cfg(test)]
    fn try_send(&self, event: Event) -> Result<(), Event> {
        let bytes = event_bytes(&event);
        let mut q = self.gate.queued.lock();
        if q.closed || !q.fits(bytes, self.gate.max_events, self.gate.budget()) {
            return Err(event);
        }
        q.bytes += bytes;
        q.events += 1;
        drop(q);
        self.tx.send((event, bytes)).map_err(|e| e.0 .0)
    }
}

/// Reading end of a channel: a local channel's (with its gate), or the
/// queue a remote channel's reader thread fills (its flow control is the
/// data plane's credits).
#[derive(Debug)]
pub struct EventReceiver {
    rx: Receiver<Item>,
    gate: Option<Arc<Gate>>,
    priority: Arc<PrioritySlot>,
}

impl EventReceiver {
    /// The receiving end of a queue filled without a gate.
    pub fn ungated(rx: Receiver<Item>) -> Self {
        Self::ungated_with(rx, Arc::default())
    }

    /// The receiving end of a queue filled without a gate, whose overtaking
    /// barriers arrive in `priority` (a remote channel's).
    pub fn ungated_with(rx: Receiver<Item>, priority: Arc<PrioritySlot>) -> Self {
        EventReceiver {
            rx,
            gate: None,
            priority,
        }
    }

    /// The next event, without waiting; with its cost in bytes.
    #[inline]
    pub fn try_recv(&self) -> Result<Item, TryRecvError> {
        let item = self.rx.try_recv()?;
        Ok(self.taken(item))
    }

    /// The underlying queue, to wait on it in a `crossbeam_channel::Select`;
    /// pass what it yields to [`Self::taken`].
    pub fn queue(&self) -> &Receiver<Item> {
        &self.rx
    }

    /// Frees the space of an item taken off [`Self::queue`].
    #[inline]
    pub fn taken(&self, item: Item) -> Item {
        if let Some(g) = &self.gate {
            g.release(item.1);
        }
        item
    }

    /// The oldest overtaking barrier not taken yet (see
    /// [`EventSender::send_overtaking`]); one relaxed load when none.
    #[inline]
    pub fn take_priority(&self) -> Option<Barrier> {
        self.priority.take()
    }

    /// Takes the queued items up to and including the in-band marker of
    /// the overtaking barrier `id` (which [`EventSender::send_overtaking`]
    /// queued before it published the barrier), appending the items before
    /// it to `into`; false if the producer is gone first. The items keep
    /// their space in the channel until they are processed (pass each to
    /// [`Self::taken`] then): the overtaken data is still in flight, and
    /// the producer must not queue as much again behind it.
    pub fn drain_to_marker(&self, id: u64, into: &mut std::collections::VecDeque<Item>) -> bool {
        loop {
            let Ok(item) = self.rx.recv() else {
                return false;
            };
            if matches!(&item.0, Event::Barrier(b) if b.id == id) {
                self.taken(item);
                return true;
            }
            into.push_back(item);
        }
    }

    /// The channel's gate (`None` for a remote channel).
    pub fn gate(&self) -> Option<&Arc<Gate>> {
        self.gate.as_ref()
    }
}

impl Drop for EventReceiver {
    fn drop(&mut self) {
        if let Some(g) = &self.gate {
            g.close();
        }
    }
}

/// A channel holding at most `max_events` events, and more than one only
/// within `initial_budget` bytes until its consumer sets a budget.
pub fn bounded(max_events: usize, initial_budget: usize) -> (EventSender, EventReceiver) {
    let (tx, rx) = crossbeam_channel::unbounded();
    let gate = Arc::new(Gate::new(max_events, initial_budget));
    (
        EventSender {
            tx,
            gate: gate.clone(),
        },
        EventReceiver {
            rx,
            priority: gate.priority.clone(),
            gate: Some(gate),
        },
    )
}

/// The flow control of one consumer task: measures its throughput and
/// sets the budgets of its local input channels.
#[derive(Debug)]
pub struct InputFlow {
    policy: FlowPolicy,
    meter: ThroughputMeter,
}

impl InputFlow {
    /// Flow control under `policy`, measuring from `now`.
    pub fn new(policy: FlowPolicy, now: Instant) -> Self {
        InputFlow {
            policy,
            meter: ThroughputMeter::new(now),
        }
    }

    /// The task took `bytes` from an input channel at `now`. Returns the
    /// new throughput when the measurement window closed (then set the
    /// budgets with [`Self::budget`]).
    #[inline]
    pub fn on_taken(&mut self, bytes: usize, now: Instant) -> Option<f64> {
        let updated = self.meter.update(now);
        self.meter.on_consumed(bytes);
        updated
    }

    /// The budget of each of `live` input channels at throughput `rate`.
    pub fn budget(&self, rate: f64, live: usize) -> usize {
        self.policy.budget(rate, live)
    }

    /// The task waited `idle` for input.
    #[inline]
    pub fn on_idle(&mut self, idle: Duration) {
        self.meter.on_idle(idle);
    }

    /// The measured throughput, bytes per busy second.
    pub fn rate(&self) -> Option<f64> {
        self.meter.rate()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{ArrayRef, Int64Array};
    use std::time::Duration;

    fn batch(n: i64) -> RecordBatch {
        let a: ArrayRef = Arc::new(Int64Array::from_iter_values(0..n));
        RecordBatch::try_from_iter([("value", a)]).unwrap()
    }

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn events_arrive_in_order_and_batches_are_shared_not_copied() {
        let (tx, rx) = bounded(4, MAX_BUDGET_BYTES);
        let b = batch(10);
        let ptr = b.column(0).to_data().buffers()[0].as_ptr();
        tx.send(Event::Data(b.clone())).unwrap();
        tx.send(Event::Watermark(5)).unwrap();
        tx.send(Event::EndOfData { drain: true }).unwrap();
        match rx.try_recv().unwrap().0 {
            Event::Data(got) => assert_eq!(got.column(0).to_data().buffers()[0].as_ptr(), ptr),
            other => panic!("unexpected {other:?}"),
        }
        assert!(matches!(rx.try_recv().unwrap().0, Event::Watermark(5)));
        assert!(matches!(
            rx.try_recv().unwrap().0,
            Event::EndOfData { drain: true }
        ));
    }

    #[test]
    fn full_channel_blocks_the_writer() {
        let (tx, rx) = bounded(2, MAX_BUDGET_BYTES);
        tx.send(Event::Watermark(1)).unwrap();
        tx.send(Event::Watermark(2)).unwrap();
        let third = tx.try_send(Event::Watermark(3));
        assert!(third.is_err(), "two events are the limit");
        rx.try_recv().unwrap();
        tx.try_send(Event::Watermark(3)).unwrap();
    }

    #[test]
    fn the_byte_budget_blocks_the_writer_but_an_empty_channel_takes_any_batch() {
        let big = batch(10_000); // ~80 KB
        let bytes = batch_bytes(&big);
        let (tx, rx) = bounded(8, bytes / 2);
        // larger than the budget, but the channel is empty: it goes (whole,
        // since try_send never cuts)
        tx.try_send(Event::Data(big.clone())).unwrap();
        assert!(tx.try_send(Event::Data(batch(10))).is_err());
        // control events cost no bytes but still count as events
        assert!(tx.try_send(Event::Watermark(1)).is_ok());
        let (got, cost) = rx.try_recv().unwrap();
        assert_eq!(cost, bytes);
        assert_eq!(got.num_rows(), 10_000);
        assert_eq!(rx.gate().unwrap().queued(), (0, 1));
        tx.try_send(Event::Data(batch(10))).unwrap();
    }

    #[test]
    fn a_batch_far_above_the_budget_is_sent_as_zero_copy_slices() {
        let big = batch(10_000);
        let bytes = batch_bytes(&big);
        let (tx, rx) = bounded(64, MAX_BUDGET_BYTES);
        rx.gate().unwrap().set_budget(bytes / 4);
        let base = big.column(0).to_data().buffers()[0].as_ptr() as usize;
        let mut got = Vec::new();
        std::thread::scope(|s| {
            s.spawn(|| tx.send(Event::Data(big.clone())).unwrap());
            let mut rows = 0;
            while rows < 10_000 {
                let (event, cost) = rx.taken(rx.queue().recv().unwrap());
                let Event::Data(b) = event else {
                    continue;
                };
                rows += b.num_rows();
                let first = b.column(0).to_data().buffers()[0].as_ptr() as usize;
                got.push((b, first, cost));
            }
        });
        assert_eq!(got.len(), 4, "cut into about budget-sized slices");
        let mut expected_next = 0;
        for (b, first, _) in &got {
            assert_eq!(
                *first,
                base + expected_next * 8,
                "a slice points into the batch's buffer"
            );
            let values = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
            assert_eq!(values.value(0), expected_next as i64, "in order");
            expected_next += b.num_rows();
        }
        let costs: usize = got.iter().map(|g| g.2).sum();
        assert!(
            costs <= bytes && costs + 4 >= bytes,
            "slices cost their share"
        );
    }

    #[test]
    fn nothing_is_cut_before_the_consumer_measured_a_budget() {
        let big = batch(10_000);
        let (tx, rx) = bounded(8, 1);
        tx.send(Event::Data(big)).unwrap();
        assert_eq!(rx.try_recv().unwrap().0.num_rows(), 10_000);
    }

    #[test]
    fn a_dropped_consumer_releases_a_blocked_writer() {
        let (tx, rx) = bounded(1, MAX_BUDGET_BYTES);
        tx.send(Event::Watermark(1)).unwrap();
        let t = std::thread::spawn(move || tx.send(Event::Watermark(2)));
        std::thread::sleep(Duration::from_millis(20));
        drop(rx);
        assert_eq!(t.join().unwrap(), Err(Disconnected));
    }

    #[test]
    fn a_raised_budget_wakes_a_blocked_writer() {
        let (tx, rx) = bounded(8, 1);
        tx.send(Event::Data(batch(100))).unwrap();
        let t = std::thread::spawn(move || tx.send(Event::Data(batch(100))));
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(rx.gate().unwrap().queued().1, 1, "the writer waits");
        rx.gate().unwrap().set_budget(MAX_BUDGET_BYTES);
        t.join().unwrap().unwrap();
        assert_eq!(rx.gate().unwrap().queued().1, 2);
    }

    #[test]
    fn meter_measures_bytes_per_busy_second_and_ignores_idle_time() {
        let t0 = Instant::now();
        let mut m = ThroughputMeter::new(t0);
        m.on_consumed(1_000_000);
        assert_eq!(m.update(t0 + 10 * MS), None, "the window is still open");
        // 100 ms of which 50 ms waiting for input: 1 MB per 50 busy ms
        m.on_idle(50 * MS);
        let r = m.update(t0 + 100 * MS).unwrap();
        assert!((r - 20e6).abs() < 1.0, "{r}");
        // a window without input teaches nothing
        m.on_idle(60 * MS);
        assert_eq!(m.update(t0 + 160 * MS), None);
        assert_eq!(m.rate(), Some(r));
        // a slower window moves the average half way
        m.on_consumed(100_000);
        let r2 = m.update(t0 + 260 * MS).unwrap();
        assert!((r2 - (20e6 + 1e6) / 2.0).abs() < 1.0, "{r2}");
    }

    #[test]
    fn a_fast_consumer_that_mostly_waits_for_input_gets_a_large_budget() {
        let t0 = Instant::now();
        let mut f = InputFlow::new(FlowPolicy::default(), t0);
        let mut now = t0;
        let mut last = None;
        // 8 batches of 512 KiB within 2 ms, nearly all of it spent waiting
        for _ in 0..9 {
            f.on_idle(Duration::from_micros(240));
            now += Duration::from_micros(250);
            last = f.on_taken(512 << 10, now).map(|r| f.budget(r, 2)).or(last);
        }
        assert_eq!(last, Some(MAX_BUDGET_BYTES));
    }

    #[test]
    fn the_first_window_closes_early_after_a_few_events() {
        let t0 = Instant::now();
        let mut m = ThroughputMeter::new(t0);
        for _ in 0..FIRST_WINDOW_EVENTS {
            m.on_consumed(1000);
        }
        assert_eq!(m.update(t0 + Duration::from_micros(500)), None, "too short");
        let r = m.update(t0 + 2 * MS).unwrap();
        assert!((r - 4e6).abs() < 1.0, "{r}");
        // later windows run their full period
        for _ in 0..100 {
            m.on_consumed(1000);
        }
        assert_eq!(m.update(t0 + 10 * MS), None);
    }

    #[test]
    fn policy_budget_is_throughput_times_target_shared_by_channels_within_bounds() {
        let p = FlowPolicy::default();
        // 1 MB/s for 1 s over 2 channels
        assert_eq!(p.budget(1e6, 2), 500_000);
        assert_eq!(p.budget(10.0, 1), MIN_BUDGET_BYTES, "floor");
        assert_eq!(p.budget(1e12, 1), MAX_BUDGET_BYTES, "ceiling");
        assert_eq!(p.budget(f64::INFINITY, 1), MAX_BUDGET_BYTES);
        assert_eq!(p.budget(1e6, 0), 1_000_000, "no live channel counts as one");
        let j = FlowPolicy::for_job(Duration::from_secs(1), Some(Duration::from_millis(250)));
        assert_eq!(j.budget(1e6, 1), 250_000, "at most the checkpoint interval");
        let j = FlowPolicy::for_job(Duration::from_secs(1), Some(Duration::from_secs(60)));
        assert_eq!(j.target, Duration::from_secs(1));
    }

    #[test]
    fn slices_keep_a_minimum_size() {
        assert_eq!(slices_for(100, 10_000, 200), 1, "fits");
        assert_eq!(slices_for(1000, 10_000, 100), 10);
        assert_eq!(slices_for(1000, 400, 100), 1, "too few rows to cut");
        assert_eq!(
            slices_for(1_000_000, 1024, 1),
            4,
            "at least MIN_SLICE_ROWS rows each"
        );
    }

    #[test]
    fn input_flow_turns_a_slow_consumer_into_small_budgets() {
        let t0 = Instant::now();
        let mut f = InputFlow::new(FlowPolicy::default(), t0);
        // a consumer that needs 500 ms per 128 KiB batch, fed by 2 channels
        assert_eq!(f.on_taken(128 << 10, t0), None);
        let rate = f.on_taken(128 << 10, t0 + 500 * MS).unwrap();
        let b = f.budget(rate, 2);
        assert_eq!(
            b,
            (128 << 10) * 2 / 2,
            "one second of work shared by two channels"
        );
        // a fast consumer: 128 KiB per 100 us
        let mut f = InputFlow::new(FlowPolicy::default(), t0);
        let mut now = t0;
        let mut last = None;
        for _ in 0..600 {
            now += Duration::from_micros(100);
            last = f.on_taken(128 << 10, now).map(|r| f.budget(r, 2)).or(last);
        }
        assert_eq!(last, Some(MAX_BUDGET_BYTES));
    }
}
