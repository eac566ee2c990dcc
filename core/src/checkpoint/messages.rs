//! What the checkpoint coordinator (`coordinator.rs`) exchanges with the
//! job's driver and tasks: requests, snapshot reports, what it knows of each
//! task, and the messages it asks the driver to deliver (the seed
//! flink-fault-tolerance-mechanism.txt, "checkpointing"; FLIP-147).

use std::path::PathBuf;

use crossbeam_channel::Sender;

use crate::checkpoint::CheckpointDone;
use crate::error::Result;
use crate::event::Barrier;
use crate::state::OperatorState;

/// Who waits for a checkpoint. Sends to it are best effort (`let _`): a
/// waiter that stopped waiting dropped its receiver, and the outcome is in
/// the job's checkpoint stats and failures anyway.
pub(crate) type Waiter = Sender<Result<CheckpointDone>>;

/// What a user asked the coordinator for.
#[derive(Debug, Clone)]
pub(crate) enum Request {
    Checkpoint,
    Savepoint { path: PathBuf },
    StopWithSavepoint { path: PathBuf, drain: bool },
}

/// The state of one node of a task at a checkpoint.
#[derive(Debug)]
pub(crate) struct NodeSnapshot {
    pub node: usize,
    pub state: OperatorState,
    /// The operator's null-state watermark, if it recomputes (FLINK-4120).
    pub null_state: Option<u64>,
}

/// What the coordinator knows of one task of the current attempt.
#[derive(Debug, Clone)]
pub(crate) struct TaskInfo {
    pub name: String,
    pub nodes: Vec<usize>,
    pub subtask: usize,
    pub is_source: bool,
    /// The task heads a loop: it keeps running after its inputs finished
    /// (termination rounds), so the coordinator triggers it directly once
    /// every predecessor task finished (FLIP-147), and the head takes the
    /// snapshot after the last record of its finished inputs.
    pub loop_head: bool,
    /// The tasks whose output this task reads (loop feedback excluded).
    pub predecessors: Vec<usize>,
}

impl TaskInfo {
    /// A loop head whose predecessors all finished, so no barrier reaches
    /// it through its input channels any more.
    pub(crate) fn needs_direct_trigger(&self, finished: &[bool]) -> bool {
        self.loop_head
            && !self.predecessors.is_empty()
            && self.predecessors.iter().all(|p| finished[*p])
    }
}

/// Messages the coordinator asks the driver to deliver to tasks.
#[derive(Debug, Clone)]
pub(crate) enum Outgoing {
    Trigger {
        task: usize,
        barrier: Barrier,
    },
    /// Stop a source: without `barrier` (drain) it ends its input; with one
    /// it snapshots, forwards the savepoint barrier and stops undrained.
    StopSource {
        task: usize,
        barrier: Option<Barrier>,
    },
    Notify {
        checkpoint: u64,
    },
    Abort {
        checkpoint: u64,
    },
    /// The final checkpoint completed: every task may close.
    Finalize,
}
