//! The chain of a task: its operators, each with its output's bookkeeping
//! ([`OpSlot`]), and how a batch or watermark travels down it (each
//! operator's [`ChainOut`] collector feeds the next one, the last one feeds
//! the task's output).

use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;

use super::TaskOutput;
use crate::error::{Error, Result};
use crate::event::{Barrier, BarrierKind, Event};
use crate::operator::{Collector, Operator, OperatorContext};
use crate::runtime::metrics::{OperatorMetrics, SubtaskMetrics};

/// One operator of a task's chain, with what the task keeps for it.
pub(crate) struct Chained {
    pub op: Box<dyn Operator>,
    /// Its metrics and output schema.
    pub slot: OpSlot,
    /// Where it runs (handed to `open`).
    pub context: OperatorContext,
    /// Its graph node.
    pub node: usize,
}

/// Schema bookkeeping and counters of one operator's output.
pub(crate) struct OpSlot {
    pub name: Arc<str>,
    pub metrics: Arc<OperatorMetrics>,
    /// This subtask's counters of the operator (set when the task starts).
    pub sub: Arc<SubtaskMetrics>,
    pub schema: Option<SchemaRef>,
    /// With no declared schema: how the first batch's schema is agreed with
    /// the node's other subtasks (`crate::schemas`).
    pub agreement: Option<crate::schemas::SchemaAgreement>,
    /// This subtask's contribution to the operator's late-record count.
    pub late: u64,
    /// A persisted operator drops its input while a recompute recovery
    /// replays (FLINK-4120; see [`crate::runtime::replay`]).
    pub replay_drop: bool,
}

impl OpSlot {
    /// Counts an input batch of `rows` rows.
    #[inline]
    pub(crate) fn count_in(&self, rows: usize) {
        self.metrics.add_in(rows);
        self.sub
            .records_in
            .fetch_add(rows as u64, std::sync::atomic::Ordering::Relaxed);
    }

    /// Counts an output batch of `rows` rows.
    #[inline]
    pub(crate) fn count_out(&self, rows: usize) {
        self.metrics.add_out(rows);
        self.sub
            .records_out
            .fetch_add(rows as u64, std::sync::atomic::Ordering::Relaxed);
    }

    /// Adds what the operator dropped as late since the last look.
    #[inline]
    fn track_late(&mut self, now: u64) {
        if now > self.late {
            self.metrics
                .late_records
                .fetch_add(now - self.late, std::sync::atomic::Ordering::Relaxed);
            self.late = now;
        }
    }
}

impl OpSlot {
    fn check(&mut self, batch: &RecordBatch) -> Result<()> {
        let got = batch.schema();
        if self.schema.is_none() {
            // Only a subtask's first batch gets here (and may wait, for a
            // worker process, on its driver).
            let agreed = match &self.agreement {
                Some(a) => a.agree(&got)?,
                None => got.clone(),
            };
            self.schema = Some(agreed);
        }
        match &self.schema {
            None => Ok(()),
            Some(expected) if Arc::ptr_eq(expected, &got) => Ok(()),
            Some(expected) => {
                let same = expected.fields().len() == got.fields().len()
                    && expected
                        .fields()
                        .iter()
                        .zip(got.fields().iter())
                        .all(|(a, b)| a.name() == b.name() && a.data_type() == b.data_type());
                if same {
                    Ok(())
                } else {
                    Err(Error::schema(
                        self.name.to_string(),
                        format!(
                            "a batch of {} rows has schema {} but the stream's schema is {}",
                            batch.num_rows(),
                            schema_string(&got),
                            schema_string(expected)
                        ),
                    ))
                }
            }
        }
    }
}

/// `a: Int64, b: Utf8` for messages.
pub(crate) fn schema_string(schema: &SchemaRef) -> String {
    let fields: Vec<String> = schema
        .fields()
        .iter()
        .map(|f| format!("{}: {}", f.name(), f.data_type()))
        .collect();
    format!("[{}]", fields.join(", "))
}

/// The collector handed to the operator at `slot`: its output goes to the
/// rest of the chain, or to the task output at the end of the chain.
pub(crate) struct ChainOut<'a> {
    pub(super) slot: &'a mut OpSlot,
    pub(super) rest: &'a mut [Chained],
    pub(super) tail: &'a mut TaskOutput,
}

impl Collector for ChainOut<'_> {
    fn emit(&mut self, batch: RecordBatch) -> Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        self.slot.check(&batch)?;
        self.slot.count_out(batch.num_rows());
        if self.rest.is_empty() {
            self.tail.emit(batch)
        } else {
            push_batch(self.rest, self.tail, 0, batch)
        }
    }

    fn emit_watermark(&mut self, watermark: i64) -> Result<()> {
        if self.rest.is_empty() {
            self.tail.broadcast(Event::Watermark(watermark))
        } else {
            push_watermark(self.rest, self.tail, watermark)
        }
    }

    /// Idleness is a property of the task's output channels: it skips the
    /// rest of the chain.
    fn emit_idle(&mut self) -> Result<()> {
        self.tail.broadcast(Event::Idle)
    }

    /// Port 0 continues down the chain. A side output (port > 0) goes to
    /// the task's edges of that port when the operator ends the chain. An
    /// operator followed by a chained one has no consumer on another port
    /// (`Plan` chains a node only into a producer whose single consumer reads
    /// port 0), so its side output has no reader and is dropped; the task's
    /// port edges belong to the chain's last operator.
    fn source_progress(&mut self, split: Option<u64>, open: &[u64]) -> Result<()> {
        at_chain_head(self.rest, self.tail, |op, out| {
            op.on_source_progress(split, open, out)
        })
    }

    fn emit_to_port(&mut self, port: u8, batch: RecordBatch) -> Result<()> {
        if port == 0 {
            return self.emit(batch);
        }
        if batch.num_rows() == 0 || !self.rest.is_empty() {
            return Ok(());
        }
        self.slot.count_out(batch.num_rows());
        self.tail.emit_port(port, batch)
    }
}

/// Calls `f` with the first operator of a chain and the collector of the
/// rest (nothing for an empty chain or while the head drops a replay);
/// errors name the head.
pub(crate) fn at_chain_head(
    chain: &mut [Chained],
    tail: &mut TaskOutput,
    f: impl FnOnce(&mut dyn Operator, &mut ChainOut<'_>) -> Result<()>,
) -> Result<()> {
    let Some((Chained { op, slot, .. }, rest)) = chain.split_first_mut() else {
        return Ok(());
    };
    if slot.replay_drop {
        return Ok(());
    }
    let name = slot.name.clone();
    let mut out = ChainOut { slot, rest, tail };
    f(op.as_mut(), &mut out).map_err(|e| e.in_operator(&name))
}

pub(crate) fn push_batch(
    chain: &mut [Chained],
    tail: &mut TaskOutput,
    input: usize,
    batch: RecordBatch,
) -> Result<()> {
    let Some((Chained { op, slot, .. }, rest)) = chain.split_first_mut() else {
        return tail.emit(batch);
    };
    if slot.replay_drop {
        return Ok(());
    }
    slot.count_in(batch.num_rows());
    let name = slot.name.clone();
    let mut out = ChainOut { slot, rest, tail };
    let r = op
        .process_batch(input, batch, &mut out)
        .map_err(|e| e.in_operator(&name));
    out.slot.track_late(op.late_records());
    r
}

pub(crate) fn push_watermark(
    chain: &mut [Chained],
    tail: &mut TaskOutput,
    watermark: i64,
) -> Result<()> {
    if chain.is_empty() {
        return tail.broadcast(Event::Watermark(watermark));
    }
    at_chain_head(chain, tail, |op, out| {
        // The operator's event-time clock is what its metrics show: a window
        // fires by it even when it forwards no watermark itself.
        out.slot.sub.note_watermark(watermark);
        let r = op.process_watermark(watermark, out);
        out.slot.track_late(op.late_records());
        r
    })
}

/// The synchronous snapshot of `op` (nothing when it has no state).
pub(crate) fn snapshot_op(
    op: &mut dyn Operator,
    checkpoint_id: u64,
) -> Result<crate::state::OperatorState> {
    match op.state() {
        Some(state) => state.snapshot_state(checkpoint_id),
        None => Ok(crate::state::OperatorState::default()),
    }
}

/// Restores `state` into `op`; state for an operator that keeps none is
/// ignored, as the default `restore_state` did.
pub(crate) fn restore_op(op: &mut dyn Operator, state: crate::state::OperatorState) -> Result<()> {
    match op.state() {
        Some(s) => s.restore_state(state),
        None => Ok(()),
    }
}

/// Tells every operator of `chain` that `barrier` passed
/// (checkpoints only: savepoints do not start an epoch, their offsets are not
/// in the storage). An operator's failure fails the checkpoint: the caller
/// has not reported its snapshot yet.
pub(crate) fn start_epoch(chain: &mut [Chained], barrier: &Barrier) -> Result<()> {
    if barrier.kind == BarrierKind::Checkpoint {
        for c in chain {
            if let Some(r) = c.op.recompute() {
                r.on_barrier(barrier.id)
                    .map_err(|e| e.in_operator(&c.slot.name))?;
            }
        }
    }
    Ok(())
}
