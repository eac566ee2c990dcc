//! A checkpoint's identity: what a restore must match (the key columns of a
//! keyed operator and its number of key groups), ids that are never reused
//! after a crash, and the checkpoint paths the engine refuses instead of
//! ignoring (a URI scheme it cannot serve, a directory that is a file).
#![allow(clippy::unwrap_used)] // test helpers

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use eddyline_core::checkpoint::CheckpointConfig;
use eddyline_core::checkpoint::CheckpointStorage;
use eddyline_core::error::Error;
use eddyline_core::expr::{BinaryOp, Expr, ScalarValue};
use eddyline_core::graph::{Edge, JobGraph, NodeKind, Role};
use eddyline_core::operator::keyed_agg::KeyedAggFactory;
use eddyline_core::operator::project::ProjectFactory;
use eddyline_core::partition::Partitioning;
use eddyline_core::runtime::{JobConfig, JobHandle, RestoreFrom};
use eddyline_core::sink::collect::{CollectSinkFactory, CollectStore};
use eddyline_core::state::keyed::AggKind;

use common::{fwd, node, seq_node};

/// `seq -> key (column `key_col` = value % 13) -> sum (uid 'sum', keyed by
/// `key_col`) -> collect`, over `0..n`, with `max_p` key groups.
fn keyed_graph(n: i64, key_col: &str, max_p: usize) -> (JobGraph, Arc<CollectStore>) {
    let store = CollectStore::new();
    let key = Expr::binary(
        BinaryOp::Mod,
        Expr::col("value"),
        Expr::lit(ScalarValue::Int64(13)),
    );
    let nodes = vec![
        seq_node(0, 2, n),
        node(
            1,
            "key",
            2,
            vec![fwd(0)],
            NodeKind::Operator(Arc::new(ProjectFactory::with_columns(vec![(
                key_col.into(),
                key,
            )]))),
            Role::Operator,
        ),
        node(
            2,
            "sum",
            2,
            vec![Edge::new(
                1,
                Partitioning::Hash {
                    keys: vec![key_col.into()],
                },
                0,
            )],
            NodeKind::Operator(Arc::new(KeyedAggFactory::new(
                vec![key_col.into()],
                AggKind::Sum,
                Some("value".into()),
            ))),
            Role::Operator,
        ),
        node(
            3,
            "collect",
            2,
            vec![fwd(2)],
            NodeKind::Operator(Arc::new(CollectSinkFactory::new(store.clone()))),
            Role::Sink,
        ),
    ];
    (
        JobGraph {
            nodes,
            max_parallelism: max_p,
            loops: vec![],
        },
        store,
    )
}

fn config(dir: &Path, interval: Duration) -> JobConfig {
    let mut c = CheckpointConfig::new(dir);
    c.interval = interval;
    JobConfig {
        batch_size: 64,
        checkpoint: Some(c),
        ..JobConfig::default()
    }
}

/// A savepoint of the keyed job (key column `key`, 128 key groups), taken
/// after keyed state exists.
fn savepoint(dir: &Path, sp: &Path) -> PathBuf {
    let (g, _) = keyed_graph(i64::MAX / 4, "key", 128);
    let job = JobHandle::start(g, config(dir, Duration::from_millis(5))).unwrap();
    while job.checkpoints().len() < 2 {
        assert!(
            !job.wait_timeout(Duration::from_millis(2)),
            "the job ended too early"
        );
    }
    let path = job.stop_with_savepoint(sp, false).unwrap();
    job.result().unwrap();
    path
}

fn restore(
    dir: &Path,
    path: &Path,
    key_col: &str,
    max_p: usize,
    allow: bool,
) -> eddyline_core::error::Result<JobHandle> {
    let (g, _) = keyed_graph(i64::MAX / 4, key_col, max_p);
    let mut cfg = config(dir, Duration::from_secs(3600));
    cfg.restore_from = Some(RestoreFrom::Path(path.to_path_buf()));
    cfg.allow_non_restored_state = allow;
    JobHandle::start(g, cfg)
}

#[test]
fn test_key_identity_a_changed_key_column_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let sp = tempfile::tempdir().unwrap();
    let path = savepoint(dir.path(), sp.path());
    let err = restore(dir.path(), &path, "grp", 128, false).err().unwrap();
    assert!(matches!(err, Error::Checkpoint { .. }), "{err}");
    let msg = err.to_string();
    for part in ["operator 'sum'", "uid 'sum'", "'key'", "'grp'"] {
        assert!(msg.contains(part), "{part} missing from: {msg}");
    }
    // The same key restores; allow_non_restored_state drops the state.
    for (key, allow) in [("key", false), ("grp", true)] {
        let job = restore(dir.path(), &path, key, 128, allow).unwrap();
        job.cancel();
        let _ = job.result();
    }
}

#[test]
fn test_key_identity_another_max_parallelism_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let sp = tempfile::tempdir().unwrap();
    let path = savepoint(dir.path(), sp.path());
    for max_p in [64, 256] {
        let err = restore(dir.path(), &path, "key", max_p, false)
            .err()
            .unwrap();
        assert!(matches!(err, Error::Checkpoint { .. }), "{err}");
        let msg = err.to_string();
        for part in [
            "operator 'sum'".to_string(),
            "max_parallelism 128".to_string(),
            format!("max_parallelism {max_p}"),
        ] {
            assert!(msg.contains(&part), "{part} missing from: {msg}");
        }
    }
}

/// An id that was started (here a savepoint that failed to begin, and a
/// checkpoint a crash left half-written) is never given to another
/// checkpoint, also not by a new process restoring "latest". The failed
/// savepoint's cause is kept.
#[test]
fn test_checkpoint_ids_continue_after_the_highest_started() {
    let dir = tempfile::tempdir().unwrap();
    let blocker = dir.path().join("not-a-dir");
    std::fs::write(&blocker, b"x").unwrap();
    let chk = dir.path().join("chk");
    let (g, _) = keyed_graph(i64::MAX / 4, "key", 128);
    let job = JobHandle::start(g, config(&chk, Duration::from_secs(3600))).unwrap();
    let first = job.trigger_checkpoint().unwrap();
    let err = job.trigger_savepoint(&blocker).err().unwrap();
    assert!(err.to_string().contains("is a file"), "{err}");
    let failures = job.checkpoint_failures();
    assert_eq!(failures.len(), 1, "{failures:?}");
    assert_eq!(failures[0].id, first + 1);
    assert!(
        failures[0].reason.contains("not-a-dir") && failures[0].reason.contains("is a file"),
        "the cause is kept: {}",
        failures[0].reason
    );
    assert_eq!(job.failed_checkpoints(), 1);
    job.cancel();
    let _ = job.result();

    // A new process: the failed savepoint's id is not reused.
    let (g, _) = keyed_graph(i64::MAX / 4, "key", 128);
    let mut cfg = config(&chk, Duration::from_secs(3600));
    cfg.restore_from = Some(RestoreFrom::Latest);
    let job = JobHandle::start(g, cfg).unwrap();
    let next = job.trigger_checkpoint().unwrap();
    assert_eq!(next, first + 2, "ids continue after the failed savepoint");
    job.cancel();
    let _ = job.result();

    // A crash in the middle of checkpoint `next + 1` leaves its directory
    // without a manifest: the next process starts after it.
    let storage = CheckpointStorage::open(&chk).unwrap();
    storage.note_started(next + 1).unwrap();
    let half_written = storage.begin(next + 1).unwrap();
    std::mem::forget(half_written);
    let (g, _) = keyed_graph(i64::MAX / 4, "key", 128);
    let mut cfg = config(&chk, Duration::from_secs(3600));
    cfg.restore_from = Some(RestoreFrom::Latest);
    let job = JobHandle::start(g, cfg).unwrap();
    assert_eq!(job.trigger_checkpoint().unwrap(), next + 2);
    job.cancel();
    let _ = job.result();
}

/// The same without the recorded id: a half-written checkpoint directory
/// alone is enough (a storage written before the id file existed).
#[test]
fn test_checkpoint_ids_skip_a_half_written_directory() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("chk-9")).unwrap();
    let storage = CheckpointStorage::open(dir.path()).unwrap();
    assert_eq!(storage.highest_started().unwrap(), 9);
    let (g, _) = keyed_graph(i64::MAX / 4, "key", 128);
    let job = JobHandle::start(g, config(dir.path(), Duration::from_secs(3600))).unwrap();
    assert_eq!(job.trigger_checkpoint().unwrap(), 10);
    job.cancel();
    let _ = job.result();
}

#[test]
fn test_unaligned_checkpoints_complete_with_the_exact_result() {
    // unaligned=True runs (it was refused before), and the
    // keyed sums it commits are exact.
    let dir = tempfile::tempdir().unwrap();
    let n = 3_000;
    let (g, store) = keyed_graph(n, "key", 128);
    let mut cfg = config(dir.path(), Duration::from_millis(5));
    if let Some(c) = cfg.checkpoint.as_mut() {
        c.unaligned = true;
    }
    let job = JobHandle::start(g, cfg).unwrap();
    job.result().unwrap();
    assert!(!job.checkpoints().is_empty(), "checkpoints completed");
    let last = common::final_sums(&store);
    let mut want: std::collections::BTreeMap<i64, i64> = Default::default();
    for v in 0..n {
        *want.entry(v % 13).or_default() += v;
    }
    assert_eq!(last, want);
}

#[test]
fn test_checkpoint_storage_refuses_uris_it_cannot_serve() {
    // Object store URIs (s3://, gs://, ...) are served by store.rs and tested
    // against a real S3 API server in tests/storage; other schemes are refused.
    for uri in ["hdfs://nn/x", "ftp://host/chk"] {
        let err = CheckpointStorage::open(uri).err().unwrap();
        assert!(matches!(err, Error::Storage { .. }), "{err}");
        let scheme = uri.split_once("://").unwrap().0;
        assert!(
            err.to_string().contains(&format!("'{scheme}'")) && err.to_string().contains(uri),
            "{err}"
        );
        let err = CheckpointStorage::load_path(uri).err().unwrap();
        assert!(matches!(err, Error::Storage { .. }), "{err}");
    }
    assert!(!Path::new("s3:").exists(), "no local directory named 's3:'");
    // file:// URIs are local paths.
    let dir = tempfile::tempdir().unwrap();
    let uri = format!("file://{}", dir.path().join("sub").display());
    let storage = CheckpointStorage::open(&uri).unwrap();
    assert_eq!(storage.dir(), dir.path().join("sub"));
    assert!(dir.path().join("sub").is_dir());
}

#[test]
fn test_checkpoint_dir_that_is_a_file_is_named_as_such() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("plain");
    std::fs::write(&file, b"x").unwrap();
    let err = CheckpointStorage::open(&file).err().unwrap();
    let msg = err.to_string();
    assert!(msg.contains("is a file, not a directory"), "{msg}");
    assert!(!msg.contains("File exists"), "{msg}");
    let err = CheckpointStorage::open(file.join("below")).err().unwrap();
    assert!(err.to_string().contains("is a file"), "{err}");
}
