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
    /// With `unaligned`: start each checkpoint aligned and switch a task to
    /// unaligned when its alignment takes longer than this (Flink's
    /// `aligned-checkpoint-timeout`); `None`: unaligned from the start.
    pub aligned_timeout: Option<Duration>,
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
    /// Whether the barriers of a checkpoint of `kind` start aligned.
    /// Savepoints are always aligned (as in Flink): they hold no channel
    /// state, so they restore at any parallelism. With an aligned timeout,
    /// barriers start aligned and tasks switch to unaligned when the
    /// checkpoint takes longer (`runtime/task/unaligned.rs`).
    pub fn starts_aligned(&self, kind: crate::event::BarrierKind) -> bool {
        !self.unaligned
            || self.aligned_timeout.is_some()
            || kind == crate::event::BarrierKind::Savepoint
    }

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
            aligned_timeout: None,
            retained: 3,
            timeout: Duration::from_secs(600),
            recovery: Recovery::Latest,
            storage_options: StorageOptions::new(),
        }
    }
}
