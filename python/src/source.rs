//! `env.from_source(source)`: a user source written in Python.
//!
//! Glue only. The Python side (`eddyline/sources.py`) deals the source's
//! splits to subtasks and keeps the offsets; this file calls its reader once
//! per poll with the GIL taken, hands the batch to Rust zero-copy and passes
//! the offset bytes to and from the checkpoint. It keeps the reader's open
//! splits and the split of the last batch for per-split event time (FLIP-27,
//! DESIGN.md "Event time per split"); the reader reports them only when they
//! change.

use arrow::datatypes::SchemaRef;
use eddyline_core::error::{Error, Result};
use eddyline_core::operator::OperatorContext;
use eddyline_core::source::{SourceFactory, SourcePoll, SourceReader};
use eddyline_core::state::{decode_entries, encode_entries, Redistribution};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes};

use crate::arrow::batch_from_py;
use crate::errors::from_py;

/// Builds one Python reader per subtask with
/// `make_reader(subtask_index, parallelism, batch_size)`.
pub struct PySourceFactory {
    pub make_reader: Py<PyAny>,
    pub schema: SchemaRef,
    /// A source that discovers splits while running deals its splits by
    /// their ids, so every restored subtask sees every entry (Flink's union
    /// list state) and keeps its own.
    pub union_offsets: bool,
}

impl SourceFactory for PySourceFactory {
    fn create(&self, ctx: &OperatorContext, batch_size: usize) -> Result<Box<dyn SourceReader>> {
        let reader = Python::attach(|py| {
            self.make_reader
                .call1(py, (ctx.subtask_index, ctx.parallelism, batch_size))
                .map_err(|e| from_py(py, &ctx.name, e))
        })?;
        let mut r = PySourceReader {
            name: ctx.name.clone(),
            reader,
            open: Vec::new(),
            last: None,
        };
        r.refresh_open()?;
        Ok(Box::new(r))
    }

    fn schema(&self) -> Option<SchemaRef> {
        Some(self.schema.clone())
    }

    /// Every split not read to its end is an entry (`SourceSubtaskReader.entries`).
    fn redistribution(&self) -> Redistribution {
        if self.union_offsets {
            Redistribution::Union
        } else {
            Redistribution::EvenSplit
        }
    }
}

/// One subtask's Python reader: `poll()` returns `(batch, split, open)`
/// (`batch` a `pyarrow.RecordBatch` or `None`, `open` the open splits when
/// they changed, else `None`), `None` (nothing available yet) or `False`
/// (exhausted); `open_splits()` lists the open splits; `entries()`
/// returns its offset as a list of bytes, one per split left, which
/// `seek_entries(list)` restores (in any subtask); `seek(bytes)` restores
/// the single-blob offset of older checkpoints.
pub struct PySourceReader {
    name: String,
    reader: Py<PyAny>,
    /// The split indices the reader has not read to their end.
    open: Vec<u64>,
    /// The split of the last batch.
    last: Option<u64>,
}

impl PySourceReader {
    /// Asks the reader for its open splits (after creation and seeks).
    fn refresh_open(&mut self) -> Result<()> {
        Python::attach(|py| {
            self.open = self
                .reader
                .bind(py)
                .call_method0("open_splits")
                .and_then(|l| l.extract::<Vec<u64>>())
                .map_err(|e| from_py(py, &self.name, e))?;
            Ok(())
        })
    }
}

impl SourceReader for PySourceReader {
    fn poll_next(&mut self) -> Result<SourcePoll> {
        Python::attach(|py| {
            let r: PyResult<SourcePoll> = (|| {
                let res = self.reader.bind(py).call_method0("poll")?;
                if res.is_none() {
                    return Ok(SourcePoll::Idle);
                }
                if res.is_instance_of::<PyBool>() {
                    return Ok(SourcePoll::End);
                }
                let (batch, split, open): (Bound<'_, PyAny>, Option<u64>, Option<Vec<u64>>) =
                    res.extract()?;
                if let Some(open) = open {
                    self.open = open;
                }
                if batch.is_none() {
                    return Ok(SourcePoll::Idle);
                }
                self.last = split;
                Ok(SourcePoll::Batch(batch_from_py(&batch)?))
            })();
            r.map_err(|e| from_py(py, &self.name, e))
        })
    }

    fn last_split(&self) -> Option<u64> {
        self.last
    }

    fn open_splits(&self) -> &[u64] {
        &self.open
    }

    fn offset(&self) -> Vec<u8> {
        self.entries_of(None)
    }

    fn checkpoint_offset(&self, checkpoint_id: u64) -> Vec<u8> {
        self.entries_of(Some(checkpoint_id))
    }

    fn notify_checkpoint_complete(&mut self, checkpoint_id: u64) -> Result<()> {
        Python::attach(|py| {
            self.reader
                .bind(py)
                .call_method1("notify_checkpoint_complete", (checkpoint_id,))
                .map(|_| ())
                .map_err(|e| from_py(py, &self.name, e))
        })
    }

    fn seek(&mut self, offset: &[u8]) -> Result<()> {
        if offset.is_empty() {
            return Err(Error::checkpoint(
                None,
                format!("the checkpointed offset of source '{}' is empty", self.name),
            ));
        }
        Python::attach(|py| {
            let reader = self.reader.bind(py);
            let done = match decode_entries(offset) {
                Some(entries) => {
                    let list: Vec<Bound<'_, PyBytes>> =
                        entries.iter().map(|e| PyBytes::new(py, e)).collect();
                    reader.call_method1("seek_entries", (list,))
                }
                // An offset of an older checkpoint.
                None => reader.call_method1("seek", (PyBytes::new(py, offset),)),
            };
            done.map(|_| ()).map_err(|e| from_py(py, &self.name, e))
        })?;
        self.refresh_open()
    }
}

impl PySourceReader {
    /// `entries(checkpoint_id)` encoded: the offset of a checkpoint (`Some`)
    /// or of a recompute position check (`None`).
    fn entries_of(&self, checkpoint_id: Option<u64>) -> Vec<u8> {
        // The Python side only pickles its own plain state here; should that
        // ever fail, the cause goes to stderr and the empty offset is refused
        // by `seek` with a clear error instead of restoring a wrong position.
        Python::attach(|py| {
            self.reader
                .bind(py)
                .call_method1("entries", (checkpoint_id,))
                .and_then(|l| l.extract::<Vec<Vec<u8>>>())
                .map(|entries| encode_entries(&entries))
                .unwrap_or_else(|e| {
                    eprintln!(
                        "eddyline: source '{}' could not report its offset: {e}",
                        self.name
                    );
                    Vec::new()
                })
        })
    }
}
