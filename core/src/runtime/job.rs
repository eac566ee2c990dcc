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

use crate::channel::{bounded, DEFAULT_CHANNEL_CAPACITY};
use crate::error::{Error, Result};
use crate::graph::{JobGraph, NodeKind};
use crate::keygroup::key_group_range;
use crate::operator::OperatorContext;
use crate::partition::{Partitioner, Partitioning};
use crate::runtime::metrics::{JobMetrics, MetricsSnapshot, OperatorMetrics};
use crate::runtime::plan::Plan;
use crate::runtime::task::{
    Control, InputChannel, OpSlot, OutputEdge, SourceHead, Task, TaskOutput, TaskReport,
};

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

/// Job-wide settings.
#[derive(Debug, Clone)]
pub struct JobConfig {
    pub name: String,
    pub batch_size: usize,
    pub channel_capacity: usize,
    pub restart: RestartStrategy,
}

impl Default for JobConfig {
    fn default() -> Self {
        JobConfig {
            name: "job".into(),
            batch_size: 8192,
            channel_capacity: DEFAULT_CHANNEL_CAPACITY,
            restart: RestartStrategy::none(),
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

struct Shared {
    status: Mutex<(JobStatus, Option<Error>)>,
    changed: Condvar,
    restarts: AtomicU32,
    metrics: JobMetrics,
    started: Instant,
    ended: Mutex<Option<Instant>>,
}

impl Shared {
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
        graph.validate()?;
        let metrics = JobMetrics {
            nodes: graph
                .nodes
                .iter()
                .map(|n| (n.name.clone(), n.role, Arc::new(OperatorMetrics::default())))
                .collect(),
        };
        let shared = Arc::new(Shared {
            status: Mutex::new((JobStatus::Running, None)),
            changed: Condvar::new(),
            restarts: AtomicU32::new(0),
            metrics,
            started: Instant::now(),
            ended: Mutex::new(None),
        });
        let (driver_tx, driver_rx) = unbounded();
        let s = shared.clone();
        let driver = std::thread::Builder::new()
            .name(format!("eddyline-{}", config.name))
            .spawn(move || drive(graph, config, s, driver_rx))
            .map_err(|e| {
                Error::operator("", format!("cannot start the job's driver thread: {e}"))
            })?;
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

fn drive(graph: JobGraph, config: JobConfig, shared: Arc<Shared>, driver_rx: Receiver<DriverMsg>) {
    let plan = Plan::new(&graph);
    let mut attempt: u32 = 0;
    loop {
        let outcome = run_attempt(&graph, &plan, &config, &shared, attempt, &driver_rx);
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
                shared.set_status(JobStatus::Running, None);
            }
        }
    }
}

struct Attempt {
    controls: Vec<Sender<Control>>,
    threads: Vec<JoinHandle<()>>,
    reports: Receiver<TaskReport>,
}

impl Attempt {
    fn cancel_and_join(self) {
        for c in &self.controls {
            let _ = c.send(Control::Cancel);
        }
        drop(self.controls);
        for t in self.threads {
            let _ = t.join();
        }
    }
}

fn run_attempt(
    graph: &JobGraph,
    plan: &Plan,
    config: &JobConfig,
    shared: &Shared,
    attempt: u32,
    driver_rx: &Receiver<DriverMsg>,
) -> Result<()> {
    let run = build_attempt(graph, plan, config, shared, attempt)?;
    let total = run.controls.len();
    let mut finished = vec![false; total];
    let mut closed = 0usize;
    let mut first_error: Option<Error> = None;
    while closed < total {
        select! {
            recv(run.reports) -> msg => match msg {
                Ok(TaskReport::Finished { task }) => {
                    finished[task] = true;
                    if finished.iter().all(|f| *f) {
                        for c in &run.controls {
                            let _ = c.send(Control::CommitFinal);
                        }
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
            recv(driver_rx) -> msg => {
                if let Ok(DriverMsg::Cancel) = msg {
                    first_error = Some(Error::Cancelled);
                    break;
                }
            }
        }
    }
    if let Some(err) = first_error {
        // Prefer the root cause over the cancellations it triggered.
        let mut root = err;
        let reports = run.reports.clone();
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
    for t in run.threads {
        let _ = t.join();
    }
    Ok(())
}

fn build_attempt(
    graph: &JobGraph,
    plan: &Plan,
    config: &JobConfig,
    shared: &Shared,
    attempt: u32,
) -> Result<Attempt> {
    let max_p = graph.max_parallelism;
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
                let mut senders = Vec::with_capacity(targets.len());
                for down in targets {
                    let (tx, rx) = bounded(config.channel_capacity);
                    senders.push(tx);
                    inputs[ci][down].push(InputChannel {
                        rx,
                        input: edge.input,
                        ended: false,
                        watermark: i64::MIN,
                    });
                }
                let consumers = senders.len();
                outputs[from_chain][up].edges.push(OutputEdge {
                    partitioner: Partitioner::new(edge.partitioning.clone(), consumers, max_p, up),
                    senders,
                });
            }
        }
    }
    let (report_tx, report_rx) = unbounded();
    let mut controls = Vec::new();
    let mut tasks = Vec::new();
    for ci in 0..n_chains {
        let chain = &plan.chains[ci];
        let p = chain.parallelism;
        let mut chain_outputs = std::mem::take(&mut outputs[ci]).into_iter();
        let mut chain_inputs = std::mem::take(&mut inputs[ci]).into_iter();
        for subtask in 0..p {
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
            for &node_id in &chain.nodes {
                let node = &graph.nodes[node_id];
                let ctx = ctx_of(node_id);
                let slot = OpSlot {
                    name: Arc::from(node.name.as_str()),
                    metrics: shared.metrics.nodes[node_id].2.clone(),
                    schema: node.output_schema.clone(),
                };
                match &node.kind {
                    NodeKind::Source(f) => {
                        let reader = f
                            .create(&ctx, config.batch_size)
                            .map_err(|e| e.in_operator(&node.name))?;
                        source = Some(SourceHead { reader, slot });
                        source_context = Some(ctx);
                    }
                    NodeKind::Operator(f) => {
                        ops.push(f.create(&ctx).map_err(|e| e.in_operator(&node.name))?);
                        slots.push(slot);
                        contexts.push(ctx);
                    }
                }
            }
            let (ctl_tx, ctl_rx) = unbounded();
            controls.push(ctl_tx);
            tasks.push(Task {
                id: tasks.len(),
                source,
                source_context,
                ops,
                slots,
                contexts,
                inputs: chain_inputs.next().unwrap_or_default(),
                num_logical_inputs: graph.num_inputs(chain.nodes[0]).max(1),
                output: chain_outputs.next().unwrap_or_default(),
                control: ctl_rx,
                reports: report_tx.clone(),
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
                };
                run.cancel_and_join();
                return Err(Error::operator(
                    "",
                    format!("cannot start a task thread: {e}"),
                ));
            }
        }
    }
    Ok(Attempt {
        controls,
        threads,
        reports: report_rx,
    })
}
