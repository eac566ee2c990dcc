//! `ParquetSink(dir)`: a two-phase-commit Parquet file sink, on a local disk
//! or an object store (DESIGN.md "Where the data lives").
//!
//! A transaction is a file written under a name readers ignore
//! (`.inprogress-...`); pre-commit closes and fsyncs it and renames it to
//! `.pending-...`; commit renames it to its final `part-...parquet` name,
//! which `pyarrow.dataset` and Spark read. On an object store the file is
//! uploaded straight to its `.pending-...` name (an object exists only once
//! its upload completes, so nothing is in progress to readers), and commit
//! is a server-side copy to the final name (the object appears whole) and
//! the deletion of the pending one. A commit whose pending file is gone but
//! whose final file exists is a no-op, so commits are idempotent. On a disk,
//! commit then fsyncs the directory (the renames are durable); a failed
//! fsync fails the commit with its cause, and the restart's restore
//! commits (and fsyncs) again. A leftover uncommitted file that cannot be
//! removed is reported on stderr and left (readers ignore it).
//!
//! A subtask's state is an entry list, one entry per pre-committed
//! transaction not yet committed (`id \t pending path \t final path`).
//! Restoring commits each entry it gets; at another parallelism (FLIP-147
//! redistribution) the entries of all old subtasks are dealt to the new
//! subtasks, so every pending transaction is committed by exactly one.
//! The parallelism only changes from one job run to another, and file
//! names carry the run tag, so the clean-up in `open` (this run's tag and
//! subtask index) never removes a pending file another subtask was dealt.
//!
//! A run killed between a pre-commit and its checkpoint's completion leaves
//! a pending file no checkpoint names; a later run that restores an older
//! checkpoint does not know the killed run's tag. Run tags of a job with a
//! checkpoint dir are `<job>r<time>`, `<job>` naming the checkpoint dir
//! (see `job_prefix`), so subtask 0 sweeps, once the run's first checkpoint
//! completed, every in-progress or pending file of the same job and another
//! run: by then every subtask has restored and committed the transactions
//! of the checkpoint it restored, so what is left is garbage of runs that
//! were killed. Files of other jobs writing into the same directory (other
//! checkpoint dirs) are never touched.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::record_batch::RecordBatch;
use parquet::arrow::ArrowWriter;

use crate::error::{Error, Result};
use crate::operator::{CheckpointedState, Collector, Operator, OperatorContext, OperatorFactory};
use crate::state::{decode_entries, encode_entries, OperatorState, Redistribution, StateBlob};
use crate::store::{ObjectWriter, StorageOptions, Store};

/// Factory of Parquet sink subtasks.
pub struct ParquetSinkFactory {
    dir: PathBuf,
    run_tag: String,
    options: StorageOptions,
}

impl ParquetSinkFactory {
    /// A sink writing into the local `dir`; `run_tag` makes file names
    /// unique per job run.
    pub fn new(dir: impl Into<PathBuf>, run_tag: impl Into<String>) -> Self {
        Self::new_with(dir, run_tag, StorageOptions::new())
    }

    /// [`new`](Self::new) for a `dir` that may be an object store URI,
    /// reached with `options`.
    pub fn new_with(
        dir: impl Into<PathBuf>,
        run_tag: impl Into<String>,
        options: StorageOptions,
    ) -> Self {
        ParquetSinkFactory {
            dir: dir.into(),
            run_tag: run_tag.into(),
            options,
        }
    }
}

impl OperatorFactory for ParquetSinkFactory {
    /// One entry per pending transaction.
    fn redistribution(&self) -> Redistribution {
        Redistribution::EvenSplit
    }

    fn create(&self, ctx: &OperatorContext) -> Result<Box<dyn Operator>> {
        Ok(Box::new(ParquetSink {
            name: ctx.name.clone(),
            dir: Store::open(&self.dir, &self.options)?,
            run_tag: self.run_tag.clone(),
            subtask: ctx.subtask_index,
            attempt: ctx.attempt,
            seq: 0,
            writer: None,
            pending: BTreeMap::new(),
            options: self.options.clone(),
            restored_tag: None,
            swept: false,
        }))
    }
}

/// A pre-committed transaction: its file's pending and final names in the
/// directory it was written to (a restored one may come from another
/// directory: the state names it in full).
struct Txn {
    dir: Store,
    pending: String,
    final_name: String,
}

struct OpenFile {
    /// Its name in the sink's directory.
    name: String,
    writer: ArrowWriter<ObjectWriter>,
}

/// One subtask of a Parquet sink.
pub struct ParquetSink {
    name: String,
    dir: Store,
    run_tag: String,
    subtask: usize,
    attempt: u32,
    seq: u64,
    writer: Option<OpenFile>,
    /// (checkpoint id, n) -> a pre-committed transaction of that
    /// checkpoint: its own (n = 0), or one of those dealt to it on restore,
    /// where several old subtasks' transactions of one checkpoint meet at a
    /// lower parallelism (n counts them; keyed by id alone, all but one
    /// would be lost).
    pending: BTreeMap<(u64, usize), Txn>,
    options: StorageOptions,
    /// The run tag of the job this subtask was restored from.
    restored_tag: Option<String>,
    /// Whether the files of the job's killed runs were swept (subtask 0).
    swept: bool,
}

/// The part of a run tag `<job>r<time>` that names the job (through its
/// checkpoint dir), with the `r`; `None` for a tag of a job without one.
/// `<job>` and `<time>` are hex digits, so the first `r` ends the prefix.
fn job_prefix(run_tag: &str) -> Option<&str> {
    let end = run_tag.find('r')?;
    (end > 0).then(|| &run_tag[..=end])
}

impl ParquetSink {
    fn io(&self, name: &str, err: &std::io::Error) -> Error {
        Error::io(self.name.clone(), self.dir.location_of(name), err)
    }

    /// The name a transaction's file has while it is written: on an object
    /// store its pending name (the object exists only once uploaded).
    fn in_progress_name(&self, stem: &str) -> String {
        if self.dir.is_local() {
            format!(".inprogress-{stem}.parquet")
        } else {
            format!(".pending-{stem}.parquet")
        }
    }

    fn file_stem(&self) -> String {
        format!(
            "{}-{:04}-a{}-{:06}",
            self.run_tag, self.subtask, self.attempt, self.seq
        )
    }

    fn pre_commit(&mut self, checkpoint_id: u64) -> Result<()> {
        let Some(open) = self.writer.take() else {
            return Ok(());
        };
        let stem = self.file_stem();
        self.seq += 1;
        let file = open.writer.into_inner().map_err(|e| {
            Error::operator(
                self.name.clone(),
                format!(
                    "cannot finish Parquet file '{}': {e}",
                    self.dir.location_of(&open.name).display()
                ),
            )
        })?;
        file.finish().map_err(|e| self.io(&open.name, &e))?;
        let pending = format!(".pending-{stem}.parquet");
        let final_name = format!("part-{stem}.parquet");
        if open.name != pending {
            self.dir
                .rename(&open.name, &pending)
                .map_err(|e| self.io(&pending, &e))?;
        }
        let dir = self.dir.clone();
        self.pending.insert(
            (checkpoint_id, 0),
            Txn {
                dir,
                pending,
                final_name,
            },
        );
        Ok(())
    }

    /// Removes the in-progress and pending files of the job's other runs
    /// (see the module docs). Called by subtask 0 once a checkpoint of this
    /// run completed; a file that cannot be listed or removed is left and
    /// reported on stderr (readers ignore it): it never fails the job.
    fn sweep_killed_runs(&mut self) {
        self.swept = true;
        let Some(job) = job_prefix(&self.run_tag) else {
            return;
        };
        let names = match self.dir.files() {
            Ok(names) => names,
            Err(e) => {
                eprintln!(
                    "eddyline: sink '{}': cannot list '{}' to remove files of killed runs \
                     (they stay; readers ignore them): {e}",
                    self.name,
                    self.dir.location().display()
                );
                return;
            }
        };
        for name in names {
            let Some(tagged) = name
                .strip_prefix(".pending-")
                .or_else(|| name.strip_prefix(".inprogress-"))
            else {
                continue;
            };
            let ours = tagged
                .strip_prefix(self.run_tag.as_str())
                .is_some_and(|rest| rest.starts_with('-'));
            if tagged.starts_with(job) && !ours {
                if let Err(e) = self.dir.remove(&name) {
                    eprintln!(
                        "eddyline: sink '{}': cannot remove '{}', left by a killed run \
                         (it stays; readers ignore it): {e}",
                        self.name,
                        self.dir.location_of(&name).display()
                    );
                }
            }
        }
    }

    /// Reports an uncommitted file that could not be removed (it stays;
    /// readers ignore its hidden name).
    fn report_leftover(&self, name: &str, e: &std::io::Error) {
        eprintln!(
            "eddyline: sink '{}': cannot remove the uncommitted '{}' (it stays; \
             readers ignore it): {e}",
            self.name,
            self.dir.location_of(name).display()
        );
    }

    fn commit_upto(&mut self, checkpoint_id: u64) -> Result<()> {
        let ids: Vec<(u64, usize)> = self
            .pending
            .range(..=(checkpoint_id, usize::MAX))
            .map(|(k, _)| *k)
            .collect();
        let mut renamed: Vec<Store> = Vec::new();
        for key @ (id, _) in ids {
            if let Some(txn) = self.pending.remove(&key) {
                let Txn {
                    dir,
                    pending,
                    final_name,
                } = &txn;
                let io = |name: &str, e: std::io::Error| {
                    Error::io(self.name.clone(), dir.location_of(name), &e)
                };
                if dir.exists(pending).map_err(|e| io(pending, e))? {
                    dir.rename(pending, final_name)
                        .map_err(|e| io(final_name, e))?;
                    note_dir(&mut renamed, dir);
                } else if dir.exists(final_name).map_err(|e| io(final_name, e))? {
                    // Renamed by an earlier attempt, whose sync may have
                    // failed: sync again.
                    note_dir(&mut renamed, dir);
                } else {
                    return Err(Error::operator(
                        self.name.clone(),
                        format!(
                            "cannot commit checkpoint {id}: neither '{}' nor '{}' exists",
                            dir.location_of(pending).display(),
                            dir.location_of(final_name).display()
                        ),
                    ));
                }
            }
        }
        // The renames are the commit: make them durable, or fail the
        // notification with the cause (the job restarts; restoring commits
        // again, idempotently, and syncs again).
        for dir in renamed {
            dir.sync().map_err(|e| {
                Error::io(
                    self.name.clone(),
                    dir.location(),
                    &std::io::Error::new(
                        e.kind(),
                        format!("cannot sync the directory after a commit: {e}"),
                    ),
                )
            })?;
        }
        Ok(())
    }
}

/// Adds `dir` to the directories to sync, once.
fn note_dir(dirs: &mut Vec<Store>, dir: &Store) {
    if !dirs.iter().any(|d| d.location() == dir.location()) {
        dirs.push(dir.clone());
    }
}

impl Operator for ParquetSink {
    fn open(&mut self, _ctx: &OperatorContext) -> Result<()> {
        self.dir
            .make_dir()
            .map_err(|e| Error::io(self.name.clone(), self.dir.location(), &e))?;
        // Remove what earlier attempts of this subtask left uncommitted:
        // files in progress, and pre-committed files of checkpoints that
        // never completed (restore_state committed the ones that did).
        let mut tags = vec![self.run_tag.clone()];
        tags.extend(self.restored_tag.clone());
        let prefixes: Vec<String> = tags
            .iter()
            .flat_map(|t| {
                [
                    format!(".inprogress-{t}-{:04}-", self.subtask),
                    format!(".pending-{t}-{:04}-", self.subtask),
                ]
            })
            .collect();
        // A leftover that cannot be listed or removed stays (readers ignore
        // it, and this attempt writes other names): reported, not fatal,
        // as in `sweep_killed_runs`.
        match self.dir.files() {
            Ok(names) => {
                for name in names {
                    if prefixes.iter().any(|p| name.starts_with(p)) {
                        if let Err(e) = self.dir.remove(&name) {
                            self.report_leftover(&name, &e);
                        }
                    }
                }
            }
            Err(e) => eprintln!(
                "eddyline: sink '{}': cannot list '{}' to remove the files earlier \
                 attempts left (they stay; readers ignore them): {e}",
                self.name,
                self.dir.location().display()
            ),
        }
        Ok(())
    }

    fn process_batch(
        &mut self,
        _input: usize,
        batch: RecordBatch,
        _out: &mut dyn Collector,
    ) -> Result<()> {
        if self.writer.is_none() {
            let name = self.in_progress_name(&self.file_stem());
            // A leftover of a crashed attempt under this name is replaced
            // (a missing one is no error; any other failure is the cause).
            self.dir.remove(&name).map_err(|e| self.io(&name, &e))?;
            let file = self.dir.create(&name).map_err(|e| self.io(&name, &e))?;
            let writer = ArrowWriter::try_new(file, batch.schema(), None).map_err(|e| {
                Error::operator(self.name.clone(), format!("cannot write Parquet: {e}"))
            })?;
            self.writer = Some(OpenFile { name, writer });
        }
        if let Some(open) = self.writer.as_mut() {
            open.writer.write(&batch).map_err(|e| {
                Error::operator(
                    self.name.clone(),
                    format!(
                        "cannot write to '{}': {e}",
                        self.dir.location_of(&open.name).display()
                    ),
                )
            })?;
        }
        Ok(())
    }

    fn process_watermark(&mut self, _watermark: i64, _out: &mut dyn Collector) -> Result<()> {
        Ok(())
    }

    fn close(&mut self) -> Result<()> {
        // An open transaction at close was never pre-committed: abort it.
        if let Some(open) = self.writer.take() {
            drop(open.writer);
            // Not fatal: the file is hidden from readers, and the next
            // attempt's `open` or the sweep removes it.
            if let Err(e) = self.dir.remove(&open.name) {
                self.report_leftover(&open.name, &e);
            }
        }
        Ok(())
    }

    fn state(&mut self) -> Option<&mut dyn CheckpointedState> {
        Some(self)
    }
}

impl CheckpointedState for ParquetSink {
    fn snapshot_state(&mut self, checkpoint_id: u64) -> Result<OperatorState> {
        self.pre_commit(checkpoint_id)?;
        let entries: Vec<Vec<u8>> = self
            .pending
            .iter()
            .map(|((id, _), t)| {
                let (p, f) = (
                    t.dir.location_of(&t.pending),
                    t.dir.location_of(&t.final_name),
                );
                format!("{id}\t{}\t{}", p.display(), f.display()).into_bytes()
            })
            .collect();
        Ok(OperatorState {
            operator: Some(StateBlob::Bytes(Arc::new(encode_entries(&entries)))),
            keyed: Vec::new(),
        })
    }

    fn restore_state(&mut self, state: OperatorState) -> Result<()> {
        let bad = || {
            Error::checkpoint(
                None,
                format!("the state of Parquet sink '{}' is malformed", self.name),
            )
        };
        let bytes = state
            .operator
            .as_ref()
            .and_then(|b| b.as_bytes())
            .ok_or_else(bad)?;
        // One entry per pending transaction; an older checkpoint's state is
        // the transactions as lines of one text.
        let lines: Vec<String> = match decode_entries(bytes) {
            Some(entries) => entries
                .into_iter()
                .map(|e| String::from_utf8(e).map_err(|_| bad()))
                .collect::<Result<_>>()?,
            None => std::str::from_utf8(bytes)
                .map_err(|_| bad())?
                .lines()
                .map(str::to_string)
                .collect(),
        };
        for line in &lines {
            let parts: Vec<&str> = line.split('\t').collect();
            match parts.as_slice() {
                ["tag", tag] => self.restored_tag = Some((*tag).to_string()),
                [id, pending, final_path] => {
                    // Entries name full paths or URIs: the directory the
                    // transaction was written to, maybe not this sink's.
                    let id: u64 = id.parse().map_err(|_| bad())?;
                    let (pending, final_path) = (Path::new(pending), Path::new(final_path));
                    let name = |p: &Path| {
                        p.file_name()
                            .and_then(|n| n.to_str())
                            .map(str::to_string)
                            .ok_or_else(bad)
                    };
                    let parent = pending.parent().ok_or_else(bad)?;
                    let dir = if parent == self.dir.location() {
                        self.dir.clone()
                    } else {
                        Store::open(parent, &self.options)?
                    };
                    let txn = Txn {
                        dir,
                        pending: name(pending)?,
                        final_name: name(final_path)?,
                    };
                    let n = self.pending.range((id, 0)..=(id, usize::MAX)).count();
                    self.pending.insert((id, n), txn);
                }
                _ => return Err(bad()),
            }
        }
        // Every pending transaction of the restored state belongs to a
        // completed checkpoint: commit it (idempotent).
        self.commit_upto(u64::MAX)
    }

    fn notify_checkpoint_complete(&mut self, checkpoint_id: u64) -> Result<()> {
        self.commit_upto(checkpoint_id)?;
        if self.subtask == 0 && !self.swept {
            self.sweep_killed_runs();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operator::testing::Recorder;
    use arrow::array::{ArrayRef, Int64Array};

    fn ctx() -> OperatorContext {
        OperatorContext {
            name: "out".into(),
            uid: "out".into(),
            subtask_index: 0,
            parallelism: 1,
            max_parallelism: 128,
            key_groups: 0..128,
            attempt: 0,
        }
    }

    #[test]
    fn a_leftover_that_cannot_be_removed_fails_the_write_with_its_cause() {
        let tmp = tempfile::tempdir().unwrap();
        let mut sink = ParquetSinkFactory::new(tmp.path(), "t1")
            .create(&ctx())
            .unwrap();
        sink.open(&ctx()).unwrap();
        // What the subtask's first file is called while written, taken
        // by something a file removal cannot remove.
        let blocker = tmp.path().join(".inprogress-t1-0000-a0-000000.parquet");
        std::fs::create_dir(&blocker).unwrap();
        std::fs::write(blocker.join("x"), b"x").unwrap();
        let a: ArrayRef = Arc::new(Int64Array::from(vec![1, 2]));
        let batch = RecordBatch::try_from_iter([("v", a)]).unwrap();
        let err = sink
            .process_batch(0, batch, &mut Recorder::default())
            .unwrap_err();
        let text = err.to_string();
        // The removal's own failure, not the "File exists" of the create
        // that would follow it.
        assert!(matches!(err, Error::Io { .. }), "{text}");
        assert!(text.contains(&blocker.display().to_string()), "{text}");
        assert!(!text.contains("exists"), "{text}");
    }
}
