//! Job-wide settings: the restart strategy, where a job restores from, and
//! the channel and checkpoint options (DESIGN.md "Runtime").

use std::time::Duration;

use crate::channel::{DEFAULT_CHANNEL_CAPACITY, DEFAULT_IN_FLIGHT_TARGET};
use crate::checkpoint::CheckpointConfig;

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
    /// Restore a checkpoint older than checkpoints that already committed
    /// output through external sinks (their output is committed again).
    pub allow_duplicate_output: bool,
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
            allow_duplicate_output: false,
        }
    }
}
