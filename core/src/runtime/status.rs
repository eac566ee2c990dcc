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

    pub(crate) fn set_status(&self, status: JobStatus, error: Option<Error>) {
        let mut g = self.status.lock();
        if status.is_terminal() {
            *self.ended.lock() = Some(Instant::now());
        }
        *g = (status, error);
        self.changed.notify_all();
    }

    pub(crate) fn wall_time(&self) -> f64 {
        let end = self.ended.lock().unwrap_or_else(Instant::now);
        (end - self.started).as_secs_f64()
    }
}
