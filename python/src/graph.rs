//! Conversion of the DSL's plan (the frozen specs of `eddyline/_specs.py`,
//! one per operator kind) into a core `JobGraph`, with the build-time schema
//! checks (unknown columns, mistyped expressions, unions of different
//! schemas) done here, before anything runs. Each spec is read by attribute
//! with a derived `FromPyObject` whose fields are the spec's own (DESIGN.md
//! "Layers": conversions only).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use eddyline_core::error::Error;
use eddyline_core::expr::Expr;
use eddyline_core::graph::{
    all_nullable, Edge, JobGraph, LoopPriority, LoopSpec, Node, NodeKind, Role,
};
use eddyline_core::operator::explode::{ExplodeFactory, ExplodeMode};
use eddyline_core::operator::filter::FilterFactory;
use eddyline_core::operator::join::{JoinBounds, JoinFactory, JoinSpec, JoinType};
use eddyline_core::operator::project::ProjectFactory;
use eddyline_core::operator::timestamps::AssignTimestampsFactory;
use eddyline_core::operator::union::UnionFactory;
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
use eddyline_core::store::StorageOptions;
use pyo3::prelude::*;
use pyo3::types::PyList;

use crate::arrow::{batch_from_py, schema_from_py, schema_to_py};
use crate::errors::to_py;
use crate::expr::PyExpr;
use crate::source::PySourceFactory;
use crate::udf::PyRunnerFactory;

mod aggregate;
mod over;

use over::{over_range_node, over_rows_node};

use aggregate::{
    keyed_agg_node, keyed_aggs_node, session_aggs_node, session_node, window_aggs_node, window_node,
};

/// A graph ready to run, with the stores of its collect sinks.
pub struct BuiltGraph {
    pub graph: JobGraph,
    pub schemas: Vec<Option<SchemaRef>>,
    pub collect_stores: HashMap<usize, Arc<CollectStore>>,
    /// Sinks that commit outside the process (Parquet files, Python 2PC sinks).
    pub external_sinks: Vec<String>,
}

/// The core expressions of named `eddyline._core.Expr` columns.
fn exprs(columns: &[(String, Bound<'_, PyExpr>)]) -> Vec<(String, Expr)> {
    columns
        .iter()
        .map(|(name, expr)| (name.clone(), expr.get().expr.clone()))
        .collect()
}

/// `exprs` in or out of Spark's ANSI mode.
fn exprs_in(columns: &[(String, Bound<'_, PyExpr>)], ansi: bool) -> Vec<(String, Expr)> {
    exprs(columns)
        .into_iter()
        .map(|(name, e)| (name, e.with_ansi(ansi)))
        .collect()
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

/// What a node spec builds: the core node kind, its role and its output
/// schema (None where it is only known at run time).
type NodeParts = (NodeKind, Role, Option<SchemaRef>);

/// One node of the plan (`NodeSpec` in `eddyline/_specs.py`): what every
/// node has, and its operator's spec `op`, read by its `kind`.
#[derive(FromPyObject)]
struct NodeSpec<'py> {
    id: usize,
    name: String,
    uid: Option<String>,
    parallelism: usize,
    inputs: Vec<EdgeSpec>,
    scope: Vec<u32>,
    kind: String,
    op: Bound<'py, PyAny>,
    late_output: bool,
    side_outputs: Vec<(u8, Option<Bound<'py, PyAny>>)>,
}

/// An input of a node (`EdgeSpec`).
#[derive(FromPyObject)]
struct EdgeSpec {
    node: usize,
    partition: String,
    keys: Vec<String>,
    input: usize,
    port: u8,
}

/// `source_arrow`: record batches held in the spec.
#[derive(FromPyObject)]
struct SourceArrowSpec<'py> {
    schema: Bound<'py, PyAny>,
    batches: Vec<Bound<'py, PyAny>>,
}

/// `source_sequence`: the int64 column `value` over `[start, end)`.
#[derive(FromPyObject)]
struct SourceSequenceSpec {
    start: i64,
    end: i64,
}

/// `source_parquet`: the files, read in order (only `columns`, when given).
#[derive(FromPyObject)]
struct SourceParquetSpec {
    paths: Vec<PathBuf>,
    storage_options: StorageOptions,
    columns: Option<Vec<String>>,
}

/// `source_python`: a user source behind its reader factory.
#[derive(FromPyObject)]
struct SourcePythonSpec<'py> {
    schema: Bound<'py, PyAny>,
    make_reader: Py<PyAny>,
    union_offsets: bool,
}

/// `filter`: a boolean expression.
#[derive(FromPyObject)]
struct FilterSpec<'py> {
    expr: Bound<'py, PyExpr>,
}

/// `with_columns` and `select`: named expressions.
#[derive(FromPyObject)]
struct ProjectSpec<'py> {
    columns: Vec<(String, Bound<'py, PyExpr>)>,
}

/// `explode`: one row per element of an array column.
#[derive(FromPyObject)]
struct ExplodeSpec<'py> {
    columns: Vec<(String, Bound<'py, PyExpr>)>,
    generator: usize,
    outer: bool,
    keep_input: bool,
    /// `posexplode`: the positions' column.
    position: Option<String>,
}

/// `assign_timestamps`: event time from a column, and watermarks.
#[derive(FromPyObject)]
struct AssignTimestampsSpec {
    column: String,
    max_out_of_orderness_ms: i64,
    idle_timeout_ms: Option<i64>,
}

/// `join`: a native keyed join of input 0 (left) and input 1 (right).
#[derive(FromPyObject)]
struct JoinSpecPy {
    left_keys: Vec<String>,
    right_keys: Vec<String>,
    how: String,
    within: Option<(i64, i64)>,
    state_ttl_ms: Option<i64>,
    time_columns: (Option<String>, Option<String>),
    temporal: bool,
    window_ms: Option<i64>,
    window_slide_ms: Option<i64>,
    session_gap_ms: Option<i64>,
}

/// `loop_head` (FLIP-15): the loop, its feedback and how it is buffered.
#[derive(FromPyObject)]
struct LoopHeadSpec<'py> {
    #[pyo3(attribute("loop"))]
    loop_id: u32,
    feedback_from: Option<usize>,
    feedback_memory: usize,
    priority: String,
    co: bool,
    spill_dir: Option<PathBuf>,
    feedback_schema: Option<Bound<'py, PyAny>>,
}

/// `python`: Python code run by the runners `factory` makes.
#[derive(FromPyObject)]
struct PythonSpec<'py> {
    factory: Py<PyAny>,
    output_schema: Option<Bound<'py, PyAny>>,
    keys: Option<Vec<String>>,
    is_sink: bool,
    input_keys: Option<Vec<Vec<String>>>,
}

/// `sink_parquet`: files committed with checkpoints.
#[derive(FromPyObject)]
struct SinkParquetSpec {
    dir: PathBuf,
    storage_options: StorageOptions,
}

/// The node being read: its id, name and the schemas of its inputs.
struct Ctx<'a> {
    id: usize,
    name: &'a str,
    inputs: &'a [Option<SchemaRef>],
    /// Spark's ANSI mode for the node's expressions.
    ansi: bool,
}

impl Ctx<'_> {
    /// A schema of the spec; a bad one is a graph error naming the node.
    fn schema(&self, s: &Bound<'_, PyAny>) -> Result<SchemaRef, NodeError> {
        Ok(schema_from_py(s).map_err(|e| Error::graph(self.name, e.to_string()))?)
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

fn op_kind(f: Arc<dyn OperatorFactory>) -> NodeKind {
    NodeKind::Operator(f)
}

/// A source node; its output schema is the source's.
fn source(src: Arc<dyn SourceFactory>) -> NodeParts {
    let s = src.schema();
    (NodeKind::Source(src), Role::Source, s)
}

/// An operator node (neither source nor sink) with its output schema.
fn operator(f: Arc<dyn OperatorFactory>, s: Option<SchemaRef>) -> NodeParts {
    (op_kind(f), Role::Operator, s)
}

fn arrow_source(cx: &Ctx<'_>, spec: SourceArrowSpec<'_>) -> Result<NodeParts, NodeError> {
    let name = cx.name;
    let schema = cx.schema(&spec.schema)?;
    let batches = spec
        .batches
        .iter()
        .map(|b| batch_from_py(b).map_err(|e| Error::schema(name, e.to_string())))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(source(Arc::new(ArrowBatchesSource::new(
        name, batches, schema,
    )?)))
}

fn parquet_source(cx: &Ctx<'_>, spec: SourceParquetSpec) -> Result<NodeParts, NodeError> {
    let mut parquet = ParquetSource::new_with(cx.name, spec.paths, spec.storage_options)?;
    if let Some(columns) = spec.columns {
        parquet = parquet.with_columns(&columns)?;
    }
    Ok(source(Arc::new(parquet)))
}

fn python_source(cx: &Ctx<'_>, spec: SourcePythonSpec<'_>) -> Result<NodeParts, NodeError> {
    Ok(source(Arc::new(PySourceFactory {
        make_reader: spec.make_reader,
        schema: cx.schema(&spec.schema)?,
        union_offsets: spec.union_offsets,
    })))
}

/// The node of a factory that binds its expressions to its input's schema
/// (`select`, `with_columns`, `explode`): when that schema is known at build
/// time, `f` is bound to it (`bind`) and then asked its output schema
/// (`output`); otherwise both wait for the first batch.
fn bound_operator<F: OperatorFactory + 'static>(
    cx: &Ctx<'_>,
    f: F,
    bind: fn(F, &str, &SchemaRef) -> Result<F, Error>,
    output: fn(&F, &str, &SchemaRef) -> Result<SchemaRef, Error>,
) -> Result<NodeParts, NodeError> {
    let Some(input) = known(cx.inputs) else {
        return Ok(operator(Arc::new(f), None));
    };
    let f = bind(f, cx.name, input)?;
    let s = output(&f, cx.name, input)?;
    Ok(operator(Arc::new(f), Some(s)))
}

/// `filter`: keeps the rows where a boolean expression holds.
fn filter_node(cx: &Ctx<'_>, spec: FilterSpec<'_>) -> Result<NodeParts, NodeError> {
    let f = FilterFactory::new(spec.expr.get().expr.clone().with_ansi(cx.ansi));
    let s = cx.output_of(|s| f.output_schema(cx.name, s))?;
    Ok(operator(Arc::new(f), s))
}

/// `with_columns` (adds or replaces columns) and `select` (keeps only the named ones).
fn project_node(cx: &Ctx<'_>, spec: ProjectSpec<'_>, select: bool) -> Result<NodeParts, NodeError> {
    let cols = exprs_in(&spec.columns, cx.ansi);
    let f = if select {
        ProjectFactory::select(cols)
    } else {
        ProjectFactory::with_columns(cols)
    };
    let (bind, output) = (
        ProjectFactory::with_input_schema,
        ProjectFactory::output_schema,
    );
    bound_operator(cx, f, bind, output)
}

/// `explode`: a native flat-map of an array column (`select` with
/// `F.explode` / `F.posexplode`, or `stream.explode` / `stream.posexplode`).
fn explode_node(cx: &Ctx<'_>, spec: ExplodeSpec<'_>) -> Result<NodeParts, NodeError> {
    let mode = if spec.keep_input {
        ExplodeMode::WithColumn
    } else {
        ExplodeMode::Select
    };
    let columns = exprs_in(&spec.columns, cx.ansi);
    let mut f = ExplodeFactory::new(mode, columns, spec.generator, spec.outer)?;
    if let Some(position) = spec.position {
        f = f.with_position(position);
    }
    let (bind, output) = (
        ExplodeFactory::with_input_schema,
        ExplodeFactory::output_schema,
    );
    bound_operator(cx, f, bind, output)
}

/// `assign_timestamps`: event time from a column, and watermarks.
fn timestamps_node(cx: &Ctx<'_>, spec: AssignTimestampsSpec) -> Result<NodeParts, NodeError> {
    let f = AssignTimestampsFactory::new(spec.column, spec.max_out_of_orderness_ms)
        .with_idle_timeout(spec.idle_timeout_ms);
    let s = cx.output_of(|s| f.output_schema(cx.name, s))?;
    Ok(operator(Arc::new(f), s))
}

/// `join`: a native keyed join of input 0 (left) and input 1 (right).
fn join_node(cx: &Ctx<'_>, spec: JoinSpecPy) -> Result<NodeParts, NodeError> {
    let name = cx.name;
    let how = match spec.how.as_str() {
        "inner" => JoinType::Inner,
        "left" => JoinType::Left,
        "right" => JoinType::Right,
        "outer" => JoinType::Outer,
        other => {
            let message = format!("unknown join type '{other}'");
            return Err(Error::graph(name, message).into());
        }
    };
    let bounds = match (spec.session_gap_ms, spec.window_ms, spec.within) {
        _ if spec.temporal => JoinBounds::Temporal,
        (Some(gap_ms), _, _) => JoinBounds::SessionWindow { gap_ms },
        (None, Some(size_ms), _) => JoinBounds::Window {
            size_ms,
            slide_ms: spec.window_slide_ms.unwrap_or(size_ms),
        },
        (None, None, Some((lower_ms, upper_ms))) => JoinBounds::Interval { lower_ms, upper_ms },
        (None, None, None) => JoinBounds::Unbounded {
            ttl_ms: spec.state_ttl_ms,
        },
    };
    let (lt, rt) = spec.time_columns;
    let join = JoinSpec {
        left_keys: spec.left_keys,
        right_keys: spec.right_keys,
        time_columns: [lt, rt],
        how,
        bounds,
    };
    let (Some(Some(left)), Some(Some(right))) = (cx.inputs.first(), cx.inputs.get(1)) else {
        let message = "a join needs the schemas of both inputs before running";
        return Err(Error::graph(name, message).into());
    };
    let f = JoinFactory::new(name, join, left, right)?;
    let s = Some(f.output_schema());
    Ok(operator(Arc::new(f), s))
}

/// `python`: Python code run by the runners the spec's `factory` makes.
fn python_node(
    py: Python<'_>,
    cx: &Ctx<'_>,
    spec: PythonSpec<'_>,
    run_tag: &str,
) -> Result<NodeParts, NodeError> {
    // A two-input keyed function (CoProcessFunction) keys each input on its own columns.
    let keys = spec.input_keys.or_else(|| spec.keys.map(|k| vec![k]));
    let s = spec
        .output_schema
        .as_ref()
        .map(|s| cx.schema(s))
        .transpose()?;
    let f = PyRunnerFactory::new(py, cx.name, spec.factory, keys, run_tag.to_string())?;
    if spec.is_sink {
        return Ok((NodeKind::Operator(Arc::new(f)), Role::Sink, None));
    }
    Ok(operator(Arc::new(f), s))
}

/// Reads node specs, in order, into core nodes, keeping what later specs
/// need: the output schemas (of port 0 and port 1), the loops, the scopes,
/// the collect stores and the external sinks.
struct GraphReader<'a> {
    run_tag: &'a str,
    /// Spark's ANSI mode for every native expression (`JobConfigSpec.ansi`).
    ansi: bool,
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
    fn edges(&self, specs: Vec<EdgeSpec>) -> PyResult<(Vec<Edge>, Vec<Option<SchemaRef>>)> {
        let mut inputs = Vec::new();
        let mut input_schemas = Vec::new();
        for e in specs {
            input_schemas.push(match e.port {
                0 => self.schemas.get(e.node).cloned().flatten(),
                port => self.port_schemas.get(&(e.node, port)).cloned().flatten(),
            });
            inputs.push(Edge {
                from: e.node,
                partitioning: parse_partitioning(&e.partition, e.keys)?,
                input: e.input,
                port: e.port,
            });
        }
        Ok((inputs, input_schemas))
    }

    /// Reads one node spec (see `NodeSpec` in `eddyline/_specs.py`).
    fn add(&mut self, py: Python<'_>, spec: NodeSpec<'_>) -> PyResult<()> {
        let NodeSpec {
            id,
            name,
            uid,
            parallelism,
            inputs,
            scope,
            kind,
            op,
            late_output,
            side_outputs,
        } = spec;
        let uid = uid.unwrap_or_else(|| format!("{kind}-{id}"));
        let (inputs, input_schemas) = self.edges(inputs)?;
        let cx = Ctx {
            id,
            name: &name,
            inputs: &input_schemas,
            ansi: self.ansi,
        };
        let (node_kind, role, schema) = match self.build(py, &kind, &op, &cx, late_output) {
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
        if late_output {
            self.port_schemas.insert((id, 1), cx.first_input());
        }
        // A process function's side outputs: (port, schema or None) each.
        for (port, schema) in side_outputs {
            let schema = schema.map(|s| schema_from_py(&s)).transpose()?;
            self.port_schemas.insert((id, port), schema);
        }
        self.schemas.push(schema.clone());
        self.nodes.push(Node {
            id,
            name,
            uid,
            parallelism,
            inputs,
            kind: node_kind,
            role,
            output_schema: schema,
            scope: scope_of(&mut self.scopes, &scope),
        });
        Ok(())
    }

    /// Builds the core node of one operator spec, read by its kind.
    fn build(
        &mut self,
        py: Python<'_>,
        kind: &str,
        op: &Bound<'_, PyAny>,
        cx: &Ctx<'_>,
        late_output: bool,
    ) -> Result<NodeParts, NodeError> {
        Ok(match kind {
            "source_arrow" => arrow_source(cx, op.extract()?)?,
            "source_sequence" => {
                let spec: SourceSequenceSpec = op.extract()?;
                source(Arc::new(SequenceSource::new(spec.start, spec.end)))
            }
            "source_parquet" => parquet_source(cx, op.extract()?)?,
            "source_python" => python_source(cx, op.extract()?)?,
            "filter" => filter_node(cx, op.extract()?)?,
            "with_columns" => project_node(cx, op.extract()?, false)?,
            "select" => project_node(cx, op.extract()?, true)?,
            "explode" => explode_node(cx, op.extract()?)?,
            "assign_timestamps" => timestamps_node(cx, op.extract()?)?,
            "keyed_agg" => keyed_agg_node(cx, op.extract()?)?,
            "keyed_aggs" => keyed_aggs_node(cx, op.extract()?)?,
            "window_aggs" => window_aggs_node(cx, op.extract()?, late_output)?,
            "session_aggs" => session_aggs_node(cx, op.extract()?, late_output)?,
            "window" => window_node(cx, op.extract()?, late_output)?,
            "join" => join_node(cx, op.extract()?)?,
            "over_rows" => over_rows_node(cx, op.extract()?)?,
            "over_range" => over_range_node(cx, op.extract()?)?,
            "session_window" => session_node(cx, op.extract()?, late_output)?,
            "loop_head" => self.loop_head_node(cx, op.extract()?)?,
            "loop_exit" => operator(Arc::new(UnionFactory::default()), cx.first_input()),
            "union" => {
                let all: Option<Vec<SchemaRef>> = cx.inputs.iter().cloned().collect();
                let s = match all {
                    Some(all) => Some(UnionFactory::output_schema(cx.name, &all)?),
                    None => None,
                };
                let factory = UnionFactory { schema: s.clone() };
                operator(Arc::new(factory), s)
            }
            "python" => python_node(py, cx, op.extract()?, self.run_tag)?,
            "sink_collect" => {
                let store = CollectStore::new();
                self.collect_stores.insert(cx.id, store.clone());
                (
                    op_kind(Arc::new(CollectSinkFactory::new(store))),
                    Role::Sink,
                    None,
                )
            }
            "sink_discard" => (op_kind(Arc::new(DiscardSinkFactory)), Role::Sink, None),
            "sink_parquet" => {
                let spec: SinkParquetSpec = op.extract()?;
                let f = ParquetSinkFactory::new_with(spec.dir, self.run_tag, spec.storage_options);
                (op_kind(Arc::new(f)), Role::Sink, None)
            }
            other => {
                let message = format!("unknown node kind '{other}'");
                return Err(Error::graph(cx.name, message).into());
            }
        })
    }

    /// `loop_head` (FLIP-15): records the loop and the schema of the feedback
    /// (port 1); the head itself forwards its inputs, every field nullable.
    fn loop_head_node(
        &mut self,
        cx: &Ctx<'_>,
        spec: LoopHeadSpec<'_>,
    ) -> Result<NodeParts, NodeError> {
        let (name, id) = (cx.name, cx.id);
        let priority = match spec.priority.as_str() {
            "feedback_first" => LoopPriority::FeedbackFirst,
            "adaptive" => LoopPriority::Adaptive,
            other => {
                let message =
                    format!("priority must be 'feedback_first' or 'adaptive', got '{other}'");
                return Err(Error::graph(name, message).into());
            }
        };
        let fb = if spec.co {
            spec.feedback_schema
                .as_ref()
                .map(|s| cx.schema(s))
                .transpose()?
        } else {
            cx.first_input()
        };
        self.port_schemas
            .insert((id, 1), fb.as_ref().map(all_nullable));
        self.loops.push(LoopSpec {
            id: spec.loop_id,
            head: id,
            // A loop still being built (validation only) has no tail yet:
            // the head stands in for it.
            tail: spec.feedback_from.unwrap_or(id),
            feedback_memory: spec.feedback_memory,
            priority,
            co: spec.co,
            spill_dir: spec.spill_dir,
        });
        let s = cx.first_input();
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
    parse_job_graph(py, nodes, max_parallelism, run_tag, false)
}

/// [`parse_graph`] for a run: `ansi` puts the native expressions in Spark's
/// ANSI mode (`spark.sql.ansi.enabled`).
pub fn parse_job_graph(
    py: Python<'_>,
    nodes: &Bound<'_, PyList>,
    max_parallelism: usize,
    run_tag: &str,
    ansi: bool,
) -> PyResult<BuiltGraph> {
    let mut reader = GraphReader {
        run_tag,
        ansi,
        nodes: Vec::new(),
        schemas: Vec::new(),
        port_schemas: HashMap::new(),
        loops: Vec::new(),
        scopes: HashMap::new(),
        collect_stores: HashMap::new(),
        external_sinks: Vec::new(),
    };
    for item in nodes.iter() {
        reader.add(py, item.extract()?)?;
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
