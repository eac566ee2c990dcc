//! Durable checkpoint storage on the local filesystem (DESIGN.md
//! "Checkpoints": state files first, then a manifest written atomically;
//! nothing without a manifest is restored; checksums refuse corrupt or
//! truncated checkpoints; old checkpoints are retained up to a count). The
//! layout and the state file format are described in the parent module.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use parking_lot::RwLock;

use super::manifest::{key_group_ranges, Manifest, OperatorEntry, StateFileEntry, TaskAlignment};
use super::state_file;
use crate::error::{Error, Result};
use crate::event::BarrierKind;
use crate::state::{OperatorState, StateBlob};

/// Name of the manifest inside a checkpoint directory.
pub const MANIFEST_FILE: &str = "_manifest.json";
/// Temporary name the manifest is written under before the rename.
const MANIFEST_TMP: &str = "_manifest.json.tmp";
/// The file recording the highest checkpoint id ever started under a
/// storage root (issue 20: ids are never reused, also not after a crash
/// that left no directory of the checkpoint in flight).
pub const STARTED_FILE: &str = "_started_ids";
/// Temporary name it is written under before the rename.
const STARTED_TMP: &str = "_started_ids.tmp";
/// Prefix of checkpoint directories: `chk-<id>`.
const CHK_PREFIX: &str = "chk-";
/// First bytes of every state file.
fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn fsync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

fn checkpoint_dir_id(name: &str) -> Option<u64> {
    let digits = name.strip_prefix(CHK_PREFIX)?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The scheme and the rest of `text` if it is a URI (`scheme://rest`).
fn uri_scheme(text: &str) -> Option<(&str, &str)> {
    let (scheme, rest) = text.split_once("://")?;
    let mut chars = scheme.chars();
    let valid = chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    valid.then_some((scheme, rest))
}

/// The local path `path` names: itself, or the path of a `file://` URI
/// (`file:///dir` or `file://localhost/dir`). Any other URI scheme is a
/// `StorageError` naming it (DESIGN.md "Where the data lives": object
/// stores are not served yet, and a URI must never become a local
/// directory named `s3:`; issue 12, item 6).
pub fn local_path(path: &Path) -> Result<PathBuf> {
    let Some(text) = path.to_str() else {
        return Ok(path.to_path_buf());
    };
    let Some((scheme, rest)) = uri_scheme(text) else {
        return Ok(path.to_path_buf());
    };
    if scheme.eq_ignore_ascii_case("file") {
        let local = rest.strip_prefix("localhost").unwrap_or(rest);
        if local.starts_with('/') {
            return Ok(PathBuf::from(local));
        }
        return Err(Error::storage(
            text,
            "a file:// URI must name an absolute path on this host, e.g. file:///data/out",
        ));
    }
    Err(Error::storage(
        text,
        format!(
            "the URI scheme '{scheme}' is not supported yet: eddyline reads and writes local \
             paths and file:// URIs only (object stores such as s3:// are not implemented); \
             use a local path"
        ),
    ))
}

/// A checkpoint directory root holding `chk-<id>` directories.
#[derive(Debug, Clone)]
pub struct CheckpointStorage {
    dir: PathBuf,
}

/// A state file written for a pending checkpoint, to be named in its
/// manifest (the ack of a subtask carries it to the coordinator).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateHandle {
    pub uid: String,
    pub subtask: u32,
    pub file: StateFileEntry,
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
}

/// A checkpoint whose manifest has been written.
#[derive(Debug, Clone)]
pub struct CompletedCheckpoint {
    pub id: u64,
    pub dir: PathBuf,
    pub manifest: Manifest,
}

/// One completed checkpoint as [`CheckpointStorage::list`] sees it.
#[derive(Debug, Clone)]
pub struct CheckpointSummary {
    pub id: u64,
    pub dir: PathBuf,
    /// Read from its manifest, or why the manifest could not be read.
    pub info: Result<SummaryInfo>,
}

/// The headline facts of a completed checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SummaryInfo {
    pub kind: BarrierKind,
    pub trigger_ms: u64,
    pub completion_ms: u64,
    /// Total bytes of its state files.
    pub state_size: u64,
}

impl CheckpointStorage {
    /// Opens (creating it if needed) the storage root `dir` and checks that
    /// it is writable by creating and removing a probe file.
    pub fn open(dir: impl AsRef<Path>) -> Result<Self> {
        let dir = local_path(dir.as_ref())?;
        // A file where the directory (or one of its parents) should be is
        // said as such, not as "not writable: File exists".
        if let Some(file) = dir.ancestors().find(|a| a.exists() && !a.is_dir()) {
            let what = if file == dir {
                "is a file, not a directory".to_string()
            } else {
                format!(
                    "cannot be created: '{}' on its path is a file, not a directory",
                    file.display()
                )
            };
            return Err(Error::checkpoint(
                Some(dir.clone()),
                format!("the checkpoint directory '{}' {what}", dir.display()),
            ));
        }
        let not_writable = |e: &io::Error| {
            Error::checkpoint(
                Some(dir.clone()),
                format!(
                    "the checkpoint directory '{}' is not writable: {e}",
                    dir.display()
                ),
            )
        };
        fs::create_dir_all(&dir).map_err(|e| not_writable(&e))?;
        let probe = dir.join(format!(".eddyline-probe-{}", std::process::id()));
        OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&probe)
            .and_then(|mut f| f.write_all(b"probe"))
            .map_err(|e| not_writable(&e))?;
        fs::remove_file(&probe).map_err(|e| not_writable(&e))?;
        Ok(CheckpointStorage { dir })
    }

    /// The storage root.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The highest checkpoint id ever started under this root: the largest
    /// of the id recorded by [`note_started`](Self::note_started) and of
    /// every `chk-<id>` directory, completed or not (0 when there is none).
    /// A new checkpoint takes a higher id, so an aborted or crashed
    /// checkpoint's id never names another checkpoint.
    pub fn highest_started(&self) -> Result<u64> {
        let path = self.dir.join(STARTED_FILE);
        let recorded = match fs::read_to_string(&path) {
            Ok(text) => text.trim().parse::<u64>().map_err(|_| {
                Error::checkpoint(
                    Some(path.clone()),
                    format!(
                        "'{}' is corrupt: it should hold the highest checkpoint id started, \
                         a decimal number, but holds {:?}",
                        path.display(),
                        text.chars().take(40).collect::<String>()
                    ),
                )
            })?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => 0,
            Err(e) => {
                return Err(Error::checkpoint(
                    Some(path.clone()),
                    format!("cannot read '{}': {e}", path.display()),
                ))
            }
        };
        let dirs = self.checkpoint_dirs()?.first().map_or(0, |(id, _)| *id);
        Ok(recorded.max(dirs))
    }

    /// Records durably (write, fsync, rename) that checkpoint `id` started,
    /// before anything of it is written, if `id` is above the recorded one.
    pub fn note_started(&self, id: u64) -> Result<()> {
        let path = self.dir.join(STARTED_FILE);
        let failed = |e: io::Error| {
            Error::checkpoint(
                Some(path.clone()),
                format!(
                    "cannot record that checkpoint {id} started in '{}': {e}",
                    path.display()
                ),
            )
        };
        if self.highest_started()? >= id {
            return Ok(());
        }
        let tmp = self.dir.join(STARTED_TMP);
        let mut f = File::create(&tmp).map_err(failed)?;
        f.write_all(format!("{id}\n").as_bytes()).map_err(failed)?;
        f.sync_all().map_err(failed)?;
        fs::rename(&tmp, &path).map_err(failed)?;
        fsync_dir(&self.dir).map_err(failed)
    }

    /// The directory of checkpoint `id`.
    pub fn checkpoint_dir(&self, id: u64) -> PathBuf {
        self.dir.join(format!("{CHK_PREFIX}{id}"))
    }

    /// Starts writing checkpoint `id`. A leftover directory of an attempt
    /// that never completed is replaced; a completed one is an error.
    pub fn begin(&self, id: u64) -> Result<PendingCheckpoint> {
        let dir = self.checkpoint_dir(id);
        if dir.join(MANIFEST_FILE).exists() {
            return Err(Error::checkpoint(
                Some(dir.clone()),
                format!(
                    "checkpoint {id} already exists and is completed at '{}'",
                    dir.display()
                ),
            ));
        }
        let failed = |e: io::Error| {
            Error::checkpoint(
                Some(dir.clone()),
                format!(
                    "cannot create the directory '{}' of checkpoint {id}: {e}",
                    dir.display()
                ),
            )
        };
        if dir.exists() {
            fs::remove_dir_all(&dir).map_err(failed)?;
        }
        fs::create_dir(&dir).map_err(failed)?;
        fsync_dir(&self.dir).map_err(failed)?;
        Ok(PendingCheckpoint {
            inner: Arc::new(PendingInner {
                id,
                dir: dir.clone(),
                written: RwLock::new(Written {
                    closed: None,
                    handles: BTreeMap::new(),
                }),
            }),
        })
    }

    /// Ids and directories of completed checkpoints (with a manifest file),
    /// newest first, without reading the manifests.
    fn completed_dirs(&self) -> Result<Vec<(u64, PathBuf)>> {
        let mut found = self.checkpoint_dirs()?;
        found.retain(|(_, dir)| dir.join(MANIFEST_FILE).is_file());
        Ok(found)
    }

    /// Every `chk-<id>` directory, newest first.
    fn checkpoint_dirs(&self) -> Result<Vec<(u64, PathBuf)>> {
        let failed = |e: io::Error| {
            Error::checkpoint(
                Some(self.dir.clone()),
                format!(
                    "cannot list the checkpoint directory '{}': {e}",
                    self.dir.display()
                ),
            )
        };
        let mut found = Vec::new();
        for entry in fs::read_dir(&self.dir).map_err(failed)? {
            let entry = entry.map_err(failed)?;
            let Some(id) = entry.file_name().to_str().and_then(checkpoint_dir_id) else {
                continue;
            };
            if entry.file_type().map_err(failed)?.is_dir() {
                found.push((id, entry.path()));
            }
        }
        found.sort_by_key(|(id, _)| std::cmp::Reverse(*id));
        Ok(found)
    }

    /// Completed checkpoints, newest first. Directories without a manifest
    /// (in progress, aborted or crashed mid-write) are not listed. A
    /// manifest that cannot be read is listed with the error in `info`.
    pub fn list(&self) -> Result<Vec<CheckpointSummary>> {
        Ok(self
            .completed_dirs()?
            .into_iter()
            .map(|(id, dir)| {
                let info = read_manifest(&dir.join(MANIFEST_FILE)).map(|m| SummaryInfo {
                    kind: m.kind,
                    trigger_ms: m.trigger_ms,
                    completion_ms: m.completion_ms,
                    state_size: m.state_size(),
                });
                CheckpointSummary { id, dir, info }
            })
            .collect())
    }

    /// Loads and verifies completed checkpoint `id` of this storage.
    pub fn load(&self, id: u64) -> Result<RestoredCheckpoint> {
        Self::load_path(self.checkpoint_dir(id))
    }

    /// Loads and verifies the checkpoint at `path`: a checkpoint directory
    /// or its manifest file. Every state file is read and its size and
    /// checksums checked; any problem is an error naming the file.
    pub fn load_path(path: impl AsRef<Path>) -> Result<RestoredCheckpoint> {
        let path = &local_path(path.as_ref())?;
        let dir = if path.file_name().is_some_and(|n| n == MANIFEST_FILE) && path.is_file() {
            path.parent().unwrap_or(Path::new(".")).to_path_buf()
        } else {
            path.to_path_buf()
        };
        if !dir.is_dir() {
            return Err(Error::checkpoint(
                Some(path.to_path_buf()),
                format!(
                    "'{}' is not a checkpoint: it does not exist or is not a directory",
                    path.display()
                ),
            ));
        }
        let manifest_path = dir.join(MANIFEST_FILE);
        if !manifest_path.is_file() {
            let root = CheckpointStorage { dir: dir.clone() };
            let hint = if root.completed_dirs().is_ok_and(|d| !d.is_empty()) {
                "; it looks like a checkpoint storage root, pass one of its chk-<id> directories"
            } else {
                " (the checkpoint never completed, or this is not a checkpoint)"
            };
            return Err(Error::checkpoint(
                Some(manifest_path.clone()),
                format!(
                    "'{}' is not a completed checkpoint: its manifest '{}' is missing{hint}",
                    dir.display(),
                    manifest_path.display()
                ),
            ));
        }
        let manifest = read_manifest(&manifest_path)?;
        restore(dir, manifest_path, manifest)
    }

    /// The newest completed checkpoint, loaded and verified; `None` if there
    /// is none. A corrupt newest checkpoint is an error: this never falls
    /// back to an older one silently (DESIGN.md, FLINK-22502); a caller that
    /// may fall back chooses one from [`list`](Self::list) explicitly.
    pub fn latest_valid(&self) -> Result<Option<RestoredCheckpoint>> {
        match self.completed_dirs()?.first() {
            Some((_, dir)) => Self::load_path(dir).map(Some),
            None => Ok(None),
        }
    }

    /// Keeps the `n` newest completed checkpoints and deletes older
    /// completed ones, plus any directory without a manifest older than the
    /// newest completed checkpoint (newer ones may be in progress). Returns
    /// the ids deleted.
    pub fn retain(&self, n: usize) -> Result<Vec<u64>> {
        self.retain_since(n, u64::MAX)
    }

    /// Like [`retain`](Self::retain), but also keeps every completed
    /// checkpoint with an id `>= since` (FLINK-4120: the checkpoints back to
    /// the null-state checkpoint of the newest one, whose source offsets a
    /// recompute recovery replays). Returns the ids deleted.
    pub fn retain_since(&self, n: usize, since: u64) -> Result<Vec<u64>> {
        let all = self.checkpoint_dirs()?;
        let newest_completed = all
            .iter()
            .find(|(_, d)| d.join(MANIFEST_FILE).is_file())
            .map(|(id, _)| *id);
        let mut kept = 0;
        let mut removed = Vec::new();
        for (id, dir) in all {
            let delete = if dir.join(MANIFEST_FILE).is_file() {
                kept += 1;
                kept > n && id < since
            } else {
                newest_completed.is_some_and(|newest| id < newest)
            };
            if delete {
                remove_checkpoint_dir(&dir)?;
                removed.push(id);
            }
        }
        Ok(removed)
    }
}

/// Deletes a checkpoint directory, manifest first so that a crash midway
/// never leaves a manifest naming deleted state files.
fn remove_checkpoint_dir(dir: &Path) -> Result<()> {
    let failed = |e: io::Error| {
        Error::checkpoint(
            Some(dir.to_path_buf()),
            format!("cannot delete the checkpoint '{}': {e}", dir.display()),
        )
    };
    match fs::remove_file(dir.join(MANIFEST_FILE)) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(failed(e)),
    }
    match fs::remove_dir_all(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(failed(e)),
    }
}

pub(crate) fn read_manifest(path: &Path) -> Result<Manifest> {
    let bytes = fs::read(path).map_err(|e| {
        Error::checkpoint(
            Some(path.to_path_buf()),
            format!(
                "the checkpoint manifest '{}' cannot be read: {e}",
                path.display()
            ),
        )
    })?;
    let text = String::from_utf8(bytes).map_err(|_| {
        Error::checkpoint(
            Some(path.to_path_buf()),
            format!(
                "the checkpoint manifest '{}' is corrupt: it is not UTF-8 text",
                path.display()
            ),
        )
    })?;
    Manifest::decode(&text).map_err(|msg| {
        Error::checkpoint(
            Some(path.to_path_buf()),
            format!("the checkpoint manifest '{}' {msg}", path.display()),
        )
    })
}

/// Which files a pending checkpoint wrote, and whether it is still open.
struct Written {
    /// `Some("completed")` / `Some("aborted")` once closed.
    closed: Option<&'static str>,
    handles: BTreeMap<(String, u32), StateHandle>,
}

struct PendingInner {
    id: u64,
    dir: PathBuf,
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
        write!(f, "PendingCheckpoint({})", self.inner.dir.display())
    }
}

impl std::fmt::Debug for StateWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StateWriter({})", self.inner.dir.display())
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
}

impl PendingCheckpoint {
    /// The checkpoint id.
    pub fn id(&self) -> u64 {
        self.inner.id
    }

    /// Its directory.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
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

    /// Writes the manifest atomically (temporary name, fsync, rename, fsync
    /// of the directory): from then on the checkpoint exists.
    pub fn complete(self, info: CheckpointInfo) -> Result<CompletedCheckpoint> {
        let inner = &self.inner;
        let mut written = inner.written.write();
        inner.check_open(&written)?;
        let manifest_path = inner.dir.join(MANIFEST_FILE);
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
                    (None, Some(h)) => sub.state = Some(h.file.clone()),
                    (None, None) => {}
                    (Some(f), Some(h)) if *f == h.file => {}
                    (Some(f), _) => {
                        return Err(fail(format!(
                            "checkpoint {} cannot complete: operator '{}' subtask {} names state file '{}', which this checkpoint did not write",
                            inner.id, op.uid, sub.subtask, f.file
                        )))
                    }
                }
                if sub.state.is_some() && !referenced.insert(key) {
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
                inner.id, h.file.file
            )));
        }
        let completion_ms = info.completion_ms.unwrap_or_else(now_ms);
        let manifest = Manifest {
            id: inner.id,
            kind: info.kind,
            trigger_ms: info.trigger_ms,
            completion_ms,
            duration_ms: completion_ms.saturating_sub(info.trigger_ms),
            alignments: info.alignments,
            operators,
        };
        let tmp = inner.dir.join(MANIFEST_TMP);
        let io_fail = |e: io::Error| {
            fail(format!(
                "cannot write the manifest '{}' of checkpoint {}: {e}",
                manifest_path.display(),
                inner.id
            ))
        };
        {
            let mut f = File::create(&tmp).map_err(io_fail)?;
            f.write_all(manifest.encode().as_bytes()).map_err(io_fail)?;
            f.sync_all().map_err(io_fail)?;
        }
        fs::rename(&tmp, &manifest_path).map_err(io_fail)?;
        fsync_dir(&inner.dir).map_err(io_fail)?;
        written.closed = Some("completed");
        Ok(CompletedCheckpoint {
            id: inner.id,
            dir: inner.dir.clone(),
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
        remove_checkpoint_dir(&self.inner.dir)
    }
}

impl PendingInner {
    fn check_open(&self, written: &Written) -> Result<()> {
        match written.closed {
            None => Ok(()),
            Some(how) => Err(Error::checkpoint(
                Some(self.dir.clone()),
                format!("checkpoint {} was already {how}", self.id),
            )),
        }
    }

    fn write_state(&self, uid: &str, subtask: u32, state: &OperatorState) -> Result<StateHandle> {
        let written = self.written.read();
        self.check_open(&written)?;
        let key = (uid.to_string(), subtask);
        let name = state_file::file_name(uid, subtask);
        let path = self.dir.join(&name);
        let fail = |msg: String| Error::checkpoint(Some(path.clone()), msg);
        if written.handles.contains_key(&key) {
            return Err(fail(format!(
                "the state of operator '{uid}' subtask {subtask} was already written to '{name}' for checkpoint {}",
                self.id
            )));
        }
        let (size, checksum, groups) = state_file::write(&path, uid, subtask, state)?;
        let handle = StateHandle {
            uid: uid.to_string(),
            subtask,
            file: StateFileEntry {
                file: name,
                size,
                checksum,
                key_groups: key_group_ranges(&groups),
            },
        };
        drop(written);
        let mut written = self.written.write();
        self.check_open(&written)?;
        written.handles.insert(key, handle.clone());
        Ok(handle)
    }
}

/// A completed checkpoint read back and verified.
#[derive(Debug, Clone)]
pub struct RestoredCheckpoint {
    dir: PathBuf,
    manifest: Manifest,
    /// uid -> subtask -> state (an empty state for subtasks without a file).
    states: BTreeMap<String, BTreeMap<u32, OperatorState>>,
}

impl RestoredCheckpoint {
    /// The checkpoint id.
    pub fn id(&self) -> u64 {
        self.manifest.id
    }

    /// Its directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Its manifest.
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// The uids of the operators it holds, sorted.
    pub fn uids(&self) -> impl Iterator<Item = &str> {
        self.states.keys().map(String::as_str)
    }

    /// The state of `uid`'s `subtask` (blobs are `StateBlob::Bytes`).
    pub fn state(&self, uid: &str, subtask: u32) -> Option<&OperatorState> {
        self.states.get(uid)?.get(&subtask)
    }

    /// Every subtask state of `uid`, by subtask.
    pub fn subtask_states(&self, uid: &str) -> impl Iterator<Item = (u32, &OperatorState)> {
        self.states
            .get(uid)
            .into_iter()
            .flat_map(|m| m.iter().map(|(s, st)| (*s, st)))
    }

    /// The non-keyed state blobs of every old subtask of `uid`, by subtask
    /// (for redistributing operator state at a new parallelism).
    pub fn operator_blobs(&self, uid: &str) -> Vec<(u32, StateBlob)> {
        self.subtask_states(uid)
            .filter_map(|(s, st)| st.operator.clone().map(|b| (s, b)))
            .collect()
    }

    /// The keyed state blobs of `uid` whose key group lies in `key_groups`,
    /// gathered across all old subtasks and sorted by key group (for
    /// restoring a new subtask at another parallelism).
    pub fn keyed_state(&self, uid: &str, key_groups: Range<u32>) -> Vec<(u32, StateBlob)> {
        let mut out: Vec<(u32, StateBlob)> = self
            .subtask_states(uid)
            .flat_map(|(_, st)| st.keyed.iter())
            .filter(|(g, _)| key_groups.contains(g))
            .cloned()
            .collect();
        out.sort_by_key(|(g, _)| *g);
        out
    }
}

/// Reads every state file the manifest names and verifies it.
fn restore(dir: PathBuf, manifest_path: PathBuf, manifest: Manifest) -> Result<RestoredCheckpoint> {
    let bad_manifest = |msg: String| {
        Error::checkpoint(
            Some(manifest_path.clone()),
            format!(
                "the checkpoint manifest '{}' {msg}",
                manifest_path.display()
            ),
        )
    };
    if let Some(named) = dir
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(checkpoint_dir_id)
    {
        if named != manifest.id {
            return Err(bad_manifest(format!(
                "records checkpoint {} but lies in the directory of checkpoint {named}",
                manifest.id
            )));
        }
    }
    let mut states: BTreeMap<String, BTreeMap<u32, OperatorState>> = BTreeMap::new();
    for op in &manifest.operators {
        if states.contains_key(&op.uid) {
            return Err(bad_manifest(format!("lists operator '{}' twice", op.uid)));
        }
        let mut subtasks = BTreeMap::new();
        let mut owner: BTreeMap<u32, u32> = BTreeMap::new();
        for sub in &op.subtasks {
            let state = match &sub.state {
                None => OperatorState::default(),
                Some(entry) => state_file::read(&dir, &op.uid, sub.subtask, entry)?,
            };
            for (g, _) in &state.keyed {
                if let Some(other) = owner.insert(*g, sub.subtask) {
                    return Err(bad_manifest(format!(
                        "gives key group {g} of operator '{}' to both subtask {other} and subtask {}",
                        op.uid, sub.subtask
                    )));
                }
            }
            if subtasks.insert(sub.subtask, state).is_some() {
                return Err(bad_manifest(format!(
                    "lists subtask {} of operator '{}' twice",
                    sub.subtask, op.uid
                )));
            }
        }
        states.insert(op.uid.clone(), subtasks);
    }
    Ok(RestoredCheckpoint {
        dir,
        manifest,
        states,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_checkpoint_dir_id_parses_only_chk_dirs() {
        assert_eq!(checkpoint_dir_id("chk-12"), Some(12));
        assert_eq!(checkpoint_dir_id("chk-"), None);
        assert_eq!(checkpoint_dir_id("chk-1a"), None);
        assert_eq!(checkpoint_dir_id("sav-1"), None);
    }

    #[test]
    fn test_write_twice_and_after_abort_are_errors() -> Result<()> {
        let tmp = tempfile::tempdir().expect("tempdir");
        let storage = CheckpointStorage::open(tmp.path())?;
        let pending = storage.begin(3)?;
        let writer = pending.writer();
        writer.write_state("a", 0, &OperatorState::default())?;
        assert!(pending
            .write_state("a", 0, &OperatorState::default())
            .is_err());
        let dir = pending.dir().to_path_buf();
        pending.abort()?;
        assert!(!dir.exists());
        let err = writer
            .write_state("a", 1, &OperatorState::default())
            .expect_err("aborted");
        assert!(err.to_string().contains("already aborted"), "{err}");
        Ok(())
    }

    #[test]
    fn test_complete_refuses_unlisted_state() -> Result<()> {
        let tmp = tempfile::tempdir().expect("tempdir");
        let storage = CheckpointStorage::open(tmp.path())?;
        let pending = storage.begin(1)?;
        pending.write_state("a", 0, &OperatorState::default())?;
        let err = pending
            .complete(CheckpointInfo {
                kind: BarrierKind::Checkpoint,
                trigger_ms: 0,
                completion_ms: Some(1),
                alignments: vec![],
                operators: vec![],
            })
            .expect_err("unlisted");
        assert!(err.to_string().contains("does not list"), "{err}");
        assert!(storage.list()?.is_empty());
        Ok(())
    }

    #[test]
    fn test_pending_checkpoint_is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<PendingCheckpoint>();
        check::<StateWriter>();
    }
}
