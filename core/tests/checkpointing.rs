//! Exactly-once checkpoints end to end on the threaded runtime: barriers,
//! alignment, asynchronous writes, completion, restart from the latest
//! completed checkpoint, and restore in a "new process" (a new JobHandle).
#![allow(clippy::unwrap_used)] // test helpers

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use eddyline_core::barrier::AlignmentMode;
use eddyline_core::checkpoint::CheckpointConfig;
use eddyline_core::error::Error;
use eddyline_core::graph::{Edge, JobGraph, NodeKind, Role};
use eddyline_core::operator::union::UnionFactory;
use eddyline_core::partition::Partitioning;
use eddyline_core::runtime::{JobConfig, JobHandle, RestartStrategy, RestoreFrom};
use eddyline_core::sink::collect::{CollectSinkFactory, CollectStore};
use eddyline_core::source::sequence::SequenceSource;

use common::{
    expected_sums, final_sums, fwd, key_mod_node, node, seq_node, sum_by_key_node, FlakyFactory,
};

fn keyed_sum_graph(n: i64, p: usize, fail: bool, union: bool) -> (JobGraph, Arc<CollectStore>) {
    let store = CollectStore::new();
    let mut nodes = vec![seq_node(0, p, n)];
    let mut last = 0;
    if union {
        nodes.push(node(
            1,
            "seq2",
            1,
            vec![],
            NodeKind::Source(Arc::new(SequenceSource::new(n, n + n / 2))),
            Role::Source,
        ));
        nodes.push(node(
            2,
            "union",
            p,
            vec![
                Edge {
                    from: 0,
                    partitioning: Partitioning::Rebalance,
                    input: 0,
                    port: 0,
                },
                Edge {
                    from: 1,
                    partitioning: Partitioning::Rebalance,
                    input: 0,
                    port: 0,
                },
            ],
            NodeKind::Operator(Arc::new(UnionFactory::default())),
            Role::Operator,
        ));
        last = 2;
    }
    let id = nodes.len();
    nodes.push(node(
        id,
        "flaky",
        p,
        vec![fwd(last)],
        NodeKind::Operator(Arc::new(FlakyFactory::new(fail.then_some(1)))),
        Role::Operator,
    ));
    nodes.push(key_mod_node(id + 1, p, id, 13));
    nodes.push(sum_by_key_node(id + 2, p, id + 1));
    nodes.push(node(
        id + 3,
        "collect",
        p,
        vec![fwd(id + 2)],
        NodeKind::Operator(Arc::new(CollectSinkFactory::new(store.clone()))),
        Role::Sink,
    ));
    (
        JobGraph {
            nodes,
            max_parallelism: 128,
            loops: vec![],
        },
        store,
    )
}

fn config(dir: &std::path::Path, mode: AlignmentMode) -> JobConfig {
    let mut c = CheckpointConfig::new(dir);
    c.interval = Duration::from_millis(5);
    c.mode = mode;
    JobConfig {
        batch_size: 64,
        restart: RestartStrategy {
            attempts: 3,
            delay: Duration::from_millis(1),
        },
        checkpoint: Some(c),
        ..JobConfig::default()
    }
}

#[test]
fn restart_restores_the_latest_checkpoint_exactly_once() {
    for p in [1, 2, 4] {
        let dir = tempfile::tempdir().unwrap();
        let (g, store) = keyed_sum_graph(20_000, p, true, false);
        let job = JobHandle::start(g, config(dir.path(), AlignmentMode::ExactlyOnce)).unwrap();
        let outcome = job.result().unwrap();
        assert_eq!(outcome.restarts, 1, "the injected failure fired (p={p})");
        let cps = job.checkpoints();
        assert!(
            cps.len() >= 2,
            "checkpoints completed before and after the failure: {}",
            cps.len()
        );
        assert!(cps.windows(2).all(|w| w[0].id < w[1].id));
        assert_eq!(final_sums(&store), expected_sums(0..20_000), "p={p}");
        // Every sum row committed is a prefix sum: no row counted twice.
        let manifests = std::fs::read_dir(dir.path())
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .is_ok_and(|e| e.file_name().to_string_lossy().starts_with("chk-"))
            })
            .count();
        assert!(
            manifests <= 3,
            "retention keeps 3 checkpoints, found {manifests} entries"
        );
    }
}

#[test]
fn union_alignment_blocks_and_stays_exact() {
    let dir = tempfile::tempdir().unwrap();
    let (g, store) = keyed_sum_graph(20_000, 2, true, true);
    let job = JobHandle::start(g, config(dir.path(), AlignmentMode::ExactlyOnce)).unwrap();
    let outcome = job.result().unwrap();
    assert_eq!(outcome.restarts, 1);
    assert_eq!(final_sums(&store), expected_sums(0..30_000));
}

#[test]
fn at_least_once_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (g, store) = keyed_sum_graph(10_000, 2, true, true);
    let job = JobHandle::start(g, config(dir.path(), AlignmentMode::AtLeastOnce)).unwrap();
    job.result().unwrap();
    let got = final_sums(&store);
    let want = expected_sums(0..15_000);
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        want.keys().collect::<Vec<_>>()
    );
    for (k, v) in &want {
        assert!(got[k] >= *v, "key {k}: {} < {v}: records were lost", got[k]);
    }
}

#[test]
fn a_new_job_restores_the_latest_checkpoint_of_a_finished_one() {
    let dir = tempfile::tempdir().unwrap();
    let (g, store) = keyed_sum_graph(5_000, 2, false, false);
    let job = JobHandle::start(g, config(dir.path(), AlignmentMode::ExactlyOnce)).unwrap();
    job.result().unwrap();
    assert_eq!(final_sums(&store), expected_sums(0..5_000));
    let last = job.checkpoints().last().unwrap().id;
    // The final checkpoint holds every operator finished: restoring it
    // replays nothing and commits nothing twice.
    let (g2, store2) = keyed_sum_graph(5_000, 2, false, false);
    let mut cfg = config(dir.path(), AlignmentMode::ExactlyOnce);
    cfg.restore_from = Some(RestoreFrom::Latest);
    let job2 = JobHandle::start(g2, cfg).unwrap();
    job2.result().unwrap();
    assert_eq!(store2.committed_rows(), 0);
    assert!(
        job2.checkpoints().first().unwrap().id > last,
        "ids keep increasing"
    );
}

#[test]
fn an_unwritable_checkpoint_dir_is_refused_before_the_job_starts() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("file");
    std::fs::write(&file, b"x").unwrap();
    let (g, _) = keyed_sum_graph(100, 1, false, false);
    let err = JobHandle::start(g, config(&file.join("sub"), AlignmentMode::ExactlyOnce))
        .err()
        .unwrap();
    assert!(matches!(err, Error::Checkpoint { .. }), "{err}");
    assert!(err.to_string().contains("sub"), "{err}");
}

/// A source that never ends on its own (so only a stop ends the job).
fn endless_graph(p: usize) -> (JobGraph, Arc<CollectStore>) {
    keyed_sum_graph(i64::MAX / 4, p, false, false)
}

fn committed_values(store: &CollectStore) -> BTreeMap<i64, i64> {
    final_sums(store)
}

#[test]
fn stop_with_savepoint_then_resume_continues_exactly() {
    for p in [1, 3] {
        let dir = tempfile::tempdir().unwrap();
        let sp = tempfile::tempdir().unwrap();
        // Run 1: stop without drain after some checkpoints (enough input
        // that the job is still running when the stop comes, even on a
        // loaded machine).
        let (g, store) = keyed_sum_graph(200_000, p, false, false);
        let job = JobHandle::start(g, config(dir.path(), AlignmentMode::ExactlyOnce)).unwrap();
        while job.checkpoints().len() < 2 {
            assert!(
                !job.wait_timeout(Duration::from_millis(2)),
                "the job ended too early"
            );
        }
        let path = job.stop_with_savepoint(sp.path(), false).unwrap();
        job.result().unwrap();
        assert!(path.join("_manifest.json").exists(), "{}", path.display());
        let first = committed_values(&store);
        // Run 2: resume from the savepoint to the end.
        let (g2, store2) = keyed_sum_graph(200_000, p, false, false);
        let mut cfg = config(dir.path(), AlignmentMode::ExactlyOnce);
        cfg.restore_from = Some(RestoreFrom::Path(path));
        JobHandle::start(g2, cfg).unwrap().result().unwrap();
        let mut combined = first;
        combined.extend(committed_values(&store2));
        assert_eq!(combined, expected_sums(0..200_000), "p={p}");
        assert!(
            store2.committed_rows() > 0,
            "the resumed run had work left (p={p})"
        );
    }
}

#[test]
fn stop_with_drain_finishes_the_job_and_trigger_savepoint_keeps_it_running() {
    let dir = tempfile::tempdir().unwrap();
    let sp = tempfile::tempdir().unwrap();
    let (g, _store) = endless_graph(2);
    let job = JobHandle::start(g, config(dir.path(), AlignmentMode::ExactlyOnce)).unwrap();
    let saved = job.trigger_savepoint(sp.path()).unwrap();
    assert!(saved.join("_manifest.json").exists());
    assert!(
        !job.wait_timeout(Duration::from_millis(20)),
        "a savepoint does not stop the job"
    );
    let drained = job.stop_with_savepoint(sp.path(), true).unwrap();
    job.result().unwrap();
    assert_ne!(saved, drained);
    // A drained savepoint is a final checkpoint: every operator finished.
    let rc = eddyline_core::checkpoint::CheckpointStorage::load_path(&drained).unwrap();
    assert!(rc.manifest().operators.iter().all(|o| o.finished));
}
