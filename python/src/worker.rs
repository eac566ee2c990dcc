//! The worker side of a distributed job: connect to the driver, hand the
//! job spec to Python (which rebuilds the node dicts), then run this
//! worker's subtasks with the GIL released.

use eddyline_core::runtime::WorkerSession;
use parking_lot::Mutex;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};

use crate::errors::to_py;
use crate::gil::detached;
use crate::graph::parse_job_graph;
use crate::job::JobConfigSpec;

/// A worker connected to its driver, holding the job it was given.
#[pyclass(name = "WorkerSession", module = "eddyline._core", frozen)]
pub struct PyWorkerSession {
    session: Mutex<Option<WorkerSession>>,
    spec: Vec<u8>,
    attempt: u64,
    index: usize,
    workers: usize,
}

/// Connects to the driver at `driver` as worker `index` (GIL released while
/// waiting for the job). `attempt=None`: any attempt (Spark tasks). The data
/// port is bound on `bind_host` and advertised to the peers as
/// `advertise_host` (by default the bound address).
#[pyfunction]
#[pyo3(signature = (driver, secret, index, attempt=None, bind_host="127.0.0.1", advertise_host=None))]
pub fn worker_connect(
    py: Python<'_>,
    driver: String,
    secret: String,
    index: usize,
    attempt: Option<u64>,
    bind_host: &str,
    advertise_host: Option<String>,
) -> PyResult<PyWorkerSession> {
    let session = detached(py, move || {
        WorkerSession::connect(
            &driver,
            &secret,
            index,
            attempt.unwrap_or(u64::MAX),
            bind_host,
            advertise_host.as_deref(),
        )
    })
    .map_err(|e| to_py(py, &e))?;
    let start = session.start();
    Ok(PyWorkerSession {
        spec: start.spec.to_vec(),
        attempt: start.attempt,
        index: start.index,
        workers: start.workers,
        session: Mutex::new(Some(session)),
    })
}

#[pymethods]
impl PyWorkerSession {
    /// The job spec the driver sent (bytes the front end wrote).
    #[getter]
    fn spec<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.spec)
    }

    #[getter]
    fn attempt(&self) -> u64 {
        self.attempt
    }

    #[getter]
    fn index(&self) -> usize {
        self.index
    }

    #[getter]
    fn workers(&self) -> usize {
        self.workers
    }

    /// Tells the driver this worker cannot run the job (`message` says
    /// why); the job fails with a GraphError carrying it.
    fn fail(&self, py: Python<'_>, message: String) -> PyResult<()> {
        let Some(session) = self.session.lock().take() else {
            return Ok(());
        };
        let err = eddyline_core::Error::job_graph(message);
        detached(py, move || session.fail(err)).map_err(|e| to_py(py, &e))
    }

    /// Builds the graph from the node dicts and runs this worker's subtasks
    /// until the attempt ends (GIL released).
    fn run(
        &self,
        py: Python<'_>,
        nodes: &Bound<'_, PyList>,
        config: JobConfigSpec,
    ) -> PyResult<()> {
        let Some(session) = self.session.lock().take() else {
            return Err(pyo3::exceptions::PyRuntimeError::new_err(
                "this worker session already ran",
            ));
        };
        let max_p = config.max_parallelism;
        let run_tag = config
            .run_tag
            .clone()
            .unwrap_or_else(|| "worker".to_string());
        let built = parse_job_graph(py, nodes, max_p, &run_tag, config.ansi)?;
        let mut cfg = config.into_config()?;
        cfg.external_sinks = built.external_sinks.clone();
        let stores = built.collect_stores;
        let graph = built.graph;
        detached(py, move || session.run(graph, cfg, stores)).map_err(|e| to_py(py, &e))
    }
}
