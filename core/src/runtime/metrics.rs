//! Per-operator counters (records and batches in and out), summed over the
//! operator's subtasks with relaxed atomics: one add per batch, none per
//! record; per-subtask rows, busy / backpressured / idle time and
//! watermark ([`SubtaskMetrics`]); a loop head subtask's feedback queue
//! and termination round (DESIGN.md "Loops": feedback queues and the
//! termination protocol).

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::feedback::FeedbackQueue;
use crate::graph::Role;

/// Live counters of one operator.
#[derive(Debug, Default)]
pub struct OperatorMetrics {
    /// One entry per subtask.
    pub subtasks: Vec<Arc<SubtaskMetrics>>,
    pub records_in: AtomicU64,
    pub records_out: AtomicU64,
    pub batches_in: AtomicU64,
    pub batches_out: AtomicU64,
    /// Late records dropped (summed over subtasks).
    pub late_records: AtomicU64,
    /// Loop heads: bytes of feedback spilled to disk (counted while the
    /// head reads its feedback, so a running job's value is current).
    pub spilled_bytes: AtomicU64,
    /// Loop heads: feedback spill files written.
    pub spill_files: AtomicU64,
}

impl OperatorMetrics {
    /// Counters of an operator with `parallelism` subtasks.
    pub fn new(parallelism: usize) -> Self {
        OperatorMetrics {
            subtasks: (0..parallelism.max(1))
                .map(|_| Arc::new(SubtaskMetrics::default()))
                .collect(),
            ..Default::default()
        }
    }

    /// The counters of subtask `index` (a fresh detached one if out of range).
    pub fn subtask(&self, index: usize) -> Arc<SubtaskMetrics> {
        self.subtasks.get(index).cloned().unwrap_or_default()
    }

    /// Counts an input batch of `rows` rows.
    #[inline]
    pub fn add_in(&self, rows: usize) {
        self.records_in.fetch_add(rows as u64, Ordering::Relaxed);
        self.batches_in.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts an output batch of `rows` rows.
    #[inline]
    pub fn add_out(&self, rows: usize) {
        self.records_out.fetch_add(rows as u64, Ordering::Relaxed);
        self.batches_out.fetch_add(1, Ordering::Relaxed);
    }
}

/// A copy of one operator's counters.
#[derive(Debug, Clone)]
pub struct OperatorMetricsSnapshot {
    pub name: String,
    pub role: Role,
    pub records_in: u64,
    pub records_out: u64,
    pub batches_in: u64,
    pub batches_out: u64,
    pub late_records: u64,
    pub spilled_bytes: u64,
    pub spill_files: u64,
    pub subtasks: Vec<SubtaskMetricsSnapshot>,
}

/// A copy of a job's counters.
#[derive(Debug, Clone)]
pub struct MetricsSnapshot {
    pub wall_time_s: f64,
    pub operators: Vec<OperatorMetricsSnapshot>,
}

/// The named counters of every node of a job.
#[derive(Debug, Default)]
pub(crate) struct JobMetrics {
    pub nodes: Vec<(String, Role, Arc<OperatorMetrics>)>,
}

impl JobMetrics {
    pub fn snapshot(&self, wall_time_s: f64) -> MetricsSnapshot {
        MetricsSnapshot {
            wall_time_s,
            operators: self
                .nodes
                .iter()
                .map(|(name, role, m)| OperatorMetricsSnapshot {
                    name: name.clone(),
                    role: *role,
                    records_in: m.records_in.load(Ordering::Relaxed),
                    records_out: m.records_out.load(Ordering::Relaxed),
                    batches_in: m.batches_in.load(Ordering::Relaxed),
                    batches_out: m.batches_out.load(Ordering::Relaxed),
                    late_records: m.late_records.load(Ordering::Relaxed),
                    spilled_bytes: m.spilled_bytes.load(Ordering::Relaxed),
                    spill_files: m.spill_files.load(Ordering::Relaxed),
                    subtasks: m.subtasks.iter().map(|s| s.snapshot()).collect(),
                })
                .collect(),
        }
    }
}

/// Live counters of one subtask of an operator: rows in and out, and how
/// the subtask's thread spent its time (Flink's busy / backpressured /
/// idle time), in nanoseconds. The time of a task is charged to every
/// operator of its chain (they share the thread).
///
/// A loop head subtask also shows its feedback queues (events and bytes
/// queued, read live from the queues it [watches](Self::watch_feedback))
/// and the last termination round it emitted.
#[derive(Debug)]
pub struct SubtaskMetrics {
    pub records_in: AtomicU64,
    pub records_out: AtomicU64,
    /// Time spent computing (neither waiting for input nor blocked on output).
    pub busy_ns: AtomicU64,
    /// Time blocked sending to a full output channel (backpressure).
    pub backpressured_ns: AtomicU64,
    /// Time waiting for input.
    pub idle_ns: AtomicU64,
    /// The subtask's event time: the newest watermark its operator received
    /// or emitted (`i64::MIN`: none yet).
    pub watermark: AtomicI64,
    /// Loop heads: the last termination round emitted in this attempt
    /// (0 before round 1; termination.rs).
    pub termination_round: AtomicU64,
    /// Loop heads without watched queues (a driver whose workers run the
    /// heads): the events and bytes queued as the last metric frame said.
    pub feedback_events: AtomicU64,
    pub feedback_bytes: AtomicU64,
    /// The subtask's task ended its input and finished its operators in
    /// this attempt (FLIP-147: it stays up, answering checkpoints, until
    /// the job ends); false again when a new attempt starts the task.
    pub finished: AtomicBool,
    /// Loop heads: the feedback queues the subtask reads in this attempt
    /// (weak: the metrics never keep a queue, or its spill files, alive).
    feedback: Mutex<Vec<Weak<FeedbackQueue>>>,
}

impl Default for SubtaskMetrics {
    fn default() -> Self {
        SubtaskMetrics {
            records_in: AtomicU64::new(0),
            records_out: AtomicU64::new(0),
            busy_ns: AtomicU64::new(0),
            backpressured_ns: AtomicU64::new(0),
            idle_ns: AtomicU64::new(0),
            watermark: AtomicI64::new(i64::MIN),
            termination_round: AtomicU64::new(0),
            feedback_events: AtomicU64::new(0),
            feedback_bytes: AtomicU64::new(0),
            finished: AtomicBool::new(false),
            feedback: Mutex::new(Vec::new()),
        }
    }
}

/// A copy of one subtask's counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SubtaskMetricsSnapshot {
    pub records_in: u64,
    pub records_out: u64,
    pub busy_ns: u64,
    pub backpressured_ns: u64,
    pub idle_ns: u64,
    pub watermark: i64,
    /// Loop heads: the last termination round emitted (0: none).
    pub termination_round: u64,
    /// Loop heads: events queued on the feedback queues (memory and disk).
    pub feedback_events: u64,
    /// Loop heads: bytes of feedback batches held in memory.
    pub feedback_bytes: u64,
    /// The task finished its input and operators in this attempt.
    pub finished: bool,
}

impl SubtaskMetrics {
    /// Notes a watermark the operator received or emitted; the metric only
    /// moves forward (an operator may emit a lower watermark than it
    /// received, e.g. a window's end - 1).
    #[inline]
    pub fn note_watermark(&self, watermark: i64) {
        self.watermark.fetch_max(watermark, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> SubtaskMetricsSnapshot {
        let (feedback_events, feedback_bytes) = {
            let queues = self.feedback.lock();
            if queues.is_empty() {
                (
                    self.feedback_events.load(Ordering::Relaxed),
                    self.feedback_bytes.load(Ordering::Relaxed),
                )
            } else {
                queues
                    .iter()
                    .filter_map(Weak::upgrade)
                    .fold((0, 0), |(e, b), q| {
                        (e + q.len_events() as u64, b + q.memory_bytes() as u64)
                    })
            }
        };
        SubtaskMetricsSnapshot {
            records_in: self.records_in.load(Ordering::Relaxed),
            records_out: self.records_out.load(Ordering::Relaxed),
            busy_ns: self.busy_ns.load(Ordering::Relaxed),
            backpressured_ns: self.backpressured_ns.load(Ordering::Relaxed),
            idle_ns: self.idle_ns.load(Ordering::Relaxed),
            watermark: self.watermark.load(Ordering::Relaxed),
            termination_round: self.termination_round.load(Ordering::Relaxed),
            feedback_events,
            feedback_bytes,
            finished: self.finished.load(Ordering::Relaxed),
        }
    }

    /// A loop head subtask of a new attempt reads `queues`: they replace
    /// the last attempt's, and its termination round starts over.
    pub fn watch_feedback(&self, queues: &[Arc<FeedbackQueue>]) {
        *self.feedback.lock() = queues.iter().map(Arc::downgrade).collect();
        self.termination_round.store(0, Ordering::Relaxed);
    }
}

/// Splits a task thread's time into busy, backpressured and idle: the
/// task loop reads the clock around each wait for input and each send
/// (once per batch, never per record); whatever lies between two such
/// points is busy time.
#[derive(Debug, Default)]
pub(crate) struct TaskTimer {
    /// The subtask counters of every operator of the task's chain.
    subtasks: Vec<Arc<SubtaskMetrics>>,
    /// The end of the last wait or send.
    mark: std::cell::Cell<Option<Instant>>,
}

impl TaskTimer {
    pub fn new(subtasks: Vec<Arc<SubtaskMetrics>>) -> Self {
        TaskTimer {
            subtasks,
            mark: std::cell::Cell::new(Some(Instant::now())),
        }
    }

    /// Charges the time since the last mark as busy and `waited` (which
    /// ended now) as idle or backpressured.
    #[inline]
    pub fn waited(&self, waited: Duration, backpressure: bool) {
        let Some(mark) = self.mark.get() else {
            return;
        };
        let now = Instant::now();
        let total = now.saturating_duration_since(mark);
        let waited = waited.min(total);
        let busy = (total - waited).as_nanos() as u64;
        let waited = waited.as_nanos() as u64;
        self.mark.set(Some(now));
        for s in &self.subtasks {
            s.busy_ns.fetch_add(busy, Ordering::Relaxed);
            if backpressure {
                s.backpressured_ns.fetch_add(waited, Ordering::Relaxed);
            } else {
                s.idle_ns.fetch_add(waited, Ordering::Relaxed);
            }
        }
    }

    /// Times `send` (a send that may block on a full channel).
    #[inline]
    pub fn send<T>(&self, send: impl FnOnce() -> T) -> T {
        if self.subtasks.is_empty() {
            return send();
        }
        let began = Instant::now();
        let r = send();
        self.waited(began.elapsed(), true);
        r
    }

    /// Marks the chain's subtasks finished (the task ended its input and
    /// its operators finished) or, at the start of an attempt, running.
    pub fn set_finished(&self, finished: bool) {
        for s in &self.subtasks {
            s.finished.store(finished, Ordering::Relaxed);
        }
    }

    /// Records the watermark the task emitted.
    #[inline]
    pub fn watermark(&self, watermark: i64) {
        for s in &self.subtasks {
            s.note_watermark(watermark);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_timer_charges_waits_to_idle_or_backpressure_and_the_rest_to_busy() {
        let subs = vec![
            Arc::new(SubtaskMetrics::default()),
            Arc::new(SubtaskMetrics::default()),
        ];
        let timer = TaskTimer::new(subs.clone());
        // A wait longer than the time since the last mark is cut to it: nothing is busy.
        timer.waited(Duration::from_secs(3600), false);
        let first = subs[0].snapshot();
        assert_eq!(first.busy_ns, 0);
        assert!(
            first.idle_ns < 3_600_000_000_000,
            "the wait is cut to the elapsed time"
        );
        timer.waited(Duration::ZERO, true);
        timer.watermark(17);
        for s in &subs {
            let s = s.snapshot();
            assert_eq!(s.backpressured_ns, 0, "a zero wait adds no backpressure");
            assert_eq!(s.idle_ns, first.idle_ns);
            assert_eq!(s.watermark, 17);
        }
        let before = subs[0].snapshot();
        let sent = timer.send(|| 5);
        assert_eq!(sent, 5);
        let after = subs[0].snapshot();
        assert!(after.busy_ns + after.backpressured_ns >= before.busy_ns + before.backpressured_ns);
        assert_eq!(after.idle_ns, before.idle_ns, "a send is never idle time");
    }

    #[test]
    fn a_loop_head_subtask_shows_its_feedback_queues_live() {
        use crate::event::Event;
        let sub = SubtaskMetrics::default();
        sub.termination_round.store(4, Ordering::Relaxed);
        let dir = std::env::temp_dir().join("eddyline-metrics-test");
        let queues: Vec<_> = (0..2)
            .map(|i| Arc::new(FeedbackQueue::new(format!("head {i}"), &dir, 1 << 20)))
            .collect();
        sub.watch_feedback(&queues);
        assert_eq!(
            sub.snapshot().termination_round,
            0,
            "a new attempt starts over"
        );
        queues[0].push(Event::Watermark(1)).unwrap();
        queues[1].push(Event::Watermark(2)).unwrap();
        queues[1].push(Event::Watermark(3)).unwrap();
        assert_eq!(sub.snapshot().feedback_events, 3);
        queues[1].try_pop().unwrap();
        assert_eq!(sub.snapshot().feedback_events, 2);
        // A dropped queue (an ended attempt's) counts as empty.
        drop(queues);
        assert_eq!(sub.snapshot().feedback_events, 0);
        // Without queues (a driver): the values the last metric frame stored.
        let driver = SubtaskMetrics::default();
        driver.feedback_events.store(9, Ordering::Relaxed);
        assert_eq!(driver.snapshot().feedback_events, 9);
    }

    #[test]
    fn a_timer_without_subtasks_does_nothing() {
        let timer = TaskTimer::default();
        timer.waited(Duration::from_millis(5), true);
        assert_eq!(timer.send(|| 1), 1);
        timer.watermark(3);
    }

    #[test]
    fn operator_metrics_have_one_entry_per_subtask() {
        let m = OperatorMetrics::new(3);
        assert_eq!(m.subtasks.len(), 3);
        m.subtask(2).records_in.fetch_add(4, Ordering::Relaxed);
        assert_eq!(m.subtasks[2].snapshot().records_in, 4);
        // Out of range: a detached counter, never a panic.
        m.subtask(9).records_in.fetch_add(1, Ordering::Relaxed);
        assert_eq!(JobMetrics::default().snapshot(0.0).operators.len(), 0);
    }
}
