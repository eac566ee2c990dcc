//! `start_job` and the job handle Python's `JobClient` wraps.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use eddyline_core::barrier::AlignmentMode;
use eddyline_core::checkpoint::Recovery;
use eddyline_core::checkpoint::{CheckpointConfig, CheckpointStats};
use eddyline_core::event::BarrierKind;
use eddyline_core::graph::Role;
use eddyline_core::runtime::{
    Distribution, JobConfig, JobHandle, Launcher, RestartStrategy, RestoreFrom,
};
use eddyline_core::sink::collect::CollectStore;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use std::path::PathBuf;

use eddyline_core::store::StorageOptions;

use crate::arrow::batch_to_py;
use crate::errors::{from_py, to_py};
use crate::gil::detached;
use crate::graph::parse_job_graph;

/// A Python object that starts and stops the worker processes of a job:
/// `launch(attempt, workers, driver, secret)`, `check()` (raises once the
/// workers cannot come up) and `stop()`.
struct PyLauncher(Py<PyAny>);

impl PyLauncher {
    /// Calls the launcher's method `name`. A failure names the launcher (its
    /// class without leading underscores, e.g. `SparkLauncher`) and keeps the
    /// Python exception as cause, with its traceback.
    fn call(
        &self,
        name: &str,
        args: impl for<'py> FnOnce(Python<'py>) -> PyResult<Bound<'py, pyo3::types::PyTuple>>,
    ) -> eddyline_core::Result<()> {
        Python::attach(|py| {
            let runner = self.0.bind(py);
            let result = args(py).and_then(|a| runner.call_method1(name, a));
            result.map(|_| ()).map_err(|e| {
                let class = runner
                    .get_type()
                    .name()
                    .map(|n| n.to_string().trim_start_matches('_').to_string())
                    .ok()
                    .filter(|n| !n.is_empty())
                    .unwrap_or_else(|| "launcher".to_string());
                match from_py(py, &class, e) {
                    eddyline_core::Error::UserFunction {
                        operator,
                        message,
                        traceback,
                        cause,
                    } => eddyline_core::Error::UserFunction {
                        operator,
                        message: format!("the runner's {name}() failed: {message}"),
                        traceback,
                        cause,
                    },
                    other => other,
                }
            })
        })
    }
}

impl Launcher for PyLauncher {
    fn launch(
        &mut self,
        attempt: u64,
        workers: usize,
        driver: &str,
        secret: &str,
    ) -> eddyline_core::Result<()> {
        let (d, s) = (driver.to_string(), secret.to_string());
        self.call("launch", move |py| {
            pyo3::types::PyTuple::new(
                py,
                [
                    attempt.into_pyobject(py)?.into_any(),
                    workers.into_pyobject(py)?.into_any(),
                    d.into_pyobject(py)?.into_any(),
                    s.into_pyobject(py)?.into_any(),
                ],
            )
        })
    }

    fn check(&mut self) -> eddyline_core::Result<()> {
        self.call("check", |py| Ok(pyo3::types::PyTuple::empty(py)))
    }

    /// Cleanup after an attempt, often while another error is on its way
    /// to the user: a failure here cannot replace that error, so it goes to
    /// stderr (the job's log) with its traceback instead of being dropped.
    fn stop(&mut self) {
        Python::attach(|py| {
            if let Err(e) = self.0.bind(py).call_method0("stop") {
                eprintln!("eddyline: the runner's stop() failed (ignored while stopping):");
                e.display(py);
            }
        });
    }
}

/// A running job.
#[pyclass(name = "JobHandle", module = "eddyline._core", frozen, weakref)]
pub struct PyJobHandle {
    handle: Arc<JobHandle>,
    collect_stores: HashMap<usize, Arc<CollectStore>>,
}

/// `CheckpointSpec` (`eddyline/_specs.py`): `CheckpointConfig` with its
/// durations in seconds.
#[derive(FromPyObject)]
struct CheckpointSpec {
    dir: PathBuf,
    interval: f64,
    mode: String,
    unaligned: bool,
    incremental: bool,
    aligned_timeout: Option<f64>,
    retained: usize,
    recovery: Option<String>,
    timeout: Option<f64>,
    storage_options: StorageOptions,
}

/// `RestartSpec`: `RestartStrategy` as attempts and a delay in seconds.
#[derive(FromPyObject)]
struct RestartSpec {
    attempts: u32,
    delay_s: f64,
}

/// `JobConfigSpec` (`eddyline/_specs.py`): the configuration of one run.
#[derive(FromPyObject)]
pub(crate) struct JobConfigSpec {
    name: String,
    pub max_parallelism: usize,
    batch_size: usize,
    restart: Option<RestartSpec>,
    checkpoint: Option<CheckpointSpec>,
    restore_from: Option<String>,
    allow_non_restored_state: bool,
    allow_duplicate_output: bool,
    pub run_tag: Option<String>,
    channel_capacity: Option<usize>,
    /// Spark's ANSI mode for the native expressions (`spark.sql.ansi.enabled`).
    pub ansi: bool,
}

impl CheckpointSpec {
    fn into_config(self) -> PyResult<CheckpointConfig> {
        let mut cc = CheckpointConfig::new(self.dir);
        cc.interval = Duration::from_secs_f64(self.interval.max(0.001));
        if let Some(t) = self.timeout {
            cc.timeout = Duration::from_secs_f64(t.max(0.001));
        }
        cc.mode = match self.mode.as_str() {
            "exactly_once" => AlignmentMode::ExactlyOnce,
            "at_least_once" => AlignmentMode::AtLeastOnce,
            other => {
                return Err(pyo3::exceptions::PyValueError::new_err(format!(
                    "unknown checkpoint mode '{other}'"
                )))
            }
        };
        cc.unaligned = self.unaligned;
        cc.incremental = self.incremental;
        cc.aligned_timeout = self
            .aligned_timeout
            .map(|t| Duration::from_secs_f64(t.max(0.0)));
        if let Some(recovery) = self.recovery {
            cc.recovery = match recovery.as_str() {
                "latest" => Recovery::Latest,
                "recompute" => Recovery::Recompute,
                other => {
                    return Err(pyo3::exceptions::PyValueError::new_err(format!(
                        "unknown recovery mode '{other}'"
                    )))
                }
            };
        }
        cc.retained = self.retained.max(1);
        cc.storage_options = self.storage_options;
        Ok(cc)
    }
}

impl JobConfigSpec {
    /// The core's job configuration.
    pub(crate) fn into_config(self) -> PyResult<JobConfig> {
        let mut c = JobConfig {
            name: self.name,
            batch_size: self.batch_size.max(1),
            allow_non_restored_state: self.allow_non_restored_state,
            allow_duplicate_output: self.allow_duplicate_output,
            ..JobConfig::default()
        };
        if let Some(capacity) = self.channel_capacity {
            c.channel_capacity = capacity.max(1);
        }
        c.checkpoint = self
            .checkpoint
            .map(CheckpointSpec::into_config)
            .transpose()?;
        c.restore_from = self.restore_from.map(|s| {
            if s == "latest" {
                RestoreFrom::Latest
            } else {
                RestoreFrom::Path(s.into())
            }
        });
        if let Some(r) = self.restart {
            c.restart = RestartStrategy {
                attempts: r.attempts,
                delay: Duration::from_secs_f64(r.delay_s.max(0.0)),
            };
        }
        Ok(c)
    }
}

/// Builds the graph from the node specs and starts it: in this process, or,
/// with `launcher`, in `workers` worker processes it launches (each
/// rebuilds the job from `spec`, see `eddyline._worker`).
#[pyfunction]
#[pyo3(signature = (nodes, config, launcher=None, workers=1, spec=None, bind="127.0.0.1:0", start_timeout_s=120.0))]
#[allow(clippy::too_many_arguments)]
pub fn start_job(
    py: Python<'_>,
    nodes: &Bound<'_, PyList>,
    config: JobConfigSpec,
    launcher: Option<Py<PyAny>>,
    workers: usize,
    spec: Option<Vec<u8>>,
    bind: &str,
    start_timeout_s: f64,
) -> PyResult<PyJobHandle> {
    let max_p = config.max_parallelism;
    let millis = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    let run_tag = config
        .run_tag
        .clone()
        .unwrap_or_else(|| format!("{millis:x}"));
    let built = parse_job_graph(py, nodes, max_p, &run_tag, config.ansi)?;
    let mut cfg = config.into_config()?;
    cfg.external_sinks = built.external_sinks.clone();
    let handle = match launcher {
        None => JobHandle::start(built.graph, cfg),
        Some(launcher) => {
            let dist = Distribution {
                workers: workers.max(1),
                launcher: Box::new(PyLauncher(launcher)),
                spec: Arc::new(spec.unwrap_or_default()),
                collect_stores: built.collect_stores.clone(),
                bind: bind.to_string(),
                start_timeout: Duration::from_secs_f64(start_timeout_s.max(1.0)),
            };
            JobHandle::start_distributed(built.graph, cfg, dist)
        }
    }
    .map_err(|e| to_py(py, &e))?;
    Ok(PyJobHandle {
        handle: Arc::new(handle),
        collect_stores: built.collect_stores,
    })
}

fn kind_str(kind: BarrierKind) -> &'static str {
    match kind {
        BarrierKind::Checkpoint => "checkpoint",
        BarrierKind::Savepoint => "savepoint",
    }
}

fn checkpoint_dicts<'py>(
    py: Python<'py>,
    stats: &[CheckpointStats],
) -> PyResult<Bound<'py, PyList>> {
    let list = PyList::empty(py);
    for c in stats {
        let d = PyDict::new(py);
        d.set_item("id", c.id)?;
        d.set_item("kind", kind_str(c.kind))?;
        d.set_item("trigger_time_ms", c.trigger_ms)?;
        d.set_item("duration_ms", c.duration.as_secs_f64() * 1000.0)?;
        d.set_item("alignment_ms", c.alignment.as_secs_f64() * 1000.0)?;
        d.set_item("bytes", c.bytes)?;
        d.set_item("state_bytes", c.state_bytes)?;
        d.set_item("path", c.path.display().to_string())?;
        d.set_item("null_state_checkpoint", c.null_state_checkpoint)?;
        d.set_item("retention_errors", &c.retention_errors)?;
        let ops = PyDict::new(py);
        for (i, (uid, name, bytes, subtasks)) in c.operators.iter().enumerate() {
            let od = PyDict::new(py);
            od.set_item("name", name)?;
            od.set_item("bytes", bytes)?;
            od.set_item("subtasks", subtasks)?;
            od.set_item("recomputes", c.recomputes.get(i).copied().unwrap_or(false))?;
            ops.set_item(uid, od)?;
        }
        d.set_item("operators", ops)?;
        list.append(d)?;
    }
    Ok(list)
}

fn metrics_dict<'py>(py: Python<'py>, handle: &JobHandle) -> PyResult<Bound<'py, PyDict>> {
    let m = handle.metrics();
    let d = PyDict::new(py);
    d.set_item("wall_time_s", m.wall_time_s)?;
    // Deletions of old checkpoints that failed (the job went on).
    d.set_item("checkpoint_retention_failures", handle.retention_failures())?;
    d.set_item("checkpoint_retention_errors", handle.retention_errors())?;
    let ops = PyDict::new(py);
    for o in &m.operators {
        let od = PyDict::new(py);
        od.set_item("records_in", o.records_in)?;
        od.set_item("records_out", o.records_out)?;
        od.set_item("batches_in", o.batches_in)?;
        od.set_item("batches_out", o.batches_out)?;
        od.set_item("late_records", o.late_records)?;
        od.set_item("spilled_bytes", o.spilled_bytes)?;
        od.set_item("spill_files", o.spill_files)?;
        // Loop heads (0 elsewhere): the furthest termination round of its
        // subtasks, the events and bytes queued on their feedback queues.
        let subs = &o.subtasks;
        let round = subs.iter().map(|s| s.termination_round).max();
        od.set_item("termination_rounds", round.unwrap_or(0))?;
        let events: u64 = subs.iter().map(|s| s.feedback_events).sum();
        od.set_item("feedback_queue_events", events)?;
        let bytes: u64 = subs.iter().map(|s| s.feedback_bytes).sum();
        od.set_item("feedback_queue_bytes", bytes)?;
        // Every subtask's task finished its input (FLIP-147 finished tasks).
        let finished = !subs.is_empty() && subs.iter().all(|s| s.finished);
        od.set_item("finished", finished)?;
        let subtasks = PyList::empty(py);
        for st in &o.subtasks {
            let sd = PyDict::new(py);
            sd.set_item("records_in", st.records_in)?;
            sd.set_item("records_out", st.records_out)?;
            sd.set_item("busy_ns", st.busy_ns)?;
            sd.set_item("backpressured_ns", st.backpressured_ns)?;
            sd.set_item("idle_ns", st.idle_ns)?;
            let wm = (st.watermark != i64::MIN).then_some(st.watermark);
            sd.set_item("watermark", wm)?;
            sd.set_item("termination_round", st.termination_round)?;
            sd.set_item("feedback_queue_events", st.feedback_events)?;
            sd.set_item("feedback_queue_bytes", st.feedback_bytes)?;
            sd.set_item("finished", st.finished)?;
            subtasks.append(sd)?;
        }
        od.set_item("subtasks", subtasks)?;
        od.set_item(
            "kind",
            match o.role {
                Role::Source => "source",
                Role::Operator => "operator",
                Role::Sink => "sink",
            },
        )?;
        let mut key = o.name.clone();
        let mut n = 2;
        while ops.contains(&key)? {
            key = format!("{}#{n}", o.name);
            n += 1;
        }
        ops.set_item(key, od)?;
    }
    d.set_item("operators", ops)?;
    Ok(d)
}

#[pymethods]
impl PyJobHandle {
    /// Waits up to `timeout_s` seconds (GIL released); True once the job ended.
    fn wait(&self, py: Python<'_>, timeout_s: f64) -> bool {
        let h = self.handle.clone();
        let d = Duration::from_secs_f64(timeout_s.max(0.0));
        detached(py, move || h.wait_timeout(d))
    }

    /// "running", "restarting", "finished", "failed" or "cancelled".
    #[getter]
    fn status(&self) -> &'static str {
        self.handle.status().as_str()
    }

    /// Counters per operator and the wall time.
    fn metrics<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        metrics_dict(py, &self.handle)
    }

    /// Every restart so far, oldest first: `{"attempt", "time_ms", "cause"}`.
    fn restart_causes<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let list = PyList::empty(py);
        for r in self.handle.restart_causes() {
            let d = PyDict::new(py);
            d.set_item("attempt", r.attempt)?;
            d.set_item("time_ms", r.time_ms)?;
            d.set_item("cause", r.cause)?;
            list.append(d)?;
        }
        Ok(list)
    }

    /// The outcome of the ended job; raises its error if it failed.
    fn result<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let h = self.handle.clone();
        let outcome = detached(py, move || h.result());
        match outcome {
            Ok(o) => {
                let d = PyDict::new(py);
                d.set_item("restarts", o.restarts)?;
                d.set_item(
                    "checkpoints",
                    checkpoint_dicts(py, &self.handle.checkpoints())?,
                )?;
                d.set_item("failed_checkpoints", self.handle.failed_checkpoints())?;
                d.set_item(
                    "checkpoint_failures",
                    failure_dicts(py, &self.handle.checkpoint_failures())?,
                )?;
                d.set_item("metrics", metrics_dict(py, &self.handle)?)?;
                Ok(d)
            }
            Err(e) => Err(to_py(py, &e)),
        }
    }

    /// Stops the job.
    fn cancel(&self) {
        self.handle.cancel();
    }

    /// The committed batches of collect sink `node_id`.
    fn collected<'py>(&self, py: Python<'py>, node_id: usize) -> PyResult<Vec<Bound<'py, PyAny>>> {
        let Some(store) = self.collect_stores.get(&node_id) else {
            return Err(pyo3::exceptions::PyKeyError::new_err(format!(
                "node {node_id} is not a collect sink"
            )));
        };
        store
            .committed()
            .iter()
            .map(|b| batch_to_py(py, b))
            .collect()
    }

    /// Triggers a checkpoint and waits (GIL released) until it completed.
    fn trigger_checkpoint(&self, py: Python<'_>) -> PyResult<u64> {
        let h = self.handle.clone();
        detached(py, move || h.trigger_checkpoint()).map_err(|e| to_py(py, &e))
    }

    /// Takes a savepoint into `path` without stopping (GIL released while
    /// waiting); the savepoint's directory.
    fn trigger_savepoint(&self, py: Python<'_>, path: std::path::PathBuf) -> PyResult<String> {
        let h = self.handle.clone();
        detached(py, move || h.trigger_savepoint(path))
            .map(|p| p.display().to_string())
            .map_err(|e| to_py(py, &e))
    }

    /// Stops the job with a savepoint into `path`; the savepoint's directory.
    #[pyo3(signature = (path, drain=false))]
    fn stop_with_savepoint(
        &self,
        py: Python<'_>,
        path: std::path::PathBuf,
        drain: bool,
    ) -> PyResult<String> {
        let h = self.handle.clone();
        detached(py, move || h.stop_with_savepoint(path, drain))
            .map(|p| p.display().to_string())
            .map_err(|e| to_py(py, &e))
    }

    /// The checkpoints completed so far, oldest first.
    fn checkpoints<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        checkpoint_dicts(py, &self.handle.checkpoints())
    }

    /// How many checkpoints were aborted.
    fn failed_checkpoints(&self) -> u64 {
        self.handle.failed_checkpoints()
    }

    /// The latest failed checkpoints with their causes, oldest first.
    fn checkpoint_failures<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        failure_dicts(py, &self.handle.checkpoint_failures())
    }
}

/// `{"id", "kind", "reason"}` per failed checkpoint (the cause of a
/// checkpoint that failed to begin or complete reaches the user).
fn failure_dicts<'py>(
    py: Python<'py>,
    failures: &[eddyline_core::checkpoint::CheckpointFailure],
) -> PyResult<Bound<'py, PyList>> {
    let list = PyList::empty(py);
    for f in failures {
        let d = PyDict::new(py);
        d.set_item("id", f.id)?;
        d.set_item(
            "kind",
            match f.kind {
                eddyline_core::event::BarrierKind::Checkpoint => "checkpoint",
                eddyline_core::event::BarrierKind::Savepoint => "savepoint",
            },
        )?;
        d.set_item("reason", &f.reason)?;
        list.append(d)?;
    }
    Ok(list)
}
