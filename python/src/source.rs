//! `env.from_source(source)`: a user source written in Python.
//!
//! Glue only. The Python side (`eddyline/sources.py`) deals the source's
//! splits to subtasks and keeps the offsets; this file calls its reader once
//! per poll with the GIL taken, hands the batch to Rust zero-copy and passes
//! the offset bytes to and from the checkpoint.

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
}

impl SourceFactory for PySourceFactory {
    fn create(&self, ctx: &OperatorContext, batch_size: usize) -> Result<Box<dyn SourceReader>> {
        let reader = Python::attach(|py| {
            self.make_reader
                .call1(py, (ctx.subtask_index, ctx.parallelism, batch_size))
                .map_err(|e| from_py(py, &ctx.name, e))
        })?;
        Ok(Box::new(PySourceReader {
            name: ctx.name.clone(),
            reader,
        }))
    }

    fn schema(&self) -> Option<SchemaRef> {
        Some(self.schema.clone())
    }

    /// Every split not read to its end is an entry (`SourceSubtaskReader.entries`).
    fn redistribution(&self) -> Redistribution {
        Redistribution::EvenSplit
    }
}

/// One subtask's Python reader: `poll()` returns a `pyarrow.RecordBatch`,
/// `None` (nothing available yet) or `False` (exhausted); `entries()`
/// returns its offset as a list of bytes, one per split left, which
/// `seek_entries(list)` restores (in any subtask); `seek(bytes)` restores
/// the single-blob offset of older checkpoints.
pub struct PySourceReader {
    name: String,
    reader: Py<PyAny>,
}

impl SourceReader for PySourceReader {
    fn poll_next(&mut self) -> Result<SourcePoll> {
        Python::attach(|py| {
            let r: PyResult<SourcePoll> = (|| {
                let res = self.reader.bind(py).call_method0("poll")?;
                if res.is_none() {
                    Ok(SourcePoll::Idle)
                } else if res.is_instance_of::<PyBool>() {
                    Ok(SourcePoll::End)
                } else {
                    Ok(SourcePoll::Batch(batch_from_py(&res)?))
                }
            })();
            r.map_err(|e| from_py(py, &self.name, e))
        })
    }

    fn offset(&self) -> Vec<u8> {
        // The Python side only pickles its own plain state here; should that
        // ever fail, the empty offset is refused by `seek` with a clear error
        // instead of restoring a wrong position.
        Python::attach(|py| {
            self.reader
                .bind(py)
                .call_method0("entries")
                .and_then(|l| l.extract::<Vec<Vec<u8>>>())
                .map(|entries| encode_entries(&entries))
                .unwrap_or_default()
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
        })
    }
}
