//! The runtime: expands a [`crate::graph::JobGraph`] into chains of
//! operators, runs one thread per parallel subtask of each chain, connects
//! them with bounded channels, and supervises the job (failure, restart,
//! cancellation, final commit).

pub mod config;
pub mod dist;
pub mod job;
pub mod metrics;
pub mod plan;
pub(crate) mod replay;
pub(crate) mod spawn;
pub mod status;
pub(crate) mod task;

pub use config::{JobConfig, RestartStrategy, RestoreFrom};
pub use dist::{Distribution, Launcher, WorkerSession};
pub use job::JobHandle;
pub use metrics::{
    MetricsSnapshot, OperatorMetrics, OperatorMetricsSnapshot, SubtaskMetrics,
    SubtaskMetricsSnapshot,
};
pub use status::{JobOutcome, JobStatus, RestartCause};
