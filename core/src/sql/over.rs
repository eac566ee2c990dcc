//! `agg(col) OVER (PARTITION BY k ORDER BY ts ROWS BETWEEN n PRECEDING AND
//! CURRENT ROW)` lowered onto the event-time over window (docs/API.md
//! "Over windows", `operator/over_rows.rs`; Flink's OVER aggregation):
//! DataFusion's `Window` node becomes a [`SqlNode::Over`], which the Python
//! layer builds as `key_by(keys).over_rows(...)`, the DSL's spelling.
//!
//! Only that shape streams: the `ORDER BY` must start with the input's
//! event time, ascending (the rows are taken in event-time order as the
//! watermark passes them); further `ORDER BY` columns order rows of one
//! event time. Every other shape is a [`SqlError`] naming it: a `RANGE` or
//! `GROUPS` frame (the default frame of an `ORDER BY` without one is
//! `RANGE`), `UNBOUNDED PRECEDING`, `FOLLOWING`, no `PARTITION BY`, an
//! `ORDER BY` that is not the event time, ranking and analytic functions,
//! `DISTINCT` or `FILTER`, and an `OVER` over a running `GROUP BY`'s updates.

use datafusion_common::ScalarValue as DfScalar;
use datafusion_expr::expr::{WindowFunction, WindowFunctionParams};
use datafusion_expr::logical_plan::Window;
use datafusion_expr::{Expr as DfExpr, WindowFrameBound, WindowFrameUnits};

use super::convert::Columns;
use super::lower::Lowering;
use super::{AggregateCall, OverFrame, SqlError, SqlNode};
use crate::expr::Expr;

/// The largest `n PRECEDING` (`operator/over_rows.rs`'s `MAX_PRECEDING`).
const MAX_PRECEDING: u64 = 10_000;

fn refused(construct: &str, why: impl Into<String>) -> SqlError {
    SqlError::new(construct, why)
}

/// What a supported `OVER (...)` must look like, for the errors.
const SHAPE: &str = "OVER (PARTITION BY k ORDER BY <event time> ROWS BETWEEN n PRECEDING AND \
                     CURRENT ROW) with sum, count, avg, min or max";

impl Lowering<'_> {
    /// A `Window` node: its input with the aggregates of each row's frame.
    pub(crate) fn over(&self, w: &Window) -> Result<SqlNode, SqlError> {
        let input = self.lower(&w.input)?;
        self.refuse_running(&input, "OVER")?;
        if matches!(input, SqlNode::Window { .. }) {
            return Err(refused(
                "OVER",
                "OVER over the rows of a windowing table function: group them by \
                 window_start, window_end first",
            ));
        }
        if matches!(input, SqlNode::Over { .. }) {
            return Err(refused(
                "OVER",
                "the window functions of one SELECT must share one OVER (...); compute the \
                 others in a subquery",
            ));
        }
        let names = input.columns();
        let columns = Columns {
            schema: w.input.schema(),
            names: &names,
        };
        let time = self.timed(&input).and_then(|t| t.column);
        let mut spec: Option<(OverFrame, &WindowFunctionParams)> = None;
        let mut aggregates: Vec<AggregateCall> = Vec::with_capacity(w.window_expr.len());
        let mut out = names.clone();
        for e in &w.window_expr {
            let f = window_function(e)?;
            let this = frame(&f.params, &columns, time.as_deref())?;
            match &spec {
                Some((first, params)) => {
                    if first.keys != this.keys
                        || first.order_by != this.order_by
                        || first.preceding != this.preceding
                        || params.partition_by != f.params.partition_by
                    {
                        return Err(refused(
                            "OVER",
                            "the window functions of one SELECT must share one OVER (...); \
                             compute the others in a subquery",
                        ));
                    }
                }
                None => spec = Some((this, &f.params)),
            }
            let call = aggregate(f, &columns, &out)?;
            out.push(call.name.clone());
            aggregates.push(call);
        }
        let Some((spec, _)) = spec else {
            return Err(refused("OVER", "a window node without functions"));
        };
        Ok(SqlNode::Over {
            input: Box::new(input),
            frame: spec,
            aggregates,
            columns: out,
        })
    }

    /// A projection's aliases of an over window's aggregates folded into it
    /// (`avg(x) OVER (...) AS m` names the aggregate `m`), as the DSL twin
    /// writes `.over_rows(F.avg("x").alias("m"), ...)`: where the aggregate is
    /// read once, as a plain column, and no other column has the alias.
    pub(crate) fn fold_over_aliases(
        &self,
        input: SqlNode,
        mut exprs: Vec<(String, Expr)>,
    ) -> (SqlNode, Vec<(String, Expr)>) {
        let SqlNode::Over {
            input: below,
            frame,
            mut aggregates,
            mut columns,
        } = input
        else {
            return (input, exprs);
        };
        super::lower::name_by_aliases(&mut aggregates, &mut columns, &mut exprs);
        let node = SqlNode::Over {
            input: below,
            frame,
            aggregates,
            columns,
        };
        (node, exprs)
    }
}

/// The window function of `e` (maybe aliased).
fn window_function(e: &DfExpr) -> Result<&WindowFunction, SqlError> {
    match e {
        DfExpr::Alias(a) => window_function(&a.expr),
        DfExpr::WindowFunction(f) => Ok(f),
        other => Err(refused(
            "OVER",
            format!("unexpected window expression {other}"),
        )),
    }
}

/// SQL's ranking and analytic window functions, which an over window does
/// not compute (DataFusion does not know them here: a call is its error
/// "Invalid function").
const RANKING: [&str; 11] = [
    "row_number",
    "rank",
    "dense_rank",
    "percent_rank",
    "cume_dist",
    "ntile",
    "lag",
    "lead",
    "first_value",
    "last_value",
    "nth_value",
];

/// The [`SqlError`] of a ranking or analytic window function, where
/// DataFusion's planning error `message` is that it does not know one.
pub(crate) fn window_function_error(message: &str) -> Option<SqlError> {
    let name = message
        .strip_prefix("Invalid function '")?
        .split('\'')
        .next()?
        .to_ascii_lowercase();
    RANKING.contains(&name.as_str()).then(|| {
        refused(
            "OVER",
            format!(
                "{name}() OVER (...): ranking and analytic window functions are not \
                 supported; only {SHAPE}"
            ),
        )
    })
}

/// The keys, event time, tie-breaking columns and preceding rows of one
/// function's `OVER (...)`, checked to be the supported shape.
fn frame(
    params: &WindowFunctionParams,
    columns: &Columns<'_>,
    time: Option<&str>,
) -> Result<OverFrame, SqlError> {
    if params.partition_by.is_empty() {
        return Err(refused(
            "OVER",
            format!(
                "an OVER without PARTITION BY orders every row of the stream in one place; \
                 partition it: {SHAPE}"
            ),
        ));
    }
    let mut keys = Vec::with_capacity(params.partition_by.len());
    for p in &params.partition_by {
        let DfExpr::Column(c) = p else {
            return Err(refused(
                "PARTITION BY",
                format!("PARTITION BY {p}: partition by columns (compute others in a subquery)"),
            ));
        };
        keys.push(columns.name_of(c)?);
    }
    let (time, order_by) = order_columns(params, columns, time)?;
    let wf = &params.window_frame;
    if wf.units != WindowFrameUnits::Rows {
        return Err(refused(
            wf.units.to_string().as_str(),
            format!(
                "a {} frame is not supported (it is the default of an OVER with ORDER BY); \
                 write {SHAPE}",
                wf.units
            ),
        ));
    }
    if !matches!(wf.end_bound, WindowFrameBound::CurrentRow) {
        return Err(refused(
            "FOLLOWING",
            format!(
                "a frame ending at {}: a stream cannot wait for later rows; end it at CURRENT ROW",
                wf.end_bound
            ),
        ));
    }
    let preceding = match &wf.start_bound {
        WindowFrameBound::CurrentRow => 0,
        WindowFrameBound::Preceding(v) if v.is_null() => {
            return Err(refused(
                "UNBOUNDED PRECEDING",
                format!("a frame of every preceding row is not supported; bound it: {SHAPE}"),
            ))
        }
        WindowFrameBound::Preceding(v) => rows(v)?,
        WindowFrameBound::Following(_) => {
            return Err(refused(
                "FOLLOWING",
                "a frame starting after the current row is not supported",
            ))
        }
    };
    Ok(OverFrame {
        keys,
        time_column: time,
        order_by,
        preceding,
    })
}

/// The event time an `OVER`'s `ORDER BY` starts with (checked to be the
/// input's, `time`, ascending) and the columns after it.
fn order_columns(
    params: &WindowFunctionParams,
    columns: &Columns<'_>,
    time: Option<&str>,
) -> Result<(String, Vec<String>), SqlError> {
    let mut order = Vec::with_capacity(params.order_by.len());
    for s in &params.order_by {
        let DfExpr::Column(c) = &s.expr else {
            return Err(refused(
                "ORDER BY",
                format!("OVER (... ORDER BY {}): order by columns", s.expr),
            ));
        };
        if !s.asc {
            return Err(refused(
                "ORDER BY",
                format!(
                    "OVER (... ORDER BY {} DESC): a stream takes rows in ascending event time",
                    s.expr
                ),
            ));
        }
        order.push(columns.name_of(c)?);
    }
    let Some(time) = time else {
        return Err(refused(
            "OVER",
            format!("the input of an OVER has no event time its rows could be ordered by: {SHAPE}"),
        ));
    };
    match order.first() {
        Some(first) if first == time => {}
        Some(first) => {
            return Err(refused(
                "ORDER BY",
                format!(
                    "OVER (... ORDER BY {first}): a stream orders the rows of an OVER by its \
                     event time '{time}' first (more columns may follow it)"
                ),
            ))
        }
        None => {
            return Err(refused(
                "ORDER BY",
                format!("an OVER without ORDER BY: order by the event time '{time}': {SHAPE}"),
            ))
        }
    }
    Ok((time.to_string(), order.into_iter().skip(1).collect()))
}

/// The `n` of `n PRECEDING`.
fn rows(v: &DfScalar) -> Result<u64, SqlError> {
    let n = match v {
        DfScalar::UInt64(Some(n)) => *n,
        DfScalar::Int64(Some(n)) if *n >= 0 => *n as u64,
        other => {
            return Err(refused(
                "PRECEDING",
                format!("{other} PRECEDING: give a whole number of rows"),
            ))
        }
    };
    if n > MAX_PRECEDING {
        return Err(refused(
            "PRECEDING",
            format!("{n} PRECEDING: at most {MAX_PRECEDING} rows are supported"),
        ));
    }
    Ok(n)
}

/// One window function as an aggregate of the over window, named
/// `function(column)` (`count(1)` for `count(*)`) where `taken` has no such
/// column (a projection's alias above renames it: `fold_over_aliases`).
// DataFusion 55 still plans `count(*)` in a window with its deprecated `Wildcard`.
#[allow(deprecated)]
fn aggregate(
    f: &WindowFunction,
    columns: &Columns<'_>,
    taken: &[String],
) -> Result<AggregateCall, SqlError> {
    let function = f.fun.name().to_ascii_lowercase();
    if !matches!(function.as_str(), "sum" | "count" | "avg" | "min" | "max") {
        return Err(refused(
            "OVER",
            format!("{function}() OVER (...) is not supported: {SHAPE}"),
        ));
    }
    if f.params.distinct || f.params.filter.is_some() {
        return Err(refused(
            "OVER",
            format!("{function}(DISTINCT ...) or FILTER in an OVER is not supported: {SHAPE}"),
        ));
    }
    let column = match f.params.args.as_slice() {
        [DfExpr::Column(c)] => Some(columns.name_of(c)?),
        [DfExpr::Literal(v, _)] if function == "count" && !v.is_null() => None,
        [DfExpr::Wildcard { .. }] if function == "count" => None,
        [] if function == "count" => None,
        args => {
            let shown: Vec<String> = args.iter().map(ToString::to_string).collect();
            return Err(refused(
                "OVER",
                format!(
                    "{function}({}) OVER (...): aggregate a column (compute expressions in a \
                     subquery)",
                    shown.join(", ")
                ),
            ));
        }
    };
    let mut name = format!("{function}({})", column.as_deref().unwrap_or("1"));
    while taken.contains(&name) {
        name.push('_');
    }
    let args = vec![match &column {
        Some(c) => Expr::col(c.clone()),
        None => Expr::lit(crate::expr::ScalarValue::Int64(1)),
    }];
    Ok(AggregateCall {
        function,
        args,
        column,
        name,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::Arc;

    use arrow::datatypes::{DataType, Field, Schema};

    use super::super::{plan, SqlNode, View};

    fn views() -> Vec<View> {
        let schema = Schema::new(vec![
            Field::new("k", DataType::Utf8, true),
            Field::new("t", DataType::Int64, false),
            Field::new("v", DataType::Int64, true),
        ]);
        vec![View {
            name: "r".into(),
            schema: Arc::new(schema),
            time_column: Some("t".into()),
        }]
    }

    #[test]
    fn test_over_lowers_to_an_over_node_named_by_its_alias() {
        let node = plan(
            "SELECT k, t, avg(v) OVER (PARTITION BY k ORDER BY t, v ROWS BETWEEN 9 PRECEDING \
             AND CURRENT ROW) AS m, count(*) OVER (PARTITION BY k ORDER BY t, v ROWS \
             BETWEEN 9 PRECEDING AND CURRENT ROW) FROM r",
            &views(),
        )
        .unwrap();
        let SqlNode::Project { input, .. } = node else {
            panic!("a projection dropping v: {node:?}");
        };
        let SqlNode::Over {
            frame,
            aggregates,
            columns,
            ..
        } = *input
        else {
            panic!("an over node: {input:?}");
        };
        assert_eq!(frame.keys, ["k"]);
        assert_eq!(frame.time_column, "t");
        assert_eq!(frame.order_by, ["v"]);
        assert_eq!(frame.preceding, 9);
        assert_eq!(columns, ["k", "t", "v", "m", "count(1)"]);
        assert_eq!(aggregates[0].function, "avg");
        assert_eq!(aggregates[1].column, None);
    }

    #[test]
    fn test_a_subquery_selecting_more_columns_than_it_reads_plans() {
        // A bare column after a computed one, over fewer input columns: the
        // over window's usual input (`SELECT v % 7 AS k, v FROM r`).
        let node = plan(
            "SELECT k, v, sum(v) OVER (PARTITION BY k ORDER BY t ROWS 1 PRECEDING) AS s \
             FROM (SELECT v % 7 AS k, v, t FROM (SELECT t, v FROM r))",
            &views(),
        )
        .unwrap();
        assert_eq!(node.columns(), ["k", "v", "s"]);
    }

    #[test]
    fn test_over_shapes_a_stream_cannot_run_name_their_construct() {
        let cases = [
            ("sum(v) OVER (PARTITION BY k ORDER BY t)", "RANGE"),
            (
                "sum(v) OVER (PARTITION BY k ORDER BY t ROWS UNBOUNDED PRECEDING)",
                "UNBOUNDED PRECEDING",
            ),
            ("sum(v) OVER (ORDER BY t ROWS 1 PRECEDING)", "OVER"),
            (
                "sum(v) OVER (PARTITION BY k ORDER BY v ROWS 1 PRECEDING)",
                "ORDER BY",
            ),
            ("rank() OVER (PARTITION BY k ORDER BY t)", "OVER"),
        ];
        for (select, construct) in cases {
            let err = plan(&format!("SELECT k, {select} FROM r"), &views()).unwrap_err();
            assert_eq!(err.construct, construct, "{select}: {err}");
        }
    }
}
