//! Conversion of the DSL's node specs (the typed dicts of
//! `eddyline/_specs.py`, one per node kind) into a core `JobGraph`, with the
//! build-time schema checks (unknown columns, mistyped expressions, unions
//! of different schemas) done here, before anything runs. One function per
//! kind of node reads its spec (DESIGN.md "Layers": conversions only).

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
use eddyline_core::operator::join::{JoinBounds, JoinFactory, JoinSpec, JoinType};
use eddyline_core::operator::keyed_agg::KeyedAggFactory;
use eddyline_core::operator::project::ProjectFactory;
use eddyline_core::operator::session::SessionFactory;
use eddyline_core::operator::timestamps::AssignTimestampsFactory;
use eddyline_core::operator::union::UnionFactory;
use eddyline_core::operator::window::{WindowAgg, WindowAssigner, WindowFactory};
use eddyline_core::operator::OperatorFactory;
use eddyline_core::partition::Partitioning;
use eddyline_core::scope::StreamScope;
use eddyline_core::sink::collect::{CollectSinkFactory, CollectStore};
use eddyline_core::sink::discard::DiscardSinkFactory;
use eddyline_core::sink::parquet::ParquetSinkFactory;
use eddyline_core::source::arrow_batches::ArrowBatchesSource;
use eddyline_core::source::parquet::ParquetSource;
use eddyline_core::source::sequence::SequenceSource;
use eddyline_core::source::SourceFactory;
use eddyline_core::state::keyed::AggKind;
use eddyline_core::store::StorageOptions;
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
/// A node's `storage_options` (absent or None: none, the environment
/// variables then reach the store).
fn storage_options(d: &Bound<'_, PyDict>) -> PyResult<StorageOptions> {
    match d.get_item("storage_options")? {
        Some(o) if !o.is_none() => o.extract(),
        _ => Ok(StorageOptions::new()),
    }
}

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

/// The native aggregate a spec names (`AggName` in `eddyline/_specs.py`):
/// keyed running aggregates and windows read it here, once.
fn parse_agg(node: &str, agg: &str) -> Result<AggKind, Error> {
    Ok(match agg {
        "sum" => AggKind::Sum,
        "count" => AggKind::Count,
        "min" => AggKind::Min,
        "max" => AggKind::Max,
        other => return Err(Error::graph(node, format!("unknown aggregate '{other}'"))),
    })
}

/// A window assigner spec: `("tumbling", size_ms)` or `("sliding", size_ms, slide_ms)`.
fn parse_window_assigner(
    node: &str,
    spec: &[Bound<'_, PyAny>],
) -> Result<WindowAssigner, NodeError> {
    let kind: String = spec
        .first()
        .map(|k| k.extract())
        .transpose()?
        .unwrap_or_default();
    let num = |i: usize| -> PyResult<i64> {
        spec.get(i)
            .ok_or_else(|| {
                pyo3::exceptions::PyValueError::new_err("window assigner is incomplete")
            })?
            .extract()
    };
    Ok(match kind.as_str() {
        "tumbling" => WindowAssigner::Tumbling { size_ms: num(1)? },
        "sliding" => WindowAssigner::Sliding {
            size_ms: num(1)?,
            slide_ms: num(2)?,
        },
        other => {
            let message = format!("unknown window assigner '{other}'");
            return Err(Error::graph(node, message).into());
        }
    })
}

/// What a node spec builds: the core node kind, its role and its output
/// schema (None where it is only known at run time).
type NodeParts = (NodeKind, Role, Option<SchemaRef>);

/// One node spec being read: its dict, id, name and the schemas of its inputs.
struct Spec<'a, 'py> {
    d: &'a Bound<'py, PyDict>,
    id: usize,
    name: &'a str,
    inputs: &'a [Option<SchemaRef>],
}

impl Spec<'_, '_> {
    /// A schema field of the spec; a bad one is a graph error naming the node.
    fn schema(&self, key: &str) -> Result<SchemaRef, NodeError> {
        let s = get::<Bound<PyAny>>(self.d, key)?;
        Ok(schema_from_py(&s).map_err(|e| Error::graph(self.name, e.to_string()))?)
    }

    /// An optional (None when absent or None) schema field of the spec.
    fn opt_schema(&self, key: &str) -> Result<Option<SchemaRef>, NodeError> {
        match opt::<Bound<PyAny>>(self.d, key)? {
            Some(s) => Ok(Some(
                schema_from_py(&s).map_err(|e| Error::graph(self.name, e.to_string()))?,
            )),
            None => Ok(None),
        }
    }

    /// The output schema of a one-input operator, when its input schema is known.
    fn output_of(
        &self,
        schema_of: impl FnOnce(&SchemaRef) -> Result<SchemaRef, Error>,
    ) -> Result<Option<SchemaRef>, Error> {
        known(self.inputs).map(schema_of).transpose()
    }

    /// The schema of the first input, if known.
    fn first_input(&self) -> Option<SchemaRef> {
        self.inputs.first().cloned().flatten()
    }
}

fn op(f: Arc<dyn OperatorFactory>) -> NodeKind {
    NodeKind::Operator(f)
}

/// `source_arrow`: record batches held in the spec.
fn arrow_source(spec: &Spec<'_, '_>) -> Result<Arc<dyn SourceFactory>, NodeError> {
    let name = spec.name;
    let schema = spec.schema("schema")?;
    let mut batches = Vec::new();
    for b in get::<Bound<PyAny>>(spec.d, "batches")?
        .try_iter()
        .map_err(|e| Error::graph(name, e.to_string()))?
    {
        let b = b.map_err(|e| Error::graph(name, e.to_string()))?;
        batches.push(batch_from_py(&b).map_err(|e| Error::schema(name, e.to_string()))?);
    }
    Ok(Arc::new(ArrowBatchesSource::new(name, batches, schema)?))
}

/// `source_python`: a user source behind its reader factory.
fn python_source(spec: &Spec<'_, '_>) -> Result<Arc<dyn SourceFactory>, NodeError> {
    let schema = spec.schema("schema")?;
    let make_reader: Py<PyAny> = get(spec.d, "make_reader")?;
    let union_offsets = opt::<bool>(spec.d, "union_offsets")?.unwrap_or(false);
    Ok(Arc::new(PySourceFactory {
        make_reader,
        schema,
        union_offsets,
    }))
}

/// A source node; its output schema is the source's.
fn source(src: Arc<dyn SourceFactory>) -> NodeParts {
    let s = src.schema();
    (NodeKind::Source(src), Role::Source, s)
}

/// An operator node (neither source nor sink) with its output schema.
fn operator(f: Arc<dyn OperatorFactory>, s: Option<SchemaRef>) -> NodeParts {
    (op(f), Role::Operator, s)
}

/// `filter`: keeps the rows where a boolean expression holds.
fn filter_node(spec: &Spec<'_, '_>) -> Result<NodeParts, NodeError> {
    let f = FilterFactory::new(parse_expr(&get::<Bound<PyAny>>(spec.d, "expr")?)?);
    let s = spec.output_of(|s| f.output_schema(spec.name, s))?;
    Ok(operator(Arc::new(f), s))
}

/// `with_columns` (adds or replaces columns) and `select` (keeps only the named ones).
fn project_node(spec: &Spec<'_, '_>, select: bool) -> Result<NodeParts, NodeError> {
    let name = spec.name;
    let cols = parse_columns(&get::<Bound<PyAny>>(spec.d, "columns")?)?;
    let mut f = if select {
        ProjectFactory::select(cols)
    } else {
        ProjectFactory::with_columns(cols)
    };
    let s = match known(spec.inputs) {
        Some(s) => {
            f = f.with_input_schema(name, s)?;
            Some(f.output_schema(name, s)?)
        }
        None => None,
    };
    Ok(operator(Arc::new(f), s))
}

/// `assign_timestamps`: event time from a column, and watermarks.
fn timestamps_node(spec: &Spec<'_, '_>) -> Result<NodeParts, NodeError> {
    let d = spec.d;
    let f = AssignTimestampsFactory::new(get(d, "column")?, get(d, "max_out_of_orderness_ms")?)
        .with_idle_timeout(opt(d, "idle_timeout_ms")?);
    let s = spec.output_of(|s| f.output_schema(spec.name, s))?;
    Ok(operator(Arc::new(f), s))
}

/// `keyed_agg`: a running native aggregate per key.
fn keyed_agg_node(spec: &Spec<'_, '_>) -> Result<NodeParts, NodeError> {
    let (d, name) = (spec.d, spec.name);
    let agg = parse_agg(name, &get::<String>(d, "agg")?)?;
    let f = KeyedAggFactory::new(get(d, "keys")?, agg, opt(d, "column")?);
    let s = spec.output_of(|s| f.output_schema(name, s))?;
    Ok(operator(Arc::new(f), s))
}

/// `window`: a native event-time window aggregate per key.
fn window_node(spec: &Spec<'_, '_>) -> Result<NodeParts, NodeError> {
    let (d, name) = (spec.d, spec.name);
    let assigner = parse_window_assigner(name, &get::<Vec<Bound<PyAny>>>(d, "assigner")?)?;
    let agg = parse_agg(name, &get::<String>(d, "agg")?)?;
    let mut f = WindowFactory::new(
        get(d, "keys")?,
        get(d, "time_column")?,
        assigner,
        WindowAgg::Native(agg, opt(d, "column")?),
    );
    if opt(d, "late_output")?.unwrap_or(false) {
        f = f.with_late_output();
    }
    let s = spec.output_of(|s| f.output_schema(name, s))?;
    Ok(operator(Arc::new(f), s))
}

/// `session_window`: native event-time session windows with an aggregate per key.
fn session_node(spec: &Spec<'_, '_>) -> Result<NodeParts, NodeError> {
    let (d, name) = (spec.d, spec.name);
    let f = SessionFactory {
        keys: get(d, "keys")?,
        time_column: get(d, "time_column")?,
        gap_ms: get(d, "gap_ms")?,
        agg: parse_agg(name, &get::<String>(d, "agg")?)?,
        column: opt(d, "column")?,
        late_output: opt(d, "late_output")?.unwrap_or(false),
    };
    let s = spec.output_of(|s| f.output_schema(name, s))?;
    Ok(operator(Arc::new(f), s))
}

/// `join`: a native keyed join of input 0 (left) and input 1 (right).
fn join_node(spec: &Spec<'_, '_>) -> Result<NodeParts, NodeError> {
    let (d, name) = (spec.d, spec.name);
    let how = match get::<String>(d, "how")?.as_str() {
        "inner" => JoinType::Inner,
        "left" => JoinType::Left,
        "right" => JoinType::Right,
        "outer" => JoinType::Outer,
        other => {
            let message = format!("unknown join type '{other}'");
            return Err(Error::graph(name, message).into());
        }
    };
    let temporal: bool = opt(d, "temporal")?.unwrap_or(false);
    let window_ms: Option<i64> = opt(d, "window_ms")?;
    let slide_ms: Option<i64> = opt(d, "window_slide_ms")?;
    let gap_ms: Option<i64> = opt(d, "session_gap_ms")?;
    let bounds = match opt::<(i64, i64)>(d, "within")? {
        _ if temporal => JoinBounds::Temporal,
        _ if gap_ms.is_some() => JoinBounds::SessionWindow {
            gap_ms: gap_ms.unwrap_or_default(),
        },
        _ if window_ms.is_some() => JoinBounds::Window {
            size_ms: window_ms.unwrap_or_default(),
            slide_ms: slide_ms.or(window_ms).unwrap_or_default(),
        },
        Some((lower_ms, upper_ms)) => JoinBounds::Interval { lower_ms, upper_ms },
        None => JoinBounds::Unbounded {
            ttl_ms: opt(d, "state_ttl_ms")?,
        },
    };
    let (lt, rt): (Option<String>, Option<String>) = get(d, "time_columns")?;
    let join = JoinSpec {
        left_keys: get(d, "left_keys")?,
        right_keys: get(d, "right_keys")?,
        time_columns: [lt, rt],
        how,
        bounds,
    };
    let (Some(Some(left)), Some(Some(right))) = (spec.inputs.first(), spec.inputs.get(1)) else {
        let message = "a join needs the schemas of both inputs before running";
        return Err(Error::graph(name, message).into());
    };
    let f = JoinFactory::new(name, join, left, right)?;
    let s = Some(f.output_schema());
    Ok(operator(Arc::new(f), s))
}

/// `python`: Python code run by the runners the spec's `factory` makes.
fn python_node(py: Python<'_>, spec: &Spec<'_, '_>, run_tag: &str) -> Result<NodeParts, NodeError> {
    let factory: Py<PyAny> = get(spec.d, "factory")?;
    // A two-input keyed function (CoProcessFunction) keys each input on its own columns.
    let keys: Option<Vec<Vec<String>>> = match opt::<Vec<Vec<String>>>(spec.d, "input_keys")? {
        Some(per_input) => Some(per_input),
        None => opt::<Vec<String>>(spec.d, "keys")?.map(|k| vec![k]),
    };
    let s = spec.opt_schema("output_schema")?;
    let is_sink: bool = opt(spec.d, "is_sink")?.unwrap_or(false);
    let f = PyRunnerFactory::new(py, spec.name, factory, keys, run_tag.to_string())?;
    if is_sink {
        return Ok((NodeKind::Operator(Arc::new(f)), Role::Sink, None));
    }
    Ok(operator(Arc::new(f), s))
}

/// Reads node specs, in order, into core nodes, keeping what later specs
/// need: the output schemas (of port 0 and port 1), the loops, the scopes,
/// the collect stores and the external sinks.
struct GraphReader<'a> {
    run_tag: &'a str,
    nodes: Vec<Node>,
    schemas: Vec<Option<SchemaRef>>,
    /// The schema of each (node, port >= 1): a co-loop head's feedback, a
    /// window's late records (its input schema) or a process function's
    /// side outputs (their tags' schemas, when given).
    port_schemas: HashMap<(usize, u8), Option<SchemaRef>>,
    loops: Vec<LoopSpec>,
    scopes: HashMap<Vec<u32>, StreamScope>,
    collect_stores: HashMap<usize, Arc<CollectStore>>,
    external_sinks: Vec<String>,
}

impl GraphReader<'_> {
    /// The edges of a node spec and the schemas arriving on them.
    fn edges(&self, d: &Bound<'_, PyDict>) -> PyResult<(Vec<Edge>, Vec<Option<SchemaRef>>)> {
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
                    0 => self.schemas.get(from).cloned().flatten(),
                    _ => self.port_schemas.get(&(from, port)).cloned().flatten(),
                });
                inputs.push(Edge {
                    from,
                    partitioning: parse_partitioning(&part, keys)?,
                    input,
                    port,
                });
            }
        }
        Ok((inputs, input_schemas))
    }

    /// Reads one node spec (see `NodeSpec` in `eddyline/_specs.py`).
    fn add(&mut self, py: Python<'_>, d: &Bound<'_, PyDict>) -> PyResult<()> {
        let id: usize = get(d, "id")?;
        let kind: String = get(d, "kind")?;
        let name: String = get(d, "name")?;
        let uid: String = opt(d, "uid")?.unwrap_or_else(|| format!("{kind}-{id}"));
        let parallelism: usize = get(d, "parallelism")?;
        let (inputs, input_schemas) = self.edges(d)?;
        let spec = Spec {
            d,
            id,
            name: &name,
            inputs: &input_schemas,
        };
        let (node_kind, role, schema) = match self.build(py, &kind, &spec) {
            Ok(b) => b,
            Err(NodeError::Core(e)) => return Err(to_py(py, &e.in_operator(&name))),
            Err(NodeError::Py(e)) => return Err(e),
        };
        // Sinks whose output lives outside the job (not collect's, which the
        // driver holds; a discard sink has none).
        if role == Role::Sink && kind != "sink_collect" && kind != "sink_discard" {
            self.external_sinks.push(name.clone());
        }
        // A window (native or Python) with a late output emits its late
        // records, unchanged, on port 1.
        if opt::<bool>(d, "late_output")?.unwrap_or(false) {
            self.port_schemas.insert((id, 1), spec.first_input());
        }
        // A process function's side outputs: (port, schema or None) each.
        if let Some(ports) = opt::<Vec<(u8, Option<Bound<'_, PyAny>>)>>(d, "side_outputs")? {
            for (port, schema) in ports {
                let schema = schema.map(|s| schema_from_py(&s)).transpose()?;
                self.port_schemas.insert((id, port), schema);
            }
        }
        self.schemas.push(schema.clone());
        let path = opt::<Vec<u32>>(d, "scope")?.unwrap_or_default();
        self.nodes.push(Node {
            id,
            name,
            uid,
            parallelism,
            inputs,
            kind: node_kind,
            role,
            output_schema: schema,
            scope: scope_of(&mut self.scopes, &path),
        });
        Ok(())
    }

    /// Builds the core node of one spec, by its kind.
    fn build(
        &mut self,
        py: Python<'_>,
        kind: &str,
        spec: &Spec<'_, '_>,
    ) -> Result<NodeParts, NodeError> {
        Ok(match kind {
            "source_arrow" => source(arrow_source(spec)?),
            "source_sequence" => {
                let (start, end) = (get(spec.d, "start")?, get(spec.d, "end")?);
                source(Arc::new(SequenceSource::new(start, end)))
            }
            "source_parquet" => {
                let paths: Vec<PathBuf> = get(spec.d, "paths")?;
                let options = storage_options(spec.d)?;
                let mut parquet = ParquetSource::new_with(spec.name, paths, options)?;
                if let Some(columns) = opt::<Vec<String>>(spec.d, "columns")? {
                    parquet = parquet.with_columns(&columns)?;
                }
                source(Arc::new(parquet))
            }
            "source_python" => source(python_source(spec)?),
            "filter" => filter_node(spec)?,
            "with_columns" => project_node(spec, false)?,
            "select" => project_node(spec, true)?,
            "assign_timestamps" => timestamps_node(spec)?,
            "keyed_agg" => keyed_agg_node(spec)?,
            "window" => window_node(spec)?,
            "join" => join_node(spec)?,
            "session_window" => session_node(spec)?,
            "loop_head" => self.loop_head_node(spec)?,
            "loop_exit" => operator(Arc::new(UnionFactory::default()), spec.first_input()),
            "union" => {
                let all: Option<Vec<SchemaRef>> = spec.inputs.iter().cloned().collect();
                let s = match all {
                    Some(all) => Some(UnionFactory::output_schema(spec.name, &all)?),
                    None => None,
                };
                let factory = UnionFactory { schema: s.clone() };
                operator(Arc::new(factory), s)
            }
            "python" => python_node(py, spec, self.run_tag)?,
            "sink_collect" => {
                let store = CollectStore::new();
                self.collect_stores.insert(spec.id, store.clone());
                (
                    op(Arc::new(CollectSinkFactory::new(store))),
                    Role::Sink,
                    None,
                )
            }
            "sink_discard" => (op(Arc::new(DiscardSinkFactory)), Role::Sink, None),
            "sink_parquet" => {
                let dir: PathBuf = get(spec.d, "dir")?;
                let options = storage_options(spec.d)?;
                let f = ParquetSinkFactory::new_with(dir, self.run_tag, options);
                (op(Arc::new(f)), Role::Sink, None)
            }
            other => {
                let message = format!("unknown node kind '{other}'");
                return Err(Error::graph(spec.name, message).into());
            }
        })
    }

    /// `loop_head` (FLIP-15): records the loop and the schema of the feedback
    /// (port 1); the head itself forwards its inputs, every field nullable.
    fn loop_head_node(&mut self, spec: &Spec<'_, '_>) -> Result<NodeParts, NodeError> {
        let (d, name, id) = (spec.d, spec.name, spec.id);
        let loop_id: u32 = get(d, "loop")?;
        let tail: Option<usize> = opt(d, "feedback_from")?;
        let priority = match get::<String>(d, "priority")?.as_str() {
            "feedback_first" => LoopPriority::FeedbackFirst,
            "adaptive" => LoopPriority::Adaptive,
            other => {
                let message =
                    format!("priority must be 'feedback_first' or 'adaptive', got '{other}'");
                return Err(Error::graph(name, message).into());
            }
        };
        let co: bool = opt(d, "co")?.unwrap_or(false);
        let feedback_schema = spec.opt_schema("feedback_schema")?;
        let fb = if co {
            feedback_schema
        } else {
            spec.first_input()
        };
        self.port_schemas
            .insert((id, 1), fb.as_ref().map(all_nullable));
        self.loops.push(LoopSpec {
            id: loop_id,
            head: id,
            // A loop still being built (validation only) has no tail yet:
            // the head stands in for it.
            tail: tail.unwrap_or(id),
            feedback_memory: get(d, "feedback_memory")?,
            priority,
            co,
            spill_dir: opt::<PathBuf>(d, "spill_dir")?,
        });
        let s = spec.first_input();
        Ok(operator(
            Arc::new(UnionFactory::default()),
            s.as_ref().map(all_nullable),
        ))
    }
}

/// Builds the core graph from the node specs. Build-time errors become
/// `eddyline.errors` exceptions naming the node.
pub fn parse_graph(
    py: Python<'_>,
    nodes: &Bound<'_, PyList>,
    max_parallelism: usize,
    run_tag: &str,
) -> PyResult<BuiltGraph> {
    let mut reader = GraphReader {
        run_tag,
        nodes: Vec::new(),
        schemas: Vec::new(),
        port_schemas: HashMap::new(),
        loops: Vec::new(),
        scopes: HashMap::new(),
        collect_stores: HashMap::new(),
        external_sinks: Vec::new(),
    };
    for item in nodes.iter() {
        reader.add(py, item.cast::<PyDict>()?)?;
    }
    let graph = JobGraph {
        nodes: reader.nodes,
        max_parallelism,
        loops: reader.loops,
    };
    graph.validate().map_err(|e| to_py(py, &e))?;
    Ok(BuiltGraph {
        graph,
        schemas: reader.schemas,
        collect_stores: reader.collect_stores,
        external_sinks: reader.external_sinks,
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
/// later) or a malformed node spec.
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

/// Validates the node specs and returns each node's output schema (None
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
