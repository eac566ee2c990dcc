//! Loops on the threaded runtime: feedback queues, FLIP-15 termination
//! rounds at several parallelisms, nested loops, FLIP-16 loop logging across
//! a restart, and spilling feedback.
#![allow(clippy::unwrap_used)] // test helpers

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arrow::array::AsArray;
use arrow::datatypes::Int64Type;
use eddyline_core::checkpoint::CheckpointConfig;
use eddyline_core::expr::{BinaryOp, Expr, ScalarValue};
use eddyline_core::graph::{Edge, JobGraph, LoopPriority, LoopSpec, Node, NodeKind, Role};
use eddyline_core::operator::filter::FilterFactory;
use eddyline_core::operator::project::ProjectFactory;
use eddyline_core::operator::union::UnionFactory;
use eddyline_core::operator::OperatorFactory;
use eddyline_core::partition::Partitioning;
use eddyline_core::runtime::{JobConfig, JobHandle, RestartStrategy};
use eddyline_core::scope::StreamScope;
use eddyline_core::sink::collect::{CollectSinkFactory, CollectStore};
use eddyline_core::source::sequence::SequenceSource;

mod common;
use common::FlakyFactory;

fn col(name: &str) -> Expr {
    Expr::Column(name.into())
}

fn lit(v: i64) -> Expr {
    Expr::Literal(ScalarValue::Int64(v))
}

fn bin(op: BinaryOp, l: Expr, r: Expr) -> Expr {
    Expr::Binary {
        op,
        left: Box::new(l),
        right: Box::new(r),
    }
}

struct Builder {
    nodes: Vec<Node>,
    loops: Vec<LoopSpec>,
}

impl Builder {
    fn add(
        &mut self,
        name: &str,
        p: usize,
        inputs: Vec<Edge>,
        kind: NodeKind,
        role: Role,
        scope: &StreamScope,
    ) -> usize {
        let id = self.nodes.len();
        let mut n = common::node(id, name, p, inputs, kind, role);
        n.scope = scope.clone();
        self.nodes.push(n);
        id
    }

    fn op(
        &mut self,
        name: &str,
        p: usize,
        from: usize,
        part: Partitioning,
        f: Arc<dyn OperatorFactory>,
        scope: &StreamScope,
    ) -> usize {
        self.add(
            name,
            p,
            vec![Edge::new(from, part, 0)],
            NodeKind::Operator(f),
            Role::Operator,
            scope,
        )
    }
}

fn hash(key: &str) -> Partitioning {
    Partitioning::Hash {
        keys: vec![key.into()],
    }
}

/// `value` in [0, n) enters a loop with `left = value % 7 + 1` and goes
/// round until `left` reaches 0; the output is (value, left = 0) per value.
fn countdown_graph(
    n: i64,
    p: usize,
    body_edge: Partitioning,
    flaky: Option<Arc<AtomicBool>>,
    feedback_memory: usize,
    spill_dir: Option<std::path::PathBuf>,
) -> (JobGraph, Arc<CollectStore>) {
    let root = StreamScope::root();
    let inner = root.nest(1);
    let mut b = Builder {
        nodes: vec![],
        loops: vec![],
    };
    let src = b.add(
        "seq",
        p,
        vec![],
        NodeKind::Source(Arc::new(SequenceSource::new(0, n))),
        Role::Source,
        &root,
    );
    let init = b.op(
        "init",
        p,
        src,
        Partitioning::Forward,
        Arc::new(ProjectFactory::with_columns(vec![(
            "left".into(),
            bin(
                BinaryOp::Add,
                bin(BinaryOp::Mod, col("value"), lit(7)),
                lit(1),
            ),
        )])),
        &root,
    );
    let head = b.op(
        "head",
        p,
        init,
        Partitioning::Forward,
        Arc::new(UnionFactory::default()),
        &inner,
    );
    let dec = b.op(
        "dec",
        p,
        head,
        body_edge,
        Arc::new(ProjectFactory::with_columns(vec![(
            "left".into(),
            bin(BinaryOp::Sub, col("left"), lit(1)),
        )])),
        &inner,
    );
    let step = b.op(
        "flaky",
        p,
        dec,
        Partitioning::Forward,
        Arc::new(FlakyFactory {
            fired: flaky.clone().unwrap_or_default(),
            ..FlakyFactory::new(flaky.is_some().then_some(2))
        }),
        &inner,
    );
    let again = b.op(
        "again",
        p,
        step,
        Partitioning::Forward,
        Arc::new(FilterFactory::new(bin(BinaryOp::Gt, col("left"), lit(0)))),
        &inner,
    );
    let done = b.op(
        "done",
        p,
        step,
        Partitioning::Forward,
        Arc::new(FilterFactory::new(bin(BinaryOp::Eq, col("left"), lit(0)))),
        &inner,
    );
    let exit = b.op(
        "exit",
        p,
        done,
        Partitioning::Forward,
        Arc::new(UnionFactory::default()),
        &root,
    );
    let store = CollectStore::new();
    b.add(
        "collect",
        p,
        vec![Edge::new(exit, Partitioning::Forward, 0)],
        NodeKind::Operator(Arc::new(CollectSinkFactory::new(store.clone()))),
        Role::Sink,
        &root,
    );
    b.loops.push(LoopSpec {
        id: 1,
        head,
        tail: again,
        feedback_memory,
        priority: LoopPriority::FeedbackFirst,
        co: false,
        spill_dir,
    });
    (
        JobGraph {
            nodes: b.nodes,
            max_parallelism: 128,
            loops: b.loops,
        },
        store,
    )
}

fn outputs(store: &CollectStore) -> BTreeMap<i64, usize> {
    let mut out = BTreeMap::new();
    for b in store.committed() {
        let v = b
            .column_by_name("value")
            .unwrap()
            .as_primitive::<Int64Type>();
        let l = b
            .column_by_name("left")
            .unwrap()
            .as_primitive::<Int64Type>();
        for i in 0..b.num_rows() {
            assert_eq!(l.value(i), 0);
            *out.entry(v.value(i)).or_insert(0) += 1;
        }
    }
    out
}

fn expected(n: i64) -> BTreeMap<i64, usize> {
    (0..n).map(|v| (v, 1)).collect()
}

fn run(g: JobGraph, config: JobConfig) -> JobHandle {
    let job = JobHandle::start(g, config).unwrap();
    if !job.wait_timeout(Duration::from_secs(30)) {
        let m = job.metrics();
        for o in &m.operators {
            eprintln!("{}: in {} out {}", o.name, o.records_in, o.records_out);
        }
        panic!(
            "the loop did not terminate; {} checkpoints, {} failed",
            job.checkpoints().len(),
            job.failed_checkpoints()
        );
    }
    job
}

#[test]
fn loop_terminates_with_exact_output_at_parallelism_1_2_4() {
    for p in [1, 2, 4] {
        for edge in [Partitioning::Forward, hash("value")] {
            let (g, store) = countdown_graph(5_000, p, edge.clone(), None, 1 << 20, None);
            let job = run(
                g,
                JobConfig {
                    batch_size: 97,
                    ..JobConfig::default()
                },
            );
            job.result().unwrap();
            assert_eq!(outputs(&store), expected(5_000), "p={p} edge={edge:?}");
        }
    }
}

#[test]
fn empty_loop_input_terminates() {
    for p in [1, 3] {
        let (g, store) = countdown_graph(0, p, hash("value"), None, 1 << 20, None);
        let job = run(g, JobConfig::default());
        job.result().unwrap();
        assert!(outputs(&store).is_empty());
    }
}

#[test]
fn loop_with_checkpoints_terminates_exactly() {
    for p in [1, 2] {
        let dir = tempfile::tempdir().unwrap();
        let (g, store) = countdown_graph(3_000, p, hash("value"), None, 1 << 20, None);
        let mut c = CheckpointConfig::new(dir.path());
        c.interval = Duration::from_millis(10);
        let job = run(
            g,
            JobConfig {
                batch_size: 16,
                checkpoint: Some(c),
                ..JobConfig::default()
            },
        );
        job.result().unwrap();
        assert!(!job.checkpoints().is_empty());
        assert_eq!(outputs(&store), expected(3_000), "p={p}");
    }
}

#[test]
fn failure_inside_the_loop_restores_loop_logs_exactly_once() {
    for p in [1, 2] {
        let dir = tempfile::tempdir().unwrap();
        let fired = Arc::new(AtomicBool::new(false));
        let (g, store) =
            countdown_graph(3_000, p, hash("value"), Some(fired.clone()), 1 << 20, None);
        let mut c = CheckpointConfig::new(dir.path());
        c.interval = Duration::from_millis(10);
        let job = run(
            g,
            JobConfig {
                batch_size: 16,
                restart: RestartStrategy {
                    attempts: 2,
                    delay: Duration::from_millis(1),
                },
                checkpoint: Some(c),
                ..JobConfig::default()
            },
        );
        let outcome = job.result().unwrap();
        assert!(fired.load(Ordering::SeqCst), "the failure fired (p={p})");
        assert_eq!(outcome.restarts, 1);
        assert!(!job.checkpoints().is_empty());
        assert_eq!(outputs(&store), expected(3_000), "p={p}");
    }
}

#[test]
fn small_feedback_memory_spills_and_cleans_up() {
    let spill = tempfile::tempdir().unwrap();
    let (g, store) = countdown_graph(
        20_000,
        2,
        hash("value"),
        None,
        // Less than one 512-row batch: whatever the flow control lets
        // circulate at once, a second batch in the feedback spills.
        2 << 10,
        Some(spill.path().to_path_buf()),
    );
    let job = run(
        g,
        JobConfig {
            batch_size: 512,
            ..JobConfig::default()
        },
    );
    let outcome = job.result().unwrap();
    assert_eq!(outputs(&store), expected(20_000));
    let head = outcome
        .metrics
        .operators
        .iter()
        .find(|o| o.name == "head")
        .unwrap();
    assert!(head.spill_files > 0, "feedback spilled: {head:?}");
    let left: Vec<_> = std::fs::read_dir(spill.path())
        .map(|d| d.filter_map(|e| e.ok()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "spill files left behind: {left:?}");
}
