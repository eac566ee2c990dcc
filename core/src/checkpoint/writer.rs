//! The checkpoint writer threads: tasks only take a copy-on-write snapshot;
//! serializing it and writing its state file happen here, so neither the
//! tasks nor the driver's supervision loop wait for the disk (the seed's
//! "asynchronous state snapshots"; DESIGN.md "Checkpoints").

use std::thread::JoinHandle;

use crossbeam_channel::{unbounded, Receiver, Sender};

use std::sync::Arc;

use crate::checkpoint::incremental::SubtaskBase;
use crate::checkpoint::{StateHandle, StateWriter};
use crate::error::{Error, Result};
use crate::state::OperatorState;

/// How many state files are written at once.
const WRITER_THREADS: usize = 2;

/// One state file to write for a checkpoint.
pub(crate) struct WriteJob {
    pub checkpoint: u64,
    pub task: usize,
    pub writer: StateWriter,
    pub uid: String,
    pub subtask: u32,
    pub state: OperatorState,
    /// `Some` writes incrementally against what the last completed
    /// checkpoint holds of this subtask (an empty base writes everything).
    pub incremental: Option<Option<Arc<SubtaskBase>>>,
}

/// The result of writing one state file.
pub(crate) struct WriteDone {
    pub checkpoint: u64,
    pub task: usize,
    pub uid: String,
    pub subtask: u32,
    pub result: Result<StateHandle>,
}

/// A pool of writer threads; dropping it lets them finish their queue and
/// joins them.
pub(crate) struct StateWriters {
    jobs: Option<Sender<WriteJob>>,
    threads: Vec<JoinHandle<()>>,
}

impl StateWriters {
    /// Starts the threads; their results arrive on the returned receiver.
    pub fn start() -> Result<(StateWriters, Receiver<WriteDone>)> {
        let (jobs, job_rx) = unbounded::<WriteJob>();
        let (done_tx, done_rx) = unbounded::<WriteDone>();
        let mut threads = Vec::with_capacity(WRITER_THREADS);
        for i in 0..WRITER_THREADS {
            let rx = job_rx.clone();
            let tx = done_tx.clone();
            let h = std::thread::Builder::new()
                .name(format!("eddyline-ckpt-writer-{i}"))
                .spawn(move || {
                    for job in rx {
                        let result = match &job.incremental {
                            None => job.writer.write_state(&job.uid, job.subtask, &job.state),
                            Some(base) => job.writer.write_state_incremental(
                                &job.uid,
                                job.subtask,
                                &job.state,
                                base.as_deref(),
                            ),
                        };
                        let _ = tx.send(WriteDone {
                            checkpoint: job.checkpoint,
                            task: job.task,
                            uid: job.uid,
                            subtask: job.subtask,
                            result,
                        });
                    }
                })
                .map_err(|e| {
                    Error::checkpoint(
                        None,
                        format!("cannot start a checkpoint writer thread: {e}"),
                    )
                })?;
            threads.push(h);
        }
        let jobs = Some(jobs);
        Ok((StateWriters { jobs, threads }, done_rx))
    }

    /// Queues one state file.
    pub fn submit(&self, job: WriteJob) {
        if let Some(jobs) = &self.jobs {
            let _ = jobs.send(job);
        }
    }
}

impl Drop for StateWriters {
    fn drop(&mut self) {
        self.jobs = None;
        for h in self.threads.drain(..) {
            let _ = h.join();
        }
    }
}
