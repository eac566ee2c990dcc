//! Durable checkpoint storage on a local disk or an object store (DESIGN.md
//! "Checkpoints" and "Where the data lives": state files first, then a
//! manifest written atomically, by rename on a disk or as one PUT on an
//! object store; nothing without a manifest is restored; checksums refuse
//! corrupt or truncated checkpoints; old checkpoints are retained up to a
//! count). The layout and the state file format are described in the parent
//! module; the I/O goes through [`crate::store::Store`].

use std::collections::BTreeMap;
use std::io;
use std::ops::Range;
use std::path::{Path, PathBuf};

use super::incremental::{self, SHARED_DIR};
use super::manifest::Manifest;
use super::pending::remove_checkpoint_dir;
pub use super::pending::{
    CheckpointInfo, CompletedCheckpoint, PendingCheckpoint, StateHandle, StateWriter, MANIFEST_FILE,
};
use crate::error::{Error, Result};
use crate::event::BarrierKind;
use crate::state::{OperatorState, StateBlob};
use crate::store::{StorageOptions, Store};

/// The file recording the highest checkpoint id ever started under a
/// storage root (ids are never reused, also not after a crash
/// that left no directory of the checkpoint in flight).
pub const STARTED_FILE: &str = "_started_ids";
/// Prefix of checkpoint directories: `chk-<id>`.
const CHK_PREFIX: &str = "chk-";

fn checkpoint_dir_id(name: &str) -> Option<u64> {
    let digits = name.strip_prefix(CHK_PREFIX)?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// What one retention pass did ([`CheckpointStorage::retention`]).
#[derive(Debug, Default)]
pub struct Retention {
    /// The ids of the checkpoints deleted.
    pub removed: Vec<u64>,
    /// The deletions that failed, each naming its path and cause.
    pub errors: Vec<Error>,
}

/// A checkpoint directory root holding `chk-<id>` directories.
#[derive(Debug, Clone)]
pub struct CheckpointStorage {
    store: Store,
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
    /// Bytes of its whole state (its own files plus the sections it
    /// reuses from earlier incremental checkpoints).
    pub state_size: u64,
    /// Bytes of the state files it wrote itself.
    pub written_size: u64,
}

impl CheckpointStorage {
    /// Opens (creating it if needed) the storage root `dir` and checks that
    /// it is writable by creating and removing a probe file; object stores
    /// are reached with the standard environment variables.
    pub fn open(dir: impl AsRef<Path>) -> Result<Self> {
        Self::open_with(dir, &StorageOptions::new())
    }

    /// [`open`](Self::open) with `storage_options` for an object store URI.
    /// A missing bucket, bad credentials or an unreachable endpoint is a
    /// `Storage` error naming the URI, before anything runs.
    pub fn open_with(dir: impl AsRef<Path>, options: &StorageOptions) -> Result<Self> {
        let store = Store::open(dir.as_ref(), options)?;
        let probe = format!(".eddyline-probe-{}", std::process::id());
        if !store.is_local() {
            let uri = store.location().display().to_string();
            store
                .put_atomic(&probe, b"probe")
                .and_then(|()| store.remove(&probe))
                .map_err(|e| {
                    Error::storage(
                        &uri,
                        format!("the checkpoint location '{uri}' cannot be written: {e}"),
                    )
                })?;
            return Ok(CheckpointStorage { store });
        }
        let dir = store.location().to_path_buf();
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
        store.make_dir().map_err(|e| not_writable(&e))?;
        store
            .put_atomic(&probe, b"probe")
            .and_then(|()| store.remove(&probe))
            .map_err(|e| not_writable(&e))?;
        Ok(CheckpointStorage { store })
    }

    /// Opens the existing storage root `dir` for reading only: nothing is
    /// created or written (a reader needs no write access).
    pub fn open_read_only(dir: impl AsRef<Path>, options: &StorageOptions) -> Result<Self> {
        Ok(CheckpointStorage {
            store: Store::open(dir.as_ref(), options)?,
        })
    }

    /// The storage root: a local path or a URI.
    pub fn dir(&self) -> &Path {
        self.store.location()
    }

    /// The highest checkpoint id ever started under this root: the largest
    /// of the id recorded by [`note_started`](Self::note_started) and of
    /// every `chk-<id>` directory, completed or not (0 when there is none).
    /// A new checkpoint takes a higher id, so an aborted or crashed
    /// checkpoint's id never names another checkpoint.
    pub fn highest_started(&self) -> Result<u64> {
        let path = self.store.location_of(STARTED_FILE);
        let recorded = match self.store.read(STARTED_FILE) {
            Ok(Some(bytes)) => {
                let text = String::from_utf8_lossy(&bytes);
                text.trim().parse::<u64>().map_err(|_| {
                    Error::checkpoint(
                        Some(path.clone()),
                        format!(
                            "'{}' is corrupt: it should hold the highest checkpoint id started, \
                         a decimal number, but holds {:?}",
                            path.display(),
                            text.chars().take(40).collect::<String>()
                        ),
                    )
                })?
            }
            Ok(None) => 0,
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
        let path = self.store.location_of(STARTED_FILE);
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
        self.store
            .put_atomic(STARTED_FILE, format!("{id}\n").as_bytes())
            .map_err(failed)
    }

    /// The directory of checkpoint `id`.
    pub fn checkpoint_dir(&self, id: u64) -> PathBuf {
        self.store.location_of(&format!("{CHK_PREFIX}{id}"))
    }

    /// Starts writing checkpoint `id`. A leftover directory of an attempt
    /// that never completed is replaced; a completed one is an error.
    pub fn begin(&self, id: u64) -> Result<PendingCheckpoint> {
        let chk = self.store.child(&format!("{CHK_PREFIX}{id}"));
        let dir = chk.location().to_path_buf();
        if chk.exists(MANIFEST_FILE).unwrap_or(false) {
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
        chk.remove_all().map_err(failed)?;
        chk.make_dir().map_err(failed)?;
        self.store.sync().map_err(failed)?;
        Ok(PendingCheckpoint::new(id, chk))
    }

    /// Ids and directories of completed checkpoints (with a manifest file),
    /// newest first, without reading the manifests.
    fn completed_dirs(&self) -> Result<Vec<(u64, Store)>> {
        let mut found = self.checkpoint_dirs()?;
        found.retain(|(_, chk)| chk.exists(MANIFEST_FILE).unwrap_or(false));
        Ok(found)
    }

    /// Every `chk-<id>` directory, newest first.
    fn checkpoint_dirs(&self) -> Result<Vec<(u64, Store)>> {
        let names = self.store.dirs().map_err(|e| {
            Error::checkpoint(
                Some(self.dir().to_path_buf()),
                format!(
                    "cannot list the checkpoint directory '{}': {e}",
                    self.dir().display()
                ),
            )
        })?;
        let mut found: Vec<(u64, Store)> = names
            .iter()
            .filter_map(|n| checkpoint_dir_id(n).map(|id| (id, self.store.child(n))))
            .collect();
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
            .map(|(id, chk)| {
                let info = read_manifest(&chk).map(|m| SummaryInfo {
                    kind: m.kind,
                    trigger_ms: m.trigger_ms,
                    completion_ms: m.completion_ms,
                    state_size: m.state_size(),
                    written_size: m.written_size(),
                });
                let dir = chk.location().to_path_buf();
                CheckpointSummary { id, dir, info }
            })
            .collect())
    }

    /// The manifest of completed checkpoint `id` (its state files unread).
    pub fn load_manifest(&self, id: u64) -> Result<Manifest> {
        read_manifest(&self.store.child(&format!("{CHK_PREFIX}{id}")))
    }

    /// Loads and verifies completed checkpoint `id` of this storage.
    pub fn load(&self, id: u64) -> Result<RestoredCheckpoint> {
        Self::load_store(self.store.child(&format!("{CHK_PREFIX}{id}")))
    }

    /// Loads and verifies the checkpoint at `path`: a checkpoint directory
    /// or its manifest file. Every state file is read and its size and
    /// checksums checked; any problem is an error naming the file.
    pub fn load_path(path: impl AsRef<Path>) -> Result<RestoredCheckpoint> {
        Self::load_path_with(path, &StorageOptions::new())
    }

    /// [`load_path`](Self::load_path) with `storage_options` for an object
    /// store URI.
    pub fn load_path_with(
        path: impl AsRef<Path>,
        options: &StorageOptions,
    ) -> Result<RestoredCheckpoint> {
        let path = path.as_ref();
        if crate::store::is_object_store_uri(path) {
            let text = path.to_str().unwrap_or_default().trim_end_matches('/');
            let dir = text.strip_suffix(MANIFEST_FILE).unwrap_or(text);
            return Self::load_store(Store::open(Path::new(dir), options)?);
        }
        let path = &crate::store::local_path(path)?;
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
        Self::load_store(Store::open(&dir, options)?)
    }

    /// Loads and verifies the checkpoint whose directory is `chk`.
    fn load_store(chk: Store) -> Result<RestoredCheckpoint> {
        let dir = chk.location().to_path_buf();
        let manifest_path = chk.location_of(MANIFEST_FILE);
        let has_manifest = chk.exists(MANIFEST_FILE).map_err(|e| {
            Error::checkpoint(
                Some(manifest_path.clone()),
                format!("cannot read '{}': {e}", manifest_path.display()),
            )
        })?;
        if !has_manifest {
            let root = CheckpointStorage { store: chk.clone() };
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
        let manifest = read_manifest(&chk)?;
        restore(chk, manifest)
    }

    /// The newest completed checkpoint, loaded and verified; `None` if there
    /// is none. A corrupt newest checkpoint is an error: this never falls
    /// back to an older one silently (DESIGN.md, FLINK-22502); a caller that
    /// may fall back chooses one from [`list`](Self::list) explicitly.
    pub fn latest_valid(&self) -> Result<Option<RestoredCheckpoint>> {
        match self.completed_dirs()?.into_iter().next() {
            Some((_, chk)) => Self::load_store(chk).map(Some),
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
        let done = self.retention(n, since)?;
        match done.errors.into_iter().next() {
            Some(e) => Err(e),
            None => Ok(done.removed),
        }
    }

    /// [`retain_since`](Self::retain_since) that goes on past a deletion
    /// that fails (the store refused it): the others are still deleted, and
    /// each failure is returned with its cause and path, for the caller to
    /// report. `Err` only when the checkpoints could not be listed.
    pub fn retention(&self, n: usize, since: u64) -> Result<Retention> {
        let all = self.checkpoint_dirs()?;
        let newest_completed = all
            .iter()
            .find(|(_, chk)| chk.exists(MANIFEST_FILE).unwrap_or(false))
            .map(|(id, _)| *id);
        let mut kept = 0;
        let mut removed = Vec::new();
        let mut errors = Vec::new();
        let mut retained = Vec::new();
        for (id, chk) in all {
            let delete = if chk.exists(MANIFEST_FILE).unwrap_or(false) {
                kept += 1;
                let delete = kept > n && id < since;
                if !delete {
                    retained.push(chk.clone());
                }
                delete
            } else {
                newest_completed.is_some_and(|newest| id < newest)
            };
            if delete {
                match remove_checkpoint_dir(&chk) {
                    Ok(()) => removed.push(id),
                    Err(e) => errors.push(e),
                }
            }
        }
        // Then the shared files no retained checkpoint refers to (incremental
        // checkpoints, `checkpoint/incremental.rs`).
        if let Some(newest) = newest_completed {
            let manifests = || retained.iter().map(read_manifest).collect();
            if let Err(e) = incremental::collect(&self.store, manifests, newest) {
                errors.push(e);
            }
        }
        Ok(Retention { removed, errors })
    }

    /// The names of the files in the `shared/` directory of this root
    /// (incremental checkpoints), sorted.
    pub fn shared_files(&self) -> Result<Vec<String>> {
        let shared = self.store.child(SHARED_DIR);
        match shared.files() {
            Ok(mut names) => {
                names.sort();
                Ok(names)
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Vec::new()),
            Err(e) => Err(Error::checkpoint(
                Some(shared.location().to_path_buf()),
                format!("cannot list '{}': {e}", shared.location().display()),
            )),
        }
    }
}

/// Reads the manifest of the checkpoint directory `chk`.
pub(crate) fn read_manifest(chk: &Store) -> Result<Manifest> {
    let path = chk.location_of(MANIFEST_FILE);
    let bytes = match chk.read(MANIFEST_FILE) {
        Ok(Some(bytes)) => Ok(bytes),
        Ok(None) => Err(io::Error::from(io::ErrorKind::NotFound)),
        Err(e) => Err(e),
    }
    .map_err(|e| {
        Error::checkpoint(
            Some(path.clone()),
            format!(
                "the checkpoint manifest '{}' cannot be read: {e}",
                path.display()
            ),
        )
    })?;
    let text = String::from_utf8(bytes).map_err(|_| {
        Error::checkpoint(
            Some(path.clone()),
            format!(
                "the checkpoint manifest '{}' is corrupt: it is not UTF-8 text",
                path.display()
            ),
        )
    })?;
    Manifest::decode(&text).map_err(|msg| {
        Error::checkpoint(
            Some(path.clone()),
            format!("the checkpoint manifest '{}' {msg}", path.display()),
        )
    })
}

/// A completed checkpoint read back and verified.
#[derive(Debug, Clone)]
pub struct RestoredCheckpoint {
    dir: Store,
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
        self.dir.location()
    }

    /// The storage root it lies in, if it has one (a savepoint may not).
    pub fn parent_storage(&self) -> Option<CheckpointStorage> {
        self.dir.parent().map(|store| CheckpointStorage { store })
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
fn restore(dir: Store, manifest: Manifest) -> Result<RestoredCheckpoint> {
    let manifest_path = dir.location_of(MANIFEST_FILE);
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
        .location()
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
            let state = incremental::read_subtask(&dir, &manifest_path, &op.uid, sub)?;
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
                final_state: false,
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
