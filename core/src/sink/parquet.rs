//! `ParquetSink(dir)`: a two-phase-commit Parquet file sink.
//!
//! A transaction is a file written under a name readers ignore
//! (`.inprogress-...`); pre-commit closes and fsyncs it and renames it to
//! `.pending-...`; commit renames it to its final `part-...parquet` name,
//! which `pyarrow.dataset` and Spark read. Renames are atomic and a commit
//! whose pending file is gone but whose final file exists is a no-op, so
//! commits are idempotent.
//!
//! A subtask's state is an entry list, one entry per pre-committed
//! transaction not yet committed (`id \t pending path \t final path`).
//! Restoring commits each entry it gets; at another parallelism (FLIP-147
//! redistribution) the entries of all old subtasks are dealt to the new
//! subtasks, so every pending transaction is committed by exactly one.
//! The parallelism only changes from one job run to another, and file
//! names carry the run tag, so the clean-up in `open` (this run's tag and
//! subtask index) never removes a pending file another subtask was dealt.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::record_batch::RecordBatch;
use parquet::arrow::ArrowWriter;

use crate::error::{Error, Result};
use crate::operator::{Collector, Operator, OperatorContext, OperatorFactory};
use crate::state::{decode_entries, encode_entries, OperatorState, Redistribution, StateBlob};

/// Factory of Parquet sink subtasks.
pub struct ParquetSinkFactory {
    dir: PathBuf,
    run_tag: String,
}

impl ParquetSinkFactory {
    /// A sink writing into `dir`; `run_tag` makes file names unique per job run.
    pub fn new(dir: impl Into<PathBuf>, run_tag: impl Into<String>) -> Self {
        ParquetSinkFactory {
            dir: dir.into(),
            run_tag: run_tag.into(),
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
            dir: self.dir.clone(),
            run_tag: self.run_tag.clone(),
            subtask: ctx.subtask_index,
            attempt: ctx.attempt,
            seq: 0,
            writer: None,
            pending: BTreeMap::new(),
            restored_tag: None,
        }))
    }
}

struct OpenFile {
    path: PathBuf,
    writer: ArrowWriter<File>,
}

/// One subtask of a Parquet sink.
pub struct ParquetSink {
    name: String,
    dir: PathBuf,
    run_tag: String,
    subtask: usize,
    attempt: u32,
    seq: u64,
    writer: Option<OpenFile>,
    /// checkpoint id -> (pending path, final path)
    pending: BTreeMap<u64, (PathBuf, PathBuf)>,
    /// The run tag of the job this subtask was restored from.
    restored_tag: Option<String>,
}

impl ParquetSink {
    fn io(&self, path: &Path, err: &std::io::Error) -> Error {
        Error::io(self.name.clone(), path, err)
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
                format!("cannot finish Parquet file '{}': {e}", open.path.display()),
            )
        })?;
        file.sync_all().map_err(|e| self.io(&open.path, &e))?;
        drop(file);
        let pending = self.dir.join(format!(".pending-{stem}.parquet"));
        let final_path = self.dir.join(format!("part-{stem}.parquet"));
        fs::rename(&open.path, &pending).map_err(|e| self.io(&pending, &e))?;
        self.pending.insert(checkpoint_id, (pending, final_path));
        Ok(())
    }

    fn commit_upto(&mut self, checkpoint_id: u64) -> Result<()> {
        let ids: Vec<u64> = self
            .pending
            .range(..=checkpoint_id)
            .map(|(k, _)| *k)
            .collect();
        let mut renamed = false;
        for id in ids {
            if let Some((pending, final_path)) = self.pending.remove(&id) {
                if pending.exists() {
                    fs::rename(&pending, &final_path).map_err(|e| self.io(&final_path, &e))?;
                    renamed = true;
                } else if !final_path.exists() {
                    return Err(Error::operator(
                        self.name.clone(),
                        format!(
                            "cannot commit checkpoint {id}: neither '{}' nor '{}' exists",
                            pending.display(),
                            final_path.display()
                        ),
                    ));
                }
            }
        }
        if renamed {
            if let Ok(d) = File::open(&self.dir) {
                let _ = d.sync_all();
            }
        }
        Ok(())
    }
}

impl Operator for ParquetSink {
    fn open(&mut self, _ctx: &OperatorContext) -> Result<()> {
        fs::create_dir_all(&self.dir).map_err(|e| self.io(&self.dir.clone(), &e))?;
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
        if let Ok(entries) = fs::read_dir(&self.dir) {
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().to_string();
                if prefixes.iter().any(|p| name.starts_with(p)) {
                    let _ = fs::remove_file(e.path());
                }
            }
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
            let path = self
                .dir
                .join(format!(".inprogress-{}.parquet", self.file_stem()));
            let file = File::create(&path).map_err(|e| self.io(&path, &e))?;
            let writer = ArrowWriter::try_new(file, batch.schema(), None).map_err(|e| {
                Error::operator(self.name.clone(), format!("cannot write Parquet: {e}"))
            })?;
            self.writer = Some(OpenFile { path, writer });
        }
        if let Some(open) = self.writer.as_mut() {
            open.writer.write(&batch).map_err(|e| {
                Error::operator(
                    self.name.clone(),
                    format!("cannot write to '{}': {e}", open.path.display()),
                )
            })?;
        }
        Ok(())
    }

    fn process_watermark(&mut self, _watermark: i64, _out: &mut dyn Collector) -> Result<()> {
        Ok(())
    }

    fn snapshot_state(&mut self, checkpoint_id: u64) -> Result<OperatorState> {
        self.pre_commit(checkpoint_id)?;
        let entries: Vec<Vec<u8>> = self
            .pending
            .iter()
            .map(|(id, (p, f))| format!("{id}\t{}\t{}", p.display(), f.display()).into_bytes())
            .collect();
        Ok(OperatorState {
            operator: Some(StateBlob::Bytes(Arc::new(encode_entries(&entries)))),
            keyed: Vec::new(),
        })
    }

    fn notify_checkpoint_complete(&mut self, checkpoint_id: u64) -> Result<()> {
        self.commit_upto(checkpoint_id)
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
                    let id: u64 = id.parse().map_err(|_| bad())?;
                    self.pending
                        .insert(id, (PathBuf::from(pending), PathBuf::from(final_path)));
                }
                _ => return Err(bad()),
            }
        }
        // Every pending transaction of the restored state belongs to a
        // completed checkpoint: commit it (idempotent).
        self.commit_upto(u64::MAX)
    }

    fn close(&mut self) -> Result<()> {
        // An open transaction at close was never pre-committed: abort it.
        if let Some(open) = self.writer.take() {
            drop(open.writer);
            let _ = fs::remove_file(&open.path);
        }
        Ok(())
    }
}
