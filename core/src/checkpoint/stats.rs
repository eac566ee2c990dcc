//! What a job reports of its checkpoints: the figures of each completed one,
//! the causes of failed ones, and what a waiter hears on completion
//! (DESIGN.md "Checkpoints"; `JobResult.checkpoints` and
//! `checkpoint_failures` in the Python API).

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;

use crate::event::BarrierKind;

/// Figures of one completed checkpoint.
#[derive(Debug, Clone)]
pub struct CheckpointStats {
    pub id: u64,
    pub kind: BarrierKind,
    pub trigger_ms: u64,
    pub duration: Duration,
    /// The longest barrier alignment of any task.
    pub alignment: Duration,
    /// Bytes of the state files written for it.
    pub bytes: u64,
    /// Bytes of its whole state: what it wrote plus the sections it reuses
    /// from earlier checkpoints (incremental checkpoints; equal to `bytes`
    /// for a full one).
    pub state_bytes: u64,
    pub path: PathBuf,
    /// (uid, name, bytes, subtasks) per operator.
    pub operators: Vec<(String, String, u64, usize)>,
    /// Per operator (same order): whether it recomputes its state instead
    /// of persisting it (FLINK-4120).
    pub recomputes: Vec<bool>,
    /// The checkpoint a recompute recovery of this one rewinds the sources
    /// to (the id itself when nothing recomputes).
    pub null_state_checkpoint: u64,
    /// The deletions of older checkpoints (retention) that failed once it
    /// completed, each naming the path and the cause. The job goes on; the
    /// files stay until a later retention deletes them.
    pub retention_errors: Vec<String>,
}

/// A checkpoint or savepoint that failed to begin or to complete, and why
/// (the cause is kept, not only counted).
#[derive(Debug, Clone)]
pub struct CheckpointFailure {
    pub id: u64,
    pub kind: BarrierKind,
    /// The error that failed it, as a sentence.
    pub reason: String,
}

/// How many checkpoints failed, and the causes of the latest ones; also
/// the retention deletions that failed (they fail no checkpoint).
#[derive(Debug, Default)]
pub struct CheckpointFailures {
    count: AtomicU64,
    recent: Mutex<VecDeque<CheckpointFailure>>,
    retention_count: AtomicU64,
    retention_recent: Mutex<VecDeque<String>>,
}

impl CheckpointFailures {
    /// How many causes are kept (the oldest are forgotten first).
    pub const KEPT: usize = 64;

    /// How many checkpoints failed.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    /// The latest failures with their causes, oldest first.
    pub fn recent(&self) -> Vec<CheckpointFailure> {
        self.recent.lock().iter().cloned().collect()
    }

    /// How many retention deletions failed.
    pub fn retention_failures(&self) -> u64 {
        self.retention_count.load(Ordering::Relaxed)
    }

    /// The latest failed retention deletions (path and cause), oldest first.
    pub fn retention_errors(&self) -> Vec<String> {
        self.retention_recent.lock().iter().cloned().collect()
    }

    pub(crate) fn record_retention(&self, error: String) {
        self.retention_count.fetch_add(1, Ordering::Relaxed);
        let mut recent = self.retention_recent.lock();
        if recent.len() == Self::KEPT {
            recent.pop_front();
        }
        recent.push_back(error);
    }

    pub(crate) fn record(&self, failure: CheckpointFailure) {
        self.count.fetch_add(1, Ordering::Relaxed);
        let mut recent = self.recent.lock();
        if recent.len() == Self::KEPT {
            recent.pop_front();
        }
        recent.push_back(failure);
    }
}

/// A completed checkpoint or savepoint, as a waiter hears of it.
#[derive(Debug, Clone)]
pub struct CheckpointDone {
    pub id: u64,
    pub path: PathBuf,
}
