//! Incremental checkpoints (`incremental=True`; DESIGN.md "Checkpoints" and
//! "Operators": "incremental checkpoints write the key groups changed since
//! the last checkpoint; manifests share files by reference").
//!
//! # What is written
//!
//! A checkpoint writes, per (operator uid, subtask), one state file holding
//! its non-keyed state and only the key groups that changed since the last
//! completed checkpoint of this job; its manifest lists that file in
//! `state` and, in `reused`, the files of earlier checkpoints it takes the
//! unchanged key groups from (see [`super::manifest`]). A restore reads
//! exactly the files one manifest lists and takes from each the key groups
//! it names: no chain of deltas is replayed, because every key group has
//! exactly one current section in exactly one file.
//!
//! A key group is unchanged when
//! - its blob carries a change token ([`crate::state::StateBlob::token`],
//!   given by operators that track changes, like the native keyed
//!   aggregates' copy-on-write key groups) equal to the one recorded at the
//!   last checkpoint: then it is not even serialized; or else
//! - its serialized section has the checksum and length of the section the
//!   last checkpoint holds for it (the section checksum is xxh3 over the key
//!   group and the payload): then it is serialized but not written. Python
//!   runners and every other operator go this way.
//!
//! # Where the files lie
//!
//! ```text
//! DIR/shared/<id>-<uid>-<uid xxh3 hex>-<subtask>.state
//! ```
//!
//! Files of incremental checkpoints lie in `shared/`, not in `chk-<id>/`, so
//! deleting an old checkpoint's directory never deletes a file a newer one
//! refers to. The checkpoint id that wrote a file leads its name: ids are
//! never reused, so names are unique.
//!
//! # Retention
//!
//! After retention deleted old `chk-<id>` directories (manifest first),
//! [`collect`] counts the references of every retained manifest to the
//! files of `shared/` and deletes a file only when no retained manifest
//! names it and a checkpoint newer than the one that wrote it completed
//! (the files of a checkpoint in flight are not referenced yet). If any
//! retained manifest cannot be read, nothing is deleted: its references are
//! unknown. A crash between the two steps leaves unreferenced files, which
//! the next retention deletes.
//!
//! # Savepoints
//!
//! Savepoints are always full and self-contained: written into their own
//! directory, never referring to `shared/` files (which retention of the
//! checkpoint directory may delete), and they do not change what the next
//! incremental checkpoint compares against.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::Path;
use std::sync::Arc;

use super::manifest::{key_group_ranges, Manifest, ReusedState, StateFileEntry, SubtaskEntry};
use super::state_file::{self, Payload, Section, SECTION_HEADER, TAG_KEYED, TAG_OPERATOR};
use crate::error::{Error, Result};
use crate::state::OperatorState;
use crate::store::Store;

/// The directory of shared state files under a storage root.
pub const SHARED_DIR: &str = "shared";

/// What the last completed checkpoint holds of the key groups of one
/// (operator uid, subtask): where each one's current section lies.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SubtaskBase {
    groups: BTreeMap<u32, BaseGroup>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct BaseGroup {
    /// The shared file holding its section.
    file: Arc<StateFileEntry>,
    /// The section's checksum and bytes (header included).
    sum: u64,
    len: u64,
    /// The change token of the blob it was written from, if any.
    token: Option<u64>,
}

impl SubtaskBase {
    /// How many key groups it holds.
    pub fn len(&self) -> usize {
        self.groups.len()
    }

    /// Whether it holds no key group.
    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }
}

/// What an incremental write of one subtask's state gave.
#[derive(Debug)]
pub(crate) struct IncrementalWrite {
    /// The new shared file, if anything changed (or there is non-keyed state).
    pub file: Option<StateFileEntry>,
    /// Key groups taken from earlier files, by file.
    pub reused: Vec<ReusedState>,
    /// What the next checkpoint compares against, once this one completed.
    pub base: SubtaskBase,
}

/// The name of the shared file checkpoint `id` writes for (`uid`, `subtask`).
pub(crate) fn shared_file_name(id: u64, uid: &str, subtask: u32) -> String {
    format!("{id}-{}", state_file::file_name(uid, subtask))
}

/// The checkpoint id that leads a shared file's name.
fn shared_file_id(name: &str) -> Option<u64> {
    let (digits, _) = name.split_once('-')?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Writes the state of (`uid`, `subtask`) for checkpoint `id` into `shared`:
/// the non-keyed state and the key groups that differ from `base`.
pub(crate) fn write(
    shared: &Store,
    id: u64,
    uid: &str,
    subtask: u32,
    state: &OperatorState,
    base: Option<&SubtaskBase>,
) -> Result<IncrementalWrite> {
    let mut sections: Vec<Section> = Vec::new();
    if let Some(blob) = &state.operator {
        sections.push((TAG_OPERATOR, 0, Payload::of(blob)?));
    }
    let mut next = SubtaskBase::default();
    let mut tokens: BTreeMap<u32, Option<u64>> = BTreeMap::new();
    for (group, blob) in &state.keyed {
        let group = *group;
        let token = blob.token();
        let prev = base.and_then(|b| b.groups.get(&group));
        if let Some(p) = prev.filter(|p| token.is_some() && p.token == token) {
            // Unchanged by the operator's own account: not serialized.
            next.groups.insert(group, p.clone());
            continue;
        }
        let bytes = blob.to_bytes()?;
        let sum = state_file::keyed_section_checksum(group, &bytes);
        let len = (SECTION_HEADER + bytes.len()) as u64;
        if let Some(p) = prev.filter(|p| p.sum == sum && p.len == len) {
            // Unchanged content: not written again.
            next.groups.insert(group, BaseGroup { token, ..p.clone() });
            continue;
        }
        tokens.insert(group, token);
        sections.push((TAG_KEYED, group, Payload::Checked(bytes, sum)));
    }
    // What is reused, by file (before the new groups join `next`).
    let mut by_file: BTreeMap<&str, (&Arc<StateFileEntry>, Vec<u32>, u64)> = BTreeMap::new();
    for (g, b) in &next.groups {
        let e = by_file
            .entry(b.file.file.as_str())
            .or_insert((&b.file, Vec::new(), 0));
        e.1.push(*g);
        e.2 += b.len;
    }
    let reused = by_file
        .into_values()
        .map(|(file, groups, bytes)| ReusedState {
            file: (**file).clone(),
            key_groups: key_group_ranges(&groups),
            bytes,
        })
        .collect();
    let file = if sections.is_empty() {
        None
    } else {
        let name = shared_file_name(id, uid, subtask);
        let written = state_file::write_sections(shared, &name, uid, subtask, &sections)?;
        let groups: Vec<u32> = written.groups.iter().map(|g| g.0).collect();
        let entry = StateFileEntry {
            file: name,
            size: written.size,
            checksum: written.checksum,
            key_groups: key_group_ranges(&groups),
            shared: true,
        };
        let shared_entry = Arc::new(entry.clone());
        for (g, sum, len) in written.groups {
            let token = tokens.get(&g).copied().flatten();
            next.groups.insert(
                g,
                BaseGroup {
                    file: shared_entry.clone(),
                    sum,
                    len,
                    token,
                },
            );
        }
        Some(entry)
    };
    Ok(IncrementalWrite {
        file,
        reused,
        base: next,
    })
}

/// The store of the shared files of the storage root `chk` lies in.
fn shared_of(chk: &Store) -> Option<Store> {
    chk.parent().map(|root| root.child(SHARED_DIR))
}

/// Reads one file a manifest lists for `uid`'s `subtask`: from the
/// checkpoint directory `chk`, or from its root's `shared/` directory.
fn read_file(
    chk: &Store,
    uid: &str,
    subtask: u32,
    entry: &StateFileEntry,
) -> Result<OperatorState> {
    if !entry.shared {
        return state_file::read(chk, uid, subtask, entry);
    }
    let shared = shared_of(chk).ok_or_else(|| {
        Error::checkpoint(
            Some(chk.location().to_path_buf()),
            format!(
                "the state file '{}' of operator '{uid}' subtask {subtask} is shared with other \
                 checkpoints, but the checkpoint '{}' lies in no storage root holding a '{SHARED_DIR}' \
                 directory",
                entry.file,
                chk.location().display()
            ),
        )
    })?;
    state_file::read(&shared, uid, subtask, entry)
}

/// Reads and verifies the state of `uid`'s subtask `sub` from the files of
/// the checkpoint `chk` whose manifest is `manifest` (its own file and the
/// key groups it reuses).
pub(crate) fn read_subtask(
    chk: &Store,
    manifest: &Path,
    uid: &str,
    sub: &SubtaskEntry,
) -> Result<OperatorState> {
    let mut state = match &sub.state {
        None => OperatorState::default(),
        Some(entry) => read_file(chk, uid, sub.subtask, entry)?,
    };
    for r in &sub.reused {
        let from = read_file(chk, uid, sub.subtask, &r.file)?;
        let wanted = |g: &u32| r.key_groups.iter().any(|range| range.contains(g));
        let mut found = 0usize;
        for (g, blob) in from.keyed {
            if wanted(&g) {
                found += 1;
                state.keyed.push((g, blob));
            }
        }
        let named: usize = r.key_groups.iter().map(|range| range.len()).sum();
        if found != named {
            return Err(Error::checkpoint(
                Some(manifest.to_path_buf()),
                format!(
                    "the checkpoint manifest of '{}' takes {named} key groups of operator \
                     '{uid}' subtask {} from the state file '{}', which holds {found} of them",
                    chk.location().display(),
                    sub.subtask,
                    r.file.file
                ),
            ));
        }
    }
    let mut groups: Vec<u32> = state.keyed.iter().map(|(g, _)| *g).collect();
    groups.sort_unstable();
    if let Some(w) = groups.windows(2).find(|w| w[0] == w[1]) {
        return Err(Error::checkpoint(
            Some(manifest.to_path_buf()),
            format!(
                "the checkpoint manifest of '{}' gives key group {} of operator '{uid}' \
                 subtask {} twice",
                chk.location().display(),
                w[0],
                sub.subtask
            ),
        ));
    }
    Ok(state)
}

/// Deletes the files of `root`'s `shared/` directory that no manifest of
/// the retained checkpoints (read by `retained`, only when there are shared
/// files) refers to and that were written before `newest` (the newest
/// completed checkpoint). Returns the names deleted. Nothing is deleted
/// when a retained manifest could not be read, and that is an error naming
/// it (retention reports it; the files stay until it can be read or is
/// deleted).
pub(crate) fn collect(
    root: &Store,
    retained: impl FnOnce() -> Vec<Result<Manifest>>,
    newest: u64,
) -> Result<Vec<String>> {
    let shared = root.child(SHARED_DIR);
    let failed = |e: io::Error| {
        Error::checkpoint(
            Some(shared.location().to_path_buf()),
            format!(
                "cannot clean up the shared state files in '{}': {e}",
                shared.location().display()
            ),
        )
    };
    let names = match shared.files() {
        Ok(names) => names,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(failed(e)),
    };
    if names.is_empty() {
        return Ok(Vec::new());
    }
    let retained = retained();
    let mut referenced: BTreeSet<&str> = BTreeSet::new();
    for m in &retained {
        match m {
            Ok(m) => referenced.extend(m.shared_files()),
            // Its references are unknown: keep everything, and say why.
            Err(e) => {
                return Err(Error::checkpoint(
                    Some(shared.location().to_path_buf()),
                    format!(
                        "kept every shared state file in '{}': a retained checkpoint's \
                         manifest could not be read, so which files it refers to is \
                         unknown: {e}",
                        shared.location().display()
                    ),
                ))
            }
        }
    }
    let mut removed = Vec::new();
    for name in names {
        let old = shared_file_id(&name).is_some_and(|id| id < newest);
        if old && !referenced.contains(name.as_str()) {
            shared.remove(&name).map_err(failed)?;
            removed.push(name);
        }
    }
    Ok(removed)
}

/// Deletes the shared files an aborted checkpoint wrote.
pub(crate) fn remove_files(root: &Store, names: &[String]) -> Result<()> {
    let shared = root.child(SHARED_DIR);
    for name in names {
        shared.remove(name).map_err(|e| {
            Error::checkpoint(
                Some(shared.location_of(name)),
                format!(
                    "cannot delete the shared state file '{}' of an aborted checkpoint: {e}",
                    shared.location_of(name).display()
                ),
            )
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::storage::MANIFEST_FILE;
    use crate::checkpoint::{CheckpointInfo, CheckpointStorage, OperatorEntry, SubtaskEntry};
    use crate::event::BarrierKind;
    use crate::state::{DeferredState, StateBlob};
    use proptest::prelude::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    const UID: &str = "op";
    /// Two subtasks, four key groups each.
    const SUBTASKS: u32 = 2;
    const GROUPS: u32 = 8;

    fn owner(g: u32) -> u32 {
        g / (GROUPS / SUBTASKS)
    }

    fn info(subtasks: u32) -> CheckpointInfo {
        CheckpointInfo {
            kind: BarrierKind::Checkpoint,
            trigger_ms: 0,
            final_state: false,
            completion_ms: Some(1),
            alignments: vec![],
            operators: vec![OperatorEntry {
                uid: UID.into(),
                name: UID.into(),
                finished: false,
                null_state_checkpoint: None,
                schema: None,
                key: None,
                subtasks: (0..subtasks)
                    .map(|s| SubtaskEntry {
                        subtask: s,
                        state: None,
                        reused: vec![],
                        source_offsets: vec![],
                        finished: false,
                    })
                    .collect(),
            }],
        }
    }

    fn state_of(values: &BTreeMap<u32, Vec<u8>>, subtask: u32) -> OperatorState {
        OperatorState {
            operator: Some(StateBlob::Bytes(Arc::new(vec![subtask as u8; 8]))),
            keyed: values
                .iter()
                .filter(|(g, _)| owner(**g) == subtask)
                .map(|(g, v)| (*g, StateBlob::Bytes(Arc::new(v.clone()))))
                .collect(),
        }
    }

    /// The key groups (and their bytes) a restored checkpoint holds.
    fn restored(storage: &CheckpointStorage, id: u64) -> Result<BTreeMap<u32, Vec<u8>>> {
        let rc = storage.load(id)?;
        let mut out = BTreeMap::new();
        for (g, b) in rc.keyed_state(UID, 0..GROUPS) {
            out.insert(g, b.as_bytes().expect("bytes").to_vec());
        }
        for s in 0..SUBTASKS {
            let op = rc.state(UID, s).and_then(|st| st.operator.clone());
            assert_eq!(
                op.and_then(|b| b.as_bytes().map(<[u8]>::to_vec)),
                Some(vec![s as u8; 8])
            );
        }
        Ok(out)
    }

    type Bases = BTreeMap<u32, Arc<SubtaskBase>>;

    /// Writes checkpoint `id` of `values` incrementally against `bases`;
    /// returns the pending checkpoint, the new bases and the bytes written.
    fn write_all(
        storage: &CheckpointStorage,
        id: u64,
        values: &BTreeMap<u32, Vec<u8>>,
        bases: &Bases,
    ) -> Result<(crate::checkpoint::PendingCheckpoint, Bases, u64)> {
        let pending = storage.begin(id)?;
        let mut next = Bases::new();
        let mut written = 0;
        for s in 0..SUBTASKS {
            let h = pending.write_state_incremental(
                UID,
                s,
                &state_of(values, s),
                bases.get(&s).map(|b| &**b),
            )?;
            written += h.written_bytes();
            next.insert(s, h.base.clone().expect("base"));
        }
        Ok((pending, next, written))
    }

    #[test]
    fn test_incremental_writes_only_changed_groups_and_restores_all() -> Result<()> {
        let tmp = tempfile::tempdir().expect("tempdir");
        let storage = CheckpointStorage::open(tmp.path())?;
        let mut values: BTreeMap<u32, Vec<u8>> =
            (0..GROUPS).map(|g| (g, vec![g as u8; 1000])).collect();
        let (p, bases, full) = write_all(&storage, 1, &values, &Bases::new())?;
        p.complete(info(SUBTASKS))?;
        values.insert(5, vec![55; 1000]);
        let (p, bases, delta) = write_all(&storage, 2, &values, &bases)?;
        let done = p.complete(info(SUBTASKS))?;
        // One key group of eight changed: the second checkpoint wrote about
        // an eighth of the first (plus the non-keyed state and headers).
        assert!(delta * 6 < full, "delta {delta} vs full {full}");
        assert_eq!(done.manifest.written_size(), delta);
        assert!(
            done.manifest.state_size() >= full - 100,
            "{}",
            done.manifest.state_size()
        );
        let sub1 = &done.manifest.operators[0].subtasks[1];
        assert_eq!(sub1.state.as_ref().expect("file").key_groups, vec![5..6]);
        assert_eq!(sub1.reused[0].key_groups, vec![4..5, 6..8]);
        // Retaining one checkpoint keeps the files it still shares.
        assert_eq!(storage.retain(1)?, vec![1]);
        assert_eq!(restored(&storage, 2)?, values);
        assert_eq!(storage.shared_files()?.len(), 4);
        // Once every key group changed, the first files are unreferenced.
        for v in values.values_mut() {
            v[0] ^= 1;
        }
        let (p, _, _) = write_all(&storage, 3, &values, &bases)?;
        p.complete(info(SUBTASKS))?;
        storage.retain(1)?;
        assert_eq!(storage.shared_files()?.len(), 2);
        assert_eq!(restored(&storage, 3)?, values);
        Ok(())
    }

    /// A retained manifest that cannot be read keeps every shared file, and
    /// retention reports why instead of skipping the collection silently.
    #[test]
    fn test_unreadable_retained_manifest_keeps_shared_files_and_is_reported() -> Result<()> {
        let tmp = tempfile::tempdir().expect("tempdir");
        let storage = CheckpointStorage::open(tmp.path())?;
        let mut values: BTreeMap<u32, Vec<u8>> =
            (0..GROUPS).map(|g| (g, vec![g as u8; 100])).collect();
        let (p, bases, _) = write_all(&storage, 1, &values, &Bases::new())?;
        p.complete(info(SUBTASKS))?;
        for v in values.values_mut() {
            v[0] ^= 1;
        }
        let (p, _, _) = write_all(&storage, 2, &values, &bases)?;
        p.complete(info(SUBTASKS))?;
        let before = storage.shared_files()?;
        let manifest = storage.checkpoint_dir(2).join(MANIFEST_FILE);
        let text = std::fs::read_to_string(&manifest).expect("read");
        std::fs::write(&manifest, text.replace("\"id\": 2", "\"id\": 3")).expect("write");
        let done = storage.retention(1, u64::MAX)?;
        assert_eq!(done.removed, vec![1]);
        let msg = done
            .errors
            .iter()
            .map(ToString::to_string)
            .collect::<String>();
        assert!(msg.contains("kept every shared state file"), "{msg}");
        assert_eq!(storage.shared_files()?, before, "nothing was deleted");
        Ok(())
    }

    #[test]
    fn test_corrupt_or_missing_shared_file_is_named() -> Result<()> {
        let tmp = tempfile::tempdir().expect("tempdir");
        let storage = CheckpointStorage::open(tmp.path())?;
        let mut values: BTreeMap<u32, Vec<u8>> =
            (0..GROUPS).map(|g| (g, vec![g as u8; 100])).collect();
        let (p, bases, _) = write_all(&storage, 1, &values, &Bases::new())?;
        p.complete(info(SUBTASKS))?;
        values.insert(0, vec![9; 100]);
        let (p, _, _) = write_all(&storage, 2, &values, &bases)?;
        p.complete(info(SUBTASKS))?;
        storage.retain(1)?;
        // Subtask 1's only file is the one checkpoint 1 wrote.
        let name = shared_file_name(1, UID, 1);
        let path = tmp.path().join(SHARED_DIR).join(&name);
        let mut bytes = std::fs::read(&path).expect("read");
        let last = bytes.len() - 1;
        bytes[last] ^= 0xff;
        std::fs::write(&path, &bytes).expect("write");
        let err = storage.load(2).expect_err("corrupt").to_string();
        assert!(err.contains(&name) && err.contains("xxh3"), "{err}");
        std::fs::remove_file(&path).expect("rm");
        let err = storage.load(2).expect_err("missing").to_string();
        assert!(err.contains(&name) && err.contains("missing"), "{err}");
        Ok(())
    }

    /// A view whose serialization is counted: a key group whose token the
    /// last checkpoint recorded is not serialized again.
    struct Counted {
        bytes: Vec<u8>,
        token: u64,
        calls: Arc<AtomicUsize>,
    }

    impl DeferredState for Counted {
        fn serialize(&self) -> Result<Vec<u8>> {
            self.calls.fetch_add(1, Ordering::Relaxed);
            Ok(self.bytes.clone())
        }
        fn token(&self) -> Option<u64> {
            Some(self.token)
        }
    }

    #[test]
    fn test_unchanged_token_is_not_serialized() -> Result<()> {
        let tmp = tempfile::tempdir().expect("tempdir");
        let storage = CheckpointStorage::open(tmp.path())?;
        let calls = Arc::new(AtomicUsize::new(0));
        let state = |tokens: [u64; 2]| OperatorState {
            operator: None,
            keyed: (0..2)
                .map(|g| {
                    let view = Counted {
                        bytes: vec![tokens[g] as u8; 10],
                        token: tokens[g],
                        calls: calls.clone(),
                    };
                    (g as u32, StateBlob::Deferred(Arc::new(view)))
                })
                .collect(),
        };
        let p = storage.begin(1)?;
        let h1 = p.write_state_incremental(UID, 0, &state([1, 2]), None)?;
        p.complete(info(1))?;
        assert_eq!(calls.load(Ordering::Relaxed), 2);
        let p = storage.begin(2)?;
        let h2 = p.write_state_incremental(UID, 0, &state([1, 3]), h1.base.as_deref())?;
        p.complete(info(1))?;
        assert_eq!(
            calls.load(Ordering::Relaxed),
            3,
            "group 0 was serialized again"
        );
        assert_eq!(h2.file.expect("file").key_groups, vec![1..2]);
        let rc = storage.load(2)?;
        let got: Vec<(u32, Vec<u8>)> = rc
            .keyed_state(UID, 0..2)
            .into_iter()
            .map(|(g, b)| (g, b.as_bytes().expect("bytes").to_vec()))
            .collect();
        assert_eq!(got, vec![(0, vec![1; 10]), (1, vec![3; 10])]);
        Ok(())
    }

    #[derive(Debug, Clone)]
    enum Op {
        /// Change these key groups, then complete a checkpoint.
        Complete(Vec<u32>),
        /// Change these key groups, then write a checkpoint and abort it.
        Abort(Vec<u32>),
        /// Change these, write a checkpoint and crash before its manifest
        /// (the next attempt starts with full checkpoints).
        Crash(Vec<u32>),
        Retain(usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        let groups = proptest::collection::vec(0..GROUPS, 0..4);
        prop_oneof![
            4 => groups.clone().prop_map(Op::Complete),
            1 => groups.clone().prop_map(Op::Abort),
            1 => groups.prop_map(Op::Crash),
            2 => (1usize..4).prop_map(Op::Retain),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// Over random sequences of complete / abort / crash / retain(n), every
        /// retained checkpoint restores exactly the state it was taken of
        /// (no file it needs was deleted), and after retention no shared
        /// file survives that no retained manifest refers to (but those of
        /// a newer checkpoint that may still be in flight).
        #[test]
        fn prop_retention_keeps_needed_files_and_drops_unreferenced(
            ops in proptest::collection::vec(op(), 1..14)
        ) {
            let tmp = tempfile::tempdir().expect("tempdir");
            let storage = CheckpointStorage::open(tmp.path()).expect("open");
            let mut values: BTreeMap<u32, Vec<u8>> =
                (0..GROUPS).map(|g| (g, vec![g as u8; 64])).collect();
            let mut bases = Bases::new();
            let mut expected: BTreeMap<u64, BTreeMap<u32, Vec<u8>>> = BTreeMap::new();
            let mut id = 0;
            for op in ops {
                let mut change = |gs: &[u32]| {
                    for g in gs {
                        if let Some(v) = values.get_mut(g) {
                            v[0] = v[0].wrapping_add(1);
                        }
                    }
                };
                match op {
                    Op::Complete(gs) => {
                        change(&gs);
                        id += 1;
                        let (p, next, _) = write_all(&storage, id, &values, &bases).expect("write");
                        p.complete(info(SUBTASKS)).expect("complete");
                        bases = next;
                        expected.insert(id, values.clone());
                    }
                    Op::Abort(gs) => {
                        change(&gs);
                        id += 1;
                        let (p, _, _) = write_all(&storage, id, &values, &bases).expect("write");
                        p.abort().expect("abort");
                    }
                    Op::Crash(gs) => {
                        change(&gs);
                        id += 1;
                        let (p, _, _) = write_all(&storage, id, &values, &bases).expect("write");
                        drop(p);
                        bases.clear();
                    }
                    Op::Retain(n) => {
                        storage.retain(n).expect("retain");
                        let listed: Vec<u64> =
                            storage.list().expect("list").iter().map(|s| s.id).collect();
                        expected.retain(|i, _| listed.contains(i));
                        prop_assert!(listed.len() <= n);
                        let mut referenced = BTreeSet::new();
                        for i in &listed {
                            let m = storage.load_manifest(*i).expect("manifest");
                            referenced.extend(m.shared_files().into_iter().map(str::to_string));
                        }
                        let newest = listed.first().copied().unwrap_or(0);
                        for f in storage.shared_files().expect("shared") {
                            let from = shared_file_id(&f).expect("id");
                            prop_assert!(
                                referenced.contains(&f) || from > newest || listed.is_empty(),
                                "unreferenced shared file {} survived (retained {:?})", f, listed
                            );
                        }
                    }
                }
                for (i, want) in &expected {
                    let got = restored(&storage, *i).map_err(|e| TestCaseError::fail(e.to_string()))?;
                    prop_assert_eq!(&got, want, "checkpoint {}", i);
                }
            }
        }
    }
}
