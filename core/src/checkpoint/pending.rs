//! A checkpoint being written (DESIGN.md "Checkpoints": state files first,
//! then the manifest, written atomically; nothing without a manifest is
//! restored): [`PendingCheckpoint`] takes the state files of its subtasks,
//! in full or incrementally (`incremental.rs`), from the writer threads,
//! and completes by writing the manifest or aborts by deleting what it
//! wrote. [`super::storage::CheckpointStorage`] begins one.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use parking_lot::RwLock;

use super::incremental::{self, SubtaskBase, SHARED_DIR};
use super::manifest::{
    key_group_ranges, Manifest, OperatorEntry, ReusedState, StateFileEntry, TaskAlignment,
};
use super::state_file;
use crate::error::{Error, Result};
use crate::event::BarrierKind;
use crate::state::OperatorState;
use crate::store::Store;

/// Name of the manifest inside a checkpoint directory.
pub const MANIFEST_FILE: &str = "_manifest.json";
fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
/// A state file written for a pending checkpoint, to be named in its
/// manifest (the ack of a subtask carries it to the coordinator).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateHandle {
    pub uid: String,
    pub subtask: u32,
    /// The file written; `None` when an incremental checkpoint found
    /// nothing changed (every key group reused, no non-keyed state).
    pub file: Option<StateFileEntry>,
    /// Key groups an incremental checkpoint takes from earlier files.
    pub reused: Vec<ReusedState>,
    /// What the next incremental checkpoint compares this subtask's key
    /// groups against (`None` for a full write).
    pub base: Option<Arc<SubtaskBase>>,
}

impl StateHandle {
    /// Bytes written for it.
    pub fn written_bytes(&self) -> u64 {
        self.file.as_ref().map_or(0, |f| f.size)
    }

    /// Bytes of its whole state: written plus reused sections.
    pub fn state_bytes(&self) -> u64 {
        self.written_bytes() + self.reused.iter().map(|r| r.bytes).sum::<u64>()
    }
}

/// What the coordinator knows when a checkpoint completes. State files
/// written through the pending checkpoint fill in `SubtaskEntry::state`
/// where it is `None`; an entry that names one must match it exactly.
#[derive(Debug, Clone)]
pub struct CheckpointInfo {
    pub kind: BarrierKind,
    pub trigger_ms: u64,
    /// `None`: now.
    pub completion_ms: Option<u64>,
    pub alignments: Vec<TaskAlignment>,
    pub operators: Vec<OperatorEntry>,
    /// Taken after every task finished; recomputing operators stored their
    /// state too ([`Manifest::final_state`]).
    pub final_state: bool,
}

/// A checkpoint whose manifest has been written.
#[derive(Debug, Clone)]
pub struct CompletedCheckpoint {
    pub id: u64,
    pub dir: PathBuf,
    pub manifest: Manifest,
}

/// Deletes a checkpoint directory, manifest first so that a crash midway
/// never leaves a manifest naming deleted state files.
pub(crate) fn remove_checkpoint_dir(chk: &Store) -> Result<()> {
    let failed = |e: io::Error| {
        Error::checkpoint(
            Some(chk.location().to_path_buf()),
            format!(
                "cannot delete the checkpoint '{}': {e}",
                chk.location().display()
            ),
        )
    };
    chk.remove(MANIFEST_FILE).map_err(failed)?;
    chk.remove_all().map_err(failed)
}
/// Which files a pending checkpoint wrote, and whether it is still open.
struct Written {
    /// `Some("completed")` / `Some("aborted")` once closed.
    closed: Option<&'static str>,
    handles: BTreeMap<(String, u32), StateHandle>,
    /// Files written into the root's `shared/` directory (deleted on abort).
    shared: Vec<String>,
}

struct PendingInner {
    id: u64,
    dir: Store,
    /// Writers hold the read lock while writing; complete and abort take the
    /// write lock, so they wait for writes in flight.
    written: RwLock<Written>,
}

/// A checkpoint being written: state files go in, then the manifest.
///
/// `Send + Sync`: subtasks may write their state from background threads,
/// through `&self` or a [`StateWriter`].
pub struct PendingCheckpoint {
    inner: Arc<PendingInner>,
}

/// A cloneable handle that writes state files into a pending checkpoint
/// (one per asynchronous writer thread). Writing after the checkpoint
/// completed or aborted is an error.
#[derive(Clone)]
pub struct StateWriter {
    inner: Arc<PendingInner>,
}

impl std::fmt::Debug for PendingCheckpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "PendingCheckpoint({})",
            self.inner.dir.location().display()
        )
    }
}

impl std::fmt::Debug for StateWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StateWriter({})", self.inner.dir.location().display())
    }
}

impl StateWriter {
    /// See [`PendingCheckpoint::write_state`].
    pub fn write_state(
        &self,
        uid: &str,
        subtask: u32,
        state: &OperatorState,
    ) -> Result<StateHandle> {
        self.inner.write_state(uid, subtask, state)
    }

    /// See [`PendingCheckpoint::write_state_incremental`].
    pub fn write_state_incremental(
        &self,
        uid: &str,
        subtask: u32,
        state: &OperatorState,
        base: Option<&SubtaskBase>,
    ) -> Result<StateHandle> {
        self.inner.write_incremental(uid, subtask, state, base)
    }
}

impl PendingCheckpoint {
    /// The checkpoint id.
    pub fn id(&self) -> u64 {
        self.inner.id
    }

    /// Its directory.
    pub fn dir(&self) -> &Path {
        self.inner.dir.location()
    }

    /// A handle for writer threads.
    pub fn writer(&self) -> StateWriter {
        StateWriter {
            inner: self.inner.clone(),
        }
    }

    /// Serializes `state` (deferred blobs included) into the state file of
    /// (`uid`, `subtask`), fsyncs it and returns its handle. Each pair may
    /// be written once.
    pub fn write_state(
        &self,
        uid: &str,
        subtask: u32,
        state: &OperatorState,
    ) -> Result<StateHandle> {
        self.inner.write_state(uid, subtask, state)
    }

    /// Writes (`uid`, `subtask`)'s state incrementally (see
    /// [`incremental`]): its non-keyed state and the key groups that differ
    /// from `base` go into a new file of the root's `shared/` directory; the
    /// handle names the earlier files the unchanged key groups are taken
    /// from. Each pair may be written once.
    pub fn write_state_incremental(
        &self,
        uid: &str,
        subtask: u32,
        state: &OperatorState,
        base: Option<&SubtaskBase>,
    ) -> Result<StateHandle> {
        self.inner.write_incremental(uid, subtask, state, base)
    }

    /// Writes the manifest atomically (on a disk: temporary name, fsync,
    /// rename, fsync of the directory; on an object store: one PUT): from
    /// then on the checkpoint exists.
    pub fn complete(self, info: CheckpointInfo) -> Result<CompletedCheckpoint> {
        let inner = &self.inner;
        let mut written = inner.written.write();
        inner.check_open(&written)?;
        let manifest_path = inner.dir.location_of(MANIFEST_FILE);
        let fail = |msg: String| Error::checkpoint(Some(manifest_path.clone()), msg);
        let mut operators = info.operators;
        let mut referenced = BTreeSet::new();
        let mut seen_uids = BTreeSet::new();
        for op in &mut operators {
            if !seen_uids.insert(op.uid.clone()) {
                return Err(fail(format!(
                    "checkpoint {} cannot complete: operator uid '{}' is listed twice",
                    inner.id, op.uid
                )));
            }
            for sub in &mut op.subtasks {
                let key = (op.uid.clone(), sub.subtask);
                let handle = written.handles.get(&key);
                match (&sub.state, handle) {
                    (None, Some(h)) => {
                        sub.state.clone_from(&h.file);
                        sub.reused.clone_from(&h.reused);
                    }
                    (None, None) => {}
                    (Some(f), Some(h)) if Some(f) == h.file.as_ref() => {}
                    (Some(f), _) => {
                        return Err(fail(format!(
                            "checkpoint {} cannot complete: operator '{}' subtask {} names state file '{}', which this checkpoint did not write",
                            inner.id, op.uid, sub.subtask, f.file
                        )))
                    }
                }
                if (sub.state.is_some() || handle.is_some()) && !referenced.insert(key) {
                    return Err(fail(format!(
                        "checkpoint {} cannot complete: operator '{}' lists subtask {} twice",
                        inner.id, op.uid, sub.subtask
                    )));
                }
            }
        }
        if let Some(((uid, subtask), h)) = written
            .handles
            .iter()
            .find(|(k, _)| !referenced.contains(*k))
        {
            return Err(fail(format!(
                "checkpoint {} cannot complete: the state file '{}' of operator '{uid}' subtask {subtask} was written but the manifest does not list that subtask",
                inner.id,
                h.file.as_ref().map_or("(none)", |f| f.file.as_str())
            )));
        }
        let completion_ms = info.completion_ms.unwrap_or_else(now_ms);
        let manifest = Manifest {
            id: inner.id,
            kind: info.kind,
            trigger_ms: info.trigger_ms,
            completion_ms,
            duration_ms: completion_ms.saturating_sub(info.trigger_ms),
            final_state: info.final_state,
            alignments: info.alignments,
            operators,
        };
        let io_fail = |e: io::Error| {
            fail(format!(
                "cannot write the manifest '{}' of checkpoint {}: {e}",
                manifest_path.display(),
                inner.id
            ))
        };
        inner
            .dir
            .put_atomic(MANIFEST_FILE, manifest.encode().as_bytes())
            .map_err(io_fail)?;
        written.closed = Some("completed");
        Ok(CompletedCheckpoint {
            id: inner.id,
            dir: inner.dir.location().to_path_buf(),
            manifest,
        })
    }

    /// Gives the checkpoint up and removes its directory (waiting for writes
    /// in flight; later writes fail).
    pub fn abort(self) -> Result<()> {
        let mut written = self.inner.written.write();
        if written.closed.is_some() {
            return Ok(());
        }
        written.closed = Some("aborted");
        if let Some(root) = self.inner.dir.parent() {
            incremental::remove_files(&root, &written.shared)?;
        }
        remove_checkpoint_dir(&self.inner.dir)
    }
}

impl PendingInner {
    fn check_open(&self, written: &Written) -> Result<()> {
        match written.closed {
            None => Ok(()),
            Some(how) => Err(Error::checkpoint(
                Some(self.dir.location().to_path_buf()),
                format!("checkpoint {} was already {how}", self.id),
            )),
        }
    }

    fn write_state(&self, uid: &str, subtask: u32, state: &OperatorState) -> Result<StateHandle> {
        let written = self.written.read();
        self.check_open(&written)?;
        let key = (uid.to_string(), subtask);
        let name = state_file::file_name(uid, subtask);
        let path = self.dir.location_of(&name);
        let fail = |msg: String| Error::checkpoint(Some(path.clone()), msg);
        if written.handles.contains_key(&key) {
            return Err(fail(format!(
                "the state of operator '{uid}' subtask {subtask} was already written to '{name}' for checkpoint {}",
                self.id
            )));
        }
        let file = state_file::write(&self.dir, &name, uid, subtask, state)?;
        let groups: Vec<u32> = file.groups.iter().map(|g| g.0).collect();
        let handle = StateHandle {
            uid: uid.to_string(),
            subtask,
            file: Some(StateFileEntry {
                file: name,
                size: file.size,
                checksum: file.checksum,
                key_groups: key_group_ranges(&groups),
                shared: false,
            }),
            reused: Vec::new(),
            base: None,
        };
        drop(written);
        let mut written = self.written.write();
        self.check_open(&written)?;
        written.handles.insert(key, handle.clone());
        Ok(handle)
    }
}

impl PendingInner {
    fn write_incremental(
        &self,
        uid: &str,
        subtask: u32,
        state: &OperatorState,
        base: Option<&SubtaskBase>,
    ) -> Result<StateHandle> {
        let written = self.written.read();
        self.check_open(&written)?;
        let key = (uid.to_string(), subtask);
        let dir = self.dir.location().to_path_buf();
        let fail = |msg: String| Error::checkpoint(Some(dir.clone()), msg);
        if written.handles.contains_key(&key) {
            return Err(fail(format!(
                "the state of operator '{uid}' subtask {subtask} was already written for checkpoint {}",
                self.id
            )));
        }
        let root = self.dir.parent().ok_or_else(|| {
            fail(format!(
                "checkpoint {} lies in no storage root: it cannot share state files",
                self.id
            ))
        })?;
        let shared = root.child(SHARED_DIR);
        shared.make_dir().map_err(|e| {
            fail(format!(
                "cannot create the shared state directory '{}': {e}",
                shared.location().display()
            ))
        })?;
        let w = incremental::write(&shared, self.id, uid, subtask, state, base)?;
        let handle = StateHandle {
            uid: uid.to_string(),
            subtask,
            file: w.file,
            reused: w.reused,
            base: Some(Arc::new(w.base)),
        };
        drop(written);
        let mut written = self.written.write();
        if let Some(f) = &handle.file {
            written.shared.push(f.file.clone());
        }
        self.check_open(&written)?;
        written.handles.insert(key, handle.clone());
        Ok(handle)
    }
}

impl PendingCheckpoint {
    /// A pending checkpoint `id` writing into the (created) directory `dir`.
    pub(crate) fn new(id: u64, dir: Store) -> Self {
        PendingCheckpoint {
            inner: Arc::new(PendingInner {
                id,
                dir,
                written: RwLock::new(Written {
                    closed: None,
                    handles: BTreeMap::new(),
                    shared: Vec::new(),
                }),
            }),
        }
    }
}
