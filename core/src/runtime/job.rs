//! Job supervision: starts every subtask of an attempt, watches their
//! reports, drives the end-of-job commit, and on a failure cancels the
//! attempt and restarts it according to the restart strategy
//! (flink-fault-tolerance-mechanism.txt, "recovery").

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{select, unbounded, Receiver, Sender};
use parking_lot::Mutex;

use crate::barrier::AlignmentMode;
use crate::checkpoint::coordinator::{Coordinator, Outgoing, Request, Waiter};
use crate::checkpoint::restore::{agreed_schema, check_compatible};
use crate::checkpoint::{CheckpointConfig, CheckpointDone, CheckpointFailure, CheckpointStats};
use crate::checkpoint::{CheckpointStorage, RestoredCheckpoint};
use crate::error::{Error, Result};
use crate::graph::JobGraph;
use crate::runtime::config::{JobConfig, RestoreFrom};
use crate::runtime::dist::driver::DistDriver;
use crate::runtime::dist::Distribution;
use crate::runtime::metrics::MetricsSnapshot;
use crate::runtime::plan::Plan;
use crate::runtime::replay::AttemptRecompute;
use crate::runtime::spawn::{build_attempt, check_distributable, Attempt, ControlPort, Placement};
use crate::runtime::status::{JobOutcome, JobStatus, Shared};
use crate::runtime::task::{Control, TaskReport};

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
                shared.schemas.clone(),
            )?),
            None => None,
        };
        let restored = match &config.restore_from {
            None => None,
            Some(RestoreFrom::Path(p)) => {
                let options = CheckpointConfig::storage_options_of(config.checkpoint.as_ref());
                let rc = CheckpointStorage::load_path_with(p, &options)?;
                if !config.allow_duplicate_output {
                    check_no_recommit(&rc, &config.external_sinks)?;
                }
                Some(rc)
            }
            Some(RestoreFrom::Latest) => match &coordinator {
                Some(c) => {
                    let sinks: &[String] = if config.allow_duplicate_output {
                        &[]
                    } else {
                        &config.external_sinks
                    };
                    latest_restorable(c.storage(), sinks)?
                }
                None => return Err(Error::checkpoint(
                    None,
                    "restore_from=\"latest\" needs a checkpoint configuration (the dir to look in)",
                )),
            },
        };
        if let Some(rc) = &restored {
            check_compatible(rc, &graph, config.allow_non_restored_state)?;
            // The restored job keeps the output schemas its operators agreed
            // on (DESIGN.md "One schema per operator").
            for node in &graph.nodes {
                if let Some(s) = agreed_schema(rc, &graph, node) {
                    shared.schemas.preset(node.id, s);
                }
            }
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
            // The status is terminal: the driver recorded the outcome (and
            // its cause) before it returned; the join only reaps the thread.
            let _ = h.join();
        }
        true
    }

    /// Asks the job to stop; it ends with status `Cancelled`.
    pub fn cancel(&self) {
        // No receiver: the driver returned, the job has ended already.
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

    /// How many deletions of old checkpoints (retention) failed; the job
    /// went on.
    pub fn retention_failures(&self) -> u64 {
        self.shared.failed_checkpoints.retention_failures()
    }

    /// The latest failed retention deletions, each naming the path and
    /// the cause, oldest first.
    pub fn retention_errors(&self) -> Vec<String> {
        self.shared.failed_checkpoints.retention_errors()
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

    /// Every restart so far with its cause, oldest first.
    pub fn restart_causes(&self) -> Vec<crate::runtime::RestartCause> {
        self.shared.restart_causes.lock().clone()
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
/// be committed twice, so this refuses and says why). With
/// `allow_duplicate_output` the caller passes no sinks.
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
                let later: Vec<u64> = skipped.iter().rev().map(|(id, _)| *id).collect();
                return Err(Error::checkpoint(
                    Some(storage.dir().to_path_buf()),
                    format!(
                        "the newest checkpoint {newest} cannot be restored ({err}); falling back to \
                         checkpoint {} would commit the output of checkpoint(s) {} a second time \
                         through sink(s) {}; {}",
                        rc.id(),
                        show_ids(&later),
                        show_names(external_sinks),
                        RECOMMIT_ADVICE
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

/// What a user can do when only an older checkpoint can be restored and
/// sinks committed output after it (DESIGN.md "Checkpoints": eddyline never
/// falls back in a way that commits output twice).
const RECOMMIT_ADVICE: &str = "repair the damaged checkpoint (put back an intact copy of the \
     file) and restore 'latest' again; or, once the output those checkpoints committed has been \
     removed from the sinks, pass allow_duplicate_output=True to fall back";

/// Refuses an explicit restore of a checkpoint when later checkpoints of the
/// same checkpoint directory completed and the job has sinks that commit
/// outside the process: each later checkpoint committed its output, and a
/// run from the older one would commit that output again (its transactions
/// get new checkpoint ids, so no sink can recognise them). Savepoints are
/// taken on purpose and restored on purpose; they are not checked.
fn check_no_recommit(rc: &RestoredCheckpoint, external_sinks: &[String]) -> Result<()> {
    if external_sinks.is_empty() || rc.manifest().kind != crate::event::BarrierKind::Checkpoint {
        return Ok(());
    }
    let Some(storage) = rc.parent_storage() else {
        return Ok(());
    };
    let mut later: Vec<u64> = storage
        .list()?
        .iter()
        .map(|s| s.id)
        .filter(|id| *id > rc.id())
        .collect();
    if later.is_empty() {
        return Ok(());
    }
    later.sort_unstable();
    Err(Error::checkpoint(
        Some(rc.dir().to_path_buf()),
        format!(
            "checkpoint {} is not the newest of '{}': the later checkpoint(s) {} completed and \
             committed their output, and restoring {} would commit that output a second time \
             through sink(s) {}; restore the newest checkpoint (restore_from='latest'), or, once \
             the output of checkpoint(s) {} has been removed from the sinks, pass \
             allow_duplicate_output=True",
            rc.id(),
            storage.dir().display(),
            show_ids(&later),
            rc.id(),
            show_names(external_sinks),
            show_ids(&later),
        ),
    ))
}

/// `13, 14 and 15`; a long run of ids as `13..=40 (28 checkpoints)`.
fn show_ids(ids: &[u64]) -> String {
    match ids {
        [] => String::new(),
        [one] => one.to_string(),
        [first, .., last] if ids.len() > 4 => {
            format!("{first} to {last} ({} checkpoints)", ids.len())
        }
        [init @ .., last] => format!(
            "{} and {last}",
            init.iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// `'files', 'table'`.
fn show_names(names: &[String]) -> String {
    names
        .iter()
        .map(|n| format!("'{n}'"))
        .collect::<Vec<_>>()
        .join(", ")
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
    let mut attempt: u32 = 0;
    loop {
        // Each attempt chains for the checkpoint it restores (an operator
        // with restored channel state keeps its input channels), as the
        // workers of a distributed run do for the same checkpoint.
        let plan = Plan::for_restore(&graph, restored.as_ref());
        let job = JobContext {
            graph: &graph,
            plan: &plan,
            config: &config,
            shared: &shared,
            driver_rx: &driver_rx,
        };
        let outcome = run_attempt(
            &job,
            attempt,
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
            Err(e) => {
                shared.record_restart(attempt, &e);
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

/// What one attempt of the supervision loop reads (the job, not the attempt).
struct JobContext<'a> {
    graph: &'a JobGraph,
    plan: &'a Plan,
    config: &'a JobConfig,
    shared: &'a Shared,
    driver_rx: &'a Receiver<DriverMsg>,
}

/// Runs one attempt to its end: starts its tasks (here or in the workers),
/// relays reports, checkpoints and requests until every task closed, and on
/// a failure returns the failure's root cause.
fn run_attempt(
    job: &JobContext<'_>,
    attempt: u32,
    mut coordinator: Option<&mut Coordinator>,
    restored: Option<RestoredCheckpoint>,
    mut dist: Option<&mut DistDriver>,
) -> Result<()> {
    let mut run = start_attempt(
        job,
        attempt,
        coordinator.as_deref_mut(),
        restored,
        dist.as_deref_mut(),
    )?;
    let (first_error, user_cancel) = supervise(job, &mut run, coordinator.as_deref_mut());
    if let Some(err) = first_error {
        let mut out = Vec::new();
        if let Some(c) = coordinator {
            c.abort_inflight("a task failed", &mut out);
        }
        return Err(root_cause(err, user_cancel, run, dist));
    }
    if let (Some(d), Some(r)) = (dist, run.remote.take()) {
        d.end_attempt(r, false);
    }
    run.join_local()
}

/// Builds the attempt's tasks and starts them: on this process's threads, or
/// (a distributed job) in the workers, whose links then carry the controls.
fn start_attempt(
    job: &JobContext<'_>,
    attempt: u32,
    coordinator: Option<&mut Coordinator>,
    restored: Option<RestoredCheckpoint>,
    dist: Option<&mut DistDriver>,
) -> Result<Attempt> {
    let mode = coordinator
        .as_ref()
        .map(|c| c.mode())
        .unwrap_or(AlignmentMode::ExactlyOnce);
    let recovery = coordinator
        .as_ref()
        .map(|c| c.recovery())
        .unwrap_or_default();
    let recompute = AttemptRecompute::prepare(job.graph, recovery, restored.as_ref())?;
    if let Some(c) = coordinator {
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
        job.graph,
        job.plan,
        job.config,
        job.shared,
        attempt,
        mode,
        restored.as_ref(),
        &recompute,
        &mut place,
    )?;
    if let Some(d) = dist {
        let metrics = job
            .shared
            .metrics
            .nodes
            .iter()
            .map(|n| n.2.clone())
            .collect();
        let cancelled = || match job.driver_rx.try_recv() {
            Ok(DriverMsg::Cancel) => true,
            Ok(DriverMsg::Request(_, reply)) => {
                // No receiver: the caller stopped waiting for the answer.
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
            &job.shared.schemas,
            &cancelled,
        )?;
        let n = d.dist.workers;
        for (t, info) in run.tasks.iter().enumerate() {
            run.controls[t] = ControlPort::Remote(remote.links[info.subtask % n].clone(), t);
        }
        run.reports = remote.reports.clone();
        run.remote = Some(remote);
    }
    Ok(run)
}

/// The supervision loop of one attempt: until every task closed, or a task
/// failed or the user cancelled (the error and whether the user cancelled).
fn supervise(
    job: &JobContext<'_>,
    run: &mut Attempt,
    mut coordinator: Option<&mut Coordinator>,
) -> (Option<Error>, bool) {
    let total = run.controls.len();
    let mut finished = vec![false; total];
    let mut closed = 0usize;
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
                Ok(TaskReport::Closed { .. }) => closed += 1,
                Ok(TaskReport::Failed { error, .. }) => return (Some(error), false),
                Ok(report) => {
                    on_report(job, run, coordinator.as_deref_mut(), report, &mut finished, &mut out)
                }
                Err(_) => break,
            },
            recv(done_rx.as_ref().unwrap_or(&never)) -> msg => {
                if let (Ok(done), Some(c)) = (msg, coordinator.as_deref_mut()) {
                    c.on_write_done(job.graph, &run.tasks, done, &mut out);
                }
            },
            recv(job.driver_rx) -> msg => match msg {
                Ok(DriverMsg::Cancel) | Err(_) => return (Some(Error::Cancelled), true),
                Ok(DriverMsg::Request(req, reply)) => match coordinator.as_deref_mut() {
                    Some(c) => c.request(req, Some(reply), &run.tasks, &finished, &mut out),
                    None => {
                        // No receiver: the caller stopped waiting for the answer.
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
    (None, false)
}

/// A task finished its input, or acknowledged a checkpoint.
fn on_report(
    job: &JobContext<'_>,
    run: &Attempt,
    coordinator: Option<&mut Coordinator>,
    report: TaskReport,
    finished: &mut [bool],
    out: &mut Vec<Outgoing>,
) {
    match report {
        TaskReport::Finished { task } => {
            finished[task] = true;
            match coordinator {
                Some(c) => c.on_task_finished(task, &run.tasks, finished, out),
                None if finished.iter().all(|f| *f) => {
                    for ctl in &run.controls {
                        ctl.send(Control::Finalize {
                            commit_end_of_job: true,
                        });
                    }
                }
                None => {}
            }
        }
        TaskReport::Snapshot {
            task,
            checkpoint,
            states,
            alignment,
            finished: fin,
            channels,
        } => {
            if let Some(c) = coordinator {
                let tasks = &run.tasks;
                c.on_snapshot(
                    job.graph, tasks, task, checkpoint, states, alignment, fin, channels, out,
                );
            }
        }
        TaskReport::Closed { .. } | TaskReport::Failed { .. } => {}
    }
}

/// Stops a failed attempt and finds the failure's root cause, preferring it
/// over the cancellations it triggered.
fn root_cause(
    err: Error,
    user_cancel: bool,
    mut run: Attempt,
    dist: Option<&mut DistDriver>,
) -> Error {
    let mut root = err;
    let reports = run.reports.clone();
    let remote = run.remote.take();
    if let (Some(d), Some(r)) = (dist, remote) {
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
    root
}
