//! The operator interface and the built-in native operators.
//!
//! The lifecycle follows FLIP-147: `open`, any number of `process_batch` /
//! `process_event` calls, `end_input` per logical input, `finish` (operator
//! logic done, may still emit), then snapshot/notify for the final
//! checkpoint, then `close`. State hooks (`snapshot_state`,
//! `restore_state`, `notify_checkpoint_complete`) are what asynchronous
//! barrier snapshotting drives.

/// Expands, inside the `impl Operator` of an operator that emits each
/// batch's rows as one batch, at once and in order (filter, project,
/// explode), to the `on_source_progress` that passes the source's progress
/// on ([`Collector::source_progress`]): the split of each batch is the
/// source's (per-split event time after it).
macro_rules! forward_source_progress {
    () => {
        fn on_source_progress(
            &mut self,
            split: Option<u64>,
            open: &[u64],
            out: &mut dyn $crate::operator::Collector,
        ) -> $crate::error::Result<()> {
            out.source_progress(split, open)
        }
    };
}

/// Implements [`Recompute`] for stateless operators: their (empty) state is
/// that of the current checkpoint.
macro_rules! stateless_recompute {
    ($($op:ty),+ $(,)?) => {
        $(
            impl $crate::operator::Recompute for $op {
                fn null_state_watermark(
                    &self,
                    checkpoint_id: u64,
                ) -> $crate::error::Result<Option<u64>> {
                    Ok(Some(checkpoint_id))
                }
            }
        )+
    };
}

pub mod explode;
pub mod filter;
pub mod join;
pub mod keyed_agg;
pub(crate) mod over_frames;
pub mod over_rows;
pub mod project;
pub mod session;
#[cfg(test)]
pub(crate) mod testing;
pub mod timestamps;
pub mod union;
pub mod window;

use arrow::record_batch::RecordBatch;

use crate::error::{Error, Result};
use crate::state::{OperatorState, Redistribution};

/// Where an operator sends what it produces. Implemented by the runtime:
/// either the next operator of the chain or the task's output partitioner.
pub trait Collector {
    /// Emits a batch downstream. Batches with zero rows may be dropped.
    fn emit(&mut self, batch: RecordBatch) -> Result<()>;
    /// Emits a watermark downstream.
    fn emit_watermark(&mut self, watermark: i64) -> Result<()>;

    /// Tells the consumers that this output is idle (FLIP-27 idleness):
    /// until it sends data or a watermark again, it does not hold back
    /// their watermark. The default (collectors that feed no channel)
    /// ignores it.
    fn emit_idle(&mut self) -> Result<()> {
        Ok(())
    }

    /// Emits a batch on output port `port` (see `graph::Edge::port`): port 0
    /// is [`Collector::emit`]; other ports are side outputs (a window's late
    /// records on [`LATE_PORT`]), read only by edges of that port. Their
    /// batches need not have the operator's output schema. The default
    /// supports port 0 only.
    fn emit_to_port(&mut self, port: u8, batch: RecordBatch) -> Result<()> {
        if port == 0 {
            return self.emit(batch);
        }
        Err(Error::runtime(format!(
            "an operator emitted on output port {port}, which this collector does not support"
        )))
    }

    /// Passes the source's progress ([`Operator::on_source_progress`]) on to
    /// the next operator of the chain. Operators that emit each batch's rows
    /// as one batch, right away and in order (filters, projections), call it
    /// from their own `on_source_progress`, so a timestamp assigner chained
    /// after them still learns the split of every batch (DESIGN.md "Event
    /// time per split"). The default (no chained operator) drops it.
    fn source_progress(&mut self, _split: Option<u64>, _open: &[u64]) -> Result<()> {
        Ok(())
    }
}

/// The output port of a window's late records (its side output).
pub const LATE_PORT: u8 = 1;

/// What an operator learns about where it runs when it is opened.
#[derive(Debug, Clone)]
pub struct OperatorContext {
    /// The operator's (user-facing) name, used in every error message.
    pub name: String,
    /// Stable id that matches state on restore.
    pub uid: String,
    pub subtask_index: usize,
    pub parallelism: usize,
    pub max_parallelism: usize,
    /// The key groups `[start, end)` this subtask owns (keyed operators).
    pub key_groups: std::ops::Range<usize>,
    /// How many attempts ran before this one (0 on the first run).
    pub attempt: u32,
}

/// A streaming operator: the lifecycle every operator has. Implementations
/// hold no lock while computing and are driven by exactly one thread at a
/// time. What only some operators do is a capability they hand out:
/// [`Operator::state`] (checkpointed state), [`Operator::recompute`]
/// (FLINK-4120 recompute recovery) and [`Operator::timers`]
/// (processing-time timers); an operator without one answers `None` (the
/// default) and the runtime treats it as stateless, not recomputable, or
/// without timers.
pub trait Operator: Send {
    /// Hands over, before `open`, how this subtask agrees on the operator's
    /// output schema with its other subtasks (`crate::schemas`). Operators
    /// that infer their output schema from their first output (Python
    /// functions) use it; the runtime checks every output against it anyway.
    fn set_schema_agreement(&mut self, _agreement: crate::schemas::SchemaAgreement) {}

    /// Called once before any record. Restore happens before `open`.
    fn open(&mut self, _ctx: &OperatorContext) -> Result<()> {
        Ok(())
    }

    /// Processes one batch that arrived on logical input `input`.
    fn process_batch(
        &mut self,
        input: usize,
        batch: RecordBatch,
        out: &mut dyn Collector,
    ) -> Result<()>;

    /// Processes a watermark (already combined across input channels).
    /// The default forwards it.
    fn process_watermark(&mut self, watermark: i64, out: &mut dyn Collector) -> Result<()> {
        out.emit_watermark(watermark)
    }

    /// Logical input `input` has ended (all its channels sent EndOfData).
    fn end_input(&mut self, _input: usize, _out: &mut dyn Collector) -> Result<()> {
        Ok(())
    }

    /// All inputs ended: flush whatever the operator still holds.
    fn finish(&mut self, _out: &mut dyn Collector) -> Result<()> {
        Ok(())
    }

    /// Releases resources; called on success and on failure.
    fn close(&mut self) -> Result<()> {
        Ok(())
    }

    /// Records that arrived after the watermark had passed all their windows
    /// so far, dropped or sent to the late side output (read after each
    /// call, for the metric).
    fn late_records(&self) -> u64 {
        0
    }

    /// FLIP-27 per-split event time (DESIGN.md "Event time per split"):
    /// called only on the first operator of a source task's chain (the one
    /// right after the source). Before each batch the source emits,
    /// `split` names the split it came from
    /// (`SourceReader::last_split` of the source module); while the source has
    /// nothing to emit it is called with `split = None` about every 10 ms,
    /// so that time-based decisions (idleness) can be taken without input.
    /// `open` lists the splits the source has not read to their end.
    /// Default: nothing.
    fn on_source_progress(
        &mut self,
        _split: Option<u64>,
        _open: &[u64],
        _out: &mut dyn Collector,
    ) -> Result<()> {
        Ok(())
    }

    /// The operator's checkpointed state, if it has any.
    fn state(&mut self) -> Option<&mut dyn CheckpointedState> {
        None
    }

    /// How the operator takes part in a recompute recovery, if it can.
    fn recompute(&mut self) -> Option<&mut dyn Recompute> {
        None
    }

    /// The operator's processing-time timers, if it may have some.
    fn timers(&mut self) -> Option<&mut dyn ProcessingTimers> {
        None
    }
}

/// State that asynchronous barrier snapshotting takes, restores and
/// commits (an [`Operator::state`] capability).
pub trait CheckpointedState {
    /// Synchronous part of a snapshot for checkpoint `checkpoint_id`: a
    /// cheap (copy-on-write) view of the state. Writing it happens elsewhere.
    fn snapshot_state(&mut self, _checkpoint_id: u64) -> Result<OperatorState> {
        Ok(OperatorState::default())
    }

    /// Restores the state taken by `snapshot_state` (possibly merged from
    /// several subtasks when the parallelism changed).
    fn restore_state(&mut self, _state: OperatorState) -> Result<()> {
        Ok(())
    }

    /// Checkpoint `checkpoint_id` completed everywhere (two-phase commit).
    fn notify_checkpoint_complete(&mut self, _checkpoint_id: u64) -> Result<()> {
        Ok(())
    }
}

/// FLINK-4120 recompute recovery (an [`Operator::recompute`] capability):
/// an operator whose state can be rebuilt from a bounded stretch of input.
pub trait Recompute {
    /// This operator's null-state watermark at checkpoint `checkpoint_id`
    /// (called right after `snapshot_state` of that checkpoint): the
    /// earliest checkpoint from whose source positions its current state can
    /// be rebuilt from its input alone (`checkpoint_id` itself when it holds
    /// no state). `None`: its state cannot be rebuilt and must be persisted.
    /// Only operators whose factory says [`OperatorFactory::recomputable`]
    /// are asked. An error fails the checkpoint and the task.
    fn null_state_watermark(&self, checkpoint_id: u64) -> Result<Option<u64>>;

    /// The barrier of checkpoint `checkpoint_id` passed this operator: the
    /// records that follow belong to the epoch after it. Called after
    /// `snapshot_state`, for barriers replayed during a recompute recovery
    /// (which take no snapshot), and once before `open` with the checkpoint
    /// the operator starts from (0 on a fresh start). Operators that report
    /// a null-state watermark use it to remember in which epoch their state
    /// began. An error (e.g. a user function's `on_barrier` raising) fails
    /// the checkpoint, like a failing `snapshot_state`, and the task.
    fn on_barrier(&mut self, _checkpoint_id: u64) -> Result<()> {
        Ok(())
    }
}

/// Processing-time timers (API.md "Keyed state and timers"; an
/// [`Operator::timers`] capability).
pub trait ProcessingTimers {
    /// How long (ms, by the operator's own clock; 0 or less: due now) until
    /// its next processing-time timer, if it has one. Asked of the head of a
    /// task's chain after every event and before the task waits: the task
    /// waits at most that long, then calls
    /// [`ProcessingTimers::on_processing_time`]; time never advances by
    /// sleeping in the engine.
    fn processing_timer_delay(&self) -> Option<i64>;

    /// A processing-time timer may be due: fires those that are (by the
    /// operator's clock) and emits what they produce.
    fn on_processing_time(&mut self, out: &mut dyn Collector) -> Result<()>;
}

/// Builds one operator instance per parallel subtask.
pub trait OperatorFactory: Send + Sync {
    /// A fresh operator for subtask `ctx.subtask_index`.
    fn create(&self, ctx: &OperatorContext) -> Result<Box<dyn Operator>>;

    /// FLINK-4120: whether the operators it builds can rebuild their state
    /// from a bounded stretch of input (they then report
    /// [`Recompute::null_state_watermark`]). With `recovery = recompute`
    /// such operators persist no state. Replaying their input must give
    /// the same state: their functions must be deterministic. Default:
    /// no.
    fn recomputable(&self) -> bool {
        false
    }

    /// FLINK-4120: whether replaying from *any* checkpoint before the
    /// reported null-state watermark also rebuilds the state (windows, the
    /// largest timestamp and stateless operators: yes; a deduplication
    /// whose entries expire: no, it must start exactly there). Only such
    /// operators may feed other recomputed operators, which may need them
    /// exact from an earlier point. Default: no.
    fn replayable_from_earlier(&self) -> bool {
        false
    }

    /// How the non-keyed state of its operators is dealt to the subtasks of
    /// a restore at another parallelism (FLIP-147: the remaining state of a
    /// partially finished operator is redistributed as on rescaling).
    /// Default: not at all; restoring such state at another parallelism is
    /// a `CheckpointError` naming the operator. Operators that answer
    /// [`Redistribution::EvenSplit`] write their non-keyed state with
    /// [`crate::state::encode_entries`].
    fn redistribution(&self) -> Redistribution {
        Redistribution::unsupported()
    }
}

impl<F> OperatorFactory for F
where
    F: Fn(&OperatorContext) -> Result<Box<dyn Operator>> + Send + Sync,
{
    fn create(&self, ctx: &OperatorContext) -> Result<Box<dyn Operator>> {
        self(ctx)
    }
}
