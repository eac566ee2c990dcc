//! Conversion of the DSL's node dicts into a core `JobGraph`, with the
//! build-time schema checks (unknown columns, mistyped expressions, unions
//! of different schemas) done here, before anything runs.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use eddyline_core::error::Error;
use eddyline_core::expr::{BinaryOp, Expr, ScalarValue, UnaryOp};
use eddyline_core::graph::{
    all_nullable, Edge, JobGraph, LoopPriority, LoopSpec, Node, NodeKind, Role,
};
use eddyline_core::operator::filter::FilterFactory;
use eddyline_core::operator::keyed_agg::{AggKind, KeyedAggFactory};
use eddyline_core::operator::project::ProjectFactory;
use eddyline_core::operator::timestamps::AssignTimestampsFactory;
use eddyline_core::operator::union::UnionFactory;
use eddyline_core::operator::window::{WindowAgg, WindowAssigner, WindowFactory};
use eddyline_core::operator::OperatorFactory;
use eddyline_core::partition::Partitioning;
use eddyline_core::scope::StreamScope;
use eddyline_core::sink::collect::{CollectSinkFactory, CollectStore};
use eddyline_core::sink::parquet::ParquetSinkFactory;
use eddyline_core::source::arrow_batches::ArrowBatchesSource;
use eddyline_core::source::parquet::ParquetSource;
use eddyline_core::source::sequence::SequenceSource;
use eddyline_core::source::SourceFactory;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};

use crate::arrow::{batch_from_py, schema_from_py, schema_to_py};
use crate::errors::to_py;
use crate::source::PySourceFactory;
use crate::udf::PyRunnerFactory;

/// A graph ready to run, with the stores of its collect sinks.
pub struct BuiltGraph {
    pub graph: JobGraph,
    pub schemas: Vec<Option<SchemaRef>>,
    pub collect_stores: HashMap<usize, Arc<CollectStore>>,
    /// Sinks that commit outside the process (Parquet files, Python 2PC sinks).
    pub external_sinks: Vec<String>,
}

fn get<'py, T: FromPyObjectOwned<'py>>(d: &Bound<'py, PyDict>, key: &str) -> PyResult<T> {
    match d.get_item(key)? {
        Some(v) => v.extract::<T>().map_err(Into::into),
        None => Err(pyo3::exceptions::PyKeyError::new_err(format!(
            "node dict is missing '{key}'"
        ))),
    }
}

fn opt<'py, T: FromPyObjectOwned<'py>>(d: &Bound<'py, PyDict>, key: &str) -> PyResult<Option<T>> {
    match d.get_item(key)? {
        Some(v) if !v.is_none() => Ok(Some(v.extract::<T>().map_err(Into::into)?)),
        _ => Ok(None),
    }
}

/// Parses an expression tree of tuples (see `eddyline/expr.py`).
pub fn parse_expr(obj: &Bound<'_, PyAny>) -> PyResult<Expr> {
    let t = obj.cast::<PyTuple>()?;
    let tag: String = t.get_item(0)?.extract()?;
    let arg = |i: usize| t.get_item(i);
    Ok(match tag.as_str() {
        "col" => Expr::Column(arg(1)?.extract()?),
        "lit" => {
            let v = arg(1)?;
            let s = if v.is_none() {
                ScalarValue::Null
            } else if v.is_instance_of::<pyo3::types::PyBool>() {
                ScalarValue::Boolean(v.extract()?)
            } else if v.is_instance_of::<pyo3::types::PyInt>() {
                ScalarValue::Int64(v.extract()?)
            } else if v.is_instance_of::<pyo3::types::PyFloat>() {
                ScalarValue::Float64(v.extract()?)
            } else if v.is_instance_of::<pyo3::types::PyString>() {
                ScalarValue::Utf8(v.extract()?)
            } else {
                return Err(pyo3::exceptions::PyTypeError::new_err(format!(
                    "unsupported literal {v}: use None, bool, int, float or str"
                )));
            };
            Expr::Literal(s)
        }
        "bin" => {
            let op: String = arg(1)?.extract()?;
            let op = match op.as_str() {
                "+" => BinaryOp::Add,
                "-" => BinaryOp::Sub,
                "*" => BinaryOp::Mul,
                "/" => BinaryOp::Div,
                "//" => BinaryOp::FloorDiv,
                "%" => BinaryOp::Mod,
                "==" => BinaryOp::Eq,
                "!=" => BinaryOp::NotEq,
                "<" => BinaryOp::Lt,
                "<=" => BinaryOp::LtEq,
                ">" => BinaryOp::Gt,
                ">=" => BinaryOp::GtEq,
                "&" => BinaryOp::And,
                "|" => BinaryOp::Or,
                other => {
                    return Err(pyo3::exceptions::PyValueError::new_err(format!(
                        "unknown operator '{other}'"
                    )))
                }
            };
            Expr::Binary {
                op,
                left: Box::new(parse_expr(&arg(2)?)?),
                right: Box::new(parse_expr(&arg(3)?)?),
            }
        }
        "not" | "neg" | "is_null" | "is_not_null" => {
            let op = match tag.as_str() {
                "not" => UnaryOp::Not,
                "neg" => UnaryOp::Neg,
                "is_null" => UnaryOp::IsNull,
                _ => UnaryOp::IsNotNull,
            };
            Expr::Unary {
                op,
                expr: Box::new(parse_expr(&arg(1)?)?),
            }
        }
        other => {
            return Err(pyo3::exceptions::PyValueError::new_err(format!(
                "unknown expression node '{other}'"
            )))
        }
    })
}

fn parse_columns(obj: &Bound<'_, PyAny>) -> PyResult<Vec<(String, Expr)>> {
    let mut out = Vec::new();
    for item in obj.try_iter()? {
        let item = item?;
        let t = item.cast::<PyTuple>()?;
        out.push((t.get_item(0)?.extract()?, parse_expr(&t.get_item(1)?)?));
    }
    Ok(out)
}

fn parse_partitioning(kind: &str, keys: Vec<String>) -> PyResult<Partitioning> {
    Ok(match kind {
        "forward" => Partitioning::Forward,
        "rebalance" => Partitioning::Rebalance,
        "broadcast" => Partitioning::Broadcast,
        "hash" => Partitioning::Hash { keys },
        other => {
            return Err(pyo3::exceptions::PyValueError::new_err(format!(
                "unknown partitioning '{other}'"
            )))
        }
    })
}

fn known(inputs: &[Option<SchemaRef>]) -> Option<&SchemaRef> {
    inputs.first().and_then(|s| s.as_ref())
}

/// Builds the core graph from the node dicts. Build-time errors become
/// `eddyline.errors` exceptions naming the node.
pub fn parse_graph(
    py: Python<'_>,
    nodes: &Bound<'_, PyList>,
    max_parallelism: usize,
    run_tag: &str,
) -> PyResult<BuiltGraph> {
    let mut out = Vec::new();
    let mut schemas: Vec<Option<SchemaRef>> = Vec::new();
    let mut collect_stores = HashMap::new();
    let mut external_sinks = Vec::new();
    // The schema of each node's port 1: a co-loop head's feedback or a
    // window's late records (its input schema).
    let mut port1_schemas: HashMap<usize, Option<SchemaRef>> = HashMap::new();
    let mut loops: Vec<LoopSpec> = Vec::new();
    let mut scopes: HashMap<Vec<u32>, StreamScope> = HashMap::new();
    for item in nodes.iter() {
        let d = item.cast::<PyDict>()?;
        let id: usize = get(d, "id")?;
        let kind: String = get(d, "kind")?;
        let name: String = get(d, "name")?;
        let uid: String = opt(d, "uid")?.unwrap_or_else(|| format!("{kind}-{id}"));
        let parallelism: usize = get(d, "parallelism")?;
        let mut inputs = Vec::new();
        let mut input_schemas = Vec::new();
        if let Some(list) = d.get_item("inputs")? {
            for e in list.try_iter()? {
                let e = e?;
                let e = e.cast::<PyDict>()?;
                let from: usize = get(e, "node")?;
                let part: String = get(e, "partition")?;
                let keys: Vec<String> = opt(e, "keys")?.unwrap_or_default();
                let input: usize = opt(e, "input")?.unwrap_or(0);
                let port: u8 = opt(e, "port")?.unwrap_or(0);
                input_schemas.push(match port {
                    0 => schemas.get(from).cloned().flatten(),
                    _ => port1_schemas.get(&from).cloned().flatten(),
                });
                inputs.push(Edge {
                    from,
                    partitioning: parse_partitioning(&part, keys)?,
                    input,
                    port,
                });
            }
        }
        let built: std::result::Result<(NodeKind, Role, Option<SchemaRef>), NodeError> = (|| {
            let op = |f: Arc<dyn OperatorFactory>| NodeKind::Operator(f);
            Ok(match kind.as_str() {
                "source_arrow" => {
                    let schema = schema_from_py(&get::<Bound<PyAny>>(d, "schema")?)
                        .map_err(|e| Error::graph(&name, e.to_string()))?;
                    let mut batches = Vec::new();
                    for b in get::<Bound<PyAny>>(d, "batches")?
                        .try_iter()
                        .map_err(|e| Error::graph(&name, e.to_string()))?
                    {
                        let b = b.map_err(|e| Error::graph(&name, e.to_string()))?;
                        batches.push(
                            batch_from_py(&b).map_err(|e| Error::schema(&name, e.to_string()))?,
                        );
                    }
                    let src = Arc::new(ArrowBatchesSource::new(&name, batches, schema)?);
                    let s = src.schema();
                    (NodeKind::Source(src), Role::Source, s)
                }
                "source_sequence" => {
                    let src = Arc::new(SequenceSource::new(get(d, "start")?, get(d, "end")?));
                    let s = src.schema();
                    (NodeKind::Source(src), Role::Source, s)
                }
                "source_parquet" => {
                    let paths: Vec<PathBuf> = get(d, "paths")?;
                    let options = match d.get_item("storage_options")? {
                        Some(o) if !o.is_none() => o.extract()?,
                        _ => Default::default(),
                    };
                    let src = Arc::new(ParquetSource::new_with(&name, paths, options)?);
                    let s = src.schema();
                    (NodeKind::Source(src), Role::Source, s)
                }
                "source_python" => {
                    let schema = schema_from_py(&get::<Bound<PyAny>>(d, "schema")?)
                        .map_err(|e| Error::graph(&name, e.to_string()))?;
                    let make_reader: Py<PyAny> = get(d, "make_reader")?;
                    let src = Arc::new(PySourceFactory {
                        make_reader,
                        schema: schema.clone(),
                    });
                    (NodeKind::Source(src), Role::Source, Some(schema))
                }
                "filter" => {
                    let expr = parse_expr(&get::<Bound<PyAny>>(d, "expr")?)?;
                    let f = FilterFactory::new(expr);
                    let s = match known(&input_schemas) {
                        Some(s) => Some(f.output_schema(&name, s)?),
                        None => None,
                    };
                    (op(Arc::new(f)), Role::Operator, s)
                }
                "with_columns" | "select" => {
                    let cols = parse_columns(&get::<Bound<PyAny>>(d, "columns")?)?;
                    let mut f = if kind == "select" {
                        ProjectFactory::select(cols)
                    } else {
                        ProjectFactory::with_columns(cols)
                    };
                    let s = match known(&input_schemas) {
                        Some(s) => {
                            f = f.with_input_schema(&name, s)?;
                            Some(f.output_schema(&name, s)?)
                        }
                        None => None,
                    };
                    (op(Arc::new(f)), Role::Operator, s)
                }
                "keyed_agg" => {
                    let agg: String = get(d, "agg")?;
                    let agg = match agg.as_str() {
                        "sum" => AggKind::Sum,
                        "count" => AggKind::Count,
                        "min" => AggKind::Min,
                        "max" => AggKind::Max,
                        other => {
                            return Err(
                                Error::graph(&name, format!("unknown aggregate '{other}'")).into()
                            )
                        }
                    };
                    let f = KeyedAggFactory::new(get(d, "keys")?, agg, opt(d, "column")?);
                    let s = match known(&input_schemas) {
                        Some(s) => Some(f.output_schema(&name, s)?),
                        None => None,
                    };
                    (op(Arc::new(f)), Role::Operator, s)
                }
                "assign_timestamps" => {
                    let f = AssignTimestampsFactory::new(
                        get(d, "column")?,
                        get(d, "max_out_of_orderness_ms")?,
                    )
                    .with_idle_timeout(opt(d, "idle_timeout_ms")?);
                    let s = match known(&input_schemas) {
                        Some(s) => Some(f.output_schema(&name, s)?),
                        None => None,
                    };
                    (op(Arc::new(f)), Role::Operator, s)
                }
                "window" => {
                    let assigner: Vec<Bound<PyAny>> = get(d, "assigner")?;
                    let kind: String = assigner
                        .first()
                        .map(|k| k.extract())
                        .transpose()?
                        .unwrap_or_default();
                    let num = |i: usize| -> PyResult<i64> {
                        assigner
                            .get(i)
                            .ok_or_else(|| {
                                pyo3::exceptions::PyValueError::new_err(
                                    "window assigner is incomplete",
                                )
                            })?
                            .extract()
                    };
                    let assigner = match kind.as_str() {
                        "tumbling" => WindowAssigner::Tumbling { size_ms: num(1)? },
                        "sliding" => WindowAssigner::Sliding {
                            size_ms: num(1)?,
                            slide_ms: num(2)?,
                        },
                        other => {
                            return Err(Error::graph(
                                &name,
                                format!("unknown window assigner '{other}'"),
                            )
                            .into())
                        }
                    };
                    let agg: String = get(d, "agg")?;
                    let agg = match agg.as_str() {
                        "sum" => AggKind::Sum,
                        "count" => AggKind::Count,
                        "min" => AggKind::Min,
                        "max" => AggKind::Max,
                        other => {
                            return Err(
                                Error::graph(&name, format!("unknown aggregate '{other}'")).into()
                            )
                        }
                    };
                    let mut f = WindowFactory::new(
                        get(d, "keys")?,
                        get(d, "time_column")?,
                        assigner,
                        WindowAgg::Native(agg, opt(d, "column")?),
                    );
                    if opt(d, "late_output")?.unwrap_or(false) {
                        f = f.with_late_output();
                    }
                    let s = match known(&input_schemas) {
                        Some(s) => Some(f.output_schema(&name, s)?),
                        None => None,
                    };
                    (op(Arc::new(f)), Role::Operator, s)
                }
                "loop_head" => {
                    let loop_id: u32 = get(d, "loop")?;
                    let tail: Option<usize> = opt(d, "feedback_from")?;
                    let priority = match get::<String>(d, "priority")?.as_str() {
                        "feedback_first" => LoopPriority::FeedbackFirst,
                        "adaptive" => LoopPriority::Adaptive,
                        other => {
                            return Err(Error::graph(
                                &name,
                                format!(
                                "priority must be 'feedback_first' or 'adaptive', got '{other}'"
                            ),
                            )
                            .into())
                        }
                    };
                    let co: bool = opt(d, "co")?.unwrap_or(false);
                    let feedback_schema = match opt::<Bound<PyAny>>(d, "feedback_schema")? {
                        Some(s) => Some(
                            schema_from_py(&s).map_err(|e| Error::graph(&name, e.to_string()))?,
                        ),
                        None => None,
                    };
                    let fb = if co {
                        feedback_schema
                    } else {
                        input_schemas.first().cloned().flatten()
                    };
                    port1_schemas.insert(id, fb.as_ref().map(all_nullable));
                    loops.push(LoopSpec {
                        id: loop_id,
                        head: id,
                        // A loop still being built (validation only) has no
                        // tail yet: the head stands in for it.
                        tail: tail.unwrap_or(id),
                        feedback_memory: get(d, "feedback_memory")?,
                        priority,
                        co,
                        spill_dir: opt::<PathBuf>(d, "spill_dir")?,
                    });
                    let s = input_schemas.first().cloned().flatten();
                    (
                        op(Arc::new(UnionFactory)),
                        Role::Operator,
                        s.as_ref().map(all_nullable),
                    )
                }
                "loop_exit" => {
                    let s = input_schemas.first().cloned().flatten();
                    (op(Arc::new(UnionFactory)), Role::Operator, s)
                }
                "union" => {
                    let all: Option<Vec<SchemaRef>> = input_schemas.iter().cloned().collect();
                    let s = match all {
                        Some(all) => Some(UnionFactory::output_schema(&name, &all)?),
                        None => None,
                    };
                    (op(Arc::new(UnionFactory)), Role::Operator, s)
                }
                "python" => {
                    let factory: Py<PyAny> = get(d, "factory")?;
                    let keys: Option<Vec<String>> = opt(d, "keys")?;
                    let s = match opt::<Bound<PyAny>>(d, "output_schema")? {
                        Some(s) => Some(
                            schema_from_py(&s).map_err(|e| Error::graph(&name, e.to_string()))?,
                        ),
                        None => None,
                    };
                    let sink: bool = opt(d, "sink")?.unwrap_or(false);
                    let role = if sink { Role::Sink } else { Role::Operator };
                    let f = PyRunnerFactory::new(py, &name, factory, keys, run_tag.to_string())?;
                    (op(Arc::new(f)), role, s)
                }
                "sink_collect" => {
                    let store = CollectStore::new();
                    collect_stores.insert(id, store.clone());
                    (
                        op(Arc::new(CollectSinkFactory::new(store))),
                        Role::Sink,
                        None,
                    )
                }
                "sink_parquet" => {
                    let dir: PathBuf = get(d, "dir")?;
                    let options = match d.get_item("storage_options")? {
                        Some(o) if !o.is_none() => o.extract()?,
                        _ => Default::default(),
                    };
                    (
                        op(Arc::new(ParquetSinkFactory::new_with(
                            dir, run_tag, options,
                        ))),
                        Role::Sink,
                        None,
                    )
                }
                other => {
                    return Err(Error::graph(&name, format!("unknown node kind '{other}'")).into())
                }
            })
        })(
        );
        let (node_kind, role, schema) = match built {
            Ok(b) => b,
            Err(NodeError::Core(e)) => return Err(to_py(py, &e.in_operator(&name))),
            Err(NodeError::Py(e)) => return Err(e),
        };
        if role == Role::Sink && kind != "sink_collect" {
            external_sinks.push(name.clone());
        }
        // A window (native or Python) with a late output emits its late
        // records, unchanged, on port 1.
        if opt::<bool>(d, "late_output")?.unwrap_or(false) {
            port1_schemas.insert(id, input_schemas.first().cloned().flatten());
        }
        schemas.push(schema.clone());
        out.push(Node {
            id,
            name,
            uid,
            parallelism,
            inputs,
            kind: node_kind,
            role,
            output_schema: schema,
            scope: scope_of(
                &mut scopes,
                &opt::<Vec<u32>>(d, "scope")?.unwrap_or_default(),
            ),
        });
    }
    let graph = JobGraph {
        nodes: out,
        max_parallelism,
        loops,
    };
    graph.validate().map_err(|e| to_py(py, &e))?;
    Ok(BuiltGraph {
        graph,
        schemas,
        collect_stores,
        external_sinks,
    })
}

/// The scope of a loop path (outermost loop first); one shared value per
/// path so equal paths are the same scope.
fn scope_of(cache: &mut HashMap<Vec<u32>, StreamScope>, path: &[u32]) -> StreamScope {
    if let Some(s) = cache.get(path) {
        return s.clone();
    }
    let mut scope = StreamScope::root();
    for (i, id) in path.iter().enumerate() {
        scope = match cache.get(&path[..=i]) {
            Some(s) => s.clone(),
            None => {
                let s = scope.nest(*id);
                cache.insert(path[..=i].to_vec(), s.clone());
                s
            }
        };
    }
    scope
}

/// A failure while building one node: a core error (named after the node
/// later) or a malformed node dict.
enum NodeError {
    Core(Error),
    Py(PyErr),
}

impl From<Error> for NodeError {
    fn from(e: Error) -> Self {
        NodeError::Core(e)
    }
}

impl From<PyErr> for NodeError {
    fn from(e: PyErr) -> Self {
        NodeError::Py(e)
    }
}

/// Validates the node dicts and returns each node's output schema (None
/// where it is only known at run time).
#[pyfunction]
pub fn build_graph<'py>(
    py: Python<'py>,
    nodes: &Bound<'py, PyList>,
    max_parallelism: usize,
) -> PyResult<Vec<Option<Bound<'py, PyAny>>>> {
    let built = parse_graph(py, nodes, max_parallelism, "validate")?;
    built
        .schemas
        .iter()
        .map(|s| s.as_ref().map(|s| schema_to_py(py, s)).transpose())
        .collect()
}
