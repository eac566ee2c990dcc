//! Operator state handed over by a Python runner as a list of entries
//! (FLIP-147 operator list state, `eddyline_core::state::encode_entries`),
//! kept as Python objects until a checkpoint writer thread serializes it.
//!
//! A two-phase-commit sink's pending transactions are most of a checkpoint
//! when the sink buffers a second of rows (benches/RESULTS.md "W3"). Copying
//! them on the task thread, under the GIL, three times (pickling them into
//! bytes, extracting the bytes into a `Vec`, concatenating the entries)
//! stalled every Python operator of the process. Here the task thread only
//! takes references: each entry is `bytes`, or a tuple of parts (`bytes` or
//! read-only buffers such as the out-of-band buffers of a pickle protocol 5
//! stream, see `eddyline/_exec/two_phase.py`), and the writer thread writes
//! the parts into the state file as they are, without the GIL and without
//! joining them first (`DeferredState::runs`; the seed's "asynchronous state
//! snapshots"; DESIGN.md "Checkpoints").

use std::sync::Arc;

use eddyline_core::error::{Error, Result};
use eddyline_core::state::{DeferredState, StateBlob, ENTRY_LIST_MAGIC};
use pyo3::buffer::PyBuffer;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};

/// One read-only run of bytes owned by a Python object.
struct Part {
    /// Keeps the memory alive (and unchanged: `bytes` are immutable, and
    /// only read-only buffers are accepted). Dropped without the GIL, its
    /// reference is released the next time a thread takes the GIL.
    _owner: Py<PyAny>,
    ptr: *const u8,
    len: usize,
}

// SAFETY: `ptr` points into memory that `_owner` keeps alive and that no
// one may write (immutable `bytes`, or a buffer exported read-only); reading
// it needs no GIL, and `Py` may be sent and dropped from any thread.
unsafe impl Send for Part {}
unsafe impl Sync for Part {}

impl Part {
    fn bytes(&self) -> &[u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: see the `Send` impl; `len` bytes were exported at `ptr`.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    fn from_py(item: &Bound<'_, PyAny>) -> std::result::Result<Part, String> {
        if let Ok(b) = item.cast::<PyBytes>() {
            let bytes = b.as_bytes();
            return Ok(Part {
                ptr: bytes.as_ptr(),
                len: bytes.len(),
                _owner: item.clone().unbind(),
            });
        }
        let buf = PyBuffer::<u8>::get(item).map_err(|e| {
            format!(
                "a state entry part is neither bytes nor a byte buffer ({}): {e}",
                type_name(item)
            )
        })?;
        if !buf.readonly() {
            return Err(format!(
                "a state entry part is a writable buffer ({}): only read-only buffers \
                 are written without a copy",
                type_name(item)
            ));
        }
        if !buf.is_c_contiguous() {
            return Err("a state entry part is not a contiguous buffer".to_string());
        }
        // The object (a memoryview) holds its own export of the memory, so
        // the pointer stays valid after this `PyBuffer` is released here,
        // under the GIL.
        Ok(Part {
            ptr: buf.buf_ptr() as *const u8,
            len: buf.len_bytes(),
            _owner: item.clone().unbind(),
        })
    }
}

fn type_name(item: &Bound<'_, PyAny>) -> String {
    item.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".to_string())
}

/// Entries as Python objects, written as an entry list
/// ([`eddyline_core::state::encode_entries`]'s layout) by a writer thread:
/// as runs straight into the state file, or joined by `serialize`.
struct PyEntries {
    /// The list's head: magic and entry count.
    head: [u8; 16],
    /// Per entry: its length word, and its parts.
    entries: Vec<([u8; 8], Vec<Part>)>,
}

const ZEROS: [u8; 8] = [0; 8];

impl PyEntries {
    fn new(entries: Vec<Vec<Part>>) -> PyEntries {
        let mut head = [0u8; 16];
        head[..8].copy_from_slice(&ENTRY_LIST_MAGIC);
        head[8..].copy_from_slice(&(entries.len() as u64).to_le_bytes());
        let entries = entries
            .into_iter()
            .map(|parts| {
                let len: usize = parts.iter().map(|p| p.len).sum();
                ((len as u64).to_le_bytes(), parts)
            })
            .collect();
        PyEntries { head, entries }
    }
}

impl DeferredState for PyEntries {
    fn serialize(&self) -> Result<Vec<u8>> {
        let runs = self.runs().unwrap_or_default();
        let mut out = Vec::with_capacity(runs.iter().map(|r| r.len()).sum());
        for r in runs {
            out.extend_from_slice(r);
        }
        Ok(out)
    }

    fn runs(&self) -> Option<Vec<&[u8]>> {
        let mut runs: Vec<&[u8]> = Vec::with_capacity(1 + self.entries.len() * 3);
        runs.push(&self.head);
        for (len, parts) in &self.entries {
            runs.push(len);
            runs.extend(parts.iter().map(Part::bytes).filter(|b| !b.is_empty()));
            let pad = (u64::from_le_bytes(*len) as usize).next_multiple_of(8)
                - u64::from_le_bytes(*len) as usize;
            if pad > 0 {
                runs.push(&ZEROS[..pad]);
            }
        }
        Some(runs)
    }
}

/// Reads a runner's operator state given as a list of entries (each `bytes`
/// or a tuple of `bytes` and read-only buffers) without copying it.
pub(crate) fn entries_from_py(operator: &str, list: &Bound<'_, PyList>) -> Result<StateBlob> {
    let fail = |msg: String| {
        Error::operator(
            operator.to_string(),
            format!("the runner's snapshot() returned a list of state entries that {msg}"),
        )
    };
    let mut entries = Vec::with_capacity(list.len());
    for item in list.iter() {
        let parts = if let Ok(t) = item.cast::<PyTuple>() {
            let mut parts = Vec::with_capacity(t.len());
            for p in t.iter() {
                parts.push(Part::from_py(&p).map_err(|m| fail(format!("is invalid: {m}")))?);
            }
            parts
        } else if item.cast::<PyBytes>().is_ok() {
            vec![Part::from_py(&item).map_err(|m| fail(format!("is invalid: {m}")))?]
        } else {
            return Err(fail(format!(
                "does not hold only bytes (or tuples of byte buffers): found {}",
                type_name(&item)
            )));
        };
        entries.push(parts);
    }
    Ok(StateBlob::Deferred(Arc::new(PyEntries::new(entries))))
}
