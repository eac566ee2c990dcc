//! The loop head task: where a loop's input and its feedback enter the loop
//! body.
//!
//! Implements, on top of the pure pieces in `feedback.rs` and
//! `termination.rs`:
//!
//! * FLIP-15 "Cyclic Flow Control": the feedback arrives through one
//!   [`FeedbackQueue`] per loop tail subtask writing to this head (writers
//!   never block, the queue spills). The head reads the feedback first
//!   (`feedback_first`), or only while a queue is above its memory threshold
//!   and otherwise takes turns with the loop input (`adaptive`). Only the
//!   head can block in the cycle (on its bounded channels into the body),
//!   and the body always drains into the never-blocking feedback queues, so
//!   the cyclic backpressure graph cannot deadlock.
//! * FLIP-15 "Job Termination": once every loop input channel delivered
//!   EndOfData (drain), the head runs TerminationAttempt rounds
//!   ([`LoopHeadTermination`]); when it decides the loop is empty it ends
//!   like any task whose input ended: the chain finishes and EndOfData goes
//!   into the body and out of the loop. No timer is involved.
//! * FLIP-16 loop logging: when barrier `n` has been aligned on the loop
//!   input (or the coordinator triggers the head directly after its inputs
//!   finished), the head takes the synchronous snapshot of its chain,
//!   forwards the barrier into the body, and logs every feedback record that
//!   arrives on a feedback queue until barrier `n` came back on that queue.
//!   The log (a spilling queue itself) becomes the head's state in
//!   checkpoint `n`, reported once the barrier came back on every queue. On
//!   restore the head re-emits the log before it reads anything else.
//!
//! * Unaligned checkpoints (FLIP-76 in the cycle; DESIGN.md "Unaligned
//!   checkpoints", "Loops"; `loop_unaligned.rs`): the head snapshots on the
//!   first barrier, sends it ahead of its output queues into the body, and
//!   the barrier overtakes the feedback queues at the tail. What the FLIP-16
//!   log would have collected is then the feedback channel's state: the
//!   feedback read after the snapshot until the barrier came back, plus what
//!   the barrier overtook in the queue (spilled segments referred to).
//!
//! Watermarks of the loop input are not forwarded into the body: records
//! circulating in a loop carry event times older than any watermark the
//! input could promise. Event time inside a loop (and downstream of it)
//! advances when the loop ends.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::datatypes::SchemaRef;
use arrow::ipc::writer::StreamWriter;
use arrow::record_batch::RecordBatch;
use crossbeam_channel::Receiver;
use parking_lot::Mutex;

use super::{push_batch, push_watermark, start_epoch, Control, InputEnd, Step, Task, TaskReport};
use crate::checkpoint::coordinator::NodeSnapshot;
use crate::error::{Error, Result};
use crate::event::{Barrier, Event, MAX_WATERMARK};
use crate::feedback::{FeedbackQueue, Overtaken};
use crate::graph::{all_nullable, LoopPriority};
use crate::runtime::metrics::{OperatorMetrics, SubtaskMetrics};
use crate::state::{DeferredState, OperatorState, StateBlob};
use crate::termination::{HeadAction, LoopHeadTermination};

/// One feedback queue read by a head subtask (written by one tail subtask).
pub(crate) struct FeedbackIn {
    pub queue: Arc<FeedbackQueue>,
    pub ended: bool,
    /// Spilled bytes and files of the queue already added to the metrics.
    reported: (u64, u64),
}

/// What a loop checkpoint keeps of the feedback in flight.
pub(super) enum FeedbackLog {
    /// FLIP-16 (aligned barriers): every feedback record read until the
    /// barrier came back in-band; spills like the queues.
    Flip16(Arc<FeedbackQueue>),
    /// Unaligned barriers: per feedback queue, the records read after the
    /// snapshot, then what the barrier overtook there (channel state).
    Channel(Vec<Vec<Overtaken>>),
}

/// A loop checkpoint whose barrier went into the body and has not yet come
/// back on every feedback queue.
pub(super) struct PendingLog {
    pub(super) barrier: Barrier,
    states: Vec<NodeSnapshot>,
    pub(super) alignment: Duration,
    /// Per feedback queue: the barrier came back on it.
    pub(super) returned: Vec<bool>,
    /// Per feedback queue: the barrier's marker is queued there (announced
    /// in the queue's priority slot), not read yet (aligned timeout).
    pub(super) announced: Vec<bool>,
    pub(super) log: FeedbackLog,
    /// The channel state of the loop input channels, once every one of
    /// them delivered the unaligned barrier (`None` while capturing).
    pub(super) inputs: Option<Option<OperatorState>>,
}

/// Loop head state of a task whose first operator heads a loop.
pub(crate) struct LoopHead {
    pub loop_id: u32,
    name: Arc<str>,
    pub(super) feedback: Vec<FeedbackIn>,
    priority: LoopPriority,
    co: bool,
    term: LoopHeadTermination,
    pub(super) pending: VecDeque<PendingLog>,
    restored: Vec<RecordBatch>,
    log_memory: usize,
    spill_dir: PathBuf,
    fb_cursor: usize,
    fair_turn: bool,
    metrics: Arc<OperatorMetrics>,
    /// This subtask's counters (termination round, feedback queue size).
    subtask: Arc<SubtaskMetrics>,
    /// The newest checkpoint whose barrier went into the body.
    begun: u64,
    /// A direct trigger that waits for the loop input's last records.
    deferred: Option<Barrier>,
    /// The newest checkpoint announced by the supervisor
    /// ([`Control::ExpectBarrier`]) whose barrier has not reached the head.
    expected: Option<u64>,
    /// Per port: the last batch schema seen and its all-nullable version.
    relaxed: [Option<(SchemaRef, SchemaRef)>; 2],
}

impl LoopHead {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        loop_id: u32,
        name: Arc<str>,
        queues: Vec<Arc<FeedbackQueue>>,
        priority: LoopPriority,
        co: bool,
        input_channels: usize,
        log_memory: usize,
        spill_dir: PathBuf,
        metrics: Arc<OperatorMetrics>,
    ) -> Self {
        let term = LoopHeadTermination::new(loop_id, input_channels, queues.len());
        LoopHead {
            loop_id,
            name,
            feedback: queues
                .into_iter()
                .map(|queue| FeedbackIn {
                    queue,
                    ended: false,
                    reported: (0, 0),
                })
                .collect(),
            priority,
            co,
            term,
            pending: VecDeque::new(),
            restored: Vec::new(),
            log_memory,
            spill_dir,
            fb_cursor: 0,
            fair_turn: false,
            metrics,
            subtask: Arc::default(),
            begun: 0,
            deferred: None,
            expected: None,
            relaxed: [None, None],
        }
    }

    /// Shows this head subtask's feedback queues and termination rounds in
    /// `subtask` (the dashboard's loop metrics).
    pub fn observed_by(mut self, subtask: Arc<SubtaskMetrics>) -> Self {
        let queues: Vec<_> = self.feedback.iter().map(|f| f.queue.clone()).collect();
        subtask.watch_feedback(&queues);
        self.subtask = subtask;
        self
    }

    /// Takes the FLIP-16 log of the restored checkpoint, to re-emit first.
    pub fn restore_log(&mut self, state: OperatorState) -> Result<()> {
        let Some(blob) = state.operator else {
            return Ok(());
        };
        // A FLIP-16 log or the feedback channel state of an unaligned
        // checkpoint (possibly dealt out at another parallelism).
        let bytes = blob.to_bytes()?;
        let batches = crate::checkpoint::feedback_rescale::decode_feedback(
            &format!("{} (loop {})", self.name, self.loop_id),
            &bytes,
        )?;
        self.restored.extend(batches);
        Ok(())
    }

    /// Checkpoint `id` started at the sources; its barrier is on its way.
    pub fn expect_barrier(&mut self, id: u64) {
        if id > self.begun && self.expected.is_none_or(|e| e < id) {
            self.expected = Some(id);
        }
    }

    /// A barrier is on its way to the head through its input channels (or
    /// a direct trigger waits for their end): the input goes first until it
    /// arrived, so the barrier does not wait for the feedback to run dry.
    /// Checkpoint `id` was aborted: forgets it and the older ones.
    fn forget_checkpoints_upto(&mut self, id: u64) {
        self.pending.retain(|p| p.barrier.id > id);
        if self.deferred.is_some_and(|d| d.id <= id) {
            self.deferred = None;
        }
        if self.expected.is_some_and(|e| e <= id) {
            self.expected = None;
        }
    }

    fn awaits_input_barrier(&self) -> bool {
        self.deferred.is_some() || self.expected.is_some_and(|e| e > self.begun)
    }

    fn any_above_threshold(&self) -> bool {
        self.feedback
            .iter()
            .any(|f| !f.ended && f.queue.is_above_threshold())
    }

    /// Pops the next feedback event, round-robin over the queues.
    fn try_feedback(&mut self) -> Result<Option<(usize, Event)>> {
        let n = self.feedback.len();
        for k in 0..n {
            let q = (self.fb_cursor + k) % n;
            if self.feedback[q].ended {
                continue;
            }
            if let Some(ev) = self.feedback[q].queue.try_pop()? {
                self.fb_cursor = (q + 1) % n;
                return Ok(Some((q, ev)));
            }
        }
        Ok(None)
    }

    /// Loop input and feedback differ in nullability (a body operator may
    /// make a column nullable, or not): every batch leaves the head with
    /// all fields nullable, so the body sees one schema per port. Only the
    /// schema is replaced; the columns are shared.
    fn relax(&mut self, port: usize, batch: RecordBatch) -> Result<RecordBatch> {
        let schema = batch.schema();
        let target = match &self.relaxed[port] {
            Some((from, to)) if Arc::ptr_eq(from, &schema) => to.clone(),
            _ => {
                let to = all_nullable(&schema);
                self.relaxed[port] = Some((schema.clone(), to.clone()));
                to
            }
        };
        if schema.fields().iter().all(|f| f.is_nullable()) {
            return Ok(batch);
        }
        RecordBatch::try_new(target, batch.columns().to_vec())
            .map_err(|e| Error::arrow(self.name.to_string(), &e))
    }

    /// Adds what the feedback queues spilled since the last call to the
    /// metrics (two loads per queue: called per feedback batch).
    fn record_spill_stats(&mut self) {
        use std::sync::atomic::Ordering::Relaxed;
        for f in &mut self.feedback {
            let now = (f.queue.spilled_bytes_total(), f.queue.spill_files_written());
            if now != f.reported {
                let m = &self.metrics;
                m.spilled_bytes.fetch_add(now.0 - f.reported.0, Relaxed);
                m.spill_files.fetch_add(now.1 - f.reported.1, Relaxed);
                f.reported = now;
            }
        }
    }
}

/// The feedback log of one loop checkpoint, serialized on the checkpoint
/// writer thread (as one Arrow IPC stream; empty when nothing was logged).
struct LogState {
    log: Arc<FeedbackQueue>,
    bytes: Mutex<Option<Arc<Vec<u8>>>>,
}

impl DeferredState for LogState {
    fn serialize(&self) -> Result<Vec<u8>> {
        let mut cached = self.bytes.lock();
        if let Some(b) = cached.as_ref() {
            return Ok(b.as_ref().clone());
        }
        let mut out = Vec::new();
        let mut writer: Option<StreamWriter<&mut Vec<u8>>> = None;
        let name = self.log.name().to_string();
        let arrow_err = |e: arrow::error::ArrowError| Error::arrow(name.clone(), &e);
        while let Some(ev) = self.log.try_pop()? {
            let Event::Data(batch) = ev else { continue };
            if writer.is_none() {
                writer = Some(StreamWriter::try_new(&mut out, &batch.schema()).map_err(arrow_err)?);
            }
            if let Some(w) = writer.as_mut() {
                w.write(&batch).map_err(arrow_err)?;
            }
        }
        if let Some(mut w) = writer {
            w.finish().map_err(arrow_err)?;
        }
        self.log.close()?;
        *cached = Some(Arc::new(out.clone()));
        Ok(out)
    }
}

enum HeadStep {
    Control(Control),
    Input(usize, Event),
    Feedback(usize, Event),
    /// An unaligned barrier overtook the queue of loop input channel `i`.
    Overtake(usize, Barrier),
    /// An unaligned barrier overtook feedback queue `q` (or an aligned one
    /// was announced there).
    FeedbackOvertake(usize, Barrier),
    /// An aligned timeout may have passed.
    Timeout,
}

impl Task {
    fn head(&mut self) -> &mut LoopHead {
        match self.kind.loop_head_mut() {
            Some(h) => h,
            None => unreachable!("run_loop_head runs only in loop head tasks"),
        }
    }

    fn head_ref(&self) -> &LoopHead {
        match self.kind.loop_head() {
            Some(h) => h,
            None => unreachable!("run_loop_head runs only in loop head tasks"),
        }
    }

    /// Runs a loop head until the loop terminated (or was stopped without
    /// draining and its pending loop checkpoints completed).
    pub(crate) fn run_loop_head(&mut self) -> Result<InputEnd> {
        let name = self.head_ref().name.clone();
        // FLIP-16: the restored log goes into the body before anything else.
        let restored = std::mem::take(&mut self.head().restored);
        for batch in restored {
            self.head()
                .term
                .on_record()
                .map_err(|e| e.in_operator(&name))?;
            self.emit_feedback(batch)?;
        }
        let mut live = self.inputs.iter().filter(|c| !c.ended).count();
        let mut undrained = false;
        let mut terminated = false;
        let mut cursor = 0;
        if live == 0 {
            let action = self.head().term.start();
            terminated |= self.head_actions(action)?;
        }
        while !terminated {
            if undrained && live == 0 && self.head_ref().pending.is_empty() {
                self.head().record_spill_stats();
                return Ok(InputEnd::Undrained);
            }
            match self.next_head_step(&mut cursor)? {
                HeadStep::Control(c) => {
                    if let Control::AbortCheckpoint(id) = c {
                        self.head().forget_checkpoints_upto(id);
                    }
                    self.handle_control(c)?;
                }
                HeadStep::Input(i, ev) => {
                    terminated |= self.on_head_input(i, ev, &name, &mut live, &mut undrained)?;
                }
                HeadStep::Feedback(q, ev) => terminated |= self.on_feedback(q, ev, &name)?,
                HeadStep::Overtake(i, b) => self.on_overtake(i, b)?,
                HeadStep::FeedbackOvertake(q, b) => self.on_feedback_overtake(q, b)?,
                HeadStep::Timeout => {}
            }
            // Aligned timeout: the loop input's alignment, then the trip
            // around the cycle (`loop_unaligned.rs`).
            self.switch_to_unaligned()?;
            self.switch_timed_out_loop_checkpoints()?;
        }
        // The loop is empty: no feedback record can arrive any more, so the
        // logs of checkpoints whose barrier is still in the body are
        // complete; the body tasks ack those checkpoints themselves.
        for p in self.head().pending.iter_mut() {
            p.returned.iter_mut().for_each(|r| *r = true);
        }
        self.complete_loop_checkpoints()?;
        self.head().record_spill_stats();
        push_watermark(&mut self.chain, &mut self.output, MAX_WATERMARK)?;
        Ok(InputEnd::Drained)
    }

    /// One event of input channel `i`: records go into the body, barriers
    /// are aligned, the end of an input may end the loop's input and start a
    /// deferred loop checkpoint; true once the loop terminated.
    fn on_head_input(
        &mut self,
        i: usize,
        ev: Event,
        name: &Arc<str>,
        live: &mut usize,
        undrained: &mut bool,
    ) -> Result<bool> {
        let mut terminated = false;
        match ev {
            Event::Data(batch) => {
                self.head()
                    .term
                    .on_record()
                    .map_err(|e| e.in_operator(name))?;
                self.unaligned.on_data(i, &batch);
                let input = self.inputs[i].input;
                let batch = self.head().relax(0, batch)?;
                push_batch(&mut self.chain, &mut self.output, input, batch)?;
            }
            Event::Barrier(barrier) => self.on_barrier_event(i, barrier)?,
            Event::EndOfData { drain } => {
                self.inputs[i].ended = true;
                *live -= 1;
                if let Some(action) = self.aligner.on_end_of_data(i, Instant::now()) {
                    self.apply(action)?;
                }
                self.unaligned_channel_ended(i)?;
                if *live == 0 {
                    // No barrier can come through the input now.
                    self.head().expected = None;
                    if let Some(b) = self.head().deferred.take() {
                        self.begin_loop_checkpoint(b, Duration::ZERO, false)?;
                    }
                }
                if drain {
                    let actions = self
                        .head()
                        .term
                        .on_input_ended(i)
                        .map_err(|e| e.in_operator(name))?;
                    for a in actions {
                        terminated |= self.head_actions(Some(a))?;
                    }
                } else {
                    *undrained = true;
                }
            }
            Event::Termination(token) => {
                if self.scope.contains(&token.loop_id) {
                    let action = self
                        .head()
                        .term
                        .on_input_token(i, token)
                        .map_err(|e| e.in_operator(name))?;
                    terminated |= self.head_actions(action)?;
                }
            }
            // Watermarks stay outside the loop (module docs).
            Event::Watermark(_) | Event::Idle | Event::EndOfPartition => {}
        }
        Ok(terminated)
    }

    /// One event of feedback queue `q`: records are logged for the loop
    /// checkpoints whose barrier has not come back on it (FLIP-16) and go
    /// into the body again; true once the loop terminated.
    fn on_feedback(&mut self, q: usize, ev: Event, name: &Arc<str>) -> Result<bool> {
        let mut terminated = false;
        match ev {
            Event::Data(batch) => {
                let head = self.head();
                head.term.on_record().map_err(|e| e.in_operator(name))?;
                head.record_spill_stats();
                for p in head.pending.iter_mut() {
                    if p.returned[q] {
                        continue;
                    }
                    match &mut p.log {
                        FeedbackLog::Flip16(log) => log.push(Event::Data(batch.clone()))?,
                        FeedbackLog::Channel(c) => c[q].push(Overtaken::Batch(batch.clone())),
                    }
                }
                self.emit_feedback(batch)?;
            }
            Event::Barrier(barrier) => self.barrier_returned(q, barrier.id)?,
            Event::Termination(token) => {
                let action = self
                    .head()
                    .term
                    .on_feedback_token(q, token)
                    .map_err(|e| e.in_operator(name))?;
                terminated |= self.head_actions(action)?;
            }
            Event::EndOfData { .. } => {
                self.head().feedback[q].ended = true;
                for p in self.head().pending.iter_mut() {
                    p.returned[q] = true;
                }
                self.complete_loop_checkpoints()?;
            }
            Event::Watermark(_) | Event::Idle | Event::EndOfPartition => {}
        }
        Ok(terminated)
    }

    /// Obeys the termination protocol; true once the loop terminated.
    fn head_actions(&mut self, action: Option<HeadAction>) -> Result<bool> {
        match action {
            None => Ok(false),
            Some(HeadAction::Emit(token)) => {
                let round = &self.head_ref().subtask.termination_round;
                round.store(token.round, std::sync::atomic::Ordering::Relaxed);
                self.output.broadcast(Event::Termination(token))?;
                Ok(false)
            }
            Some(HeadAction::Terminate) => Ok(true),
        }
    }

    /// Sends a feedback batch into the body: on port 1 for a co-loop (the
    /// body's feedback input), else through the chain like loop input.
    fn emit_feedback(&mut self, batch: RecordBatch) -> Result<()> {
        let port = usize::from(self.head_ref().co);
        let batch = self.head().relax(port, batch)?;
        if self.head_ref().co {
            let slot = &self.chain[0].slot;
            slot.count_in(batch.num_rows());
            slot.count_out(batch.num_rows());
            self.output.port = 1;
            let r = self.output.emit(batch);
            self.output.port = 0;
            r
        } else {
            push_batch(&mut self.chain, &mut self.output, 0, batch)
        }
    }

    /// The coordinator triggered the head directly because every task
    /// feeding it finished (FLIP-147). The snapshot must follow the last
    /// record of those inputs, so it waits until every input channel
    /// delivered EndOfData.
    pub(crate) fn trigger_loop_head(&mut self, barrier: Barrier) -> Result<()> {
        if self.inputs.iter().all(|c| c.ended) {
            self.begin_loop_checkpoint(barrier, Duration::ZERO, false)
        } else {
            let head = self.head();
            if barrier.id > head.begun {
                head.deferred = Some(barrier);
            }
            Ok(())
        }
    }

    /// FLIP-16: snapshot the chain now, send the barrier into the body and
    /// log the feedback until it comes back. An unaligned barrier goes ahead
    /// of the output queues and the feedback is captured as channel state;
    /// with `capture_inputs` the checkpoint also waits for the channel state
    /// of the loop input (`unaligned.rs`).
    pub(crate) fn begin_loop_checkpoint(
        &mut self,
        barrier: Barrier,
        alignment: Duration,
        capture_inputs: bool,
    ) -> Result<()> {
        let head = self.head();
        if head.deferred.is_some_and(|d| d.id <= barrier.id) {
            head.deferred = None;
        }
        if barrier.id <= head.begun {
            return Ok(()); // reached the head both through a channel and directly
        }
        head.begun = barrier.id;
        let states = self.chain_states(&barrier, false)?;
        start_epoch(&mut self.chain, &barrier)?;
        let head = self.head();
        let returned: Vec<bool> = head.feedback.iter().map(|f| f.ended).collect();
        let log = if barrier.aligned {
            FeedbackLog::Flip16(Arc::new(FeedbackQueue::new(
                format!("{} log {}", head.name, barrier.id),
                head.spill_dir.clone(),
                head.log_memory,
            )))
        } else {
            FeedbackLog::Channel(vec![Vec::new(); head.feedback.len()])
        };
        head.pending.push_back(PendingLog {
            barrier,
            states,
            alignment,
            announced: vec![false; returned.len()],
            returned,
            log,
            inputs: (!capture_inputs).then_some(None),
        });
        if barrier.aligned && !self.may_time_out(&barrier) {
            self.output.broadcast(Event::Barrier(barrier))?;
        } else {
            // Unaligned, or aligned and announced ahead of the queues so the
            // body's tasks (and the head, at the tail) can switch on a
            // timeout (DESIGN.md "Aligned timeout").
            self.output.broadcast_overtaking(barrier)?;
        }
        self.complete_loop_checkpoints()
    }

    /// Barrier `id` came back on feedback queue `q`.
    fn barrier_returned(&mut self, q: usize, id: u64) -> Result<()> {
        let head = self.head();
        // Channels are FIFO: an older barrier that has not come back on `q`
        // never will (its checkpoint was aborted in the body).
        head.pending.retain(|p| p.barrier.id >= id || p.returned[q]);
        for p in head.pending.iter_mut() {
            if p.barrier.id == id {
                p.returned[q] = true;
            }
        }
        self.complete_loop_checkpoints()
    }

    /// Reports the loop checkpoints whose barrier came back everywhere (and
    /// whose loop input channel state is complete).
    pub(super) fn complete_loop_checkpoints(&mut self) -> Result<()> {
        loop {
            let head = self.head();
            let Some(front) = head.pending.front() else {
                return Ok(());
            };
            if !front.returned.iter().all(|r| *r) || front.inputs.is_none() {
                return Ok(());
            }
            let Some(p) = head.pending.pop_front() else {
                return Ok(());
            };
            let mut states = p.states;
            let log: Arc<dyn DeferredState> = match p.log {
                FeedbackLog::Flip16(log) => Arc::new(LogState {
                    log,
                    bytes: Mutex::new(None),
                }),
                FeedbackLog::Channel(queues) => {
                    Arc::new(super::feedback_state::FeedbackState::new(
                        format!("{} (feedback)", head.name),
                        queues,
                    ))
                }
            };
            if let Some(first) = states.first_mut() {
                first.state.operator = Some(StateBlob::Deferred(log));
            }
            self.report_snapshot(TaskReport::Snapshot {
                task: self.id,
                checkpoint: p.barrier.id,
                states,
                alignment: p.alignment,
                finished: false,
                channels: p.inputs.flatten(),
            })?;
        }
    }

    fn next_head_step(&mut self, cursor: &mut usize) -> Result<HeadStep> {
        loop {
            if let Some(c) = self.poll_control()? {
                return Ok(HeadStep::Control(c));
            }
            if let Some((i, b)) = self.poll_priority() {
                return Ok(HeadStep::Overtake(i, b));
            }
            if let Some((q, b)) = self.head_ref().feedback_priority() {
                return Ok(HeadStep::FeedbackOvertake(q, b));
            }
            let head = self.head();
            let feedback_first = match head.priority {
                _ if head.awaits_input_barrier() => false,
                LoopPriority::FeedbackFirst => true,
                LoopPriority::Adaptive => {
                    head.fair_turn = !head.fair_turn;
                    head.fair_turn || head.any_above_threshold()
                }
            };
            if feedback_first {
                if let Some((q, ev)) = self.head().try_feedback()? {
                    return Ok(HeadStep::Feedback(q, ev));
                }
            }
            if let Some((i, ev)) = self.poll_inputs(cursor)? {
                return Ok(HeadStep::Input(i, ev));
            }
            if !feedback_first {
                if let Some((q, ev)) = self.head().try_feedback()? {
                    return Ok(HeadStep::Feedback(q, ev));
                }
            }
            // Nothing ready: wait on the inputs, the control channel and the
            // feedback queues' wake-up tokens.
            let wakers: Vec<&Receiver<()>> = self
                .head_ref()
                .feedback
                .iter()
                .filter(|f| !f.ended)
                .map(|f| f.queue.ready())
                .collect();
            let deadline = match (self.alignment_deadline(), self.loop_switch_deadline()) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            match self.wait_step(&wakers, deadline)? {
                // Only an aligned timeout ends the wait on a deadline; an
                // overtaking barrier is found by the polls above.
                Some(Step::Timer) => return Ok(HeadStep::Timeout),
                None | Some(Step::Overtake(..)) => continue,
                Some(Step::Control(c)) => return Ok(HeadStep::Control(c)),
                Some(Step::Event(i, ev)) => return Ok(HeadStep::Input(i, ev)),
            }
        }
    }
}
