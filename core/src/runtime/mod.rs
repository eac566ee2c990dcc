//! The runtime: expands a [`crate::graph::JobGraph`] into chains of
//! operators, runs one thread per parallel subtask of each chain, connects
//! them with bounded channels, and supervises the job (failure, restart,
//! cancellation, final commit).

pub mod dist;
pub mod job;
pub(crate) mod loop_head;
pub mod metrics;
pub mod plan;
pub(crate) mod replay;
pub(crate) mod task;

pub use dist::{Distribution, Launcher, WorkerSession};
pub use job::{JobConfig, JobHandle, JobOutcome, JobStatus, RestartStrategy, RestoreFrom};
pub use metrics::{MetricsSnapshot, OperatorMetrics, OperatorMetricsSnapshot};
