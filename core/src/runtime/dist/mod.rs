//! Running one job's subtasks in several worker processes.
//!
//! Subtask `s` of every chain runs in worker `s % workers`, so forward
//! edges stay inside a process and only repartitioning edges cross the data
//! plane ([`crate::net::data`]). The driver keeps the checkpoint
//! coordinator and the supervision loop of [`crate::runtime::job`]
//! unchanged: its control messages go to the owning worker over an
//! authenticated connection, and the workers' task reports (with their
//! snapshot bytes), metric deltas and collect-sink operations come back on
//! it. A worker that exits or loses its connection fails the attempt; the
//! driver then stops every worker and starts a new attempt from the latest
//! completed checkpoint (flink-fault-tolerance-mechanism.txt, "recovery").
//!
//! How workers are started is the front end's business ([`Launcher`]):
//! local processes for `ProcessRunner`, Spark barrier tasks for
//! `SparkRunner`.
//!
//! The driver side is in [`driver`], the worker side in [`worker`]; what
//! both use (how workers are launched, the metric fields) is here.

pub(crate) mod driver;
pub(crate) mod worker;

pub use worker::WorkerSession;

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::runtime::metrics::{OperatorMetrics, SubtaskMetricsSnapshot};
use crate::sink::collect::CollectStore;

/// Starts and stops the worker processes of a distributed job.
pub trait Launcher: Send {
    /// Starts the `workers` workers of `attempt`; each connects to `driver`
    /// and proves it knows `secret` (hex).
    fn launch(&mut self, attempt: u64, workers: usize, driver: &str, secret: &str) -> Result<()>;
    /// An error once the launched workers cannot all come up (a process
    /// exited, the cluster gave up).
    fn check(&mut self) -> Result<()>;
    /// Stops whatever the last launch started and waits for it.
    fn stop(&mut self);
}

/// How a job runs distributed.
pub struct Distribution {
    pub workers: usize,
    pub launcher: Box<dyn Launcher>,
    /// The job as the front end serialized it; workers rebuild the graph
    /// from it (opaque to the core).
    pub spec: Arc<Vec<u8>>,
    /// The driver's collect stores (workers forward to them).
    pub collect_stores: HashMap<usize, Arc<CollectStore>>,
    /// The address the driver listens on for its workers.
    pub bind: String,
    /// How long the workers of an attempt may take to connect.
    pub start_timeout: Duration,
}

fn net_err(what: &str, e: impl std::fmt::Display) -> Error {
    Error::runtime(format!("{what}: {e}"))
}

const METRIC_FIELDS: usize = 7;

fn metric_values(m: &OperatorMetrics) -> [u64; METRIC_FIELDS] {
    [
        m.records_in.load(Ordering::Relaxed),
        m.records_out.load(Ordering::Relaxed),
        m.batches_in.load(Ordering::Relaxed),
        m.batches_out.load(Ordering::Relaxed),
        m.late_records.load(Ordering::Relaxed),
        m.spilled_bytes.load(Ordering::Relaxed),
        m.spill_files.load(Ordering::Relaxed),
    ]
}

/// What a worker last sent of one operator's counters: its metric frames
/// carry the deltas since (and each changed subtask's watermark).
#[derive(Debug, Clone, Default)]
struct SentMetrics {
    op: [u64; METRIC_FIELDS],
    subtasks: Vec<SubtaskMetricsSnapshot>,
}

/// The subtask fields a metric frame carries as deltas.
fn subtask_values(s: &SubtaskMetricsSnapshot) -> [u64; 5] {
    [
        s.records_in,
        s.records_out,
        s.busy_ns,
        s.backpressured_ns,
        s.idle_ns,
    ]
}
