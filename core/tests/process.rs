//! Distributed runs (`ProcessRunner`, API.md "Runners") without Python: a launcher whose
//! "workers" are threads of this test, each a full `WorkerSession` with its
//! own copy of the graph, talking to the driver and to each other over
//! authenticated loopback TCP exactly as worker processes do.

#![allow(clippy::unwrap_used)] // test helpers

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use eddyline_core::checkpoint::CheckpointConfig;
use eddyline_core::graph::{JobGraph, NodeKind, Role};
use eddyline_core::runtime::{
    Distribution, JobConfig, JobHandle, Launcher, RestartStrategy, WorkerSession,
};
use eddyline_core::sink::collect::{CollectSinkFactory, CollectStore};
use eddyline_core::Result;

use common::{
    expected_sums, final_sums, fwd, key_mod_node, node, seq_node, sum_by_key_node, FlakyFactory,
};

/// seq (p) -> flaky (p) -> key = value % 13 -> sum by key (hash, p) -> collect.
fn graph(n: i64, p: usize, flaky: &Arc<FlakyFactory>, store: Arc<CollectStore>) -> JobGraph {
    JobGraph {
        nodes: vec![
            seq_node(0, p, n),
            node(
                1,
                "flaky",
                p,
                vec![fwd(0)],
                NodeKind::Operator(flaky.clone()),
                Role::Operator,
            ),
            key_mod_node(2, p, 1, 13),
            sum_by_key_node(3, p, 2),
            node(
                4,
                "collect",
                p,
                vec![fwd(3)],
                NodeKind::Operator(Arc::new(CollectSinkFactory::new(store))),
                Role::Sink,
            ),
        ],
        max_parallelism: 128,
        loops: vec![],
    }
}

fn config(dir: &std::path::Path) -> JobConfig {
    let mut c = CheckpointConfig::new(dir);
    c.interval = Duration::from_millis(20);
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

/// Runs each worker on a thread of this process.
struct ThreadLauncher {
    n: i64,
    p: usize,
    flaky: Arc<FlakyFactory>,
    config: JobConfig,
    threads: Vec<JoinHandle<Result<()>>>,
    /// Starts per attempt, to check the driver restarted the workers.
    launches: Arc<std::sync::atomic::AtomicUsize>,
}

impl Launcher for ThreadLauncher {
    fn launch(&mut self, attempt: u64, workers: usize, driver: &str, secret: &str) -> Result<()> {
        self.launches.fetch_add(1, Ordering::SeqCst);
        for i in 0..workers {
            let (driver, secret) = (driver.to_string(), secret.to_string());
            let (n, p, flaky, config) = (self.n, self.p, self.flaky.clone(), self.config.clone());
            self.threads.push(std::thread::spawn(move || {
                let session =
                    WorkerSession::connect(&driver, &secret, i, attempt, "127.0.0.1", None)?;
                let store = CollectStore::new();
                let g = graph(n, p, &flaky, store.clone());
                session.run(g, config, [(4usize, store)].into_iter().collect())
            }));
        }
        Ok(())
    }

    fn check(&mut self) -> Result<()> {
        Ok(())
    }

    fn stop(&mut self) {
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn run(n: i64, p: usize, workers: usize, fail: bool) -> (BTreeMap<i64, i64>, u32, usize, usize) {
    let dir = tempfile::tempdir().unwrap();
    let flaky = Arc::new(FlakyFactory::new(fail.then_some(1)));
    let store = CollectStore::new();
    let cfg = config(dir.path());
    let launches = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let launcher = ThreadLauncher {
        n,
        p,
        flaky: flaky.clone(),
        config: cfg.clone(),
        threads: Vec::new(),
        launches: launches.clone(),
    };
    let dist = Distribution {
        workers,
        launcher: Box::new(launcher),
        spec: Arc::new(Vec::new()),
        collect_stores: [(4usize, store.clone())].into_iter().collect(),
        bind: "127.0.0.1:0".into(),
        start_timeout: Duration::from_secs(30),
    };
    let job = JobHandle::start_distributed(graph(n, p, &flaky, store.clone()), cfg, dist).unwrap();
    let outcome = job.result().unwrap();
    let records_in = outcome
        .metrics
        .operators
        .iter()
        .find(|o| o.name == "sum")
        .map(|o| o.records_in)
        .unwrap_or(0);
    assert_eq!(flaky.fired.load(Ordering::SeqCst), fail);
    let sums = final_sums(&store);
    (
        sums,
        outcome.restarts,
        launches.load(Ordering::SeqCst),
        records_in as usize,
    )
}

#[test]
fn two_workers_compute_what_one_process_computes() {
    for (p, workers) in [(2, 2), (3, 2), (1, 2)] {
        let (sums, restarts, launches, records_in) = run(20_000, p, workers, false);
        assert_eq!(sums, expected_sums(0..20_000), "p={p} workers={workers}");
        assert_eq!((restarts, launches), (0, 1));
        // Metrics of every worker reach the driver.
        assert_eq!(records_in, 20_000, "p={p}");
    }
}

#[test]
fn a_failed_task_restarts_every_worker_from_the_latest_checkpoint() {
    let (sums, restarts, launches, _) = run(20_000, 2, 2, true);
    assert_eq!(restarts, 1);
    assert_eq!(launches, 2, "the driver launched a new set of workers");
    assert_eq!(sums, expected_sums(0..20_000));
}
