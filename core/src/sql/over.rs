//! `agg(col) OVER (PARTITION BY k ORDER BY ts <frame>)` lowered onto the
//! event-time over window (docs/API.md "Over windows",
//! `operator/over_rows.rs`; Flink's OVER aggregation): DataFusion's `Window`
//! node becomes a [`SqlNode::Over`], which the Python layer builds as
//! `key_by(keys).over_rows(...)` (a `ROWS` frame) or `.over_range(...)` (a
//! `RANGE` frame), the DSL's spellings.
//!
//! The frames that stream end at the current row: `ROWS BETWEEN n|UNBOUNDED
//! PRECEDING AND CURRENT ROW` and `RANGE BETWEEN INTERVAL 'x'|UNBOUNDED
//! PRECEDING AND CURRENT ROW` (the default frame of an `ORDER BY` without
//! one). The `ORDER BY` must start with the input's event time, ascending
//! (the rows are taken in event-time order as the watermark passes them);
//! further `ORDER BY` columns order rows of one event time in a `ROWS`
//! frame (a `RANGE` frame's peers are the rows of one time, so it is
//! ordered by the time alone). Every other shape is a [`SqlError`] naming
//! it: a `GROUPS` frame, `FOLLOWING`, no `PARTITION BY`, an `ORDER BY` that
//! is not the event time, ranking and analytic functions, `DISTINCT` or
//! `FILTER`, and an `OVER` over a running `GROUP BY`'s updates. Functions of
//! different `OVER (...)`s in one `SELECT` become over windows chained one
//! after another (docs/API.md "SQL", over windows).

use arrow::datatypes::{DataType, IntervalUnit};
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
                     CURRENT ROW, or ROWS|RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW, or \
                     RANGE BETWEEN INTERVAL 'x' PRECEDING AND CURRENT ROW) with sum, count, \
                     avg, min or max";

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
        // An OVER over another's rows (DataFusion stacks one Window node per
        // PARTITION BY and ORDER BY): chained. Exact, as each over window
        // emits a row before the watermark that passes its event time, so the
        // next never finds it late, and passes the rows' time on unchanged.
        let names = input.columns();
        let columns = Columns {
            schema: w.input.schema(),
            names: &names,
        };
        let time = self.timed(&input).and_then(|t| t.column);
        let mut node = input;
        // Consecutive functions of one frame share an operator; a function of
        // another frame starts the next one, chained on its output, so the
        // columns keep the node's order.
        let mut run: Option<(OverFrame, Vec<AggregateCall>)> = None;
        let mut out = names.clone();
        for e in &w.window_expr {
            let f = window_function(e)?;
            let this = frame(&f.params, &columns, time.as_deref())?;
            let call = aggregate(f, &columns, &out)?;
            out.push(call.name.clone());
            match &mut run {
                Some((spec, calls)) if *spec == this => calls.push(call),
                _ => {
                    if let Some((spec, calls)) = run.take() {
                        node = over_node(node, spec, calls);
                    }
                    run = Some((this, vec![call]));
                }
            }
        }
        let Some((spec, calls)) = run else {
            return Err(refused("OVER", "a window node without functions"));
        };
        Ok(over_node(node, spec, calls))
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

/// The over window of `frame` computing `aggregates` on the rows of `input`.
fn over_node(input: SqlNode, frame: OverFrame, aggregates: Vec<AggregateCall>) -> SqlNode {
    let mut columns = input.columns();
    columns.extend(aggregates.iter().map(|a| a.name.clone()));
    SqlNode::Over {
        input: Box::new(input),
        frame,
        aggregates,
        columns,
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
    let range = match wf.units {
        WindowFrameUnits::Rows => false,
        WindowFrameUnits::Range => true,
        WindowFrameUnits::Groups => {
            return Err(refused(
                "GROUPS",
                format!("a GROUPS frame is not supported; write {SHAPE}"),
            ))
        }
    };
    if !matches!(wf.end_bound, WindowFrameBound::CurrentRow) {
        return Err(refused(
            "FOLLOWING",
            format!(
                "a frame ending at {}: a stream cannot wait for later rows; end it at CURRENT ROW",
                wf.end_bound
            ),
        ));
    }
    if range && !order_by.is_empty() {
        // Peers of a RANGE frame are rows equal in every ORDER BY column;
        // the over window's are the rows of one event time.
        return Err(refused(
            "RANGE",
            format!(
                "a RANGE frame ordered by '{time}', {}: order a RANGE frame by the event time \
                 alone (or use a ROWS frame)",
                order_by.join(", ")
            ),
        ));
    }
    let preceding = match &wf.start_bound {
        WindowFrameBound::CurrentRow => Some(0),
        WindowFrameBound::Preceding(v) if v.is_null() => None,
        WindowFrameBound::Preceding(v) if range => Some(range_ms(v, columns, &time)?),
        WindowFrameBound::Preceding(v) => Some(rows(v)?),
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
        range,
    })
}

/// The `x` of `RANGE BETWEEN x PRECEDING`, in milliseconds of event time:
/// an `INTERVAL` of days and smaller units, or over an `Int64` event time
/// (milliseconds) a whole number of them.
fn range_ms(v: &DfScalar, columns: &Columns<'_>, time: &str) -> Result<u64, SqlError> {
    let int_ms = columns
        .schema
        .fields()
        .iter()
        .find(|f| f.name() == time)
        .is_some_and(|f| f.data_type().is_integer());
    let ms = match v {
        DfScalar::Int64(Some(n)) if int_ms => Some(*n),
        DfScalar::UInt64(Some(n)) if int_ms => i64::try_from(*n).ok(),
        // DataFusion keeps a bound as its text until it executes: a number
        // (`RANGE 1000 PRECEDING`) or an interval's (`'1' SECOND`).
        DfScalar::Utf8(Some(text)) => match text.trim().parse::<i64>() {
            Ok(n) => int_ms.then_some(n),
            Err(_) => v
                .cast_to(&DataType::Interval(IntervalUnit::MonthDayNano))
                .ok()
                .and_then(|i| interval_ms(&i)),
        },
        other => interval_ms(other),
    };
    match ms {
        Some(ms) if ms >= 0 => Ok(ms as u64),
        _ => Err(refused(
            "RANGE",
            format!(
                "RANGE BETWEEN {v} PRECEDING: give an INTERVAL of days, hours, minutes, seconds \
                 or milliseconds (over an int64 event time of milliseconds, or a whole number \
                 of them)"
            ),
        )),
    }
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

/// An interval of days and smaller units in whole milliseconds.
fn interval_ms(v: &DfScalar) -> Option<i64> {
    match v {
        DfScalar::IntervalMonthDayNano(Some(i))
            if i.months == 0 && i.nanoseconds % 1_000_000 == 0 =>
        {
            Some(i64::from(i.days) * 86_400_000 + i.nanoseconds / 1_000_000)
        }
        DfScalar::IntervalDayTime(Some(i)) => {
            Some(i64::from(i.days) * 86_400_000 + i64::from(i.milliseconds))
        }
        _ => None,
    }
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
        assert_eq!(frame.preceding, Some(9));
        assert!(!frame.range);
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
    fn test_over_frames_lower_to_their_start_and_units() {
        let cases = [
            ("ROWS UNBOUNDED PRECEDING", None, false),
            (
                "ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW",
                None,
                false,
            ),
            ("", None, true),
            ("RANGE UNBOUNDED PRECEDING", None, true),
            (
                "RANGE BETWEEN 1500 PRECEDING AND CURRENT ROW",
                Some(1500),
                true,
            ),
            ("RANGE CURRENT ROW", Some(0), true),
            ("RANGE 20 PRECEDING", Some(20), true),
            ("RANGE INTERVAL '2' SECOND PRECEDING", Some(2000), true),
            (
                "RANGE BETWEEN INTERVAL '1 minute 500 milliseconds' PRECEDING AND CURRENT ROW",
                Some(60_500),
                true,
            ),
        ];
        for (frame_sql, preceding, range) in cases {
            let node = plan(
                &format!("SELECT k, t, sum(v) OVER (PARTITION BY k ORDER BY t {frame_sql}) FROM r"),
                &views(),
            )
            .unwrap();
            let SqlNode::Project { input, .. } = node else {
                panic!("{frame_sql}: a projection: {node:?}");
            };
            let SqlNode::Over { frame, .. } = *input else {
                panic!("{frame_sql}: an over node: {input:?}");
            };
            assert_eq!(
                (frame.preceding, frame.range),
                (preceding, range),
                "{frame_sql}"
            );
        }
    }

    #[test]
    fn test_over_functions_of_other_frames_and_partitions_chain_over_windows() {
        let node = plan(
            "SELECT k, t, sum(v) OVER (PARTITION BY k ORDER BY t ROWS 1 PRECEDING) AS a, \
             sum(v) OVER (PARTITION BY k ORDER BY t ROWS UNBOUNDED PRECEDING) AS b, \
             count(*) OVER (PARTITION BY v ORDER BY t RANGE 5 PRECEDING) AS c FROM r",
            &views(),
        )
        .unwrap();
        assert_eq!(node.columns(), ["k", "t", "a", "b", "c"]);
        let mut frames = Vec::new();
        let mut at = &node;
        loop {
            match at {
                SqlNode::Project { input, .. } => at = input,
                SqlNode::Over { input, frame, .. } => {
                    frames.push((frame.keys.clone(), frame.preceding, frame.range));
                    at = input;
                }
                _ => break,
            }
        }
        frames.sort();
        let k = || vec!["k".to_string()];
        assert_eq!(
            frames,
            [
                (k(), None, false),
                (k(), Some(1), false),
                (vec!["v".to_string()], Some(5), true),
            ]
        );
    }

    #[test]
    fn test_over_shapes_a_stream_cannot_run_name_their_construct() {
        let cases = [
            (
                "sum(v) OVER (PARTITION BY k ORDER BY t GROUPS 1 PRECEDING)",
                "GROUPS",
            ),
            ("sum(v) OVER (PARTITION BY k ORDER BY t, v)", "RANGE"),
            (
                "sum(v) OVER (PARTITION BY k ORDER BY t RANGE BETWEEN 1 PRECEDING AND 1 \
                 FOLLOWING)",
                "FOLLOWING",
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
