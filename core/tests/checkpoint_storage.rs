//! Checkpoint storage protocol (DESIGN.md "Checkpoints"; TESTING.md "Faults
//! to inject"): round trips, a manifest written last and atomically, refusal
//! of flipped, truncated and deleted files with the file named, no partial
//! checkpoint ever listed or loaded, retention, unwritable directories.

use std::fs;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use eddyline_core::checkpoint::{
    CheckpointInfo, CheckpointStorage, OperatorEntry, SourceOffset, SubtaskEntry, TaskAlignment,
    MANIFEST_FILE,
};
use eddyline_core::error::{Error, Result};
use eddyline_core::event::BarrierKind;
use eddyline_core::state::{DeferredState, OperatorState, StateBlob};

fn bytes(b: &[u8]) -> StateBlob {
    StateBlob::Bytes(Arc::new(b.to_vec()))
}

/// A copy-on-write view serialized on the writer thread.
struct Deferred(Vec<u8>);

impl DeferredState for Deferred {
    fn serialize(&self) -> Result<Vec<u8>> {
        Ok(self.0.clone())
    }
}

/// State of `count` subtask `s` at parallelism 2 over 8 key groups.
fn count_state(s: u32) -> OperatorState {
    OperatorState {
        operator: None,
        keyed: (s * 4..s * 4 + 4)
            .map(|g| {
                let blob = if g % 2 == 0 {
                    bytes(format!("group-{g}").as_bytes())
                } else {
                    StateBlob::Deferred(Arc::new(Deferred(format!("group-{g}").into_bytes())))
                };
                (g, blob)
            })
            .collect(),
    }
}

fn source_state(s: u32) -> OperatorState {
    OperatorState {
        operator: Some(bytes(format!("offset-{s}").as_bytes())),
        keyed: vec![],
    }
}

fn info() -> CheckpointInfo {
    CheckpointInfo {
        kind: BarrierKind::Checkpoint,
        trigger_ms: 1_000,
        final_state: false,
        completion_ms: Some(1_250),
        alignments: vec![TaskAlignment {
            task: "count".into(),
            subtask: 1,
            alignment_us: 42,
        }],
        operators: vec![
            OperatorEntry {
                uid: "source".into(),
                name: "read parquet".into(),
                finished: true,
                null_state_checkpoint: None,
                schema: None,
                key: None,
                subtasks: (0..2)
                    .map(|s| SubtaskEntry {
                        subtask: s,
                        state: None,
                        reused: vec![],
                        source_offsets: vec![SourceOffset {
                            split: format!("part-{s}"),
                            offset: 100 + u64::from(s),
                        }],
                        finished: true,
                    })
                    .collect(),
            },
            OperatorEntry {
                uid: "count/by key".into(),
                name: "count".into(),
                finished: false,
                null_state_checkpoint: Some(3),
                schema: None,
                key: None,
                subtasks: (0..2)
                    .map(|s| SubtaskEntry {
                        subtask: s,
                        state: None,
                        reused: vec![],
                        source_offsets: vec![],
                        finished: false,
                    })
                    .collect(),
            },
            OperatorEntry {
                uid: "sink".into(),
                name: "print".into(),
                finished: false,
                null_state_checkpoint: None,
                schema: None,
                key: None,
                subtasks: vec![SubtaskEntry {
                    subtask: 0,
                    state: None,
                    reused: vec![],
                    source_offsets: vec![],
                    finished: false,
                }],
            },
        ],
    }
}

/// Writes and completes checkpoint `id` (state from two writer threads).
fn write_checkpoint(storage: &CheckpointStorage, id: u64) -> Result<()> {
    let pending = storage.begin(id)?;
    let threads: Vec<_> = (0..2u32)
        .map(|s| {
            let writer = pending.writer();
            std::thread::spawn(move || -> Result<()> {
                writer.write_state("source", s, &source_state(s))?;
                writer.write_state("count/by key", s, &count_state(s))?;
                Ok(())
            })
        })
        .collect();
    for t in threads {
        t.join().expect("writer thread panicked")?;
    }
    pending.complete(info())?;
    Ok(())
}

fn state_file(storage: &CheckpointStorage, id: u64, uid: &str, subtask: u32) -> PathBuf {
    let restored = storage.load(id).expect("intact checkpoint loads");
    let op = restored.manifest().operator(uid).expect("operator");
    let file = &op.subtasks[subtask as usize]
        .state
        .as_ref()
        .expect("state")
        .file;
    storage.checkpoint_dir(id).join(file)
}

/// Asserts `err` is a checkpoint error about `path` whose message names the
/// file and says `what`.
fn assert_refused(err: &Error, path: &Path, what: &str) {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .expect("file name");
    match err {
        Error::Checkpoint {
            path: Some(p),
            message,
        } => {
            assert_eq!(p, path, "{err}");
            assert!(
                message.contains(name),
                "message does not name {name}: {message}"
            );
            assert!(
                message.contains(what),
                "message does not say '{what}': {message}"
            );
        }
        other => panic!(
            "expected a checkpoint error about {}, got {other}",
            path.display()
        ),
    }
}

fn blob_bytes(b: &StateBlob) -> Vec<u8> {
    b.as_bytes().expect("restored blobs are bytes").to_vec()
}

#[test]
fn test_checkpoint_round_trip() -> Result<()> {
    let tmp = tempfile::tempdir().expect("tempdir");
    let storage = CheckpointStorage::open(tmp.path().join("ckpts"))?;
    write_checkpoint(&storage, 4)?;

    let listed = storage.list()?;
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].id, 4);
    let summary = listed[0].info.as_ref().expect("manifest readable");
    assert_eq!(summary.kind, BarrierKind::Checkpoint);
    assert!(summary.state_size > 0);

    let restored = storage.load(4)?;
    assert_eq!(restored.id(), 4);
    let m = restored.manifest();
    assert_eq!(
        (m.trigger_ms, m.completion_ms, m.duration_ms),
        (1_000, 1_250, 250)
    );
    assert_eq!(m.alignments[0].alignment_us, 42);
    let source = m.operator("source").expect("source");
    assert!(source.finished);
    assert_eq!(source.subtasks[1].source_offsets[0].offset, 101);
    let count = m.operator("count/by key").expect("count");
    assert_eq!(count.null_state_checkpoint, Some(3));
    assert_eq!(
        count.subtasks[1]
            .state
            .as_ref()
            .map(|s| s.key_groups.clone()),
        Some(vec![Range { start: 4, end: 8 }])
    );
    assert!(m.operator("sink").expect("sink").subtasks[0]
        .state
        .is_none());

    for s in 0..2 {
        let st = restored.state("source", s).expect("source state");
        assert_eq!(
            st.operator.as_ref().map(blob_bytes),
            Some(format!("offset-{s}").into_bytes())
        );
        let st = restored.state("count/by key", s).expect("count state");
        assert_eq!(st.keyed.len(), 4);
    }
    assert!(restored.state("sink", 0).expect("sink").is_empty());
    assert_eq!(restored.operator_blobs("source").len(), 2);

    // Rescaling: key groups 2..6 come from both old subtasks, sorted.
    let keyed = restored.keyed_state("count/by key", 2..6);
    let groups: Vec<u32> = keyed.iter().map(|(g, _)| *g).collect();
    assert_eq!(groups, vec![2, 3, 4, 5]);
    for (g, b) in &keyed {
        assert_eq!(blob_bytes(b), format!("group-{g}").into_bytes());
    }

    // Loading by path: the directory or its manifest.
    let by_dir = CheckpointStorage::load_path(storage.checkpoint_dir(4))?;
    assert_eq!(by_dir.manifest(), restored.manifest());
    let by_manifest = CheckpointStorage::load_path(storage.checkpoint_dir(4).join(MANIFEST_FILE))?;
    assert_eq!(by_manifest.id(), 4);
    assert_eq!(storage.latest_valid()?.map(|c| c.id()), Some(4));
    Ok(())
}

#[test]
fn test_checkpoint_flipped_byte_in_state_file_is_refused() -> Result<()> {
    let tmp = tempfile::tempdir().expect("tempdir");
    let storage = CheckpointStorage::open(tmp.path())?;
    write_checkpoint(&storage, 1)?;
    let path = state_file(&storage, 1, "count/by key", 1);
    let mut data = fs::read(&path).expect("read");
    let mid = data.len() / 2;
    data[mid] ^= 0x40;
    fs::write(&path, &data).expect("write");
    let err = storage.load(1).expect_err("corrupt state is refused");
    assert_refused(&err, &path, "corrupt");
    assert!(
        err.to_string()
            .contains("operator 'count/by key' subtask 1"),
        "{err}"
    );
    // The newest checkpoint is corrupt: no silent fallback.
    assert!(storage.latest_valid().is_err());
    Ok(())
}

#[test]
fn test_checkpoint_truncated_state_file_is_refused() -> Result<()> {
    let tmp = tempfile::tempdir().expect("tempdir");
    let storage = CheckpointStorage::open(tmp.path())?;
    write_checkpoint(&storage, 1)?;
    let path = state_file(&storage, 1, "source", 0);
    let data = fs::read(&path).expect("read");
    fs::write(&path, &data[..data.len() - 3]).expect("write");
    let err = storage.load(1).expect_err("truncated state is refused");
    assert_refused(&err, &path, "truncated");
    Ok(())
}

#[test]
fn test_checkpoint_deleted_state_file_is_refused() -> Result<()> {
    let tmp = tempfile::tempdir().expect("tempdir");
    let storage = CheckpointStorage::open(tmp.path())?;
    write_checkpoint(&storage, 1)?;
    let path = state_file(&storage, 1, "count/by key", 0);
    fs::remove_file(&path).expect("remove");
    let err = storage.load(1).expect_err("missing state is refused");
    assert_refused(&err, &path, "missing");
    Ok(())
}

#[test]
fn test_checkpoint_corrupt_or_truncated_manifest_is_refused() -> Result<()> {
    let tmp = tempfile::tempdir().expect("tempdir");
    let storage = CheckpointStorage::open(tmp.path())?;
    write_checkpoint(&storage, 1)?;
    let path = storage.checkpoint_dir(1).join(MANIFEST_FILE);
    let original = fs::read(&path).expect("read");

    // A digit of an offset changed: still valid JSON, caught by the checksum.
    let text = String::from_utf8(original.clone()).expect("utf8");
    let flipped = text.replacen("\"offset\": 100", "\"offset\": 900", 1);
    assert_ne!(flipped, text);
    fs::write(&path, flipped).expect("write");
    let err = storage.load(1).expect_err("flipped manifest");
    assert_refused(&err, &path, "corrupt");
    let listed = storage.list()?;
    assert!(
        listed[0].info.is_err(),
        "list reports the unreadable manifest"
    );

    fs::write(&path, &original[..original.len() / 2]).expect("write");
    let err = storage.load(1).expect_err("truncated manifest");
    assert_refused(&err, &path, "truncated");

    fs::write(&path, &original).expect("write");
    storage.load(1)?;
    Ok(())
}

#[test]
fn test_checkpoint_without_manifest_is_never_listed_nor_loaded() -> Result<()> {
    let tmp = tempfile::tempdir().expect("tempdir");
    let storage = CheckpointStorage::open(tmp.path())?;
    write_checkpoint(&storage, 1)?;
    // Checkpoint 2 crashed after writing its state, before its manifest.
    let pending = storage.begin(2)?;
    pending.write_state("source", 0, &source_state(0))?;
    drop(pending);
    let ids: Vec<u64> = storage.list()?.iter().map(|s| s.id).collect();
    assert_eq!(ids, vec![1]);
    assert_eq!(storage.latest_valid()?.map(|c| c.id()), Some(1));
    let err = storage.load(2).expect_err("no manifest");
    assert_refused(
        &err,
        &storage.checkpoint_dir(2).join(MANIFEST_FILE),
        "missing",
    );

    // A completed checkpoint whose manifest was deleted is refused the same way.
    fs::remove_file(storage.checkpoint_dir(1).join(MANIFEST_FILE)).expect("remove");
    assert!(storage.list()?.is_empty());
    assert!(storage.latest_valid()?.is_none());
    let err = storage.load(1).expect_err("no manifest");
    assert_refused(
        &err,
        &storage.checkpoint_dir(1).join(MANIFEST_FILE),
        "missing",
    );

    // A second attempt of checkpoint 2 replaces the leftover directory.
    write_checkpoint(&storage, 2)?;
    assert_eq!(storage.latest_valid()?.map(|c| c.id()), Some(2));
    Ok(())
}

#[test]
fn test_checkpoint_abort_removes_its_directory() -> Result<()> {
    let tmp = tempfile::tempdir().expect("tempdir");
    let storage = CheckpointStorage::open(tmp.path())?;
    let pending = storage.begin(9)?;
    pending.write_state("count/by key", 0, &count_state(0))?;
    let dir = pending.dir().to_path_buf();
    pending.abort()?;
    assert!(!dir.exists());
    assert!(storage.list()?.is_empty());
    Ok(())
}

#[test]
fn test_checkpoint_retention_keeps_exactly_n() -> Result<()> {
    let tmp = tempfile::tempdir().expect("tempdir");
    let storage = CheckpointStorage::open(tmp.path())?;
    write_checkpoint(&storage, 1)?;
    // An attempt that never completed, older than the newest completed one.
    storage
        .begin(2)?
        .write_state("source", 0, &source_state(0))?;
    for id in 3..=6 {
        write_checkpoint(&storage, id)?;
    }
    // Checkpoint 7 is in progress: retention must not touch it.
    let in_progress = storage.begin(7)?;
    in_progress.write_state("source", 0, &source_state(0))?;

    let mut removed = storage.retain(2)?;
    removed.sort_unstable();
    assert_eq!(removed, vec![1, 2, 3, 4]);
    let ids: Vec<u64> = storage.list()?.iter().map(|s| s.id).collect();
    assert_eq!(ids, vec![6, 5]);
    assert!(!storage.checkpoint_dir(2).exists());
    assert!(in_progress.dir().exists());
    storage.load(5)?;
    assert!(storage.retain(2)?.is_empty());
    Ok(())
}

#[test]
fn test_checkpoint_unwritable_dir_is_refused() {
    let tmp = tempfile::tempdir().expect("tempdir");

    // A path under a regular file cannot be created, even by root.
    let file = tmp.path().join("file.txt");
    fs::write(&file, b"not a directory").expect("write");
    let under_file = file.join("sub");
    let err = CheckpointStorage::open(&under_file).expect_err("under a file");
    assert_refused(&err, &under_file, "is a file, not a directory");

    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let ro = tmp.path().join("read-only");
        fs::create_dir(&ro).expect("mkdir");
        fs::set_permissions(&ro, fs::Permissions::from_mode(0o500)).expect("chmod");
        // Root ignores permissions; only check where they are enforced.
        let enforced = fs::write(ro.join("probe"), b"x").is_err();
        if enforced {
            let err = CheckpointStorage::open(&ro).expect_err("read-only dir");
            assert_refused(&err, &ro, "is not writable");
        } else {
            let _ = fs::remove_file(ro.join("probe"));
        }
        fs::set_permissions(&ro, fs::Permissions::from_mode(0o700)).expect("chmod back");
    }
}

#[test]
fn test_checkpoint_load_path_that_is_not_a_checkpoint_is_refused() -> Result<()> {
    let tmp = tempfile::tempdir().expect("tempdir");
    let storage = CheckpointStorage::open(tmp.path())?;
    let missing = tmp.path().join("nope");
    let err = CheckpointStorage::load_path(&missing).expect_err("missing path");
    assert_refused(&err, &missing, "does not exist");

    write_checkpoint(&storage, 1)?;
    // The storage root instead of one of its checkpoints: a hint is given.
    let err = CheckpointStorage::load_path(tmp.path()).expect_err("root");
    assert!(err.to_string().contains("chk-<id>"), "{err}");

    // A completed checkpoint cannot be begun again.
    assert!(storage.begin(1).is_err());
    Ok(())
}

/// A deletion the store refuses fails only itself: retention goes on with
/// the other checkpoints and returns the failure naming its path
/// (`retain` reports it as its error).
#[test]
fn test_checkpoint_retention_goes_on_past_a_refused_deletion() -> Result<()> {
    let tmp = tempfile::tempdir().expect("tempdir");
    let storage = CheckpointStorage::open(tmp.path())?;
    for id in 1..=4 {
        write_checkpoint(&storage, id)?;
    }
    // Deleting chk-2 fails: its manifest is a non-empty directory, which a
    // file deletion refuses (as root too, unlike a permission).
    let stuck = storage.checkpoint_dir(2).join(MANIFEST_FILE);
    fs::remove_file(&stuck).expect("remove");
    fs::create_dir_all(stuck.join("keep")).expect("mkdir");
    let done = storage.retention(1, u64::MAX)?;
    assert_eq!(done.removed, vec![3, 1]);
    assert_eq!(done.errors.len(), 1, "{:?}", done.errors);
    let msg = done.errors[0].to_string();
    let chk2 = storage.checkpoint_dir(2).display().to_string();
    assert!(
        msg.contains(&chk2) && msg.contains("cannot delete"),
        "{msg}"
    );
    let err = storage.retain(1).expect_err("still refused");
    assert!(err.to_string().contains(&chk2), "{err}");
    let ids: Vec<u64> = storage.list()?.iter().map(|s| s.id).collect();
    assert_eq!(ids, vec![4]);
    Ok(())
}
