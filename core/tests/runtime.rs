//! End-to-end runs of small graphs on the threaded runtime: sources, chains,
//! partitioned exchanges, sinks, failures and restarts.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arrow::array::{ArrayRef, AsArray, Int64Array};
use arrow::datatypes::Int64Type;
use arrow::record_batch::RecordBatch;
use eddyline_core::error::{Error, Result};
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
            return Err(Error::operator("", "injected failure"));
        }
        let d: ArrayRef = Arc::new(Int64Array::from_iter_values(
            v.values().iter().map(|x| x * 2),
        ));
        out.emit(RecordBatch::try_new(b.schema(), vec![d])?)
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
