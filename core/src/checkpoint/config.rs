//! How and where a job checkpoints (DESIGN.md "Checkpoints"; the Python
//! API's `enable_checkpointing` options).

use std::path::PathBuf;
use std::time::Duration;

use crate::barrier::AlignmentMode;
use crate::checkpoint::recompute::Recovery;
use crate::store::StorageOptions;

/// How and where a job checkpoints.
#[derive(Debug, Clone)]
pub struct CheckpointConfig {
    pub dir: PathBuf,
    pub interval: Duration,
    pub mode: AlignmentMode,
    pub unaligned: bool,
    /// Write only the key groups changed since the last completed
    /// checkpoint; manifests share unchanged ones by reference
    /// (`checkpoint/incremental.rs`). Savepoints stay full.
    pub incremental: bool,
    /// How many completed checkpoints to keep.
    pub retained: usize,
    /// A checkpoint not completed after this long is aborted.
    pub timeout: Duration,
    /// Persist every operator's state, or recompute what can be (FLINK-4120).
    pub recovery: Recovery,
    /// Options of the object store `dir` (and savepoint or restore paths)
    /// lie on, over the standard environment variables (`store.rs`).
    pub storage_options: StorageOptions,
}

impl CheckpointConfig {
    /// The storage options of `config` (none without checkpointing): what
    /// a restore path is opened with.
    pub fn storage_options_of(config: Option<&CheckpointConfig>) -> StorageOptions {
        config
            .map(|c| c.storage_options.clone())
            .unwrap_or_default()
    }

    /// Defaults for `dir`: every second, exactly-once, 3 retained, 10 min timeout.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        CheckpointConfig {
            dir: dir.into(),
            interval: Duration::from_secs(1),
            mode: AlignmentMode::ExactlyOnce,
            unaligned: false,
            incremental: false,
            retained: 3,
            timeout: Duration::from_secs(600),
            recovery: Recovery::Latest,
            storage_options: StorageOptions::new(),
        }
    }
}
