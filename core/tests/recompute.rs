//! Recovery by recomputation (FLINK-4120) end to end on the threaded
//! runtime: recomputed windows persist no state, a failure rewinds the
//! sources to the null-state checkpoint and re-injects the later barriers,
//! persisted operators and sinks drop the replay until the latest barrier,
//! retention keeps exactly the checkpoints back to the null-state one, and a
//! replay that differs from the original run is an error.
#![allow(clippy::unwrap_used)] // test helpers

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use arrow::array::AsArray;
use arrow::datatypes::Int64Type;
use eddyline_core::checkpoint::{CheckpointConfig, CheckpointStats};
use eddyline_core::checkpoint::{CheckpointStorage, Recovery};
use eddyline_core::error::Error;
use eddyline_core::expr::{BinaryOp, Expr, ScalarValue};
use eddyline_core::graph::{JobGraph, NodeKind, Role};
use eddyline_core::operator::keyed_agg::KeyedAggFactory;
use eddyline_core::operator::project::ProjectFactory;
use eddyline_core::operator::timestamps::AssignTimestampsFactory;
use eddyline_core::operator::window::{WindowAgg, WindowAssigner, WindowFactory};
use eddyline_core::runtime::{JobConfig, JobHandle, RestartStrategy, RestoreFrom};
use eddyline_core::sink::collect::{CollectSinkFactory, CollectStore};
use eddyline_core::state::keyed::AggKind;

mod common;
use common::{by_key, final_sums, fwd, node, seq_node, FlakyFactory};

const KEYS: i64 = 7;

struct Job {
    graph: JobGraph,
    windows: Arc<CollectStore>,
    sums: Option<Arc<CollectStore>>,
}

/// seq(0..n) -> flaky -> key = value % 7, ts = value -> assign_timestamps(ts)
/// -> by key -> sliding(size, slide) sum(value) -> collect "windows";
/// with `running_sum`, also key -> by key -> running sum(value) -> collect "sums".
fn windowed_job(n: i64, fail_after: Option<usize>, size: i64, running_sum: bool) -> Job {
    let windows = CollectStore::new();
    let p = 2;
    let key = Expr::binary(
        BinaryOp::Mod,
        Expr::col("value"),
        Expr::lit(ScalarValue::Int64(KEYS)),
    );
    let mut nodes = vec![
        seq_node(0, 1, n),
        node(
            1,
            "flaky",
            1,
            vec![fwd(0)],
            NodeKind::Operator(Arc::new(FlakyFactory {
                recomputable: true,
                ..FlakyFactory::new(fail_after)
            })),
            Role::Operator,
        ),
        node(
            2,
            "key",
            1,
            vec![fwd(1)],
            NodeKind::Operator(Arc::new(ProjectFactory::with_columns(vec![
                ("key".into(), key),
                ("ts".into(), Expr::col("value")),
            ]))),
            Role::Operator,
        ),
        node(
            3,
            "timestamps",
            1,
            vec![fwd(2)],
            NodeKind::Operator(Arc::new(AssignTimestampsFactory::new("ts".into(), 0))),
            Role::Operator,
        ),
        node(
            4,
            "window",
            p,
            vec![by_key(3)],
            NodeKind::Operator(Arc::new(WindowFactory::new(
                vec!["key".into()],
                "ts".into(),
                WindowAssigner::Sliding {
                    size_ms: size,
                    slide_ms: size / 4,
                },
                WindowAgg::Native(AggKind::Sum, Some("value".into())),
            ))),
            Role::Operator,
        ),
        node(
            5,
            "windows",
            p,
            vec![fwd(4)],
            NodeKind::Operator(Arc::new(CollectSinkFactory::new(windows.clone()))),
            Role::Sink,
        ),
    ];
    let mut sums = None;
    if running_sum {
        let store = CollectStore::new();
        nodes.push(node(
            6,
            "sum",
            p,
            vec![by_key(2)],
            NodeKind::Operator(Arc::new(KeyedAggFactory::new(
                vec!["key".into()],
                AggKind::Sum,
                Some("value".into()),
            ))),
            Role::Operator,
        ));
        nodes.push(node(
            7,
            "sums",
            p,
            vec![fwd(6)],
            NodeKind::Operator(Arc::new(CollectSinkFactory::new(store.clone()))),
            Role::Sink,
        ));
        sums = Some(store);
    }
    Job {
        graph: JobGraph {
            nodes,
            max_parallelism: 128,
            loops: vec![],
        },
        windows,
        sums,
    }
}

/// Every committed window result, (key, start, end, sum) -> how often.
fn window_rows(store: &CollectStore) -> BTreeMap<(i64, i64, i64, i64), usize> {
    let mut out = BTreeMap::new();
    for b in store.committed() {
        let col = |n: &str| b.column_by_name(n).unwrap().as_primitive::<Int64Type>();
        let (k, s, e, v) = (
            col("key"),
            col("window_start"),
            col("window_end"),
            col("value"),
        );
        for i in 0..b.num_rows() {
            *out.entry((k.value(i), s.value(i), e.value(i), v.value(i)))
                .or_insert(0) += 1;
        }
    }
    out
}

/// The reference: sliding windows of `size` (slide size/4) over 0..n.
fn expected_windows(n: i64, size: i64) -> BTreeMap<(i64, i64, i64, i64), usize> {
    let slide = size / 4;
    let mut sums: BTreeMap<(i64, i64), i64> = BTreeMap::new();
    for v in 0..n {
        let last = v - v.rem_euclid(slide);
        let mut start = last;
        while start > v - size {
            *sums.entry((v % KEYS, start)).or_insert(0) += v;
            start -= slide;
        }
    }
    sums.into_iter()
        .map(|((k, s), v)| ((k, s, s + size, v), 1))
        .collect()
}

fn config(dir: &std::path::Path, recovery: Recovery, batch_size: usize) -> JobConfig {
    let mut c = CheckpointConfig::new(dir);
    c.interval = Duration::from_millis(5);
    c.recovery = recovery;
    c.retained = 1;
    JobConfig {
        batch_size,
        restart: RestartStrategy {
            attempts: 2,
            delay: Duration::from_millis(1),
        },
        checkpoint: Some(c),
        ..JobConfig::default()
    }
}

fn operator_bytes(stats: &CheckpointStats, uid: &str) -> u64 {
    stats
        .operators
        .iter()
        .find(|o| o.0 == uid)
        .map(|o| o.2)
        .unwrap()
}

fn recomputes(stats: &CheckpointStats, uid: &str) -> bool {
    let i = stats.operators.iter().position(|o| o.0 == uid).unwrap();
    stats.recomputes[i]
}

#[test]
fn recompute_windows_after_a_failure_are_exact_and_persist_no_window_state() {
    let (n, size) = (30_000, 2_000);
    let dir = tempfile::tempdir().unwrap();
    let job = windowed_job(n, Some(8), size, false);
    let handle = JobHandle::start(job.graph, config(dir.path(), Recovery::Recompute, 64)).unwrap();
    let outcome = handle.result().unwrap();
    assert_eq!(outcome.restarts, 1, "the injected failure fired");
    assert_eq!(window_rows(&job.windows), expected_windows(n, size));
    let cps = handle.checkpoints();
    assert!(cps.len() >= 8, "checkpoints completed: {}", cps.len());
    for (i, c) in cps.iter().enumerate() {
        assert!(recomputes(c, "window") && recomputes(c, "timestamps"));
        assert!(!recomputes(c, "windows") && !recomputes(c, "seq"));
        // The final checkpoint (FLIP-147), the last, stores their final
        // state too, for read_state (coordinator.rs); no other one does.
        if i + 1 < cps.len() {
            assert_eq!(operator_bytes(c, "window"), 0, "checkpoint {}", c.id);
            assert_eq!(operator_bytes(c, "timestamps"), 0);
        }
        assert!(c.null_state_checkpoint <= c.id);
    }
    assert!(
        cps.iter().any(|c| c.null_state_checkpoint < c.id),
        "some checkpoint replays from an earlier one"
    );
    // The same job in persist mode writes the open windows.
    let dir2 = tempfile::tempdir().unwrap();
    let job2 = windowed_job(n, None, size, false);
    let h2 = JobHandle::start(job2.graph, config(dir2.path(), Recovery::Latest, 64)).unwrap();
    h2.result().unwrap();
    assert_eq!(window_rows(&job2.windows), expected_windows(n, size));
    let persisted = h2.checkpoints();
    assert!(persisted
        .iter()
        .any(|c| operator_bytes(c, "window") > 1_000 && !recomputes(c, "window")));
    assert!(persisted
        .iter()
        .all(|c| c.null_state_checkpoint == c.id && c.recomputes.iter().all(|r| !r)));
}

#[test]
fn recompute_mixed_with_a_persisted_running_sum_is_exact() {
    let (n, size) = (30_000, 1_000);
    let dir = tempfile::tempdir().unwrap();
    let job = windowed_job(n, Some(6), size, true);
    let handle = JobHandle::start(job.graph, config(dir.path(), Recovery::Recompute, 64)).unwrap();
    assert_eq!(handle.result().unwrap().restarts, 1);
    assert_eq!(window_rows(&job.windows), expected_windows(n, size));
    let mut want = BTreeMap::new();
    for v in 0..n {
        *want.entry(v % KEYS).or_insert(0) += v;
    }
    assert_eq!(final_sums(job.sums.as_ref().unwrap()), want);
    let cps = handle.checkpoints();
    assert!(cps
        .iter()
        .all(|c| !recomputes(c, "sum") && recomputes(c, "window")));
    assert!(cps.iter().any(|c| operator_bytes(c, "sum") > 0));
}

/// Waits until `handle` completed `count` checkpoints.
fn await_checkpoints(handle: &JobHandle, count: usize) {
    while handle.checkpoints().len() < count {
        assert!(
            !handle.wait_timeout(Duration::from_millis(2)),
            "the job ended too early"
        );
    }
}

#[test]
fn recompute_retention_keeps_exactly_the_checkpoints_back_to_the_null_state_one() {
    let dir = tempfile::tempdir().unwrap();
    let job = windowed_job(10_000_000, None, 4_000, false);
    let handle = JobHandle::start(job.graph, config(dir.path(), Recovery::Recompute, 64)).unwrap();
    await_checkpoints(&handle, 12);
    handle.cancel();
    let _ = handle.result();
    let cps = handle.checkpoints();
    let last = cps.last().unwrap();
    let storage = CheckpointStorage::open(dir.path()).unwrap();
    let kept: Vec<u64> = storage.list().unwrap().iter().rev().map(|s| s.id).collect();
    let want: Vec<u64> = cps
        .iter()
        .map(|c| c.id)
        .filter(|id| *id >= last.null_state_checkpoint)
        .collect();
    assert_eq!(
        kept, want,
        "null-state checkpoint {}",
        last.null_state_checkpoint
    );
    assert!(want.len() > 1, "the windows span several checkpoints");
}

#[test]
fn recompute_restore_in_a_new_job_is_exact_and_a_differing_replay_is_refused() {
    let (n, size) = (200_000, 4_000);
    let dir = tempfile::tempdir().unwrap();
    let job = windowed_job(n, None, size, false);
    let mut cfg = config(dir.path(), Recovery::Recompute, 64);
    // Only the checkpoints triggered below, so the last one is known to
    // have been committed by the sink before the job is cancelled.
    if let Some(c) = cfg.checkpoint.as_mut() {
        c.interval = Duration::from_secs(3600);
    }
    let handle = JobHandle::start(job.graph, cfg).unwrap();
    for _ in 0..6 {
        std::thread::sleep(Duration::from_millis(10));
        handle.trigger_checkpoint().unwrap();
    }
    std::thread::sleep(Duration::from_millis(100));
    handle.cancel();
    let _ = handle.result();
    let last = handle.checkpoints().last().unwrap().clone();
    assert!(last.null_state_checkpoint < last.id, "{last:?}");
    let first = window_rows(&job.windows);
    assert!(!first.is_empty());

    // Another batch size cuts the input elsewhere: the barriers are not
    // found at their recorded offsets.
    let other = windowed_job(n, None, size, false);
    let mut cfg = config(dir.path(), Recovery::Recompute, 100);
    cfg.restore_from = Some(RestoreFrom::Latest);
    let err = JobHandle::start(other.graph, cfg)
        .unwrap()
        .result()
        .expect_err("a differing replay fails");
    assert!(matches!(err, Error::Checkpoint { .. }), "{err}");
    assert!(
        err.to_string()
            .contains("first emitted the barrier of checkpoint"),
        "{err}"
    );
    assert_eq!(other.windows.committed_rows(), 0);

    // The same input replays exactly: together with the first run's
    // output, every window once.
    let again = windowed_job(n, None, size, false);
    let mut cfg = config(dir.path(), Recovery::Recompute, 64);
    cfg.restore_from = Some(RestoreFrom::Latest);
    JobHandle::start(again.graph, cfg)
        .unwrap()
        .result()
        .unwrap();
    let mut all = first;
    for (row, count) in window_rows(&again.windows) {
        *all.entry(row).or_insert(0) += count;
    }
    assert_eq!(all, expected_windows(n, size));
}
