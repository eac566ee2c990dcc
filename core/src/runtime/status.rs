//! Where a job is in its life, what it reports when it ends, and the state
//! its handle, its supervisor and (on a worker) its tasks share.

use std::sync::atomic::AtomicU32;
use std::sync::Arc;
use std::time::Instant;

use parking_lot::{Condvar, Mutex};

use crate::checkpoint::{CheckpointFailures, CheckpointStats};
use crate::error::Error;
use crate::graph::JobGraph;
use crate::runtime::metrics::{JobMetrics, MetricsSnapshot, OperatorMetrics};

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
    pub(crate) status: Mutex<(JobStatus, Option<Error>)>,
    pub(crate) changed: Condvar,
    pub(crate) restarts: AtomicU32,
    pub(crate) metrics: JobMetrics,
    pub(crate) started: Instant,
    pub(crate) ended: Mutex<Option<Instant>>,
    pub(crate) checkpoints: Arc<Mutex<Vec<CheckpointStats>>>,
    pub(crate) failed_checkpoints: Arc<CheckpointFailures>,
    /// Every restart so far: when and why (the failure that caused it).
    pub(crate) restart_causes: Mutex<Vec<RestartCause>>,
    /// The agreed output schema of each node (DESIGN.md "One schema per
    /// operator"); a worker process replaces it with a remote board.
    pub(crate) schemas: Arc<crate::schemas::SchemaBoard>,
}

/// One restart of a job after a failure.
#[derive(Debug, Clone)]
pub struct RestartCause {
    /// The attempt that failed (0 is the first run).
    pub attempt: u32,
    /// When it failed, in milliseconds since the epoch.
    pub time_ms: u64,
    /// The failure, as its message.
    pub cause: String,
}

impl Shared {
    /// Fresh status and counters for the nodes of `graph`.
    pub(crate) fn new(graph: &JobGraph) -> Shared {
        let metrics = JobMetrics {
            nodes: graph
                .nodes
                .iter()
                .map(|n| {
                    let m = OperatorMetrics::new(n.parallelism);
                    (n.name.clone(), n.role, Arc::new(m))
                })
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
            restart_causes: Mutex::new(Vec::new()),
            schemas: Arc::default(),
        }
    }

    pub(crate) fn set_status(&self, status: JobStatus, error: Option<Error>) {
        let mut g = self.status.lock();
        if status.is_terminal() {
            *self.ended.lock() = Some(Instant::now());
        }
        *g = (status, error);
        self.changed.notify_all();
    }

    /// Records that attempt `attempt` failed with `cause` and restarts.
    pub(crate) fn record_restart(&self, attempt: u32, cause: &Error) {
        let time_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        self.restart_causes.lock().push(RestartCause {
            attempt,
            time_ms,
            cause: cause.to_string(),
        });
    }

    pub(crate) fn wall_time(&self) -> f64 {
        let end = self.ended.lock().unwrap_or_else(Instant::now);
        (end - self.started).as_secs_f64()
    }
}
