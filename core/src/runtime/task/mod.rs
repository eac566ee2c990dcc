//! One subtask of a chain: its thread loop over input channels (or its
//! source), the chain of operators it drives, and its output partitioners.
//!
//! The loop holds no lock while computing. It polls its input channels
//! round-robin and blocks on all of them (and its control channel) only when
//! none has an event. A channel that delivered EndOfData is no longer read;
//! when every channel of a logical input ended, `end_input` is called; when
//! all ended, the chain finishes (FLIP-147's EndOfData), the task reports to
//! the supervisor and waits for the checkpoint that covers its end (or the
//! end-of-job commit) before it closes and sends EndOfPartition.

mod channel_replay;
mod feedback_state;
pub(crate) mod inputs;
pub(crate) mod loop_head;
mod loop_unaligned;
pub(crate) mod source;
pub(crate) mod unaligned;

use std::sync::Arc;
use std::time::Duration;

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use crossbeam_channel::{Receiver, Sender};

use crate::barrier::{AlignerAction, BarrierAligner};
use crate::channel::{EventReceiver, EventSender, InputFlow};
use crate::checkpoint::coordinator::NodeSnapshot;
use crate::error::{Error, Result};
use crate::event::{Barrier, Event};
use crate::feedback::FeedbackQueue;
use crate::net::data::{CreditReturn, RemoteSender};
use crate::operator::{Collector, Operator, OperatorContext};
use crate::partition::Partitioner;
use crate::runtime::metrics::{OperatorMetrics, SubtaskMetrics, TaskTimer};
use crate::runtime::replay::{start_epoch, TaskRecompute};
use crate::sink::END_OF_JOB;
use crate::termination::BodyTermination;
use loop_head::LoopHead;
pub(crate) use source::SourceHead;

pub(crate) use crate::message::{Control, TaskReport};

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
pub fn schema_string(schema: &SchemaRef) -> String {
    let fields: Vec<String> = schema
        .fields()
        .iter()
        .map(|f| format!("{}: {}", f.name(), f.data_type()))
        .collect();
    format!("[{}]", fields.join(", "))
}

/// Where an output edge delivers to one consumer subtask: a bounded
/// channel (blocks when full: backpressure) or a loop's feedback queue
/// (never blocks; spills to disk).
pub(crate) enum OutSender {
    Channel(EventSender),
    Feedback(Arc<FeedbackQueue>),
    /// A consumer subtask in another worker process.
    Remote(Box<RemoteSender>),
}

impl OutSender {
    #[inline]
    pub fn send(&self, event: Event) -> Result<()> {
        match self {
            OutSender::Channel(s) => s.send(event).map_err(|_| Error::Cancelled),
            OutSender::Remote(s) => s.send(event),
            OutSender::Feedback(q) => q.push(event),
        }
    }

    /// Sends, charging the time a full channel blocks it as backpressure.
    #[inline]
    fn send_timed(&self, event: Event, timer: &TaskTimer) -> Result<()> {
        match self {
            // A feedback queue never blocks (it spills).
            OutSender::Feedback(q) => q.push(event),
            _ => timer.send(|| self.send(event)),
        }
    }
}

/// One outgoing edge of a task.
pub(crate) struct OutputEdge {
    pub partitioner: Partitioner,
    /// One sender per consumer subtask reachable by this edge.
    pub senders: Vec<OutSender>,
    /// The output port the edge reads (see `graph::Edge::port`).
    pub port: u8,
}

/// Everything a task emits goes through here.
#[derive(Default)]
pub(crate) struct TaskOutput {
    pub edges: Vec<OutputEdge>,
    /// The port data batches are emitted on now (a co-loop head switches
    /// to port 1 for feedback); control events go to every port.
    pub port: u8,
    /// Busy / backpressured / idle time of the task.
    pub timer: TaskTimer,
}

impl TaskOutput {
    pub(crate) fn emit(&mut self, batch: RecordBatch) -> Result<()> {
        self.emit_port(self.port, batch)
    }

    /// Emits `batch` to the edges that read output port `port` only.
    pub(crate) fn emit_port(&mut self, port: u8, batch: RecordBatch) -> Result<()> {
        for edge in &mut self.edges {
            let OutputEdge {
                partitioner,
                senders,
                port: edge_port,
            } = edge;
            if *edge_port != port {
                continue;
            }
            // A clone of a batch shares its buffers (reference counts only).
            let timer = &self.timer;
            partitioner.route(batch.clone(), |c, part| {
                senders[c].send_timed(Event::Data(part), timer)
            })?;
        }
        Ok(())
    }

    /// Sends an unaligned barrier ahead of the data queued in every output
    /// channel, local or remote (FLIP-76; see `channel.rs`, `net/data.rs`).
    /// A feedback queue is overtaken too (`feedback.rs`); an aligned barrier
    /// (aligned timeout) is only announced there: the loop head keeps its
    /// FLIP-16 log and reads the marker in-band, unless the checkpoint
    /// times out (`loop_unaligned.rs` `switch_loop_checkpoint`).
    pub(crate) fn broadcast_overtaking(&mut self, barrier: Barrier) -> Result<()> {
        for edge in &mut self.edges {
            for s in &edge.senders {
                match s {
                    OutSender::Channel(c) => {
                        c.send_overtaking(barrier).map_err(|_| Error::Cancelled)?
                    }
                    OutSender::Remote(r) => r.send_overtaking(barrier)?,
                    OutSender::Feedback(q) => q.push_overtaking(barrier)?,
                }
            }
        }
        Ok(())
    }

    pub(crate) fn broadcast(&mut self, event: Event) -> Result<()> {
        if let Event::Watermark(w) = event {
            self.timer.watermark(w);
        }
        for edge in &mut self.edges {
            for s in &edge.senders {
                s.send_timed(event.clone(), &self.timer)?;
            }
        }
        Ok(())
    }
}

/// The collector handed to the operator at `slot`: its output goes to the
/// rest of the chain, or to the task output at the end of the chain.
pub(crate) struct ChainOut<'a> {
    slot: &'a mut OpSlot,
    rest_ops: &'a mut [Box<dyn Operator>],
    rest_slots: &'a mut [OpSlot],
    tail: &'a mut TaskOutput,
}

impl Collector for ChainOut<'_> {
    fn emit(&mut self, batch: RecordBatch) -> Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        self.slot.check(&batch)?;
        self.slot.count_out(batch.num_rows());
        if self.rest_ops.is_empty() {
            self.tail.emit(batch)
        } else {
            push_batch(self.rest_ops, self.rest_slots, self.tail, 0, batch)
        }
    }

    fn emit_watermark(&mut self, watermark: i64) -> Result<()> {
        if self.rest_ops.is_empty() {
            self.tail.broadcast(Event::Watermark(watermark))
        } else {
            push_watermark(self.rest_ops, self.rest_slots, self.tail, watermark)
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
        at_chain_head(self.rest_ops, self.rest_slots, self.tail, |op, out| {
            op.on_source_progress(split, open, out)
        })
    }

    fn emit_to_port(&mut self, port: u8, batch: RecordBatch) -> Result<()> {
        if port == 0 {
            return self.emit(batch);
        }
        if batch.num_rows() == 0 || !self.rest_ops.is_empty() {
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
    ops: &mut [Box<dyn Operator>],
    slots: &mut [OpSlot],
    tail: &mut TaskOutput,
    f: impl FnOnce(&mut dyn Operator, &mut ChainOut<'_>) -> Result<()>,
) -> Result<()> {
    let (Some((op, rest_ops)), Some((slot, rest_slots))) =
        (ops.split_first_mut(), slots.split_first_mut())
    else {
        return Ok(());
    };
    if slot.replay_drop {
        return Ok(());
    }
    let name = slot.name.clone();
    let mut out = ChainOut {
        slot,
        rest_ops,
        rest_slots,
        tail,
    };
    f(op.as_mut(), &mut out).map_err(|e| e.in_operator(&name))
}

pub(crate) fn push_batch(
    ops: &mut [Box<dyn Operator>],
    slots: &mut [OpSlot],
    tail: &mut TaskOutput,
    input: usize,
    batch: RecordBatch,
) -> Result<()> {
    let (Some((op, rest_ops)), Some((slot, rest_slots))) =
        (ops.split_first_mut(), slots.split_first_mut())
    else {
        return tail.emit(batch);
    };
    if slot.replay_drop {
        return Ok(());
    }
    slot.count_in(batch.num_rows());
    let name = slot.name.clone();
    let mut out = ChainOut {
        slot,
        rest_ops,
        rest_slots,
        tail,
    };
    let r = op
        .process_batch(input, batch, &mut out)
        .map_err(|e| e.in_operator(&name));
    out.slot.track_late(op.late_records());
    r
}

pub(crate) fn push_watermark(
    ops: &mut [Box<dyn Operator>],
    slots: &mut [OpSlot],
    tail: &mut TaskOutput,
    watermark: i64,
) -> Result<()> {
    if ops.is_empty() {
        return tail.broadcast(Event::Watermark(watermark));
    }
    at_chain_head(ops, slots, tail, |op, out| {
        // The operator's event-time clock is what its metrics show: a window
        // fires by it even when it forwards no watermark itself.
        out.slot.sub.note_watermark(watermark);
        let r = op.process_watermark(watermark, out);
        out.slot.track_late(op.late_records());
        r
    })
}

/// The synchronous snapshot of `op` (nothing when it has no state).
fn snapshot_op(op: &mut dyn Operator, checkpoint_id: u64) -> Result<crate::state::OperatorState> {
    match op.state() {
        Some(state) => state.snapshot_state(checkpoint_id),
        None => Ok(crate::state::OperatorState::default()),
    }
}

/// Restores `state` into `op`; state for an operator that keeps none is
/// ignored, as the default `restore_state` did.
fn restore_op(op: &mut dyn Operator, state: crate::state::OperatorState) -> Result<()> {
    match op.state() {
        Some(s) => s.restore_state(state),
        None => Ok(()),
    }
}

/// One input channel of a task.
pub(crate) struct InputChannel {
    pub rx: EventReceiver,
    /// Credits to return to a sender in another process as events are taken.
    pub credit: Option<CreditReturn>,
    /// The logical input of the head operator this channel feeds.
    pub input: usize,
    pub ended: bool,
    pub blocked: bool,
    pub watermark: i64,
    /// The producer said it is idle (FLIP-27) and sent nothing since: the
    /// channel does not hold back the combined watermark.
    pub idle: bool,
    /// Events taken off the queue but not processed yet, read before it:
    /// what an unaligned barrier overtook, and restored channel state
    /// (FLIP-76, `unaligned.rs`).
    /// `(item, true)` while the item still holds its space in the channel.
    pub pending: std::collections::VecDeque<(crate::channel::Item, bool)>,
    /// The newest unaligned barrier whose in-band marker was taken.
    pub last_barrier: u64,
    /// The newest aligned barrier announced ahead of the queue (aligned
    /// timeout; see `unaligned.rs`).
    pub announced: u64,
    /// Restored channel state at the front of `pending`, in events
    /// (`channel_replay.rs`).
    pub restored: usize,
}

/// The rows of a source's batches while a local consumer has not measured
/// its throughput yet: small enough that a slow consumer's first batches
/// do not queue seconds of work in front of the first barriers, large
/// enough that a fast consumer measures (and lifts its budget) within a
/// few of them.
const STARTUP_BATCH_ROWS: usize = 1024;

/// What a task restores before it opens its operators.
#[derive(Default)]
pub(crate) struct TaskRestore {
    pub source_offset: Option<Vec<u8>>,
    pub states: Vec<Option<crate::state::OperatorState>>,
    /// Every operator of the task had finished in the restored checkpoint:
    /// it is skipped (FLIP-147) and only sends EndOfData.
    pub finished: bool,
    /// Channel state of an unaligned checkpoint: per input channel, the
    /// batches to process before the channel's new data (FLIP-76).
    pub channels: Option<Vec<Vec<RecordBatch>>>,
}

/// A subtask ready to run on its own thread.
pub(crate) struct Task {
    pub id: usize,
    pub source: Option<SourceHead>,
    pub ops: Vec<Box<dyn Operator>>,
    pub slots: Vec<OpSlot>,
    pub contexts: Vec<OperatorContext>,
    pub source_context: Option<OperatorContext>,
    pub inputs: Vec<InputChannel>,
    pub num_logical_inputs: usize,
    pub output: TaskOutput,
    pub control: Receiver<Control>,
    pub reports: Sender<TaskReport>,
    /// The graph node of each operator of `ops`.
    pub node_ids: Vec<usize>,
    pub aligner: BarrierAligner,
    pub restore: TaskRestore,
    /// The loop ids of the task's scope, outermost first (empty outside
    /// every loop). Termination tokens of other loops are dropped here: they
    /// left their loop.
    pub scope: Vec<u32>,
    /// Token alignment of a task inside a loop body (not a loop head).
    pub body_term: Option<BodyTermination>,
    /// The loop head state when the task's first operator heads a loop.
    pub loop_head: Option<Box<LoopHead>>,
    /// Recompute-mode bookkeeping (FLINK-4120).
    pub recompute: TaskRecompute,
    /// Flow control of the input channels: the task's measured throughput
    /// sets their byte budgets (FLIP-183, see `channel.rs`).
    pub flow: std::cell::RefCell<InputFlow>,
    /// The unaligned checkpoint whose channel state is being captured.
    pub unaligned: unaligned::UnalignedState,
    /// Aligned checkpoints switch to unaligned after this long aligning
    /// (`CheckpointConfig::aligned_timeout`); aligned barriers are then
    /// announced ahead of the output queues.
    pub aligned_timeout: Option<Duration>,
}

/// How a task's input ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum InputEnd {
    /// All input ended for good: operators finish (windows and timers fire).
    Drained,
    /// Stop-with-savepoint without drain: operators stop where they are.
    Undrained,
}

pub(crate) enum Step {
    Event(usize, Event),
    Control(Control),
    /// The wait for input ended at the chain head's processing-time timer.
    Timer,
    /// An unaligned barrier overtook the queue of this channel.
    Overtake(usize, Barrier),
}

impl Task {
    /// Sends a snapshot report to the checkpoint coordinator. A coordinator
    /// that is gone has ended the job: the task stops (cancelled) instead of
    /// going on with a snapshot nobody receives.
    pub(crate) fn report_snapshot(&self, report: TaskReport) -> Result<()> {
        self.reports.send(report).map_err(|_| Error::Cancelled)
    }

    /// Runs the task to its end and reports the outcome.
    pub fn run(mut self) {
        self.start_metrics();
        let id = self.id;
        let reports = self.reports.clone();
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.run_inner()));
        let outcome = match result {
            Ok(r) => r,
            Err(payload) => {
                let name = self
                    .slots
                    .first()
                    .map(|s| s.name.to_string())
                    .or_else(|| self.source.as_ref().map(|s| s.slot.name.to_string()))
                    .unwrap_or_default();
                Err(Error::operator(
                    name,
                    format!(
                        "panicked: {}",
                        crate::error::panic_message(payload.as_ref())
                    ),
                ))
            }
        };
        // A task that ran to its end closed its operators already (errors
        // reported); after a failure the outcome carries the cause, and a
        // close that fails too is secondary to it.
        for op in &mut self.ops {
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| op.close()));
        }
        let report = match outcome {
            Ok(()) => TaskReport::Closed { task: id },
            Err(error) => TaskReport::Failed { task: id, error },
        };
        // No receiver: the job's driver is gone, nobody is left to tell.
        let _ = reports.send(report);
        // Dropping self drops the senders: consumers see the partition end.
    }

    /// Points the chain's slots and the task timer at this subtask's counters.
    fn start_metrics(&mut self) {
        let index = self
            .source_context
            .as_ref()
            .or(self.contexts.first())
            .map_or(0, |c| c.subtask_index);
        let mut subs = Vec::with_capacity(self.slots.len() + 1);
        let src = self.source.as_mut().map(|s| &mut s.slot);
        for slot in src.into_iter().chain(self.slots.iter_mut()) {
            slot.sub = slot.metrics.subtask(index);
            subs.push(slot.sub.clone());
        }
        self.output.timer = TaskTimer::new(subs);
        self.output.timer.set_finished(false);
    }

    fn run_inner(&mut self) -> Result<()> {
        let mut restore = std::mem::take(&mut self.restore);
        let skip = restore.finished;
        if let Some(head) = self.loop_head.as_mut() {
            // The loop head's state is its FLIP-16 feedback log.
            if let Some(state) = restore.states.first_mut().and_then(Option::take) {
                head.restore_log(state)
                    .map_err(|e| e.in_operator(&self.slots[0].name))?;
            }
        }
        if let (Some(src), Some(offset)) = (self.source.as_mut(), restore.source_offset) {
            src.reader
                .seek(&offset)
                .map_err(|e| e.in_operator(&src.slot.name))?;
        }
        if let Some(channels) = restore.channels.take() {
            self.restore_channels(channels)?;
        }
        for (i, state) in restore.states.into_iter().enumerate() {
            if let (Some(state), Some(op)) = (state, self.ops.get_mut(i)) {
                restore_op(op.as_mut(), state).map_err(|e| e.in_operator(&self.slots[i].name))?;
            }
        }
        if let (Some(src), Some(ctx)) = (self.source.as_mut(), self.source_context.as_ref()) {
            src.reader
                .open(ctx)
                .map_err(|e| e.in_operator(&src.slot.name))?;
        }
        for (i, op) in self.ops.iter_mut().enumerate() {
            if let Some(r) = op.recompute() {
                r.on_barrier(self.recompute.start_epoch(i))
                    .map_err(|e| e.in_operator(&self.slots[i].name))?;
            }
            self.slots[i].replay_drop = self.recompute.drops(i);
            op.open(&self.contexts[i])
                .map_err(|e| e.in_operator(&self.slots[i].name))?;
        }
        let end = if skip {
            InputEnd::Undrained
        } else if self.source.is_some() {
            self.run_source()?
        } else if self.loop_head.is_some() {
            self.run_loop_head()?
        } else {
            self.run_inputs()?
        };
        if end == InputEnd::Drained {
            let first_unfinished = if self.source.is_some() { 0 } else { 1 };
            self.finish_chain(first_unfinished)?;
        }
        // A skipped (already finished) task ends its consumers' input for good.
        let drain = skip || end == InputEnd::Drained;
        self.output.broadcast(Event::EndOfData { drain })?;
        self.output.timer.set_finished(true);
        let _ = self.reports.send(TaskReport::Finished { task: self.id });
        self.await_finalize()?;
        for i in 0..self.ops.len() {
            let name = self.slots[i].name.clone();
            self.ops[i].close().map_err(|e| e.in_operator(&name))?;
        }
        // Consumers that already closed no longer listen: best effort.
        for edge in &self.output.edges {
            for s in &edge.senders {
                let _ = s.send(Event::EndOfPartition);
            }
        }
        Ok(())
    }

    /// Handles a control message while the task runs.
    pub(crate) fn handle_control(&mut self, c: Control) -> Result<()> {
        match c {
            Control::Cancel => Err(Error::Cancelled),
            Control::TriggerCheckpoint(barrier) if self.loop_head.is_some() => {
                self.trigger_loop_head(barrier)
            }
            Control::TriggerCheckpoint(barrier) => {
                // Only sources are triggered while running.
                self.snapshot(barrier, Duration::ZERO, false)
            }
            Control::NotifyComplete(id) => self.notify_complete(id),
            Control::AbortCheckpoint(id) => {
                self.unaligned.cancel(id);
                let action = self.aligner.on_cancel(id);
                self.apply(action)
            }
            Control::ExpectBarrier(id) => {
                if let Some(head) = self.loop_head.as_mut() {
                    head.expect_barrier(id);
                }
                Ok(())
            }
            Control::Finalize { .. } | Control::StopSource(_) => Ok(()),
        }
    }

    /// Takes the synchronous part of a snapshot of every operator of the
    /// chain, reports it, and (while running) forwards the barrier.
    pub(crate) fn snapshot(
        &mut self,
        barrier: Barrier,
        alignment: Duration,
        finished: bool,
    ) -> Result<()> {
        if self.recompute.is_replayed(&barrier) {
            return self.pass_replayed(barrier);
        }
        if !finished && self.loop_head.is_some() {
            return self.begin_loop_checkpoint(barrier, alignment, false);
        }
        let states = self.chain_states(&barrier, finished)?;
        let slots = &self.slots;
        start_epoch(&mut self.ops, |i| slots[i].name.to_string(), &barrier)?;
        self.report_snapshot(TaskReport::Snapshot {
            task: self.id,
            checkpoint: barrier.id,
            states,
            alignment,
            finished,
            channels: None,
        })?;
        if !finished {
            let announce = self.aligned_timeout.is_some()
                && barrier.kind == crate::event::BarrierKind::Checkpoint;
            if barrier.aligned && !announce {
                self.output.broadcast(Event::Barrier(barrier))?;
            } else {
                self.output.broadcast_overtaking(barrier)?;
            }
        }
        Ok(())
    }

    /// The synchronous snapshot of the source offset and every operator
    /// (`finished`: the chain's operators finished, see
    /// [`TaskRecompute::persists`]).
    pub(crate) fn chain_states(
        &mut self,
        barrier: &Barrier,
        finished: bool,
    ) -> Result<Vec<NodeSnapshot>> {
        let mut states = Vec::with_capacity(self.ops.len() + 1);
        if let Some(src) = &self.source {
            states.push(NodeSnapshot {
                node: src.node,
                state: crate::state::OperatorState {
                    operator: Some(crate::state::StateBlob::Bytes(Arc::new(
                        src.reader.checkpoint_offset(barrier.id),
                    ))),
                    keyed: Vec::new(),
                },
                null_state: None,
            });
        }
        for i in 0..self.ops.len() {
            let name = self.slots[i].name.clone();
            let state = if self.recompute.persists(i, barrier, finished) {
                snapshot_op(self.ops[i].as_mut(), barrier.id).map_err(|e| e.in_operator(&name))?
            } else {
                crate::state::OperatorState::default()
            };
            states.push(NodeSnapshot {
                node: self.node_ids[i],
                state,
                null_state: self
                    .recompute
                    .null_state(i, self.ops[i].as_mut(), barrier)
                    .map_err(|e| e.in_operator(&name))?,
            });
        }
        Ok(states)
    }

    /// A barrier replayed by a recompute recovery: operators learn the
    /// epoch, nothing is snapshotted; the last one ends the replay.
    fn pass_replayed(&mut self, barrier: Barrier) -> Result<()> {
        let slots = &self.slots;
        start_epoch(&mut self.ops, |i| slots[i].name.to_string(), &barrier)?;
        self.output.broadcast(Event::Barrier(barrier))?;
        let ended = self.recompute.passed(&barrier);
        for (i, slot) in self.slots.iter_mut().enumerate() {
            slot.replay_drop = self.recompute.drops(i);
        }
        if ended {
            for b in std::mem::take(&mut self.recompute.deferred) {
                self.snapshot(b, Duration::ZERO, false)?;
            }
        }
        Ok(())
    }

    /// A replaying source re-injects the barriers recorded at its offset.
    fn inject_replayed(&mut self) -> Result<()> {
        let Some(src) = self.source.as_ref() else {
            return Ok(());
        };
        let name = src.slot.name.clone();
        for b in self.recompute.due(&src.reader.offset(), &name)? {
            self.snapshot(b, Duration::ZERO, false)?;
        }
        Ok(())
    }

    pub(crate) fn notify_complete(&mut self, id: u64) -> Result<()> {
        if let Some(src) = self.source.as_mut() {
            let name = src.slot.name.clone();
            src.reader
                .notify_checkpoint_complete(id)
                .map_err(|e| e.in_operator(&name))?;
        }
        for i in 0..self.ops.len() {
            if let Some(state) = self.ops[i].state() {
                state
                    .notify_checkpoint_complete(id)
                    .map_err(|e| e.in_operator(&self.slots[i].name))?;
            }
        }
        Ok(())
    }

    /// Obeys the barrier aligner.
    pub(crate) fn apply(&mut self, action: AlignerAction) -> Result<()> {
        match action {
            AlignerAction::Nothing => Ok(()),
            AlignerAction::Block(ch) => {
                self.inputs[ch].blocked = true;
                Ok(())
            }
            AlignerAction::Snapshot {
                barrier,
                unblock,
                alignment,
            } => {
                self.unaligned.settle(barrier.id);
                self.snapshot(barrier, alignment, false)?;
                for ch in unblock {
                    self.inputs[ch].blocked = false;
                }
                Ok(())
            }
            AlignerAction::AbortAndStart { unblock, block, .. } => {
                for ch in unblock {
                    self.inputs[ch].blocked = false;
                }
                if let Some(ch) = block {
                    self.inputs[ch].blocked = true;
                }
                Ok(())
            }
            AlignerAction::Abort { unblock, .. } => {
                for ch in unblock {
                    self.inputs[ch].blocked = false;
                }
                Ok(())
            }
        }
    }

    /// Finishes the chain from the head on. Operators from
    /// `first_unfinished` on also get `end_input(0)` first (their single
    /// input is the operator before them).
    fn finish_chain(&mut self, first_unfinished: usize) -> Result<()> {
        for i in 0..self.ops.len() {
            let (left_ops, rest_ops) = self.ops.split_at_mut(i + 1);
            let (left_slots, rest_slots) = self.slots.split_at_mut(i + 1);
            let op = &mut left_ops[i];
            let slot = &mut left_slots[i];
            let name = slot.name.clone();
            let mut out = ChainOut {
                slot,
                rest_ops,
                rest_slots,
                tail: &mut self.output,
            };
            if i >= first_unfinished {
                op.end_input(0, &mut out)
                    .map_err(|e| e.in_operator(&name))?;
            }
            op.finish(&mut out).map_err(|e| e.in_operator(&name))?;
        }
        Ok(())
    }

    /// After the operators finished: answer checkpoint triggers with the
    /// final state, deliver completions, and return once the job tells the
    /// task to close (after the final checkpoint, or, without
    /// checkpointing, after committing with the end-of-job pseudo-checkpoint).
    fn await_finalize(&mut self) -> Result<()> {
        loop {
            let waiting = std::time::Instant::now();
            let next = self.control.recv();
            self.output.timer.waited(waiting.elapsed(), false);
            match next {
                // A stop-with-savepoint can reach a source that ended its
                // input before the coordinator heard of it: the savepoint's
                // barrier is then a trigger like any other (the task has
                // nothing left to stop), or the savepoint would never complete.
                Ok(Control::TriggerCheckpoint(barrier))
                | Ok(Control::StopSource(Some(barrier))) => {
                    self.snapshot(barrier, Duration::ZERO, true)?;
                }
                Ok(Control::NotifyComplete(id)) => self.notify_complete(id)?,
                Ok(Control::AbortCheckpoint(_))
                | Ok(Control::StopSource(None))
                | Ok(Control::ExpectBarrier(_)) => {}
                Ok(Control::Finalize { commit_end_of_job }) => {
                    if commit_end_of_job {
                        for i in 0..self.ops.len() {
                            snapshot_op(self.ops[i].as_mut(), END_OF_JOB)
                                .map_err(|e| e.in_operator(&self.slots[i].name))?;
                        }
                        self.notify_complete(END_OF_JOB)?;
                    }
                    return Ok(());
                }
                Ok(Control::Cancel) | Err(_) => return Err(Error::Cancelled),
            }
        }
    }
}
