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

mod chain;
mod channel_replay;
mod feedback_state;
pub(crate) mod inputs;
pub(crate) mod loop_head;
mod loop_unaligned;
pub(crate) mod source;
pub(crate) mod unaligned;

use std::sync::Arc;
use std::time::Duration;

use arrow::record_batch::RecordBatch;
use crossbeam_channel::{Receiver, Sender};

use crate::barrier::{AlignerAction, BarrierAligner};
use crate::channel::{EventReceiver, EventSender, InputFlow};
use crate::checkpoint::coordinator::NodeSnapshot;
use crate::error::{Error, Result};
use crate::event::{Barrier, Event};
use crate::feedback::FeedbackQueue;
use crate::net::data::{CreditReturn, RemoteSender};
use crate::operator::OperatorContext;
use crate::partition::Partitioner;
use crate::runtime::metrics::TaskTimer;
use crate::runtime::replay::TaskRecompute;
use crate::sink::END_OF_JOB;
use crate::termination::BodyTermination;
pub(crate) use chain::{
    at_chain_head, push_batch, push_watermark, restore_op, snapshot_op, start_epoch, ChainOut,
    Chained, OpSlot,
};
use loop_head::LoopHead;
pub(crate) use source::SourceHead;

pub(crate) use crate::message::{Control, TaskReport};

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

/// What heads a task's chain, with what only that kind of task has.
pub(crate) enum TaskKind {
    /// A source (with its context and metrics): the task reads no channel.
    Source(Box<SourceHead>),
    /// The head of a loop (FLIP-16): its input channels and the loop's
    /// feedback queues.
    LoopHead(Box<LoopHead>),
    /// A task that reads input channels; inside a loop body it aligns the
    /// loop's termination tokens.
    Channels { body_term: Option<BodyTermination> },
}

impl TaskKind {
    pub(crate) fn is_source(&self) -> bool {
        matches!(self, TaskKind::Source(_))
    }

    pub(crate) fn is_loop_head(&self) -> bool {
        matches!(self, TaskKind::LoopHead(_))
    }

    pub(crate) fn source(&self) -> Option<&SourceHead> {
        match self {
            TaskKind::Source(s) => Some(s),
            _ => None,
        }
    }

    pub(crate) fn source_mut(&mut self) -> Option<&mut SourceHead> {
        match self {
            TaskKind::Source(s) => Some(s),
            _ => None,
        }
    }

    pub(crate) fn loop_head(&self) -> Option<&LoopHead> {
        match self {
            TaskKind::LoopHead(h) => Some(h),
            _ => None,
        }
    }

    pub(crate) fn loop_head_mut(&mut self) -> Option<&mut LoopHead> {
        match self {
            TaskKind::LoopHead(h) => Some(h),
            _ => None,
        }
    }

    pub(crate) fn body_term_mut(&mut self) -> Option<&mut BodyTermination> {
        match self {
            TaskKind::Channels { body_term } => body_term.as_mut(),
            _ => None,
        }
    }
}

/// A subtask ready to run on its own thread.
pub(crate) struct Task {
    pub id: usize,
    /// Source, loop head, or a task reading channels.
    pub kind: TaskKind,
    /// The chained operators after the head, in order.
    pub chain: Vec<Chained>,
    pub inputs: Vec<InputChannel>,
    pub num_logical_inputs: usize,
    pub output: TaskOutput,
    pub control: Receiver<Control>,
    pub reports: Sender<TaskReport>,
    pub aligner: BarrierAligner,
    pub restore: TaskRestore,
    /// The loop ids of the task's scope, outermost first (empty outside
    /// every loop). Termination tokens of other loops are dropped here: they
    /// left their loop.
    pub scope: Vec<u32>,
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
                    .chain
                    .first()
                    .map(|c| c.slot.name.to_string())
                    .or_else(|| self.kind.source().map(|s| s.slot.name.to_string()))
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
        for c in &mut self.chain {
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| c.op.close()));
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
            .kind
            .source()
            .map(|s| &s.context)
            .or(self.chain.first().map(|c| &c.context))
            .map_or(0, |c| c.subtask_index);
        let mut subs = Vec::with_capacity(self.chain.len() + 1);
        let src = self.kind.source_mut().map(|s| &mut s.slot);
        for slot in src
            .into_iter()
            .chain(self.chain.iter_mut().map(|c| &mut c.slot))
        {
            slot.sub = slot.metrics.subtask(index);
            subs.push(slot.sub.clone());
        }
        self.output.timer = TaskTimer::new(subs);
        self.output.timer.set_finished(false);
    }

    fn run_inner(&mut self) -> Result<()> {
        let mut restore = std::mem::take(&mut self.restore);
        let skip = restore.finished;
        if let TaskKind::LoopHead(head) = &mut self.kind {
            // The loop head's state is its FLIP-16 feedback log.
            if let Some(state) = restore.states.first_mut().and_then(Option::take) {
                head.restore_log(state)
                    .map_err(|e| e.in_operator(&self.chain[0].slot.name))?;
            }
        }
        if let (Some(src), Some(offset)) = (self.kind.source_mut(), restore.source_offset) {
            src.reader
                .seek(&offset)
                .map_err(|e| e.in_operator(&src.slot.name))?;
        }
        if let Some(channels) = restore.channels.take() {
            self.restore_channels(channels)?;
        }
        for (i, state) in restore.states.into_iter().enumerate() {
            if let (Some(state), Some(c)) = (state, self.chain.get_mut(i)) {
                restore_op(c.op.as_mut(), state).map_err(|e| e.in_operator(&c.slot.name))?;
            }
        }
        if let Some(src) = self.kind.source_mut() {
            src.reader
                .open(&src.context)
                .map_err(|e| e.in_operator(&src.slot.name))?;
        }
        for (i, c) in self.chain.iter_mut().enumerate() {
            if let Some(r) = c.op.recompute() {
                r.on_barrier(self.recompute.start_epoch(i))
                    .map_err(|e| e.in_operator(&c.slot.name))?;
            }
            c.slot.replay_drop = self.recompute.drops(i);
            c.op.open(&c.context)
                .map_err(|e| e.in_operator(&c.slot.name))?;
        }
        let end = if skip {
            InputEnd::Undrained
        } else if self.kind.is_source() {
            self.run_source()?
        } else if self.kind.is_loop_head() {
            self.run_loop_head()?
        } else {
            self.run_inputs()?
        };
        if end == InputEnd::Drained {
            let first_unfinished = if self.kind.is_source() { 0 } else { 1 };
            self.finish_chain(first_unfinished)?;
        }
        // A skipped (already finished) task ends its consumers' input for good.
        let drain = skip || end == InputEnd::Drained;
        self.output.broadcast(Event::EndOfData { drain })?;
        self.output.timer.set_finished(true);
        // No receiver: the job's driver is gone (the job is ending), nobody to tell.
        let _ = self.reports.send(TaskReport::Finished { task: self.id });
        self.await_finalize()?;
        for c in &mut self.chain {
            c.op.close().map_err(|e| e.in_operator(&c.slot.name))?;
        }
        // Consumers that already closed no longer listen: best effort.
        for edge in &self.output.edges {
            for s in &edge.senders {
                // Err: that consumer closed already; it needs no end marker.
                let _ = s.send(Event::EndOfPartition);
            }
        }
        Ok(())
    }

    /// Handles a control message while the task runs.
    pub(crate) fn handle_control(&mut self, c: Control) -> Result<()> {
        match c {
            Control::Cancel => Err(Error::Cancelled),
            Control::TriggerCheckpoint(barrier) if self.kind.is_loop_head() => {
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
                if let Some(head) = self.kind.loop_head_mut() {
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
        if !finished && self.kind.is_loop_head() {
            return self.begin_loop_checkpoint(barrier, alignment, false);
        }
        let states = self.chain_states(&barrier, finished)?;
        start_epoch(&mut self.chain, &barrier)?;
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
        let mut states = Vec::with_capacity(self.chain.len() + 1);
        if let Some(src) = self.kind.source() {
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
        for (i, c) in self.chain.iter_mut().enumerate() {
            let name = &c.slot.name;
            let state = if self.recompute.persists(i, barrier, finished) {
                snapshot_op(c.op.as_mut(), barrier.id).map_err(|e| e.in_operator(name))?
            } else {
                crate::state::OperatorState::default()
            };
            states.push(NodeSnapshot {
                node: c.node,
                state,
                null_state: self
                    .recompute
                    .null_state(i, c.op.as_mut(), barrier)
                    .map_err(|e| e.in_operator(name))?,
            });
        }
        Ok(states)
    }

    /// A barrier replayed by a recompute recovery: operators learn the
    /// epoch, nothing is snapshotted; the last one ends the replay.
    fn pass_replayed(&mut self, barrier: Barrier) -> Result<()> {
        start_epoch(&mut self.chain, &barrier)?;
        self.output.broadcast(Event::Barrier(barrier))?;
        let ended = self.recompute.passed(&barrier);
        for (i, c) in self.chain.iter_mut().enumerate() {
            c.slot.replay_drop = self.recompute.drops(i);
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
        let Some(src) = self.kind.source() else {
            return Ok(());
        };
        let name = src.slot.name.clone();
        for b in self.recompute.due(&src.reader.offset(), &name)? {
            self.snapshot(b, Duration::ZERO, false)?;
        }
        Ok(())
    }

    pub(crate) fn notify_complete(&mut self, id: u64) -> Result<()> {
        if let Some(src) = self.kind.source_mut() {
            let name = src.slot.name.clone();
            src.reader
                .notify_checkpoint_complete(id)
                .map_err(|e| e.in_operator(&name))?;
        }
        for c in &mut self.chain {
            if let Some(state) = c.op.state() {
                state
                    .notify_checkpoint_complete(id)
                    .map_err(|e| e.in_operator(&c.slot.name))?;
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
        for i in 0..self.chain.len() {
            let (left, rest) = self.chain.split_at_mut(i + 1);
            let Chained { op, slot, .. } = &mut left[i];
            let name = slot.name.clone();
            let mut out = ChainOut {
                slot,
                rest,
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
                        for c in &mut self.chain {
                            snapshot_op(c.op.as_mut(), END_OF_JOB)
                                .map_err(|e| e.in_operator(&c.slot.name))?;
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
