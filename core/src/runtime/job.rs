//! Job supervision: starts every subtask of an attempt, watches their
//! reports, drives the end-of-job commit, and on a failure cancels the
//! attempt and restarts it according to the restart strategy
//! (flink-fault-tolerance-mechanism.txt, "recovery").

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{select, unbounded, Receiver, Sender};
use parking_lot::{Condvar, Mutex};

use crate::barrier::{AlignmentMode, BarrierAligner};
use crate::channel::{
    bounded, FlowPolicy, InputFlow, DEFAULT_CHANNEL_CAPACITY, DEFAULT_IN_FLIGHT_TARGET,
    MIN_BUDGET_BYTES,
};
use crate::checkpoint::coordinator::{Coordinator, Outgoing, Request, TaskInfo, Waiter};
use crate::checkpoint::restore::{all_finished, check_compatible, state_for};
use crate::checkpoint::{
    CheckpointConfig, CheckpointDone, CheckpointFailure, CheckpointFailures, CheckpointStats,
};
use crate::checkpoint::{CheckpointStorage, RestoredCheckpoint};
use crate::error::{Error, Result};
use crate::feedback::FeedbackQueue;
use crate::graph::{JobGraph, NodeKind};
use crate::keygroup::key_group_range;
use crate::net::data::DataPlane;
use crate::operator::OperatorContext;
use crate::partition::{Partitioner, Partitioning};
use crate::runtime::dist::{DistDriver, Distribution, RemoteAttempt, WorkerLink};
use crate::runtime::loop_head::LoopHead;
use crate::runtime::metrics::{JobMetrics, MetricsSnapshot, OperatorMetrics};
use crate::runtime::plan::Plan;
use crate::runtime::replay::AttemptRecompute;
use crate::runtime::task::{
    Control, InputChannel, OpSlot, OutSender, OutputEdge, SourceHead, Task, TaskOutput, TaskReport,
    TaskRestore,
};
use crate::termination::BodyTermination;
use std::collections::HashMap;

/// How often and how soon a failed job is restarted.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RestartStrategy {
    pub attempts: u32,
    pub delay: Duration,
}

impl RestartStrategy {
    /// Never restart.
    pub fn none() -> Self {
        RestartStrategy {
            attempts: 0,
            delay: Duration::ZERO,
        }
    }
}

/// Where a job restores its state from when it starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RestoreFrom {
    /// The newest completed checkpoint under the checkpoint dir (a dir
    /// without checkpoints starts fresh; a corrupt newest one is an error).
    Latest,
    /// A checkpoint or savepoint directory.
    Path(std::path::PathBuf),
}

/// Job-wide settings.
#[derive(Debug, Clone)]
pub struct JobConfig {
    pub name: String,
    pub batch_size: usize,
    /// The most events a channel holds.
    pub channel_capacity: usize,
    /// About how much work (time) a task's input channels may queue; a job
    /// with checkpoints uses at most its checkpoint interval, so an aligned
    /// barrier waits about that long at each hop (FLIP-183, `channel.rs`).
    pub in_flight_target: Duration,
    pub restart: RestartStrategy,
    pub checkpoint: Option<CheckpointConfig>,
    pub restore_from: Option<RestoreFrom>,
    /// Names of sinks that commit outside this process (files, tables).
    /// `restore_from = Latest` may skip a corrupt newest checkpoint only when
    /// there are none: an older checkpoint would make them commit the output
    /// after it a second time.
    pub external_sinks: Vec<String>,
    /// Restore even when the checkpoint holds state of operators the job
    /// lacks (that state is dropped).
    pub allow_non_restored_state: bool,
}

impl Default for JobConfig {
    fn default() -> Self {
        JobConfig {
            name: "job".into(),
            batch_size: 8192,
            channel_capacity: DEFAULT_CHANNEL_CAPACITY,
            in_flight_target: DEFAULT_IN_FLIGHT_TARGET,
            restart: RestartStrategy::none(),
            checkpoint: None,
            restore_from: None,
            external_sinks: Vec::new(),
            allow_non_restored_state: false,
        }
    }
}

/// Where a job is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobStatus {
    Running,
    Restarting,
    Finished,
    Failed,
    Cancelled,
}

impl JobStatus {
    /// Whether the job has ended.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            JobStatus::Finished | JobStatus::Failed | JobStatus::Cancelled
        )
    }

    /// Lower-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            JobStatus::Running => "running",
            JobStatus::Restarting => "restarting",
            JobStatus::Finished => "finished",
            JobStatus::Failed => "failed",
            JobStatus::Cancelled => "cancelled",
        }
    }
}

/// What a finished job reports.
#[derive(Debug, Clone)]
pub struct JobOutcome {
    pub restarts: u32,
    pub metrics: MetricsSnapshot,
}

pub(crate) struct Shared {
    status: Mutex<(JobStatus, Option<Error>)>,
    changed: Condvar,
    restarts: AtomicU32,
    pub(crate) metrics: JobMetrics,
    started: Instant,
    ended: Mutex<Option<Instant>>,
    checkpoints: Arc<Mutex<Vec<CheckpointStats>>>,
    failed_checkpoints: Arc<CheckpointFailures>,
}

impl Shared {
    /// Fresh status and counters for the nodes of `graph`.
    pub(crate) fn new(graph: &JobGraph) -> Shared {
        let metrics = JobMetrics {
            nodes: graph
                .nodes
                .iter()
                .map(|n| (n.name.clone(), n.role, Arc::new(OperatorMetrics::default())))
                .collect(),
        };
        Shared {
            status: Mutex::new((JobStatus::Running, None)),
            changed: Condvar::new(),
            restarts: AtomicU32::new(0),
            metrics,
            started: Instant::now(),
            ended: Mutex::new(None),
            checkpoints: Arc::new(Mutex::new(Vec::new())),
            failed_checkpoints: Arc::new(CheckpointFailures::default()),
        }
    }

    fn set_status(&self, status: JobStatus, error: Option<Error>) {
        let mut g = self.status.lock();
        if status.is_terminal() {
            *self.ended.lock() = Some(Instant::now());
        }
        *g = (status, error);
        self.changed.notify_all();
    }

    fn wall_time(&self) -> f64 {
        let end = self.ended.lock().unwrap_or_else(Instant::now);
        (end - self.started).as_secs_f64()
    }
}

enum DriverMsg {
    Cancel,
    Request(Request, Waiter),
}

/// A running (or ended) job.
pub struct JobHandle {
    shared: Arc<Shared>,
    driver_tx: Sender<DriverMsg>,
    driver: Mutex<Option<JoinHandle<()>>>,
}

impl JobHandle {
    /// Validates `graph` and starts running it on background threads.
    pub fn start(graph: JobGraph, config: JobConfig) -> Result<JobHandle> {
        Self::start_with(graph, config, None)
    }

    /// Like [`JobHandle::start`], but the subtasks run in the worker
    /// processes `dist` launches; this process keeps the coordinator.
    pub fn start_distributed(
        graph: JobGraph,
        config: JobConfig,
        dist: Distribution,
    ) -> Result<JobHandle> {
        Self::start_with(graph, config, Some(dist))
    }

    fn start_with(
        graph: JobGraph,
        config: JobConfig,
        dist: Option<Distribution>,
    ) -> Result<JobHandle> {
        graph.validate()?;
        if let (Some(c), Some(l)) = (&config.checkpoint, graph.loops.first()) {
            if c.recovery == crate::checkpoint::recompute::Recovery::Recompute {
                return Err(Error::graph(
                    &graph.nodes[l.head].name,
                    "recovery='recompute' does not support loops yet: records in flight in a \
                     loop cannot be rebuilt from the sources; use recovery='latest'",
                ));
            }
        }
        let shared = Arc::new(Shared::new(&graph));
        // Storage problems and bad restore paths are reported now, before
        // anything runs.
        let mut coordinator = match &config.checkpoint {
            Some(c) => Some(Coordinator::new(
                c.clone(),
                shared.checkpoints.clone(),
                shared.failed_checkpoints.clone(),
            )?),
            None => None,
        };
        let restored = match &config.restore_from {
            None => None,
            Some(RestoreFrom::Path(p)) => {
                let options = CheckpointConfig::storage_options_of(config.checkpoint.as_ref());
                Some(CheckpointStorage::load_path_with(p, &options)?)
            }
            Some(RestoreFrom::Latest) => match &coordinator {
                Some(c) => latest_restorable(c.storage(), &config.external_sinks)?,
                None => return Err(Error::checkpoint(
                    None,
                    "restore_from=\"latest\" needs a checkpoint configuration (the dir to look in)",
                )),
            },
        };
        if let Some(rc) = &restored {
            check_compatible(rc, &graph, config.allow_non_restored_state)?;
            if let Some(c) = coordinator.as_mut() {
                c.restored(rc.id());
            }
        }
        let dist = match dist {
            Some(d) => {
                check_distributable(&graph, d.workers)?;
                Some(DistDriver::new(d)?)
            }
            None => None,
        };
        let (driver_tx, driver_rx) = unbounded();
        let s = shared.clone();
        let driver = std::thread::Builder::new()
            .name(format!("eddyline-{}", config.name))
            .spawn(move || drive(graph, config, s, driver_rx, coordinator, restored, dist))
            .map_err(|e| Error::runtime(format!("cannot start the job's driver thread: {e}")))?;
        Ok(JobHandle {
            shared,
            driver_tx,
            driver: Mutex::new(Some(driver)),
        })
    }

    /// The current status.
    pub fn status(&self) -> JobStatus {
        self.shared.status.lock().0
    }

    /// Waits up to `timeout` for the job to end; true if it has ended.
    pub fn wait_timeout(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut g = self.shared.status.lock();
        while !g.0.is_terminal() {
            if self.shared.changed.wait_until(&mut g, deadline).timed_out() {
                return g.0.is_terminal();
            }
        }
        drop(g);
        if let Some(h) = self.driver.lock().take() {
            let _ = h.join();
        }
        true
    }

    /// Asks the job to stop; it ends with status `Cancelled`.
    pub fn cancel(&self) {
        let _ = self.driver_tx.send(DriverMsg::Cancel);
    }

    /// The checkpoints completed so far, oldest first.
    pub fn checkpoints(&self) -> Vec<CheckpointStats> {
        self.shared.checkpoints.lock().clone()
    }

    /// How many checkpoints were aborted.
    pub fn failed_checkpoints(&self) -> u64 {
        self.shared.failed_checkpoints.count()
    }

    /// The latest checkpoints that failed to begin or complete, with their
    /// causes (at most [`CheckpointFailures::KEPT`]), oldest first.
    pub fn checkpoint_failures(&self) -> Vec<CheckpointFailure> {
        self.shared.failed_checkpoints.recent()
    }

    fn request(&self, req: Request) -> Result<CheckpointDone> {
        let (tx, rx) = crossbeam_channel::bounded(1);
        self.driver_tx
            .send(DriverMsg::Request(req, tx))
            .map_err(|_| Error::checkpoint(None, "the job has ended"))?;
        rx.recv()
            .map_err(|_| Error::checkpoint(None, "the job ended before the checkpoint completed"))?
    }

    /// Triggers a checkpoint and waits until it completed; its id.
    pub fn trigger_checkpoint(&self) -> Result<u64> {
        self.request(Request::Checkpoint).map(|d| d.id)
    }

    /// Takes a savepoint into `dir` without stopping; its directory.
    pub fn trigger_savepoint(
        &self,
        dir: impl Into<std::path::PathBuf>,
    ) -> Result<std::path::PathBuf> {
        self.request(Request::Savepoint { path: dir.into() })
            .map(|d| d.path)
    }

    /// Stops the job with a savepoint into `dir` (FLIP-147): without
    /// `drain` operators stop where they are; with it, event time ends and
    /// operators finish first. Returns the savepoint's directory once it
    /// completed; the job then ends.
    pub fn stop_with_savepoint(
        &self,
        dir: impl Into<std::path::PathBuf>,
        drain: bool,
    ) -> Result<std::path::PathBuf> {
        self.request(Request::StopWithSavepoint {
            path: dir.into(),
            drain,
        })
        .map(|d| d.path)
    }

    /// The current counters.
    pub fn metrics(&self) -> MetricsSnapshot {
        self.shared.metrics.snapshot(self.shared.wall_time())
    }

    /// The outcome of an ended job (its error if it failed). Waits for the end.
    pub fn result(&self) -> Result<JobOutcome> {
        while !self.wait_timeout(Duration::from_secs(3600)) {}
        let g = self.shared.status.lock();
        match (&g.0, &g.1) {
            (JobStatus::Finished, _) => Ok(JobOutcome {
                restarts: self.shared.restarts.load(Ordering::Relaxed),
                metrics: self.metrics(),
            }),
            (_, Some(e)) => Err(e.clone()),
            _ => Err(Error::Cancelled),
        }
    }
}

impl Drop for JobHandle {
    fn drop(&mut self) {
        if !self.status().is_terminal() {
            self.cancel();
        }
    }
}

/// The newest checkpoint `restore_from = "latest"` may use: the newest
/// valid one, skipping corrupt newer ones only when no sink commits outside
/// the process (otherwise output committed by the skipped checkpoints would
/// be committed twice, so this refuses and says why).
fn latest_restorable(
    storage: &CheckpointStorage,
    external_sinks: &[String],
) -> Result<Option<RestoredCheckpoint>> {
    let summaries = storage.list()?;
    let mut skipped: Vec<(u64, Error)> = Vec::new();
    for s in &summaries {
        match storage.load(s.id) {
            Ok(rc) if skipped.is_empty() || external_sinks.is_empty() => return Ok(Some(rc)),
            Ok(rc) => {
                let (newest, err) = &skipped[0];
                return Err(Error::checkpoint(
                    Some(storage.dir().to_path_buf()),
                    format!(
                        "the newest checkpoint {newest} cannot be restored ({err}); falling back to \
                         checkpoint {} could commit the output of the later checkpoints a second \
                         time through sink(s) {}; repair or remove the broken checkpoint, or \
                         restore checkpoint {} explicitly with restore_from='{}'",
                        rc.id(),
                        external_sinks
                            .iter()
                            .map(|n| format!("'{n}'"))
                            .collect::<Vec<_>>()
                            .join(", "),
                        rc.id(),
                        rc.dir().display()
                    ),
                ));
            }
            Err(e) => skipped.push((s.id, e)),
        }
    }
    match skipped.first() {
        None => Ok(None),
        Some((newest, err)) => Err(Error::checkpoint(
            Some(storage.dir().to_path_buf()),
            format!(
                "no checkpoint under it can be restored; the newest, {newest}, fails with: {err}"
            ),
        )),
    }
}

fn drive(
    graph: JobGraph,
    config: JobConfig,
    shared: Arc<Shared>,
    driver_rx: Receiver<DriverMsg>,
    mut coordinator: Option<Coordinator>,
    mut restored: Option<RestoredCheckpoint>,
    mut dist: Option<DistDriver>,
) {
    let plan = Plan::new(&graph);
    let mut attempt: u32 = 0;
    loop {
        let outcome = run_attempt(
            &graph,
            &plan,
            &config,
            &shared,
            attempt,
            &driver_rx,
            coordinator.as_mut(),
            restored.take(),
            dist.as_mut(),
        );
        match outcome {
            Ok(()) => {
                shared.set_status(JobStatus::Finished, None);
                return;
            }
            Err(Error::Cancelled) => {
                shared.set_status(JobStatus::Cancelled, Some(Error::Cancelled));
                return;
            }
            Err(e) if e.is_deterministic() || attempt >= config.restart.attempts => {
                shared.set_status(JobStatus::Failed, Some(e));
                return;
            }
            Err(_) => {
                attempt += 1;
                shared.restarts.fetch_add(1, Ordering::Relaxed);
                shared.set_status(JobStatus::Restarting, None);
                if let Ok(DriverMsg::Cancel) = driver_rx.recv_timeout(config.restart.delay) {
                    shared.set_status(JobStatus::Cancelled, Some(Error::Cancelled));
                    return;
                }
                // Restart every task from the newest completed checkpoint.
                if let Some(c) = coordinator.as_ref() {
                    match c.latest_for_restart() {
                        Ok(rc) => restored = rc,
                        Err(e) => {
                            shared.set_status(JobStatus::Failed, Some(e));
                            return;
                        }
                    }
                }
                shared.set_status(JobStatus::Running, None);
            }
        }
    }
}

/// Where the control messages of one task go.
pub(crate) enum ControlPort {
    /// A task thread of this process.
    Local(Sender<Control>),
    /// Task `.1`, run by a worker process.
    Remote(Arc<WorkerLink>, usize),
    /// A task another worker runs (seen from a worker).
    Absent,
}

impl ControlPort {
    fn send(&self, c: Control) {
        match self {
            ControlPort::Local(s) => {
                let _ = s.send(c);
            }
            ControlPort::Remote(link, task) => link.send_control(*task, &c),
            ControlPort::Absent => {}
        }
    }
}

/// Which worker runs which subtask: subtask `s` of every chain runs in
/// worker `s % workers` (forward edges stay in one process).
pub(crate) struct Placement<'a> {
    pub workers: usize,
    /// This process's worker index; `None` for a driver that runs no task.
    pub me: Option<usize>,
    /// The remote channels of this worker (when `workers > 1`).
    pub plane: Option<&'a mut DataPlane>,
}

impl Placement<'_> {
    /// Everything in this process.
    pub(crate) fn local() -> Placement<'static> {
        Placement {
            workers: 1,
            me: Some(0),
            plane: None,
        }
    }

    fn owner(&self, subtask: usize) -> usize {
        subtask % self.workers.max(1)
    }

    fn owns(&self, subtask: usize) -> bool {
        self.me == Some(self.owner(subtask))
    }

    fn plane(&mut self) -> Result<&mut DataPlane> {
        self.plane
            .as_deref_mut()
            .ok_or_else(|| Error::runtime("internal: a remote channel without a data plane"))
    }
}

/// Refuses what a distributed run cannot do yet, before anything starts.
fn check_distributable(graph: &JobGraph, workers: usize) -> Result<()> {
    if workers <= 1 {
        return Ok(());
    }
    let plan = Plan::new(graph);
    for l in &graph.loops {
        let hp = plan.chains[plan.chain_of[l.head]].parallelism;
        let tp = plan.chains[plan.chain_of[l.tail]].parallelism;
        if hp != tp {
            return Err(Error::graph(
                &graph.nodes[l.head].name,
                format!(
                    "this loop's head runs at parallelism {hp} and its tail at {tp}: its \
                     feedback would cross worker processes, which is not supported; give the \
                     loop body the parallelism of its head"
                ),
            ));
        }
    }
    Ok(())
}

pub(crate) struct Attempt {
    controls: Vec<ControlPort>,
    threads: Vec<JoinHandle<()>>,
    pub reports: Receiver<TaskReport>,
    tasks: Vec<TaskInfo>,
    /// The loops' feedback queues: closed (spill files deleted) when the
    /// attempt's threads are gone.
    queues: Vec<Arc<FeedbackQueue>>,
    /// The worker processes running the tasks (driver of a distributed job).
    remote: Option<RemoteAttempt>,
    /// The newest checkpoint announced to the loop heads.
    announced: std::cell::Cell<u64>,
}

impl Attempt {
    fn deliver(&self, out: &mut Vec<Outgoing>) {
        for msg in out.drain(..) {
            match msg {
                Outgoing::Trigger { task, barrier } => {
                    self.announce_to_loop_heads(task, barrier.id);
                    self.controls[task].send(Control::TriggerCheckpoint(barrier));
                }
                Outgoing::StopSource { task, barrier } => {
                    if let Some(b) = &barrier {
                        self.announce_to_loop_heads(task, b.id);
                    }
                    self.controls[task].send(Control::StopSource(barrier));
                }
                Outgoing::Notify { checkpoint } => {
                    for c in &self.controls {
                        c.send(Control::NotifyComplete(checkpoint));
                    }
                }
                Outgoing::Abort { checkpoint } => {
                    for c in &self.controls {
                        c.send(Control::AbortCheckpoint(checkpoint));
                    }
                }
                Outgoing::Finalize => {
                    for c in &self.controls {
                        c.send(Control::Finalize {
                            commit_end_of_job: false,
                        });
                    }
                }
            }
        }
    }
}

impl Attempt {
    /// A checkpoint is triggered at source task `task`: every loop head
    /// learns that its barrier is coming, so it reads its input first until
    /// the barrier arrived (see [`Control::ExpectBarrier`]). Once per
    /// checkpoint.
    fn announce_to_loop_heads(&self, task: usize, checkpoint: u64) {
        if !self.tasks[task].is_source || self.announced.get() >= checkpoint {
            return;
        }
        self.announced.set(checkpoint);
        for (t, info) in self.tasks.iter().enumerate() {
            if info.loop_head {
                self.controls[t].send(Control::ExpectBarrier(checkpoint));
            }
        }
    }

    pub(crate) fn cancel_and_join(self) {
        for c in &self.controls {
            c.send(Control::Cancel);
        }
        let _ = self.join_local();
    }

    /// The control senders of this process's tasks, by task id.
    pub(crate) fn local_controls(&self) -> Vec<Option<Sender<Control>>> {
        self.controls
            .iter()
            .map(|c| match c {
                ControlPort::Local(s) => Some(s.clone()),
                _ => None,
            })
            .collect()
    }

    /// Waits for this process's task threads and closes the loops' queues.
    pub(crate) fn join_local(self) -> Result<()> {
        drop(self.controls);
        for t in self.threads {
            let _ = t.join();
        }
        let mut result = Ok(());
        for q in &self.queues {
            if let Err(e) = q.close() {
                result = Err(e);
            }
        }
        result
    }
}

#[allow(clippy::too_many_arguments)]
fn run_attempt(
    graph: &JobGraph,
    plan: &Plan,
    config: &JobConfig,
    shared: &Shared,
    attempt: u32,
    driver_rx: &Receiver<DriverMsg>,
    mut coordinator: Option<&mut Coordinator>,
    restored: Option<RestoredCheckpoint>,
    dist: Option<&mut DistDriver>,
) -> Result<()> {
    let mode = coordinator
        .as_ref()
        .map(|c| c.mode())
        .unwrap_or(AlignmentMode::ExactlyOnce);
    let recompute = AttemptRecompute::prepare(
        graph,
        coordinator
            .as_ref()
            .map(|c| c.recovery())
            .unwrap_or_default(),
        restored.as_ref(),
    )?;
    if let Some(c) = coordinator.as_deref_mut() {
        c.set_recomputed(recompute.recomputed.clone());
    }
    let mut place = match &dist {
        Some(d) => Placement {
            workers: d.dist.workers,
            me: None,
            plane: None,
        },
        None => Placement::local(),
    };
    let mut run = build_attempt(
        graph,
        plan,
        config,
        shared,
        attempt,
        mode,
        restored.as_ref(),
        &recompute,
        &mut place,
    )?;
    let mut dist = dist;
    if let Some(d) = dist.as_deref_mut() {
        let metrics = shared.metrics.nodes.iter().map(|n| n.2.clone()).collect();
        let cancelled = || match driver_rx.try_recv() {
            Ok(DriverMsg::Cancel) => true,
            Ok(DriverMsg::Request(_, reply)) => {
                let _ = reply.send(Err(Error::checkpoint(
                    None,
                    "the job is still starting its workers; try again",
                )));
                false
            }
            Err(_) => false,
        };
        let remote = d.start_attempt(
            attempt as u64,
            &run.tasks,
            restored.as_ref(),
            metrics,
            &cancelled,
        )?;
        let n = d.dist.workers;
        for (t, info) in run.tasks.iter().enumerate() {
            run.controls[t] = ControlPort::Remote(remote.links[info.subtask % n].clone(), t);
        }
        run.reports = remote.reports.clone();
        run.remote = Some(remote);
    }
    drop(restored);
    let total = run.controls.len();
    let mut finished = vec![false; total];
    let mut closed = 0usize;
    let mut first_error: Option<Error> = None;
    let mut user_cancel = false;
    let mut out = Vec::new();
    if let Some(c) = coordinator.as_deref_mut() {
        c.begin_attempt(&mut out);
    }
    let never = crossbeam_channel::never();
    while closed < total {
        let done_rx = coordinator.as_ref().map(|c| c.done_rx.clone());
        let deadline = coordinator
            .as_ref()
            .map(|c| c.next_deadline())
            .unwrap_or_else(|| Instant::now() + Duration::from_secs(3600));
        let timeout = deadline.saturating_duration_since(Instant::now());
        select! {
            recv(run.reports) -> msg => match msg {
                Ok(TaskReport::Finished { task }) => {
                    finished[task] = true;
                    match coordinator.as_deref_mut() {
                        Some(c) => c.on_task_finished(task, &run.tasks, &finished, &mut out),
                        None => {
                            if finished.iter().all(|f| *f) {
                                for ctl in &run.controls {
                                    ctl.send(Control::Finalize { commit_end_of_job: true });
                                }
                            }
                        }
                    }
                }
                Ok(TaskReport::Snapshot { task, checkpoint, states, alignment, finished: fin }) => {
                    if let Some(c) = coordinator.as_deref_mut() {
                        c.on_snapshot(graph, &run.tasks, task, checkpoint, states, alignment, fin, &mut out);
                    }
                }
                Ok(TaskReport::Closed { .. }) => closed += 1,
                Ok(TaskReport::Failed { task, error }) => {
                    let _ = task;
                    first_error = Some(error);
                    break;
                }
                Err(_) => break,
            },
            recv(done_rx.as_ref().unwrap_or(&never)) -> msg => {
                if let (Ok(done), Some(c)) = (msg, coordinator.as_deref_mut()) {
                    c.on_write_done(graph, &run.tasks, done, &mut out);
                }
            },
            recv(driver_rx) -> msg => match msg {
                Ok(DriverMsg::Cancel) | Err(_) => {
                    first_error = Some(Error::Cancelled);
                    user_cancel = true;
                    break;
                }
                Ok(DriverMsg::Request(req, reply)) => match coordinator.as_deref_mut() {
                    Some(c) => c.request(req, Some(reply), &run.tasks, &finished, &mut out),
                    None => {
                        let _ = reply.send(Err(Error::checkpoint(
                            None,
                            "checkpointing is not enabled for this job",
                        )));
                    }
                },
            },
            default(timeout) => {}
        }
        if let Some(c) = coordinator.as_deref_mut() {
            c.tick(&run.tasks, &finished, &mut out);
        }
        run.deliver(&mut out);
    }
    if let Some(err) = first_error {
        if let Some(c) = coordinator {
            c.abort_inflight("a task failed", &mut out);
        }
        // Prefer the root cause over the cancellations it triggered.
        let mut root = err;
        let reports = run.reports.clone();
        let remote = run.remote.take();
        if let (Some(d), Some(r)) = (dist.as_deref_mut(), remote) {
            if matches!(root, Error::Cancelled) && !user_cancel {
                // A worker's task stopped because a peer connection broke:
                // the peer's own loss is reported by its connection.
                let deadline = Instant::now() + Duration::from_secs(2);
                while let Ok(rep) = reports.recv_deadline(deadline) {
                    if let TaskReport::Failed { error, .. } = rep {
                        if !matches!(error, Error::Cancelled) {
                            root = error;
                            break;
                        }
                    }
                }
                if matches!(root, Error::Cancelled) {
                    root = Error::runtime(
                        "a worker's task stopped because a connection to another worker broke",
                    );
                }
            }
            d.end_attempt(r, true);
        }
        run.cancel_and_join();
        if matches!(root, Error::Cancelled) {
            while let Ok(r) = reports.try_recv() {
                if let TaskReport::Failed { error, .. } = r {
                    if !matches!(error, Error::Cancelled) {
                        root = error;
                        break;
                    }
                }
            }
        }
        return Err(root);
    }
    if let (Some(d), Some(r)) = (dist, run.remote.take()) {
        d.end_attempt(r, false);
    }
    run.join_local()
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn build_attempt(
    graph: &JobGraph,
    plan: &Plan,
    config: &JobConfig,
    shared: &Shared,
    attempt: u32,
    mode: AlignmentMode,
    restored: Option<&RestoredCheckpoint>,
    recompute: &AttemptRecompute,
    place: &mut Placement<'_>,
) -> Result<Attempt> {
    let max_p = graph.max_parallelism;
    let flow_policy = FlowPolicy::for_job(
        config.in_flight_target,
        config.checkpoint.as_ref().map(|c| c.interval),
    );
    // Channels: for every edge into a chain head, one channel per connected
    // (producer subtask, consumer subtask) pair.
    let n_chains = plan.chains.len();
    let mut outputs: Vec<Vec<TaskOutput>> = plan
        .chains
        .iter()
        .map(|c| (0..c.parallelism).map(|_| TaskOutput::default()).collect())
        .collect();
    let mut inputs: Vec<Vec<Vec<InputChannel>>> = plan
        .chains
        .iter()
        .map(|c| (0..c.parallelism).map(|_| Vec::new()).collect())
        .collect();
    // Channels are numbered in this (deterministic) order in every process.
    let mut channel_id: u32 = 0;
    for (ci, chain) in plan.chains.iter().enumerate() {
        let head = &graph.nodes[chain.nodes[0]];
        if matches!(head.kind, NodeKind::Source(_)) {
            continue;
        }
        for edge in &head.inputs {
            let from_chain = plan.chain_of[edge.from];
            let up_p = plan.chains[from_chain].parallelism;
            let down_p = chain.parallelism;
            #[allow(clippy::needless_range_loop)] // `up` is also the forward target
            for up in 0..up_p {
                let targets: Vec<usize> = match edge.partitioning {
                    Partitioning::Forward => vec![up],
                    _ => (0..down_p).collect(),
                };
                let up_here = place.owns(up);
                let mut senders = Vec::with_capacity(targets.len());
                for down in targets {
                    let id = channel_id;
                    channel_id += 1;
                    let down_here = place.owns(down);
                    let (rx, credit) = match (up_here, down_here) {
                        (true, true) => {
                            let (tx, rx) = bounded(config.channel_capacity, MIN_BUDGET_BYTES);
                            senders.push(OutSender::Channel(tx));
                            (rx, None)
                        }
                        (true, false) => {
                            let to = place.owner(down);
                            let tx = place.plane()?.outbound(to, id);
                            senders.push(OutSender::Remote(Box::new(tx)));
                            continue;
                        }
                        (false, true) => {
                            let from = place.owner(up);
                            let (rx, credit) = place.plane()?.inbound(from, id);
                            (rx, Some(credit))
                        }
                        (false, false) => continue,
                    };
                    inputs[ci][down].push(InputChannel {
                        rx,
                        credit,
                        input: edge.input,
                        ended: false,
                        blocked: false,
                        watermark: i64::MIN,
                        idle: false,
                    });
                }
                if !up_here {
                    continue;
                }
                let consumers = senders.len();
                outputs[from_chain][up].edges.push(OutputEdge {
                    partitioner: Partitioner::new(
                        &head.name,
                        edge.partitioning.clone(),
                        consumers,
                        max_p,
                        up,
                    ),
                    senders,
                    port: edge.port,
                });
            }
        }
    }
    // Feedback edges (FLIP-15): one never-blocking queue per (tail subtask,
    // head subtask) pair; forward when the parallelisms match, else every
    // tail subtask writes to every head subtask round-robin.
    let mut all_queues: Vec<Arc<FeedbackQueue>> = Vec::new();
    let mut head_queues: HashMap<usize, Vec<Vec<Arc<FeedbackQueue>>>> = HashMap::new();
    for l in &graph.loops {
        let head_chain = plan.chain_of[l.head];
        let tail_chain = plan.chain_of[l.tail];
        let head_name = &graph.nodes[l.head].name;
        if plan.chains[head_chain].nodes[0] != l.head
            || plan.chains[tail_chain].nodes.last() != Some(&l.tail)
        {
            return Err(Error::graph(
                head_name,
                "internal: a loop head must start its chain and a loop tail must end its chain",
            ));
        }
        let hp = plan.chains[head_chain].parallelism;
        let tp = plan.chains[tail_chain].parallelism;
        let forward = hp == tp;
        let writers = if forward { 1 } else { tp };
        let spill_dir = l
            .spill_dir
            .clone()
            .unwrap_or_else(|| std::env::temp_dir().join("eddyline-spill"));
        let per_queue = (l.feedback_memory / writers).max(1);
        let queues: Vec<Vec<Arc<FeedbackQueue>>> = (0..hp)
            .map(|h| {
                (0..writers)
                    .map(|w| {
                        let q = Arc::new(FeedbackQueue::new(
                            format!("{head_name} {h} from {}", if forward { h } else { w }),
                            spill_dir.clone(),
                            per_queue,
                        ));
                        all_queues.push(q.clone());
                        q
                    })
                    .collect()
            })
            .collect();
        for (t, out) in outputs[tail_chain].iter_mut().enumerate() {
            let senders: Vec<OutSender> = if forward {
                vec![OutSender::Feedback(queues[t][0].clone())]
            } else {
                (0..hp)
                    .map(|h| OutSender::Feedback(queues[h][t].clone()))
                    .collect()
            };
            let partitioning = if forward {
                Partitioning::Forward
            } else {
                Partitioning::Rebalance
            };
            let consumers = senders.len();
            out.edges.push(OutputEdge {
                partitioner: Partitioner::new(head_name, partitioning, consumers, max_p, t),
                senders,
                port: 0,
            });
        }
        head_queues.insert(l.head, queues);
    }
    // Task ids are assigned chain by chain, subtask by subtask.
    let mut first_task = Vec::with_capacity(n_chains);
    let mut next_task = 0;
    for chain in &plan.chains {
        first_task.push(next_task);
        next_task += chain.parallelism;
    }
    let predecessors = |ci: usize, subtask: usize| -> Vec<usize> {
        let head = &graph.nodes[plan.chains[ci].nodes[0]];
        let mut out = Vec::new();
        for edge in &head.inputs {
            let from_chain = plan.chain_of[edge.from];
            let up_p = plan.chains[from_chain].parallelism;
            if edge.partitioning == Partitioning::Forward {
                out.push(first_task[from_chain] + subtask);
            } else {
                out.extend((0..up_p).map(|u| first_task[from_chain] + u));
            }
        }
        out.sort_unstable();
        out.dedup();
        out
    };
    let (report_tx, report_rx) = unbounded();
    let mut controls = Vec::new();
    let mut tasks = Vec::new();
    let mut infos = Vec::new();
    for ci in 0..n_chains {
        let chain = &plan.chains[ci];
        let p = chain.parallelism;
        let mut chain_outputs = std::mem::take(&mut outputs[ci]).into_iter();
        let mut chain_inputs = std::mem::take(&mut inputs[ci]).into_iter();
        for subtask in 0..p {
            let head_node = &graph.nodes[chain.nodes[0]];
            let info = TaskInfo {
                name: chain
                    .nodes
                    .iter()
                    .map(|n| graph.nodes[*n].name.as_str())
                    .collect::<Vec<_>>()
                    .join(" -> "),
                nodes: chain.nodes.clone(),
                subtask,
                is_source: matches!(head_node.kind, NodeKind::Source(_)),
                loop_head: graph.loop_with_head(chain.nodes[0]).is_some(),
                predecessors: predecessors(ci, subtask),
            };
            let task_output = chain_outputs.next().unwrap_or_default();
            let task_inputs: Vec<InputChannel> = chain_inputs.next().unwrap_or_default();
            if !place.owns(subtask) {
                controls.push(ControlPort::Absent);
                infos.push(info);
                continue;
            }
            let ctx_of = |node: usize| OperatorContext {
                name: graph.nodes[node].name.clone(),
                uid: graph.nodes[node].uid.clone(),
                subtask_index: subtask,
                parallelism: p,
                max_parallelism: max_p,
                key_groups: key_group_range(subtask, p, max_p),
                attempt,
            };
            let mut source = None;
            let mut source_context = None;
            let mut ops = Vec::new();
            let mut slots = Vec::new();
            let mut contexts = Vec::new();
            let mut node_ids = Vec::new();
            let mut restore = TaskRestore {
                finished: restored.is_some_and(|rc| all_finished(rc, graph, &chain.nodes))
                    && !recompute.replays_chain(graph, &chain.nodes),
                ..TaskRestore::default()
            };
            for &node_id in &chain.nodes {
                let node = &graph.nodes[node_id];
                let ctx = ctx_of(node_id);
                let slot = OpSlot {
                    name: Arc::from(node.name.as_str()),
                    metrics: shared.metrics.nodes[node_id].2.clone(),
                    schema: node.output_schema.clone(),
                    late: 0,
                    replay_drop: false,
                };
                let state = match restored {
                    Some(rc) => state_for(rc, graph, node, subtask, p, ctx.key_groups.clone())?,
                    None => None,
                };
                match &node.kind {
                    NodeKind::Source(f) => {
                        let reader = f
                            .create(&ctx, config.batch_size)
                            .map_err(|e| e.in_operator(&node.name))?;
                        source = Some(SourceHead {
                            reader,
                            slot,
                            node: node_id,
                            sized: config.checkpoint.as_ref().is_none_or(|c| {
                                c.recovery != crate::checkpoint::recompute::Recovery::Recompute
                            }),
                            row_bytes: 0,
                        });
                        source_context = Some(ctx);
                        restore.source_offset = match recompute.source_start(&node.uid, subtask) {
                            Some(start) => start,
                            None => state
                                .and_then(|s| s.operator)
                                .and_then(|b| b.as_bytes().map(<[u8]>::to_vec)),
                        };
                    }
                    NodeKind::Operator(f) => {
                        ops.push(f.create(&ctx).map_err(|e| e.in_operator(&node.name))?);
                        slots.push(slot);
                        contexts.push(ctx);
                        node_ids.push(node_id);
                        restore.states.push(state);
                    }
                }
            }
            let (ctl_tx, ctl_rx) = unbounded();
            controls.push(ControlPort::Local(ctl_tx));
            let loop_head = match graph.loop_with_head(chain.nodes[0]) {
                Some(l) => {
                    let queues = head_queues
                        .get(&l.head)
                        .and_then(|q| q.get(subtask))
                        .cloned()
                        .unwrap_or_default();
                    Some(Box::new(LoopHead::new(
                        l.id,
                        Arc::from(head_node.name.as_str()),
                        queues,
                        l.priority,
                        l.co,
                        task_inputs.len(),
                        l.feedback_memory,
                        l.spill_dir
                            .clone()
                            .unwrap_or_else(|| std::env::temp_dir().join("eddyline-spill")),
                        shared.metrics.nodes[l.head].2.clone(),
                    )))
                }
                None => None,
            };
            let body_term = (!head_node.scope.is_root() && loop_head.is_none())
                .then(|| BodyTermination::new(task_inputs.len()));
            let id = infos.len();
            infos.push(info);
            tasks.push(Task {
                id,
                source,
                source_context,
                ops,
                slots,
                contexts,
                aligner: BarrierAligner::new(task_inputs.len(), mode),
                inputs: task_inputs,
                num_logical_inputs: graph.num_inputs(chain.nodes[0]).max(1),
                output: task_output,
                control: ctl_rx,
                reports: report_tx.clone(),
                recompute: recompute.for_task(graph, &chain.nodes, &node_ids, subtask),
                node_ids,
                restore,
                scope: head_node.scope.loop_path(),
                body_term,
                loop_head,
                flow: std::cell::RefCell::new(InputFlow::new(flow_policy, Instant::now())),
            });
        }
    }
    drop(report_tx);
    let mut threads = Vec::new();
    for task in tasks {
        let name = format!("eddyline-task-{}", task.id);
        match std::thread::Builder::new()
            .name(name)
            .spawn(move || task.run())
        {
            Ok(h) => threads.push(h),
            Err(e) => {
                let run = Attempt {
                    controls,
                    threads,
                    reports: report_rx,
                    tasks: infos,
                    queues: all_queues,
                    remote: None,
                    announced: std::cell::Cell::new(0),
                };
                run.cancel_and_join();
                return Err(Error::runtime(format!("cannot start a task thread: {e}")));
            }
        }
    }
    Ok(Attempt {
        controls,
        threads,
        reports: report_rx,
        tasks: infos,
        queues: all_queues,
        remote: None,
        announced: std::cell::Cell::new(0),
    })
}
