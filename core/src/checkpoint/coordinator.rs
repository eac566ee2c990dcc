//! The checkpoint coordinator (flink-fault-tolerance-mechanism.txt,
//! "checkpointing": the coordinator injects barriers at the sources, collects
//! the acknowledgements with the state handles, and a checkpoint completes
//! when every task acknowledged; FLIP-147 for tasks that already finished).
//!
//! It runs on the job's driver thread, inside the supervision loop. Tasks
//! only take a copy-on-write snapshot and report it; serializing and writing
//! the state files happens on the coordinator's writer threads while the
//! tasks keep processing records. The manifest is written last, atomically,
//! and only then is every task notified (two-phase-commit sinks commit).
//!
//! Tasks that already finished answer a trigger directly with their final
//! state (their channels carry no more barriers). After every task finished,
//! a final checkpoint is taken; its completion lets the tasks close, so a
//! bounded job ends with everything committed.
//!
//! With `recovery="recompute"` (FLINK-4120) recomputing operators write no
//! state into checkpoints, except into the final one: a finished task
//! reports their full state, which is held until the checkpoint is known to
//! be final (every task acknowledged it finished) and only then written;
//! otherwise it is dropped, so intermediate checkpoints are unchanged. The
//! manifest says `"final": true`, `read_state` reads that state, and a
//! restore from it loads it and replays nothing (docs/read_state.md; the
//! cost is one full write of those operators' state at the end of a
//! bounded job).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crossbeam_channel::Receiver;
use parking_lot::Mutex;

use crate::barrier::AlignmentMode;
use crate::checkpoint::channel_state::channel_state_uid;
use crate::checkpoint::incremental::SubtaskBase;
use crate::checkpoint::manifest::source_offsets;
use crate::checkpoint::recompute::{NullStateLedger, Recovery};
use crate::checkpoint::writer::{StateWriters, WriteDone, WriteJob};
use crate::checkpoint::{
    CheckpointConfig, CheckpointFailure, CheckpointFailures, CheckpointStats, CheckpointStorage,
    PendingCheckpoint, RestoredCheckpoint, SourceOffset, TaskAlignment,
};
use crate::error::{Error, Result};
use crate::event::{Barrier, BarrierKind};
use crate::graph::JobGraph;
use crate::state::{OperatorState, StateBlob};

pub(crate) use crate::checkpoint::messages::{NodeSnapshot, Outgoing, Request, TaskInfo, Waiter};

mod complete;

struct Stopping {
    drain: bool,
    path: PathBuf,
    waiter: Option<Waiter>,
    savepoint_done: bool,
    finalized: bool,
}

struct InFlight {
    barrier: Barrier,
    pending: PendingCheckpoint,
    started: Instant,
    reported: Vec<bool>,
    outstanding: Vec<usize>,
    triggered_directly: Vec<bool>,
    finished_at_ack: Vec<bool>,
    alignments: Vec<TaskAlignment>,
    bytes: BTreeMap<String, u64>,
    /// Bytes of the whole state (written and reused), over all operators.
    state_bytes: u64,
    /// What the next incremental checkpoint compares against, per (uid,
    /// subtask), once this one completes.
    bases: BTreeMap<(String, u32), Arc<SubtaskBase>>,
    /// This checkpoint is written incrementally.
    incremental: bool,
    offsets: BTreeMap<(usize, usize), Vec<SourceOffset>>,
    /// The smallest null-state watermark reported per node.
    null_states: BTreeMap<usize, u64>,
    /// Chain heads some of whose subtasks wrote channel state.
    channel_nodes: std::collections::BTreeSet<usize>,
    /// The final state of recomputing operators of finished tasks, written
    /// only if the checkpoint turns out final (see the module docs).
    held: Vec<WriteJob>,
    /// Every task acknowledged it finished, and `held` was written.
    final_state: bool,
    waiters: Vec<Waiter>,
    /// Whether tasks hear of the completion (false for plain savepoints,
    /// whose transactions commit with the next checkpoint, as in Flink).
    notify: bool,
}

/// Coordinates the checkpoints of one job across its attempts.
pub(crate) struct Coordinator {
    storage: CheckpointStorage,
    config: CheckpointConfig,
    next_id: u64,
    inflight: Option<InFlight>,
    last_completed: Option<u64>,
    next_trigger: Instant,
    /// Serialize and write state files off the driver and task threads.
    writers: StateWriters,
    pub done_rx: Receiver<WriteDone>,
    pub stats: Arc<Mutex<Vec<CheckpointStats>>>,
    pub failed: Arc<CheckpointFailures>,
    /// The last completed checkpoint was taken with every task finished.
    final_done: bool,
    queued: Vec<(Request, Option<Waiter>)>,
    stopping: Option<Stopping>,
    /// Replay points of the retained checkpoints (FLINK-4120).
    ledger: NullStateLedger,
    /// Which nodes recompute in the current attempt.
    recomputed: Vec<bool>,
    /// Per (uid, subtask): what the last completed incremental checkpoint
    /// of this attempt holds of its key groups (`checkpoint/incremental.rs`).
    bases: BTreeMap<(String, u32), Arc<SubtaskBase>>,
    /// The job's agreed output schemas, recorded in every manifest
    /// (DESIGN.md "One schema per operator").
    schemas: Arc<crate::schemas::SchemaBoard>,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

impl Coordinator {
    /// Opens the storage (reporting an unusable directory now, before the
    /// job starts) and starts the writer threads.
    pub fn new(
        config: CheckpointConfig,
        stats: Arc<Mutex<Vec<CheckpointStats>>>,
        failed: Arc<CheckpointFailures>,
        schemas: Arc<crate::schemas::SchemaBoard>,
    ) -> Result<Self> {
        if config.recovery == Recovery::Recompute
            && (config.mode != AlignmentMode::ExactlyOnce || config.unaligned)
        {
            return Err(Error::checkpoint(
                Some(config.dir.clone()),
                "recovery='recompute' needs exactly-once checkpoints with aligned barriers \
                 (mode='exactly_once', unaligned=False): replayed state is only exact when \
                 every barrier cuts the input where it did in the original run",
            ));
        }
        let storage = CheckpointStorage::open_with(&config.dir, &config.storage_options)?;
        let ledger = if config.recovery == Recovery::Recompute {
            NullStateLedger::load(&storage)
        } else {
            NullStateLedger::default()
        };
        // Ids continue after the highest ever started, also by a run that
        // crashed or aborted it: an id names one checkpoint, never two.
        let newest = storage.highest_started()?;
        let (writers, done_rx) = StateWriters::start()?;
        Ok(Coordinator {
            next_trigger: Instant::now() + config.interval,
            storage,
            config,
            next_id: newest + 1,
            inflight: None,
            last_completed: None,
            writers,
            done_rx,
            stats,
            failed,
            final_done: false,
            queued: Vec::new(),
            stopping: None,
            ledger,
            recomputed: Vec::new(),
            bases: BTreeMap::new(),
            schemas,
        })
    }

    /// The storage.
    pub fn storage(&self) -> &CheckpointStorage {
        &self.storage
    }

    /// How the job recovers.
    pub fn recovery(&self) -> Recovery {
        self.config.recovery
    }

    /// Which nodes recompute in the attempt that starts now.
    pub fn set_recomputed(&mut self, recomputed: Vec<bool>) {
        self.recomputed = recomputed;
    }

    /// The alignment mode tasks use.
    pub fn mode(&self) -> AlignmentMode {
        self.config.mode
    }

    /// Records that the job restored checkpoint `id` (ids continue after it).
    pub fn restored(&mut self, id: u64) {
        self.last_completed = Some(id);
        self.next_id = self.next_id.max(id + 1);
    }

    /// The newest completed checkpoint of this job, verified, to restart from.
    pub fn latest_for_restart(&self) -> Result<Option<RestoredCheckpoint>> {
        match self.last_completed {
            Some(id) => Ok(Some(self.storage.load(id)?)),
            None => Ok(None),
        }
    }

    /// When the coordinator next needs to act (trigger or time out).
    pub fn next_deadline(&self) -> Instant {
        match &self.inflight {
            Some(f) => f.started + self.config.timeout,
            None => self.next_trigger,
        }
    }

    /// Starts a new attempt: whatever was in flight is aborted.
    pub fn begin_attempt(&mut self, out: &mut Vec<Outgoing>) {
        self.abort_inflight("the job restarted", out);
        // The first checkpoint of an attempt is written in full.
        self.bases.clear();
        self.final_done = false;
        if let Some(stop) = self.stopping.take() {
            if let Some(w) = stop.waiter {
                // No receiver: whoever asked stopped waiting for the answer.
                let _ = w.send(Err(Error::checkpoint(
                    Some(stop.path),
                    "the job failed and restarted before the stop-with-savepoint completed",
                )));
            }
        }
        self.next_trigger = Instant::now() + self.config.interval;
    }

    /// Periodic work: triggers a checkpoint when one is due, aborts one that
    /// timed out. `finished[t]` tells which tasks finished.
    pub fn tick(&mut self, tasks: &[TaskInfo], finished: &[bool], out: &mut Vec<Outgoing>) {
        let now = Instant::now();
        if let Some(f) = &self.inflight {
            if now >= f.started + self.config.timeout {
                let msg = format!(
                    "checkpoint {} did not complete within {:?}",
                    f.barrier.id, self.config.timeout
                );
                self.abort_inflight(&msg, out);
            }
            return;
        }
        let all_finished = finished.iter().all(|f| *f);
        if !self.queued.is_empty() {
            let (req, waiter) = self.queued.remove(0);
            self.request(req, waiter, tasks, finished, out);
            return;
        }
        if let Some(stop) = &mut self.stopping {
            if stop.drain {
                if all_finished && !self.final_done {
                    // The savepoint is the final checkpoint of a drained job.
                    let path = stop.path.clone();
                    let waiter = stop.waiter.take();
                    self.start(
                        BarrierKind::Savepoint,
                        Some(&path),
                        true,
                        false,
                        waiter,
                        tasks,
                        finished,
                        out,
                    );
                }
            } else if stop.savepoint_done && all_finished && !stop.finalized {
                stop.finalized = true;
                self.final_done = true;
                out.push(Outgoing::Finalize);
            }
            return;
        }
        if all_finished && !self.final_done {
            self.start(
                BarrierKind::Checkpoint,
                None,
                true,
                false,
                None,
                tasks,
                finished,
                out,
            );
            return;
        }
        if now >= self.next_trigger && !all_finished {
            self.start(
                BarrierKind::Checkpoint,
                None,
                true,
                false,
                None,
                tasks,
                finished,
                out,
            );
        }
    }

    /// Handles a user request: a checkpoint joins the one in flight; a
    /// savepoint waits for the one in flight; a stop begins stopping.
    pub fn request(
        &mut self,
        req: Request,
        waiter: Option<Waiter>,
        tasks: &[TaskInfo],
        finished: &[bool],
        out: &mut Vec<Outgoing>,
    ) {
        if self.stopping.is_some() {
            if let Some(w) = waiter {
                // No receiver: whoever asked stopped waiting for the answer.
                let _ = w.send(Err(Error::checkpoint(None, "the job is stopping")));
            }
            return;
        }
        match req {
            Request::Checkpoint => {
                if let Some(f) = &mut self.inflight {
                    if let Some(w) = waiter {
                        f.waiters.push(w);
                    }
                    return;
                }
                self.start(
                    BarrierKind::Checkpoint,
                    None,
                    true,
                    false,
                    waiter,
                    tasks,
                    finished,
                    out,
                );
            }
            Request::Savepoint { path } => {
                if self.inflight.is_some() {
                    self.queued.push((Request::Savepoint { path }, waiter));
                    return;
                }
                self.start(
                    BarrierKind::Savepoint,
                    Some(&path),
                    false,
                    false,
                    waiter,
                    tasks,
                    finished,
                    out,
                );
            }
            Request::StopWithSavepoint { path, drain } => {
                if self.inflight.is_some() {
                    self.queued
                        .push((Request::StopWithSavepoint { path, drain }, waiter));
                    return;
                }
                if drain {
                    // Sources end their input (MAX_WATERMARK, EndOfData); the
                    // savepoint is taken once every task finished.
                    for (t, info) in tasks.iter().enumerate() {
                        if info.is_source && !finished[t] {
                            out.push(Outgoing::StopSource {
                                task: t,
                                barrier: None,
                            });
                        }
                    }
                    self.stopping = Some(Stopping {
                        drain,
                        path,
                        waiter,
                        savepoint_done: false,
                        finalized: false,
                    });
                } else {
                    self.stopping = Some(Stopping {
                        drain,
                        path: path.clone(),
                        waiter: None,
                        savepoint_done: false,
                        finalized: false,
                    });
                    self.start(
                        BarrierKind::Savepoint,
                        Some(&path),
                        true,
                        true,
                        waiter,
                        tasks,
                        finished,
                        out,
                    );
                }
            }
        }
    }

    /// Starts checkpoint (or savepoint) `next_id`: sources (and finished
    /// tasks) are triggered; with `stop`, sources stop after the barrier.
    /// A checkpoint that cannot begin is recorded in the failures with its
    /// cause, which a waiter also receives.
    #[allow(clippy::too_many_arguments)]
    fn start(
        &mut self,
        kind: BarrierKind,
        savepoint_dir: Option<&std::path::Path>,
        notify: bool,
        stop: bool,
        waiter: Option<Waiter>,
        tasks: &[TaskInfo],
        finished: &[bool],
        out: &mut Vec<Outgoing>,
    ) {
        let id = self.next_id;
        self.next_id += 1;
        self.next_trigger = Instant::now() + self.config.interval;
        let begun = self
            .storage
            .note_started(id)
            .and_then(|()| match savepoint_dir {
                None => self.storage.begin(id),
                Some(dir) => CheckpointStorage::open_with(dir, &self.config.storage_options)
                    .and_then(|s| s.begin(id)),
            });
        let pending = match begun {
            Ok(p) => p,
            Err(e) => {
                // The cause reaches the job's failure log and any waiter.
                self.failed.record(CheckpointFailure {
                    id,
                    kind,
                    reason: format!("it could not begin: {e}"),
                });
                if let Some(w) = waiter {
                    // No receiver: whoever asked stopped waiting for the answer.
                    let _ = w.send(Err(e.clone()));
                }
                if stop {
                    self.stopping = None;
                }
                return;
            }
        };
        let barrier = Barrier {
            id,
            kind,
            aligned: self.config.starts_aligned(kind),
            timestamp_ms: now_ms(),
        };
        let n = tasks.len();
        let mut flight = InFlight {
            barrier,
            pending,
            started: Instant::now(),
            reported: vec![false; n],
            outstanding: vec![0; n],
            triggered_directly: vec![false; n],
            finished_at_ack: vec![false; n],
            alignments: Vec::new(),
            bytes: BTreeMap::new(),
            state_bytes: 0,
            bases: BTreeMap::new(),
            // Savepoints stay full and self-contained (incremental.rs).
            incremental: self.config.incremental && kind == BarrierKind::Checkpoint,
            offsets: BTreeMap::new(),
            null_states: BTreeMap::new(),
            channel_nodes: Default::default(),
            held: Vec::new(),
            final_state: false,
            waiters: waiter.into_iter().collect(),
            notify,
        };
        for (t, info) in tasks.iter().enumerate() {
            if finished[t] || info.needs_direct_trigger(finished) {
                flight.triggered_directly[t] = true;
                out.push(Outgoing::Trigger { task: t, barrier });
            } else if info.is_source {
                flight.triggered_directly[t] = true;
                out.push(if stop {
                    Outgoing::StopSource {
                        task: t,
                        barrier: Some(barrier),
                    }
                } else {
                    Outgoing::Trigger { task: t, barrier }
                });
            }
        }
        self.inflight = Some(flight);
    }

    /// A task finished: if it has not acknowledged the checkpoint in flight
    /// (its inputs ended before the barrier reached it), trigger it directly.
    pub fn on_task_finished(
        &mut self,
        task: usize,
        tasks: &[TaskInfo],
        finished: &[bool],
        out: &mut Vec<Outgoing>,
    ) {
        if let Some(f) = &mut self.inflight {
            if !f.reported[task] && !f.triggered_directly[task] {
                f.triggered_directly[task] = true;
                out.push(Outgoing::Trigger {
                    task,
                    barrier: f.barrier,
                });
            }
            // Loop heads whose last predecessor just finished.
            for (t, info) in tasks.iter().enumerate() {
                if !f.reported[t]
                    && !f.triggered_directly[t]
                    && info.predecessors.contains(&task)
                    && info.needs_direct_trigger(finished)
                {
                    f.triggered_directly[t] = true;
                    out.push(Outgoing::Trigger {
                        task: t,
                        barrier: f.barrier,
                    });
                }
            }
        }
    }

    /// A task reported its snapshot of `checkpoint`.
    #[allow(clippy::too_many_arguments)]
    pub fn on_snapshot(
        &mut self,
        graph: &JobGraph,
        tasks: &[TaskInfo],
        task: usize,
        checkpoint: u64,
        states: Vec<NodeSnapshot>,
        alignment: Duration,
        finished: bool,
        channels: Option<OperatorState>,
        out: &mut Vec<Outgoing>,
    ) {
        let Some(f) = self
            .inflight
            .as_mut()
            .filter(|f| f.barrier.id == checkpoint)
        else {
            return; // a snapshot of an aborted checkpoint
        };
        if f.reported[task] {
            return;
        }
        f.reported[task] = true;
        f.finished_at_ack[task] = finished;
        let info = &tasks[task];
        f.alignments.push(TaskAlignment {
            task: info.name.clone(),
            subtask: info.subtask as u32,
            alignment_us: alignment.as_micros() as u64,
        });
        for snap in states {
            let node = &graph.nodes[snap.node];
            if let Some(w) = snap.null_state {
                let e = f.null_states.entry(snap.node).or_insert(w);
                *e = (*e).min(w);
            }
            if let (true, Some(StateBlob::Bytes(b))) = (
                matches!(node.kind, crate::graph::NodeKind::Source(_)),
                snap.state.operator.as_ref(),
            ) {
                f.offsets
                    .insert((snap.node, info.subtask), source_offsets(info.subtask, b));
            }
            if snap.state.is_empty() {
                continue;
            }
            let subtask = info.subtask as u32;
            let incremental = f
                .incremental
                .then(|| self.bases.get(&(node.uid.clone(), subtask)).cloned());
            let job = WriteJob {
                checkpoint,
                task,
                writer: f.pending.writer(),
                uid: node.uid.clone(),
                subtask,
                state: snap.state,
                incremental,
            };
            // A recomputing operator (it reports a null-state watermark)
            // whose task finished: held until the checkpoint proves final.
            if finished && snap.null_state.is_some() {
                f.held.push(job);
                continue;
            }
            f.outstanding[task] += 1;
            self.writers.submit(job);
        }
        if let (Some(state), Some(&head)) = (channels, info.nodes.first()) {
            // Channel state (FLIP-76): its own file, under the head's `#channels` uid.
            f.channel_nodes.insert(head);
            f.outstanding[task] += 1;
            self.writers.submit(WriteJob {
                checkpoint,
                task,
                writer: f.pending.writer(),
                uid: channel_state_uid(&graph.nodes[head].uid),
                subtask: info.subtask as u32,
                state,
                // In-flight data is this checkpoint's own: never shared.
                incremental: None,
            });
        }
        self.maybe_complete(graph, tasks, out);
    }

    /// A state file was written (or failed to be).
    pub fn on_write_done(
        &mut self,
        graph: &JobGraph,
        tasks: &[TaskInfo],
        done: WriteDone,
        out: &mut Vec<Outgoing>,
    ) {
        let Some(f) = self
            .inflight
            .as_mut()
            .filter(|f| f.barrier.id == done.checkpoint)
        else {
            return;
        };
        match done.result {
            Ok(handle) => {
                f.outstanding[done.task] = f.outstanding[done.task].saturating_sub(1);
                f.state_bytes += handle.state_bytes();
                *f.bytes.entry(done.uid.clone()).or_default() += handle.written_bytes();
                if let Some(base) = handle.base {
                    f.bases.insert((done.uid, done.subtask), base);
                }
                self.maybe_complete(graph, tasks, out);
            }
            Err(e) => {
                let msg = format!("writing its state failed: {e}");
                self.abort_inflight(&msg, out);
            }
        }
    }

    /// Deletes the checkpoints retention no longer keeps after checkpoint
    /// `id` completed (also every one from `since` on, FLINK-4120). A
    /// deletion that fails fails nothing (the checkpoint is complete and
    /// the files stay until a later retention deletes them), but it is
    /// never silent: it is logged to stderr, counted in the job's metrics,
    /// and returned for the checkpoint's stats.
    fn retain(&self, id: u64, since: u64) -> Vec<String> {
        let errors: Vec<String> = match self.storage.retention(self.config.retained.max(1), since) {
            Ok(done) => done.errors.iter().map(ToString::to_string).collect(),
            Err(e) => vec![e.to_string()],
        };
        for e in &errors {
            eprintln!(
                "eddyline: deleting an old checkpoint of '{}' after checkpoint {id} failed \
                 (the job goes on): {e}",
                self.storage.dir().display()
            );
            self.failed.record_retention(e.clone());
        }
        errors
    }

    /// Aborts the checkpoint in flight, if any.
    pub fn abort_inflight(&mut self, reason: &str, out: &mut Vec<Outgoing>) {
        if let Some(f) = self.inflight.take() {
            let id = f.barrier.id;
            if f.barrier.kind == BarrierKind::Savepoint {
                if let Some(stop) = &self.stopping {
                    if !stop.drain {
                        // A stop whose savepoint failed: the job keeps running.
                        self.stopping = None;
                    }
                }
            }
            let cleanup = f.pending.abort().err();
            let reason = match cleanup {
                None => reason.to_string(),
                Some(e) => format!("{reason} (and removing its files failed: {e})"),
            };
            self.failed.record(CheckpointFailure {
                id,
                kind: f.barrier.kind,
                reason: reason.clone(),
            });
            out.push(Outgoing::Abort { checkpoint: id });
            let err = Error::checkpoint(None, format!("checkpoint {id} was aborted: {reason}"));
            for w in f.waiters {
                // No receiver: whoever asked stopped waiting for the answer.
                let _ = w.send(Err(err.clone()));
            }
        }
    }
}
