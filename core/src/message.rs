//! The messages between the supervisor (the job's driver thread, or a
//! worker process's stand-in for it) and its tasks: control messages down,
//! reports up (flink-fault-tolerance-mechanism.txt, "checkpointing": triggers
//! and acknowledgements; FLIP-147 for finished tasks). The runtime passes
//! them over in-process channels and `net::control` encodes them for worker
//! processes; both depend on this module, and it on neither.

use std::time::Duration;

use crate::checkpoint::coordinator::NodeSnapshot;
use crate::error::Error;
use crate::event::Barrier;

/// Messages from the supervisor to a task.
#[derive(Debug, Clone)]
pub(crate) enum Control {
    /// Take a snapshot for this barrier now (sent to sources, and to tasks
    /// that finished and so receive no more barriers on their channels).
    TriggerCheckpoint(Barrier),
    /// Stop-with-savepoint at a source: with a barrier, snapshot, forward
    /// it and stop without draining; without, end the input (drain).
    StopSource(Option<Barrier>),
    /// The checkpoint completed everywhere.
    NotifyComplete(u64),
    /// The checkpoint was aborted.
    AbortCheckpoint(u64),
    /// Checkpoint `n` was triggered at the sources: a loop head reads its
    /// input channels first until barrier `n` reached it, because
    /// feedback-first priority would leave the barrier waiting behind the
    /// loop input for as long as records circulate (FLIP-15 "Cyclic Flow
    /// Control" names this stall). Other tasks ignore it.
    ExpectBarrier(u64),
    /// The job is over: close. With `commit_end_of_job`, first commit
    /// everything with the end-of-job pseudo-checkpoint (no checkpointing).
    Finalize { commit_end_of_job: bool },
    /// Stop now.
    Cancel,
}

/// Messages from a task to the supervisor.
#[derive(Debug)]
pub(crate) enum TaskReport {
    /// The task's operators finished; it waits for the final commit.
    Finished { task: usize },
    /// The task committed and closed.
    #[allow(dead_code)] // read by the checkpoint coordinator (FLIP-147)
    Closed { task: usize },
    /// The task failed.
    Failed { task: usize, error: Error },
    /// The task's snapshot for a checkpoint (to be written asynchronously).
    Snapshot {
        task: usize,
        checkpoint: u64,
        states: Vec<NodeSnapshot>,
        alignment: Duration,
        finished: bool,
        /// Channel state of an unaligned checkpoint (FLIP-76), written as
        /// the head operator's `#channels` state.
        channels: Option<crate::state::OperatorState>,
    },
}
