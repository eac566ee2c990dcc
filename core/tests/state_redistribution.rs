//! FLIP-147 "partially finished operators": a savepoint taken while some
//! subtasks of an operator had finished and others were running is
//! restored at another parallelism; the non-keyed state that is left
//! (source splits, pending sink commits) is dealt to the new subtasks and
//! the committed output equals an uninterrupted run exactly. Operators
//! whose non-keyed state cannot move are refused with a CheckpointError
//! naming them.
#![allow(clippy::unwrap_used)] // test helpers

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::{AsArray, RecordBatch};
use arrow::datatypes::Int64Type;
use eddyline_core::barrier::AlignmentMode;
use eddyline_core::checkpoint::CheckpointConfig;
use eddyline_core::checkpoint::CheckpointStorage;
use eddyline_core::error::{Error, Result};
use eddyline_core::graph::{Edge, JobGraph, NodeKind, Role};
use eddyline_core::operator::union::UnionFactory;
use eddyline_core::operator::{
    CheckpointedState, Collector, Operator, OperatorContext, OperatorFactory,
};
use eddyline_core::partition::Partitioning;
use eddyline_core::runtime::{JobConfig, JobHandle, RestartStrategy, RestoreFrom};
use eddyline_core::sink::collect::{CollectSinkFactory, CollectStore};
use eddyline_core::sink::parquet::ParquetSinkFactory;
use eddyline_core::source::sequence::SequenceSource;
use eddyline_core::state::{decode_entries, OperatorState, StateBlob};

use common::{fwd, key_mod_node, node, sum_by_key_node};

/// Values of the sequence read by subtasks at different speeds.
const UNEVEN: i64 = 20_000;
/// Values of the short source, which finishes at once.
const SHORT: i64 = 300;

/// Passes batches on; subtask `slow` sleeps `delay` per batch, so the other
/// subtasks of its source finish long before it. `fast_done` is set when a
/// fast subtask finished.
struct ThrottleFactory {
    slow: usize,
    delay: Duration,
    fast_done: Arc<AtomicBool>,
}

struct Throttle {
    subtask: usize,
    slow: usize,
    delay: Duration,
    fast_done: Arc<AtomicBool>,
}

impl OperatorFactory for ThrottleFactory {
    fn create(&self, ctx: &OperatorContext) -> Result<Box<dyn Operator>> {
        Ok(Box::new(Throttle {
            subtask: ctx.subtask_index,
            slow: self.slow,
            delay: self.delay,
            fast_done: self.fast_done.clone(),
        }))
    }
}

impl Operator for Throttle {
    fn process_batch(&mut self, _i: usize, b: RecordBatch, out: &mut dyn Collector) -> Result<()> {
        if self.subtask == self.slow {
            std::thread::sleep(self.delay);
        }
        out.emit(b)
    }
    fn finish(&mut self, _out: &mut dyn Collector) -> Result<()> {
        if self.subtask != self.slow {
            self.fast_done.store(true, Ordering::SeqCst);
        }
        Ok(())
    }
}

/// Counts the batches its subtask saw, as non-keyed state of the default
/// redistribution (it stays with its subtask).
struct BatchCounter(u64);

impl Operator for BatchCounter {
    fn process_batch(&mut self, _i: usize, b: RecordBatch, out: &mut dyn Collector) -> Result<()> {
        self.0 += 1;
        out.emit(b)
    }

    fn state(&mut self) -> Option<&mut dyn CheckpointedState> {
        Some(self)
    }
}

impl CheckpointedState for BatchCounter {
    fn snapshot_state(&mut self, _checkpoint_id: u64) -> Result<OperatorState> {
        Ok(OperatorState {
            operator: Some(StateBlob::Bytes(Arc::new(self.0.to_le_bytes().to_vec()))),
            keyed: Vec::new(),
        })
    }
}

fn batch_counter(_ctx: &OperatorContext) -> Result<Box<dyn Operator>> {
    Ok(Box::new(BatchCounter(0)))
}

enum Sink {
    Collect(Arc<CollectStore>),
    Parquet(PathBuf, &'static str),
}

/// `uneven` (a sequence at parallelism `p`, one subtask throttled by
/// `delay`) and `short` (parallelism 1) -> union -> key = value % 13 ->
/// keyed sum -> sink, everything but `short` at parallelism `p`.
fn graph(p: usize, delay: Duration, fast_done: Arc<AtomicBool>, sink: &Sink) -> JobGraph {
    let rebalance = |from| Edge {
        from,
        partitioning: Partitioning::Rebalance,
        input: 0,
        port: 0,
    };
    let sink_factory: Arc<dyn OperatorFactory> = match sink {
        Sink::Collect(store) => Arc::new(CollectSinkFactory::new(store.clone())),
        Sink::Parquet(dir, tag) => Arc::new(ParquetSinkFactory::new(dir, *tag)),
    };
    let nodes = vec![
        node(
            0,
            "uneven",
            p,
            vec![],
            NodeKind::Source(Arc::new(SequenceSource::new(0, UNEVEN))),
            Role::Source,
        ),
        node(
            1,
            "throttle",
            p,
            vec![fwd(0)],
            NodeKind::Operator(Arc::new(ThrottleFactory {
                slow: 1,
                delay,
                fast_done,
            })),
            Role::Operator,
        ),
        node(
            2,
            "short",
            1,
            vec![],
            NodeKind::Source(Arc::new(SequenceSource::new(UNEVEN, UNEVEN + SHORT))),
            Role::Source,
        ),
        node(
            3,
            "union",
            p,
            vec![rebalance(1), rebalance(2)],
            NodeKind::Operator(Arc::new(UnionFactory::default())),
            Role::Operator,
        ),
        key_mod_node(4, p, 3, 13),
        sum_by_key_node(5, p, 4),
        node(
            6,
            "sink",
            p,
            vec![fwd(5)],
            NodeKind::Operator(sink_factory),
            Role::Sink,
        ),
    ];
    JobGraph {
        nodes,
        max_parallelism: 128,
        loops: vec![],
    }
}

fn config(dir: &Path) -> JobConfig {
    let mut c = CheckpointConfig::new(dir);
    c.interval = Duration::from_millis(20);
    c.mode = AlignmentMode::ExactlyOnce;
    JobConfig {
        batch_size: 64,
        restart: RestartStrategy {
            attempts: 0,
            delay: Duration::from_millis(1),
        },
        checkpoint: Some(c),
        ..JobConfig::default()
    }
}

/// The newest sum per key of `batches`, in commit order.
fn sums(batches: impl IntoIterator<Item = RecordBatch>) -> BTreeMap<i64, i64> {
    let mut out = BTreeMap::new();
    for b in batches {
        let k = b.column_by_name("key").unwrap().as_primitive::<Int64Type>();
        let v = b
            .column_by_name("value")
            .unwrap()
            .as_primitive::<Int64Type>();
        for i in 0..b.num_rows() {
            out.insert(k.value(i), v.value(i));
        }
    }
    out
}

fn expected() -> BTreeMap<i64, i64> {
    let mut out = BTreeMap::new();
    for v in 0..UNEVEN + SHORT {
        *out.entry(v % 13).or_insert(0) += v;
    }
    out
}

/// Runs at parallelism 2 until the fast subtask of `uneven` (and `short`)
/// finished, then stops with a savepoint while the slow one still runs.
fn stop_after_fast_subtask_finished(dir: &Path, sp: &Path, sink: &Sink) -> PathBuf {
    let fast_done = Arc::new(AtomicBool::new(false));
    let g = graph(2, Duration::from_millis(4), fast_done.clone(), sink);
    let job = JobHandle::start(g, config(dir)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !fast_done.load(Ordering::SeqCst) {
        assert!(Instant::now() < deadline, "the fast subtask never finished");
        assert!(
            !job.wait_timeout(Duration::from_millis(2)),
            "the job ended before the savepoint"
        );
    }
    let path = job.stop_with_savepoint(sp, false).unwrap();
    job.result().unwrap();
    // Non-vacuity: the savepoint holds a partially finished source: the
    // fast subtask has no split left, the slow one has.
    let rc = CheckpointStorage::load_path(&path).unwrap();
    let left = |s: u32| {
        let blob = rc.state("uneven", s).unwrap().operator.clone().unwrap();
        decode_entries(blob.as_bytes().unwrap()).unwrap().len()
    };
    assert_eq!(left(0), 0, "the fast subtask finished");
    assert_eq!(left(1), 1, "the slow subtask was still reading");
    let uneven = rc.manifest().operator("uneven").unwrap();
    assert!(!uneven.finished, "only partially finished");
    assert!(rc.manifest().operator("short").unwrap().finished);
    path
}

#[test]
fn partially_finished_source_restores_at_another_parallelism_exactly() {
    for p in [1, 3] {
        let dir = tempfile::tempdir().unwrap();
        let sp = tempfile::tempdir().unwrap();
        let store = CollectStore::new();
        let path =
            stop_after_fast_subtask_finished(dir.path(), sp.path(), &Sink::Collect(store.clone()));
        let first = sums(store.committed());
        let store2 = CollectStore::new();
        let g2 = graph(
            p,
            Duration::ZERO,
            Arc::new(AtomicBool::new(false)),
            &Sink::Collect(store2.clone()),
        );
        let mut cfg = config(dir.path());
        cfg.restore_from = Some(RestoreFrom::Path(path));
        JobHandle::start(g2, cfg).unwrap().result().unwrap();
        assert!(
            store2.committed_rows() > 0,
            "the resumed run had work left (p={p})"
        );
        let mut combined = first;
        combined.extend(sums(store2.committed()));
        assert_eq!(combined, expected(), "p={p}");
    }
}

fn parquet_rows(dir: &Path) -> Vec<RecordBatch> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy();
            name.starts_with("part-") && name.ends_with(".parquet")
        })
        .collect();
    files.sort();
    let mut out = Vec::new();
    for f in files {
        let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
            std::fs::File::open(&f).unwrap(),
        )
        .unwrap()
        .build()
        .unwrap();
        out.extend(reader.map(|b| b.unwrap()));
    }
    out
}

/// Sums per key over every committed row: each key's running sums are
/// increasing, so the largest one committed is the total (a lost or a
/// duplicated commit shows as a wrong total or a missing key).
fn max_sums(batches: &[RecordBatch]) -> BTreeMap<i64, i64> {
    let mut out = BTreeMap::new();
    for (k, v) in sums_rows(batches) {
        let e = out.entry(k).or_insert(v);
        *e = (*e).max(v);
    }
    out
}

fn sums_rows(batches: &[RecordBatch]) -> Vec<(i64, i64)> {
    let mut out = Vec::new();
    for b in batches {
        let k = b.column_by_name("key").unwrap().as_primitive::<Int64Type>();
        let v = b
            .column_by_name("value")
            .unwrap()
            .as_primitive::<Int64Type>();
        out.extend((0..b.num_rows()).map(|i| (k.value(i), v.value(i))));
    }
    out
}

#[test]
fn partially_finished_job_with_parquet_sink_restores_at_another_parallelism_exactly() {
    for p in [1, 3] {
        let dir = tempfile::tempdir().unwrap();
        let sp = tempfile::tempdir().unwrap();
        let out = tempfile::tempdir().unwrap();
        let path = stop_after_fast_subtask_finished(
            dir.path(),
            sp.path(),
            &Sink::Parquet(out.path().to_path_buf(), "run1"),
        );
        // A plain stop-with-savepoint leaves its transactions pending: they
        // are in the savepoint, and the restored job must commit each once.
        let rc = CheckpointStorage::load_path(&path).unwrap();
        let pending: usize = (0..2)
            .map(|s| {
                let blob = rc.state("sink", s).unwrap().operator.clone().unwrap();
                decode_entries(blob.as_bytes().unwrap()).unwrap().len()
            })
            .sum();
        let committed_before = sums_rows(&parquet_rows(out.path())).len();
        let g2 = graph(
            p,
            Duration::ZERO,
            Arc::new(AtomicBool::new(false)),
            &Sink::Parquet(out.path().to_path_buf(), "run2"),
        );
        let mut cfg = config(dir.path());
        cfg.restore_from = Some(RestoreFrom::Path(path));
        JobHandle::start(g2, cfg).unwrap().result().unwrap();
        let rows = parquet_rows(out.path());
        assert!(
            sums_rows(&rows).len() > committed_before,
            "the resumed run committed more (p={p})"
        );
        assert_eq!(max_sums(&rows), expected(), "p={p}, {pending} pending");
        let leftovers: Vec<String> = std::fs::read_dir(out.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
            .filter(|n| n.starts_with('.'))
            .collect();
        assert!(
            leftovers.is_empty(),
            "uncommitted files left: {leftovers:?}"
        );
    }
}

#[test]
fn non_redistributable_operator_state_is_a_checkpoint_error_naming_the_operator() {
    let dir = tempfile::tempdir().unwrap();
    let sp = tempfile::tempdir().unwrap();
    let ts_graph = |p: usize| JobGraph {
        nodes: vec![
            node(
                0,
                "numbers",
                p,
                vec![],
                NodeKind::Source(Arc::new(SequenceSource::new(0, i64::MAX / 4))),
                Role::Source,
            ),
            node(
                1,
                "counter",
                p,
                vec![fwd(0)],
                NodeKind::Operator(Arc::new(batch_counter)),
                Role::Operator,
            ),
            node(
                2,
                "collect",
                p,
                vec![fwd(1)],
                NodeKind::Operator(Arc::new(CollectSinkFactory::new(CollectStore::new()))),
                Role::Sink,
            ),
        ],
        max_parallelism: 128,
        loops: vec![],
    };
    let job = JobHandle::start(ts_graph(2), config(dir.path())).unwrap();
    while job.checkpoints().is_empty() {
        assert!(!job.wait_timeout(Duration::from_millis(2)));
    }
    let path = job.stop_with_savepoint(sp.path(), false).unwrap();
    job.result().unwrap();
    let mut cfg = config(dir.path());
    cfg.restore_from = Some(RestoreFrom::Path(path.clone()));
    let err = JobHandle::start(ts_graph(1), cfg)
        .and_then(|j| j.result().map(|_| ()))
        .unwrap_err();
    assert!(matches!(err, Error::Checkpoint { .. }), "{err}");
    let msg = err.to_string();
    assert!(msg.contains("operator 'counter'"), "{msg}");
    assert!(
        msg.contains("parallelism 2") && msg.contains("parallelism 1"),
        "{msg}"
    );
    // At the parallelism it was taken at, the same savepoint restores.
    let mut cfg = config(dir.path());
    cfg.restore_from = Some(RestoreFrom::Path(path));
    let job = JobHandle::start(ts_graph(2), cfg).unwrap();
    while job.checkpoints().is_empty() {
        assert!(!job.wait_timeout(Duration::from_millis(2)));
    }
    job.cancel();
}
