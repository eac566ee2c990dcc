//! End-to-end runs of small graphs on the threaded runtime: sources, chains,
//! partitioned exchanges, sinks, failures and restarts.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arrow::array::{ArrayRef, AsArray, Int64Array};
use arrow::datatypes::Int64Type;
use arrow::record_batch::RecordBatch;
use eddyline_core::error::{Error, ForOperator, Result};
use eddyline_core::graph::{Edge, JobGraph, Node, NodeKind, Role};
use eddyline_core::operator::{Collector, Operator, OperatorContext, OperatorFactory};
use eddyline_core::partition::Partitioning;
use eddyline_core::runtime::{JobConfig, JobHandle, JobStatus, RestartStrategy};
use eddyline_core::sink::collect::{CollectSinkFactory, CollectStore};
use eddyline_core::source::sequence::SequenceSource;

/// Doubles `value`; fails on the first attempt when it sees `fail_at`.
struct Double {
    fail_at: Option<i64>,
    attempt: u32,
}

impl Operator for Double {
    fn open(&mut self, ctx: &OperatorContext) -> Result<()> {
        self.attempt = ctx.attempt;
        Ok(())
    }
    fn process_batch(&mut self, _i: usize, b: RecordBatch, out: &mut dyn Collector) -> Result<()> {
        let v = b.column(0).as_primitive::<Int64Type>();
        if self.attempt == 0 && self.fail_at.is_some_and(|f| v.values().contains(&f)) {
            return Err(Error::operator("double", "injected failure"));
        }
        let d: ArrayRef = Arc::new(Int64Array::from_iter_values(
            v.values().iter().map(|x| x * 2),
        ));
        out.emit(RecordBatch::try_new(b.schema(), vec![d]).for_operator("double")?)
    }
}

struct DoubleFactory(Option<i64>);
impl OperatorFactory for DoubleFactory {
    fn create(&self, _ctx: &OperatorContext) -> Result<Box<dyn Operator>> {
        Ok(Box::new(Double {
            fail_at: self.0,
            attempt: 0,
        }))
    }
}

fn graph(
    n: i64,
    p: usize,
    partitioning: Partitioning,
    fail_at: Option<i64>,
) -> (JobGraph, Arc<CollectStore>) {
    let store = CollectStore::new();
    let source = Node {
        id: 0,
        name: "seq".into(),
        uid: "seq".into(),
        parallelism: p,
        inputs: vec![],
        kind: NodeKind::Source(Arc::new(SequenceSource::new(0, n))),
        role: Role::Source,
        output_schema: None,
        scope: eddyline_core::scope::StreamScope::root(),
    };
    let double = Node {
        id: 1,
        name: "double".into(),
        uid: "double".into(),
        parallelism: p,
        inputs: vec![Edge {
            from: 0,
            partitioning,
            input: 0,
            port: 0,
        }],
        kind: NodeKind::Operator(Arc::new(DoubleFactory(fail_at))),
        role: Role::Operator,
        output_schema: None,
        scope: eddyline_core::scope::StreamScope::root(),
    };
    let sink = Node {
        id: 2,
        name: "sink".into(),
        uid: "sink".into(),
        parallelism: p,
        inputs: vec![Edge {
            from: 1,
            partitioning: Partitioning::Forward,
            input: 0,
            port: 0,
        }],
        kind: NodeKind::Operator(Arc::new(CollectSinkFactory::new(store.clone()))),
        role: Role::Sink,
        output_schema: None,
        scope: eddyline_core::scope::StreamScope::root(),
    };
    (
        JobGraph {
            nodes: vec![source, double, sink],
            max_parallelism: 128,
            loops: vec![],
        },
        store,
    )
}

fn sorted_values(store: &CollectStore) -> Vec<i64> {
    let mut v: Vec<i64> = store
        .committed()
        .iter()
        .flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().to_vec())
        .collect();
    v.sort_unstable();
    v
}

#[test]
fn chained_and_exchanged_pipelines_produce_every_record_once() {
    for p in [1, 2, 4] {
        for part in [
            Partitioning::Forward,
            Partitioning::Rebalance,
            Partitioning::Hash {
                keys: vec!["value".into()],
            },
        ] {
            let (g, store) = graph(10_000, p, part.clone(), None);
            let cfg = JobConfig {
                batch_size: 333,
                ..JobConfig::default()
            };
            let job = JobHandle::start(g, cfg).unwrap();
            let outcome = job.result().unwrap();
            assert_eq!(job.status(), JobStatus::Finished);
            let expected: Vec<i64> = (0..10_000).map(|x| x * 2).collect();
            assert_eq!(sorted_values(&store), expected, "p={p} {part:?}");
            let sink = &outcome.metrics.operators[2];
            assert_eq!(sink.records_in, 10_000);
        }
    }
}

#[test]
fn failure_without_restarts_fails_the_job_naming_the_operator() {
    let (g, store) = graph(1000, 2, Partitioning::Rebalance, Some(500));
    let job = JobHandle::start(g, JobConfig::default()).unwrap();
    let err = job.result().unwrap_err();
    assert!(err.to_string().contains("operator 'double'"), "{err}");
    assert_eq!(job.status(), JobStatus::Failed);
    assert_eq!(
        store.committed_rows(),
        0,
        "nothing commits from a failed job"
    );
}

#[test]
fn restart_from_scratch_commits_exactly_once() {
    let (g, store) = graph(5000, 2, Partitioning::Rebalance, Some(2500));
    let cfg = JobConfig {
        batch_size: 100,
        restart: RestartStrategy {
            attempts: 2,
            delay: Duration::from_millis(1),
        },
        ..JobConfig::default()
    };
    let job = JobHandle::start(g, cfg).unwrap();
    let outcome = job.result().unwrap();
    assert_eq!(outcome.restarts, 1);
    let expected: Vec<i64> = (0..5000).map(|x| x * 2).collect();
    assert_eq!(sorted_values(&store), expected);
}

struct Panicker;
impl Operator for Panicker {
    fn process_batch(&mut self, _i: usize, _b: RecordBatch, _o: &mut dyn Collector) -> Result<()> {
        panic!("boom in operator")
    }
}

#[test]
fn a_panic_becomes_an_error_not_a_crash() {
    let (mut g, _) = graph(100, 1, Partitioning::Forward, None);
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    g.nodes[1].kind = NodeKind::Operator(Arc::new(
        move |_ctx: &OperatorContext| -> Result<Box<dyn Operator>> {
            c.fetch_add(1, Ordering::Relaxed);
            Ok(Box::new(Panicker))
        },
    ));
    let job = JobHandle::start(g, JobConfig::default()).unwrap();
    let err = job.result().unwrap_err();
    assert!(
        err.to_string().contains("panicked: boom in operator"),
        "{err}"
    );
    assert_eq!(calls.load(Ordering::Relaxed), 1);
}

#[test]
fn cancel_stops_a_running_job() {
    let (g, _) = graph(i64::MAX / 4, 2, Partitioning::Rebalance, None);
    let job = JobHandle::start(g, JobConfig::default()).unwrap();
    assert!(!job.wait_timeout(Duration::from_millis(50)));
    job.cancel();
    assert!(job.wait_timeout(Duration::from_secs(30)));
    assert_eq!(job.status(), JobStatus::Cancelled);
}

/// Sends the values divisible by `modulus` to output port 1, the others
/// to port 0 (a stand-in for a window's late records).
struct Splitter {
    modulus: i64,
}

impl Operator for Splitter {
    fn process_batch(&mut self, _i: usize, b: RecordBatch, out: &mut dyn Collector) -> Result<()> {
        let v = b.column(0).as_primitive::<Int64Type>();
        let side: arrow::array::BooleanArray = v
            .values()
            .iter()
            .map(|x| Some(x % self.modulus == 0))
            .collect();
        let main = arrow::compute::not(&side).for_operator("split")?;
        out.emit(arrow::compute::filter_record_batch(&b, &main).for_operator("split")?)?;
        out.emit_to_port(
            1,
            arrow::compute::filter_record_batch(&b, &side).for_operator("split")?,
        )
    }
}

fn splitter(modulus: i64) -> NodeKind {
    NodeKind::Operator(Arc::new(
        move |_ctx: &OperatorContext| -> Result<Box<dyn Operator>> {
            Ok(Box::new(Splitter { modulus }))
        },
    ))
}

fn edge(from: usize, port: u8) -> Edge {
    Edge {
        from,
        partitioning: Partitioning::Forward,
        input: 0,
        port,
    }
}

fn plain_node(id: usize, name: &str, p: usize, inputs: Vec<Edge>, kind: NodeKind) -> Node {
    Node {
        id,
        name: name.into(),
        uid: name.into(),
        parallelism: p,
        inputs,
        role: if name.starts_with("sink") {
            Role::Sink
        } else {
            Role::Operator
        },
        kind,
        output_schema: None,
        scope: eddyline_core::scope::StreamScope::root(),
    }
}

fn collect_node(id: usize, name: &str, p: usize, from: Edge) -> (Node, Arc<CollectStore>) {
    let store = CollectStore::new();
    let kind = NodeKind::Operator(Arc::new(CollectSinkFactory::new(store.clone())));
    (plain_node(id, name, p, vec![from], kind), store)
}

#[test]
fn side_output_port_reaches_only_the_edges_of_that_port() {
    for p in [1, 2] {
        let source = NodeKind::Source(Arc::new(SequenceSource::new(0, 3000)));
        let mut src = plain_node(0, "seq", p, vec![], source);
        src.role = Role::Source;
        let split = plain_node(1, "split", p, vec![edge(0, 0)], splitter(3));
        let (main, main_store) = collect_node(2, "sink_main", p, edge(1, 0));
        let (side, side_store) = collect_node(3, "sink_side", p, edge(1, 1));
        let g = JobGraph {
            nodes: vec![src, split, main, side],
            max_parallelism: 128,
            loops: vec![],
        };
        let cfg = JobConfig {
            batch_size: 7,
            ..JobConfig::default()
        };
        let job = JobHandle::start(g, cfg).unwrap();
        job.result().unwrap();
        let side_expected: Vec<i64> = (0..3000).filter(|x| x % 3 == 0).collect();
        let main_expected: Vec<i64> = (0..3000).filter(|x| x % 3 != 0).collect();
        assert_eq!(sorted_values(&side_store), side_expected, "p={p}");
        assert_eq!(sorted_values(&main_store), main_expected, "p={p}");
    }
}

#[test]
fn side_output_of_an_operator_chained_into_another_reaches_no_edge() {
    // seq -> split3 -> split5 run as one chain (split3's only consumer reads
    // its port 0); split5's port 1 goes to a sink. split3's port 1 has no
    // reader: its values (multiples of 3) must not leak into split5's port 1.
    let mut src = plain_node(
        0,
        "seq",
        2,
        vec![],
        NodeKind::Source(Arc::new(SequenceSource::new(0, 3000))),
    );
    src.role = Role::Source;
    let split3 = plain_node(1, "split3", 2, vec![edge(0, 0)], splitter(3));
    let split5 = plain_node(2, "split5", 2, vec![edge(1, 0)], splitter(5));
    let (main, main_store) = collect_node(3, "sink_main", 2, edge(2, 0));
    let (side, side_store) = collect_node(4, "sink_side", 2, edge(2, 1));
    let g = JobGraph {
        nodes: vec![src, split3, split5, main, side],
        max_parallelism: 128,
        loops: vec![],
    };
    let plan = eddyline_core::runtime::plan::Plan::new(&g);
    assert_eq!(
        plan.chain_of[1], plan.chain_of[2],
        "split3 and split5 are chained"
    );
    let job = JobHandle::start(g, JobConfig::default()).unwrap();
    job.result().unwrap();
    let side_expected: Vec<i64> = (0..3000).filter(|x| x % 3 != 0 && x % 5 == 0).collect();
    let main_expected: Vec<i64> = (0..3000).filter(|x| x % 3 != 0 && x % 5 != 0).collect();
    assert_eq!(sorted_values(&side_store), side_expected);
    assert_eq!(sorted_values(&main_store), main_expected);
}
