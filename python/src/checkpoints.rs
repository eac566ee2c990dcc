//! `list_checkpoints`, `inspect_checkpoint` and `read_keyed_state`:
//! read-only views of a checkpoint directory for the CLI and for users.

use std::str::FromStr;

use arrow::datatypes::DataType;
use arrow_pyarrow::ToPyArrow;
use eddyline_core::checkpoint::read_state::{self, KeyedStateContent};
use eddyline_core::checkpoint::recompute::null_state_checkpoint_of;
use eddyline_core::checkpoint::{CheckpointStorage, Manifest};
use eddyline_core::event::BarrierKind;
use eddyline_core::store::StorageOptions;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};

use crate::arrow::batch_to_py;
use crate::errors::to_py;
use crate::gil::detached;

fn kind_str(kind: BarrierKind) -> &'static str {
    match kind {
        BarrierKind::Checkpoint => "checkpoint",
        BarrierKind::Savepoint => "savepoint",
    }
}

/// The completed checkpoints under `dir` (a local path or an object store
/// URI reached with `storage_options`), newest first.
#[pyfunction]
#[pyo3(signature = (dir, storage_options=StorageOptions::new()))]
pub fn list_checkpoints<'py>(
    py: Python<'py>,
    dir: std::path::PathBuf,
    storage_options: StorageOptions,
) -> PyResult<Bound<'py, PyList>> {
    let list = PyList::empty(py);
    if !eddyline_core::store::is_object_store_uri(&dir) && !dir.exists() {
        return Ok(list);
    }
    // Listing only reads: no write probe, so read-only credentials do, and a
    // failure says the location cannot be listed (not written).
    let storage =
        CheckpointStorage::open_read_only(&dir, &storage_options).map_err(|e| to_py(py, &e))?;
    let summaries = storage.list().map_err(|e| to_py(py, &e))?;
    for s in summaries {
        let d = PyDict::new(py);
        d.set_item("id", s.id)?;
        d.set_item("path", s.dir.display().to_string())?;
        // A summary only reads the manifest; verify every file as a restore would.
        let verified = storage.load(s.id);
        match (&s.info, verified) {
            (Ok(info), Ok(rc)) => {
                d.set_item("null_state_checkpoint", null_state_checkpoint_of(&rc))?;
                d.set_item("kind", kind_str(info.kind))?;
                d.set_item("trigger_time_ms", info.trigger_ms)?;
                d.set_item("completion_time_ms", info.completion_ms)?;
                d.set_item(
                    "duration_ms",
                    info.completion_ms.saturating_sub(info.trigger_ms),
                )?;
                d.set_item("bytes", info.state_size)?;
                d.set_item("written_bytes", info.written_size)?;
                d.set_item("valid", true)?;
                d.set_item("error", py.None())?;
            }
            (info, verified) => {
                let err = match (info, verified) {
                    (Err(e), _) => e.to_string(),
                    (_, Err(e)) => e.to_string(),
                    _ => String::new(),
                };
                if let Ok(info) = info {
                    d.set_item("kind", kind_str(info.kind))?;
                    d.set_item("trigger_time_ms", info.trigger_ms)?;
                    d.set_item("completion_time_ms", info.completion_ms)?;
                    d.set_item(
                        "duration_ms",
                        info.completion_ms.saturating_sub(info.trigger_ms),
                    )?;
                    d.set_item("bytes", info.state_size)?;
                    d.set_item("written_bytes", info.written_size)?;
                    d.set_item("null_state_checkpoint", py.None())?;
                } else {
                    for k in [
                        "kind",
                        "trigger_time_ms",
                        "completion_time_ms",
                        "duration_ms",
                        "bytes",
                        "written_bytes",
                        "null_state_checkpoint",
                    ] {
                        d.set_item(k, py.None())?;
                    }
                }
                d.set_item("valid", false)?;
                d.set_item("error", err)?;
            }
        }
        list.append(d)?;
    }
    Ok(list)
}

fn manifest_dict<'py>(py: Python<'py>, m: &Manifest, path: &str) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("id", m.id)?;
    d.set_item("kind", kind_str(m.kind))?;
    d.set_item("trigger_time_ms", m.trigger_ms)?;
    d.set_item("completion_time_ms", m.completion_ms)?;
    d.set_item("duration_ms", m.duration_ms)?;
    // FLIP-147's final checkpoint: it also stores recomputing operators' state.
    d.set_item("final", m.final_state)?;
    d.set_item("bytes", m.state_size())?;
    d.set_item("written_bytes", m.written_size())?;
    d.set_item("path", path)?;
    d.set_item(
        "null_state_checkpoint",
        m.operators
            .iter()
            .filter_map(|o| o.null_state_checkpoint)
            .min()
            .unwrap_or(m.id)
            .min(m.id),
    )?;
    let aligns = PyList::empty(py);
    for a in &m.alignments {
        let ad = PyDict::new(py);
        ad.set_item("task", &a.task)?;
        ad.set_item("subtask", a.subtask)?;
        ad.set_item("alignment_ms", a.alignment_us as f64 / 1000.0)?;
        aligns.append(ad)?;
    }
    d.set_item("alignments", aligns)?;
    let ops = PyList::empty(py);
    for o in &m.operators {
        let od = PyDict::new(py);
        od.set_item("uid", &o.uid)?;
        od.set_item("name", &o.name)?;
        od.set_item("finished", o.finished)?;
        // Sources record where they rewind to; they are not recomputed.
        let is_source = o.subtasks.iter().any(|s| !s.source_offsets.is_empty());
        od.set_item(
            "recomputes",
            o.null_state_checkpoint.is_some() && !is_source,
        )?;
        od.set_item("null_state_checkpoint", o.null_state_checkpoint)?;
        od.set_item(
            "bytes",
            o.subtasks
                .iter()
                .map(|s| {
                    s.state.as_ref().map_or(0, |f| f.size)
                        + s.reused.iter().map(|r| r.bytes).sum::<u64>()
                })
                .sum::<u64>(),
        )?;
        let subs = PyList::empty(py);
        for s in &o.subtasks {
            let sd = PyDict::new(py);
            sd.set_item("subtask", s.subtask)?;
            sd.set_item(
                "bytes",
                s.state.as_ref().map_or(0, |f| f.size)
                    + s.reused.iter().map(|r| r.bytes).sum::<u64>(),
            )?;
            // Every key group it holds: in its own file and reused ones.
            let mut kgs: Vec<(u32, u32)> = s
                .state
                .iter()
                .flat_map(|f| f.key_groups.iter())
                .chain(s.reused.iter().flat_map(|r| r.key_groups.iter()))
                .map(|r| (r.start, r.end))
                .collect();
            kgs.sort_unstable();
            sd.set_item("key_groups", kgs)?;
            sd.set_item("file", s.state.as_ref().map(|f| f.file.clone()))?;
            sd.set_item("shared", s.state.as_ref().is_some_and(|f| f.shared))?;
            let reused = PyList::empty(py);
            for r in &s.reused {
                let rd = PyDict::new(py);
                rd.set_item("file", &r.file.file)?;
                let kgs: Vec<(u32, u32)> = r.key_groups.iter().map(|g| (g.start, g.end)).collect();
                rd.set_item("key_groups", kgs)?;
                rd.set_item("bytes", r.bytes)?;
                reused.append(rd)?;
            }
            sd.set_item("reused", reused)?;
            let offsets: Vec<(String, u64)> = s
                .source_offsets
                .iter()
                .map(|o| (o.split.clone(), o.offset))
                .collect();
            sd.set_item("source_offsets", offsets)?;
            subs.append(sd)?;
        }
        od.set_item("subtasks", subs)?;
        ops.append(od)?;
    }
    d.set_item("operators", ops)?;
    Ok(d)
}

/// The manifest of one checkpoint, verified (every state file checked).
#[pyfunction]
#[pyo3(signature = (path, storage_options=StorageOptions::new()))]
pub fn inspect_checkpoint<'py>(
    py: Python<'py>,
    path: std::path::PathBuf,
    storage_options: StorageOptions,
) -> PyResult<Bound<'py, PyDict>> {
    let rc =
        CheckpointStorage::load_path_with(&path, &storage_options).map_err(|e| to_py(py, &e))?;
    manifest_dict(py, rc.manifest(), &rc.dir().display().to_string())
}

/// The keyed state of operator `uid` in the checkpoint at `path` (a
/// checkpoint or savepoint directory, or a storage root: its newest
/// checkpoint): `{"checkpoint_id", "path", "uid", "name", "key_columns":
/// [(name, pyarrow type or None)], "kind": "native" | "pickled" | "empty",
/// "batches": [pyarrow.RecordBatch] (native), "blobs": [(key_group, bytes)]
/// (pickled)}`. Reading and decoding run without the GIL.
#[pyfunction]
#[pyo3(signature = (path, uid, storage_options=StorageOptions::new()))]
pub fn read_keyed_state<'py>(
    py: Python<'py>,
    path: std::path::PathBuf,
    uid: String,
    storage_options: StorageOptions,
) -> PyResult<Bound<'py, PyDict>> {
    let read = detached(py, || {
        read_state::read_keyed_state(&path, &storage_options, &uid)
    })
    .map_err(|e| to_py(py, &e))?;
    let d = PyDict::new(py);
    d.set_item("checkpoint_id", read.checkpoint_id)?;
    d.set_item("path", read.path.display().to_string())?;
    d.set_item("uid", &read.uid)?;
    d.set_item("name", &read.name)?;
    let keys = PyList::empty(py);
    for col in &read.key_columns {
        let ty = match col.data_type.as_deref().map(DataType::from_str) {
            Some(Ok(t)) => Some(t.to_pyarrow(py)?),
            _ => None,
        };
        keys.append((&col.name, ty))?;
    }
    d.set_item("key_columns", keys)?;
    let batches = PyList::empty(py);
    let blobs = PyList::empty(py);
    let kind = match &read.content {
        KeyedStateContent::Native(b) => {
            for batch in b.iter() {
                batches.append(batch_to_py(py, batch)?)?;
            }
            "native"
        }
        KeyedStateContent::Foreign(b) => {
            for (kg, bytes) in b.iter() {
                blobs.append((*kg, PyBytes::new(py, bytes.as_slice())))?;
            }
            "pickled"
        }
        KeyedStateContent::Empty => "empty",
    };
    d.set_item("kind", kind)?;
    d.set_item("batches", batches)?;
    d.set_item("blobs", blobs)?;
    Ok(d)
}
