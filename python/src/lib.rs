//! `eddyline._core`: the PyO3 binding of eddyline-core.
//!
//! Glue only: conversions between Python and core types (`graph.rs`,
//! `arrow.rs`, `job.rs`'s config), the native expression handle (`expr.rs`), the chains of a graph for `explain()` (`plan.rs`), the one
//! error table (`errors.rs`), the one place the GIL is released (`gil.rs`),
//! the job handle (`job.rs`), the operator that calls Python runners once per
//! batch (`udf.rs`) and the reader that polls Python sources (`source.rs`).
//! The logic of user functions lives in the pure-Python package, the engine
//! in core.

mod arrow;
mod checkpoints;
mod entries;
mod errors;
mod expr;
mod gil;
mod graph;
mod job;
mod plan;
mod source;
mod sql;
mod storage;
mod udf;
mod worker;

use pyo3::prelude::*;

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(graph::build_graph, m)?)?;
    m.add_function(wrap_pyfunction!(plan::plan_graph, m)?)?;
    m.add_function(wrap_pyfunction!(job::start_job, m)?)?;
    m.add_function(wrap_pyfunction!(checkpoints::list_checkpoints, m)?)?;
    m.add_function(wrap_pyfunction!(checkpoints::inspect_checkpoint, m)?)?;
    m.add_function(wrap_pyfunction!(checkpoints::read_keyed_state, m)?)?;
    m.add_function(wrap_pyfunction!(storage::parquet_files, m)?)?;
    m.add_function(wrap_pyfunction!(sql::plan_sql, m)?)?;
    m.add_class::<expr::PyExpr>()?;
    m.add_class::<sql::PySqlScan>()?;
    m.add_class::<sql::PySqlWindow>()?;
    m.add_class::<sql::PySqlFilter>()?;
    m.add_class::<sql::PySqlProject>()?;
    m.add_class::<sql::PySqlUnion>()?;
    m.add_class::<sql::PySqlAggregate>()?;
    m.add_class::<sql::PySqlJoin>()?;
    m.add_class::<sql::PySqlClosing>()?;
    m.add_class::<sql::PySqlOver>()?;
    m.add_class::<storage::PyStoreDir>()?;
    m.add_class::<job::PyJobHandle>()?;
    m.add_function(wrap_pyfunction!(worker::worker_connect, m)?)?;
    m.add_class::<worker::PyWorkerSession>()?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
