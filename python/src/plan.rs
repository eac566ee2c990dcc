//! The physical plan of a graph as a fresh run would execute it: which nodes
//! run chained in one task (decided by core's `Plan::new`, never re-derived
//! here), each node's uid as state is matched by, and each node's output
//! schema. `DataStream.explain()` and `StreamEnvironment.explain()` print it
//! (docs/API.md "Explaining a job").

use eddyline_core::runtime::plan::Plan;
use pyo3::prelude::*;
use pyo3::types::PyList;

use crate::arrow::schema_to_py;
use crate::graph::parse_graph;

/// What `plan_graph` returns: chains, uids, schemas.
type PlanParts<'py> = (Vec<Vec<usize>>, Vec<String>, Vec<Option<Bound<'py, PyAny>>>);

/// `(chains, uids, schemas)`: the node ids of each chain (head first, in
/// the order the tasks are built), every node's uid (the user's, or the one
/// core assigns) and every node's output schema (None where only known at
/// run time). Raises what `build_graph` raises for an invalid graph.
#[pyfunction]
pub fn plan_graph<'py>(
    py: Python<'py>,
    nodes: &Bound<'py, PyList>,
    max_parallelism: usize,
) -> PyResult<PlanParts<'py>> {
    let built = parse_graph(py, nodes, max_parallelism, "validate")?;
    let plan = Plan::new(&built.graph);
    let chains = plan.chains.into_iter().map(|c| c.nodes).collect();
    let uids = built.graph.nodes.iter().map(|n| n.uid.clone()).collect();
    let schemas = built
        .schemas
        .iter()
        .map(|s| s.as_ref().map(|s| schema_to_py(py, s)).transpose())
        .collect::<PyResult<_>>()?;
    Ok((chains, uids, schemas))
}
