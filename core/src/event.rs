//! The events that flow through channels (DESIGN.md "Runtime").
//!
//! A data batch is an `arrow::RecordBatch`, whose columns are reference
//! counted: cloning an event for fan-out never copies data. Control events
//! (barriers, watermarks, EndOfData, end of partition, termination tokens) are
//! carried in order with the data, which is what barrier alignment
//! (flink-fault-tolerance-mechanism.txt), FLIP-16 loop logging, FLIP-15
//! termination rounds and FLIP-147 EndOfData rely on.

use arrow::record_batch::RecordBatch;

/// Whether a barrier belongs to a periodic checkpoint or a user savepoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BarrierKind {
    Checkpoint,
    Savepoint,
}

/// A checkpoint barrier: everything before it on a channel belongs to
/// checkpoint `id`, everything after it to later checkpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Barrier {
    pub id: u64,
    pub kind: BarrierKind,
    /// `false` for unaligned checkpoints (barrier overtakes in-flight data).
    pub aligned: bool,
    /// Milliseconds since the epoch at which the coordinator triggered it.
    pub timestamp_ms: u64,
}

/// The verdict a subtask adds to a termination token (FLIP-15).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Activity {
    Idle,
    Busy,
}

/// The TerminationAttempt baton of FLIP-15 for loop `loop_id`, round `round`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TerminationToken {
    pub loop_id: u32,
    pub round: u64,
    /// Busy if any subtask it passed saw a record since the previous round.
    pub activity: Activity,
}

/// Watermark value that ends event time (emitted when a bounded source ends).
pub const MAX_WATERMARK: i64 = i64::MAX;

/// One element of a channel.
#[derive(Debug, Clone)]
pub enum Event {
    /// A batch of records, shared and never copied on fan-out.
    Data(RecordBatch),
    /// Checkpoint barrier.
    Barrier(Barrier),
    /// Event-time watermark, milliseconds since the epoch.
    Watermark(i64),
    /// The producer has no data for now (FLIP-27 idleness, Flink's idle
    /// watermark status): until it sends data or a watermark again, its
    /// channel does not hold back the consumer's watermark.
    Idle,
    /// The producer's operator logic finished (FLIP-147); `drain` is false
    /// for stop-with-savepoint without drain.
    EndOfData { drain: bool },
    /// The producer's task has finished and will send nothing more.
    EndOfPartition,
    /// FLIP-15 termination baton.
    Termination(TerminationToken),
}

impl Event {
    /// Number of records carried (0 for control events).
    pub fn num_rows(&self) -> usize {
        match self {
            Event::Data(b) => b.num_rows(),
            _ => 0,
        }
    }
}
