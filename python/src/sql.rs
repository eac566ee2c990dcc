//! `eddyline._core.plan_sql`: the SQL front-end's plan (core's `sql`
//! module) as a tree of frozen Python objects, expressions as `Expr`, which
//! `eddyline/sql.py` lowers by calling the DSL (docs/DESIGN.md "SQL").
//! Glue only: conversions and the error class.

use eddyline_core::sql::{self, AggregateCall, JoinKind, SqlError, SqlNode, View, WindowKind};
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};

use crate::arrow::schema_from_py;
use crate::expr::PyExpr;

/// A view's stream (`eddyline.sql` maps the name to it).
#[pyclass(name = "SqlScan", module = "eddyline._core", frozen, get_all)]
pub struct PySqlScan {
    view: String,
    columns: Vec<String>,
}

/// A windowing table function over `input`: `kind` is `"tumble"`, `"hop"`
/// or `"session"`; the sizes are in milliseconds.
#[pyclass(name = "SqlWindow", module = "eddyline._core", frozen, get_all)]
pub struct PySqlWindow {
    input: Py<PyAny>,
    time_column: String,
    kind: String,
    size_ms: Option<i64>,
    slide_ms: Option<i64>,
    gap_ms: Option<i64>,
    columns: Vec<String>,
}

/// Rows of `input` where `predicate` holds.
#[pyclass(name = "SqlFilter", module = "eddyline._core", frozen, get_all)]
pub struct PySqlFilter {
    input: Py<PyAny>,
    predicate: Py<PyExpr>,
    columns: Vec<String>,
}

/// `exprs`: a list of `(name, Expr)`.
#[pyclass(name = "SqlProject", module = "eddyline._core", frozen, get_all)]
pub struct PySqlProject {
    input: Py<PyAny>,
    exprs: Py<PyList>,
    columns: Vec<String>,
}

/// `UNION ALL` of `inputs` (a list), all with the same column names.
#[pyclass(name = "SqlUnion", module = "eddyline._core", frozen, get_all)]
pub struct PySqlUnion {
    inputs: Py<PyList>,
    columns: Vec<String>,
}

/// `GROUP BY keys` with `aggregates`: a list of `(function, args (a list
/// of `Expr`), the column of a one-column aggregate or None, output name)`,
/// `function` spelt as `eddyline.functions` spells it. `window` is Spark's
/// `GROUP BY window(...)`: `(column, time column, kind, size_ms, slide_ms,
/// gap_ms)` as [`PySqlWindow`]'s, or None.
#[pyclass(name = "SqlAggregate", module = "eddyline._core", frozen, get_all)]
pub struct PySqlAggregate {
    input: Py<PyAny>,
    keys: Vec<String>,
    aggregates: Py<PyList>,
    window: Option<SparkWindow>,
    columns: Vec<String>,
}

/// A join of `left` and `right` on `left_on[i] = right_on[i]`: `how` is
/// `"inner"`, `"left"`, `"right"` or `"outer"`; `kind` is `"regular"`,
/// `"interval"` (`lower_ms <= right.ts - left.ts <= upper_ms`), `"window"`
/// (the window's fields as `SqlWindow`'s) or `"temporal"`; `time_columns` the
/// inputs' event-time columns its bound reads; `columns` the join's output.
#[pyclass(name = "SqlJoin", module = "eddyline._core", frozen, get_all)]
pub struct PySqlJoin {
    left: Py<PyAny>,
    right: Py<PyAny>,
    how: String,
    left_on: Vec<String>,
    right_on: Vec<String>,
    kind: String,
    lower_ms: Option<i64>,
    upper_ms: Option<i64>,
    window: Option<String>,
    size_ms: Option<i64>,
    slide_ms: Option<i64>,
    gap_ms: Option<i64>,
    time_columns: Option<(String, String)>,
    columns: Vec<String>,
}

/// The rows of `input`, each of which comes before the watermark passes its
/// `column` (an inner interval join's rows bounded by a column of each row,
/// `b.ts <= a.expires`); a window of 1 ms on `column` above closes a group
/// of them when the watermark passes it.
#[pyclass(name = "SqlClosing", module = "eddyline._core", frozen, get_all)]
pub struct PySqlClosing {
    input: Py<PyAny>,
    column: String,
    columns: Vec<String>,
}

/// Every row of `input` with its frame's aggregates: `agg(col) OVER
/// (PARTITION BY keys ORDER BY time_column, order_by... ROWS|RANGE BETWEEN
/// preceding PRECEDING AND CURRENT ROW)`: `preceding` rows, or with `range`
/// milliseconds of event time; None: `UNBOUNDED`; `aggregates` as
/// [`PySqlAggregate`]'s.
#[pyclass(name = "SqlOver", module = "eddyline._core", frozen, get_all)]
pub struct PySqlOver {
    input: Py<PyAny>,
    keys: Vec<String>,
    time_column: String,
    order_by: Vec<String>,
    preceding: Option<u64>,
    range: bool,
    aggregates: Py<PyList>,
    columns: Vec<String>,
}

type SparkWindow = (
    String,
    String,
    String,
    Option<i64>,
    Option<i64>,
    Option<i64>,
);

fn window_fields(kind: &WindowKind) -> (&'static str, Option<i64>, Option<i64>, Option<i64>) {
    match kind {
        WindowKind::Tumble { size_ms } => ("tumble", Some(*size_ms), None, None),
        WindowKind::Hop { size_ms, slide_ms } => ("hop", Some(*size_ms), Some(*slide_ms), None),
        WindowKind::Session { gap_ms } => ("session", None, None, Some(*gap_ms)),
    }
}

fn expr(py: Python<'_>, e: &eddyline_core::expr::Expr) -> PyResult<Py<PyExpr>> {
    Py::new(
        py,
        PyExpr {
            expr: e.clone(),
            alias: None,
            more_aliases: Vec::new(),
        },
    )
}

/// Nodes already converted: a plan that holds a step twice (a subquery
/// written twice, a `WITH` read twice) gives one object for both, so the
/// lowering builds the step once and both read its stream.
type Converted<'n> = Vec<(&'n SqlNode, Py<PyAny>)>;

fn to_py<'n>(py: Python<'_>, node: &'n SqlNode, done: &mut Converted<'n>) -> PyResult<Py<PyAny>> {
    if let Some((_, object)) = done.iter().find(|(n, _)| *n == node) {
        return Ok(object.clone_ref(py));
    }
    let object = convert(py, node, done)?;
    done.push((node, object.clone_ref(py)));
    Ok(object)
}

fn convert<'n>(py: Python<'_>, node: &'n SqlNode, done: &mut Converted<'n>) -> PyResult<Py<PyAny>> {
    let columns = node.columns();
    Ok(match node {
        SqlNode::Scan { view, .. } => Py::new(
            py,
            PySqlScan {
                view: view.clone(),
                columns,
            },
        )?
        .into_any(),
        SqlNode::Window {
            input,
            time_column,
            kind,
            ..
        } => {
            let (kind, size_ms, slide_ms, gap_ms) = window_fields(kind);
            Py::new(
                py,
                PySqlWindow {
                    input: to_py(py, input, done)?,
                    time_column: time_column.clone(),
                    kind: kind.to_string(),
                    size_ms,
                    slide_ms,
                    gap_ms,
                    columns,
                },
            )?
            .into_any()
        }
        SqlNode::Filter {
            input, predicate, ..
        } => Py::new(
            py,
            PySqlFilter {
                input: to_py(py, input, done)?,
                predicate: expr(py, predicate)?,
                columns,
            },
        )?
        .into_any(),
        SqlNode::Project { input, exprs } => project_to_py(py, input, exprs, columns, done)?,
        SqlNode::Union { inputs } => {
            let items = inputs
                .iter()
                .map(|i| to_py(py, i, done))
                .collect::<PyResult<Vec<_>>>()?;
            Py::new(
                py,
                PySqlUnion {
                    inputs: PyList::new(py, items)?.unbind(),
                    columns,
                },
            )?
            .into_any()
        }
        SqlNode::Aggregate {
            input,
            keys,
            aggregates,
            window,
            ..
        } => {
            let window = window.as_ref().map(|(time_column, kind)| {
                let (name, size_ms, slide_ms, gap_ms) = window_fields(kind);
                let column = sql::spark_window_column(kind).to_string();
                (
                    column,
                    time_column.clone(),
                    name.to_string(),
                    size_ms,
                    slide_ms,
                    gap_ms,
                )
            });
            aggregate_to_py(py, input, keys, aggregates, window, columns, done)?
        }
        SqlNode::Join { .. } => join_to_py(py, node, columns, done)?,
        SqlNode::Over { .. } => over_to_py(py, node, columns, done)?,
        SqlNode::Closing { input, column } => Py::new(
            py,
            PySqlClosing {
                input: to_py(py, input, done)?,
                column: column.clone(),
                columns,
            },
        )?
        .into_any(),
    })
}

fn over_to_py<'n>(
    py: Python<'_>,
    node: &'n SqlNode,
    columns: Vec<String>,
    done: &mut Converted<'n>,
) -> PyResult<Py<PyAny>> {
    let SqlNode::Over {
        input,
        frame,
        aggregates,
        ..
    } = node
    else {
        return Err(pyo3::exceptions::PyAssertionError::new_err(
            "invariant: over_to_py is called with an over window",
        ));
    };
    Py::new(
        py,
        PySqlOver {
            input: to_py(py, input, done)?,
            keys: frame.keys.clone(),
            time_column: frame.time_column.clone(),
            order_by: frame.order_by.clone(),
            preceding: frame.preceding,
            range: frame.range,
            aggregates: aggregate_list(py, aggregates)?,
            columns,
        },
    )
    .map(Py::into_any)
}

fn join_to_py<'n>(
    py: Python<'_>,
    node: &'n SqlNode,
    columns: Vec<String>,
    done: &mut Converted<'n>,
) -> PyResult<Py<PyAny>> {
    let SqlNode::Join {
        left,
        right,
        how,
        left_on,
        right_on,
        kind,
        time_columns,
        ..
    } = node
    else {
        return Err(pyo3::exceptions::PyAssertionError::new_err(
            "invariant: join_to_py is called with a join",
        ));
    };
    let (mut lower_ms, mut upper_ms) = (None, None);
    let (mut window, mut size_ms, mut slide_ms, mut gap_ms) = (None, None, None, None);
    let kind = match kind {
        JoinKind::Regular => "regular",
        JoinKind::Interval {
            lower_ms: l,
            upper_ms: u,
        } => {
            (lower_ms, upper_ms) = (Some(*l), Some(*u));
            "interval"
        }
        JoinKind::Window(w) => {
            let (name, size, slide, gap) = window_fields(w);
            (window, size_ms, slide_ms, gap_ms) = (Some(name.to_string()), size, slide, gap);
            "window"
        }
        JoinKind::Temporal => "temporal",
    };
    Py::new(
        py,
        PySqlJoin {
            left: to_py(py, left, done)?,
            right: to_py(py, right, done)?,
            how: how.clone(),
            left_on: left_on.clone(),
            right_on: right_on.clone(),
            kind: kind.to_string(),
            lower_ms,
            upper_ms,
            window,
            size_ms,
            slide_ms,
            gap_ms,
            time_columns: time_columns.clone(),
            columns,
        },
    )
    .map(Py::into_any)
}

fn project_to_py<'n>(
    py: Python<'_>,
    input: &'n SqlNode,
    exprs: &[(String, eddyline_core::expr::Expr)],
    columns: Vec<String>,
    done: &mut Converted<'n>,
) -> PyResult<Py<PyAny>> {
    let items = exprs
        .iter()
        .map(|(name, e)| {
            PyTuple::new(
                py,
                [
                    name.clone().into_pyobject(py)?.into_any(),
                    expr(py, e)?.into_bound(py).into_any(),
                ],
            )
        })
        .collect::<PyResult<Vec<_>>>()?;
    Py::new(
        py,
        PySqlProject {
            input: to_py(py, input, done)?,
            exprs: PyList::new(py, items)?.unbind(),
            columns,
        },
    )
    .map(Py::into_any)
}

fn aggregate_to_py<'n>(
    py: Python<'_>,
    input: &'n SqlNode,
    keys: &[String],
    aggregates: &[AggregateCall],
    window: Option<SparkWindow>,
    columns: Vec<String>,
    done: &mut Converted<'n>,
) -> PyResult<Py<PyAny>> {
    Py::new(
        py,
        PySqlAggregate {
            input: to_py(py, input, done)?,
            keys: keys.to_vec(),
            aggregates: aggregate_list(py, aggregates)?,
            window,
            columns,
        },
    )
    .map(Py::into_any)
}

/// `aggregates` as a list of `(function, args, column or None, name)`.
fn aggregate_list(py: Python<'_>, aggregates: &[AggregateCall]) -> PyResult<Py<PyList>> {
    let items = aggregates
        .iter()
        .map(|call| {
            let args = call
                .args
                .iter()
                .map(|a| expr(py, a))
                .collect::<PyResult<Vec<_>>>()?;
            PyTuple::new(
                py,
                [
                    call.function.clone().into_pyobject(py)?.into_any(),
                    PyList::new(py, args)?.into_any(),
                    call.column.clone().into_pyobject(py)?.into_any(),
                    call.name.clone().into_pyobject(py)?.into_any(),
                ],
            )
        })
        .collect::<PyResult<Vec<_>>>()?;
    Ok(PyList::new(py, items)?.unbind())
}

fn sql_error(py: Python<'_>, err: &SqlError) -> PyErr {
    let raise = || -> PyResult<PyErr> {
        let class = py.import("eddyline.errors")?.getattr("SqlError")?;
        let exc = class.call1((err.to_string(), err.construct.clone()))?;
        Ok(PyErr::from_value(exc))
    };
    raise().unwrap_or_else(|e| e)
}

/// Plans `query` over `views` (`(name, pyarrow.Schema, time column or
/// None)`); a construct a stream cannot run raises `eddyline.SqlError`.
#[pyfunction]
pub fn plan_sql(
    py: Python<'_>,
    query: &str,
    views: Vec<(String, Bound<'_, PyAny>, Option<String>)>,
) -> PyResult<Py<PyAny>> {
    let views = views
        .into_iter()
        .map(|(name, schema, time_column)| {
            Ok(View {
                name,
                schema: schema_from_py(&schema)?,
                time_column,
            })
        })
        .collect::<PyResult<Vec<_>>>()?;
    let node = sql::plan(query, &views).map_err(|e| sql_error(py, &e))?;
    to_py(py, &node, &mut Vec::new())
}
