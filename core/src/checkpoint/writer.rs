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
    /// Where [`StateWriters::submit`] reports a job no thread can take.
    done: Sender<WriteDone>,
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
                        // A panic while serializing fails this checkpoint with
                        // its message; the thread lives on for the next ones.
                        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                            match &job.incremental {
                                None => job.writer.write_state(&job.uid, job.subtask, &job.state),
                                Some(base) => job.writer.write_state_incremental(
                                    &job.uid,
                                    job.subtask,
                                    &job.state,
                                    base.as_deref(),
                                ),
                            }
                        }))
                        .unwrap_or_else(|payload| {
                            Err(Error::checkpoint(
                                None,
                                format!(
                                    "writing the state of '{}' subtask {} panicked: {}",
                                    job.uid,
                                    job.subtask,
                                    crate::error::panic_message(payload.as_ref())
                                ),
                            ))
                        });
                        // No receiver: the coordinator is gone with the job,
                        // and nobody waits for this checkpoint any more.
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
        let done = done_tx;
        Ok((
            StateWriters {
                jobs,
                done,
                threads,
            },
            done_rx,
        ))
    }

    /// Queues one state file. Should no writer thread be left to take it,
    /// the file fails at once with that cause (its checkpoint is aborted
    /// saying so, instead of timing out without one).
    pub fn submit(&self, job: WriteJob) {
        let refused = match &self.jobs {
            Some(jobs) => jobs.send(job).err().map(|e| e.into_inner()),
            None => Some(job),
        };
        if let Some(job) = refused {
            // The receiver is the coordinator's own: it lives as long as self.
            let _ = self.done.send(WriteDone {
                checkpoint: job.checkpoint,
                task: job.task,
                uid: job.uid,
                subtask: job.subtask,
                result: Err(Error::checkpoint(
                    None,
                    "no checkpoint writer thread is left to write it",
                )),
            });
        }
    }
}

impl Drop for StateWriters {
    fn drop(&mut self) {
        self.jobs = None;
        for h in self.threads.drain(..) {
            // Writes cannot panic out of a thread (see `start`): nothing to report.
            let _ = h.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::CheckpointStorage;
    use crate::state::{DeferredState, StateBlob};

    /// A view whose serialization panics (a bug in an operator's format).
    struct Panics;

    impl DeferredState for Panics {
        fn serialize(&self) -> Result<Vec<u8>> {
            panic!("the view is broken")
        }
    }

    fn job(storage: &CheckpointStorage, id: u64, blob: StateBlob) -> Result<WriteJob> {
        Ok(WriteJob {
            checkpoint: id,
            task: 0,
            writer: storage.begin(id)?.writer(),
            uid: "op".into(),
            subtask: 0,
            state: OperatorState {
                operator: Some(blob),
                keyed: Vec::new(),
            },
            incremental: None,
        })
    }

    /// A panic while serializing becomes the file's failure, with its
    /// message, and the thread goes on writing the next files.
    #[test]
    fn test_a_panicking_serializer_fails_its_file_with_the_cause() -> Result<()> {
        let tmp = tempfile::tempdir().expect("tempdir");
        let storage = CheckpointStorage::open(tmp.path())?;
        let (writers, done) = StateWriters::start()?;
        for id in 1..=WRITER_THREADS as u64 {
            writers.submit(job(&storage, id, StateBlob::Deferred(Arc::new(Panics)))?);
        }
        for _ in 0..WRITER_THREADS {
            let d = done.recv().expect("a result");
            let err = d.result.expect_err("it panicked").to_string();
            assert!(
                err.contains("'op' subtask 0 panicked") && err.contains("the view is broken"),
                "{err}"
            );
        }
        let bytes = StateBlob::Bytes(Arc::new(vec![1, 2, 3]));
        writers.submit(job(&storage, 9, bytes)?);
        let d = done.recv().expect("a result");
        assert_eq!(d.checkpoint, 9);
        assert!(d.result.is_ok(), "the threads live on");
        Ok(())
    }
}
