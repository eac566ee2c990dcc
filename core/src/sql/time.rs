//! The event time of a lowered step (docs/API.md "SQL", event time after a
//! windowed `GROUP BY`), and a `GROUP BY` over a windowed aggregate's window
//! bounds lowered as a window again.
//!
//! A view's rows are timed by its `assign_timestamps` column. The rows of a
//! windowed `GROUP BY` (a windowing table function's `window_start`,
//! `window_end` and keys) are timed by their `window_end`: the window
//! operator emits a window's rows before it forwards the watermark that
//! fired it (docs/API.md "Chaining windows"), so a row timed at its window's
//! end (or later) is never late downstream, and no operator regenerates the
//! watermark. `window_start` could not be: a window's rows would be late
//! against the watermark that fires it. A projection keeps the event time
//! where it selects the column, under its name or renamed (the first
//! renaming where it is not kept as it is); `eddyline/sql.py` follows the
//! same rules on the streams, so the two agree on every step's event time,
//! and times a stream by it where a join or a window reads it (elsewhere a
//! window's results keep the DSL's event time, as in the query's DSL twin).
//!
//! Spark's spelling, `GROUP BY window(ts, ...)` / `session_window(ts, ...)`,
//! gives the same rows with the bounds in one struct column (`window`, of
//! `start` and `end`): its rows are timed by the struct's `end`, which no
//! column holds. The step keeps the struct columns that time it
//! ([`Timed::windows`]); a projection keeps them where it selects them, and
//! one selecting `window.end` as a column makes that column the event time
//! (before a struct kept as it is). Where a window or a join must read the
//! time from a column, [`Lowering::with_time_column`] adds `window.end` as
//! [`EVENT_TIME`]. Equal windows have equal ends, so `a.window = b.window`
//! bounds a join like `a.window.end = b.window.end` (sql/join.rs), and a
//! tumbling or sliding window's `start` is its `end` minus the size.
//!
//! A `GROUP BY` whose keys hold a windowed aggregate's event time (its
//! `window_end`, maybe renamed: Nexmark q5's `GROUP BY starttime, endtime`
//! over the counts per auction and window; or Spark's `window` struct, or
//! its `window.end`) groups rows that all come with the watermark that
//! fired their window: it is lowered as a window again,
//! a tumbling window of 1 ms on that column, so each group is aggregated
//! once, when complete, and emitted once, where a running aggregate would
//! emit an update per batch (Flink plans it as a window aggregate too, its
//! "window propagation"). In a window of 1 ms every row's time is the
//! window's end - 1 ms, so the key column keeps timing the result.
//!
//! Spark's `window_time(w)` (end - 1 ms) is an offset of -1 from the end; a
//! projection that keeps nothing else of the windows of a Spark grouping's
//! own results is timed by it (they come before the watermark reaches it; a
//! regrouped row comes after). A key a fixed offset from the event time (a
//! tumbling or sliding window's start) groups the rows like the event time:
//! such a `GROUP BY` is lowered as a window again, grouped by the event time
//! too; a session's start is no fixed offset from its end (an error).

use arrow::datatypes::DataType;
use datafusion_common::{Column, ScalarValue as DfScalar};
use datafusion_expr::Expr as DfExpr;

use super::lower::Lowering;
use super::rename::project;
use super::{spark_window_column, AggregateCall, SqlError, SqlNode, WindowKind, REGROUP};
use crate::expr::{Expr, ScalarValue};

const BOUNDS: [&str; 2] = ["window_start", "window_end"];

/// The column a Spark window's `end` is added as where a window or a join
/// reads the event time from a column (see the module docs).
pub(crate) const EVENT_TIME: &str = "__sql_event_time";

/// Spark's `window_time(w)`: a window's end - 1 ms, the library function
/// (expr/spark_window_time.rs).
pub(crate) const WINDOW_TIME: &str = "window_time";

/// A step's event time: its column, whether it is a windowed aggregate's
/// (its rows come with the watermark that fired their window), the columns
/// a fixed offset (ms) from it (a tumbling or sliding window's
/// `window_start` is its `window_end` minus the size, so a join may bound
/// the event time by it), and Spark's window columns whose `end` it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Timed {
    /// The event-time column, where the step has it as a column.
    pub column: Option<String>,
    pub windowed: bool,
    pub offsets: Vec<(String, i64)>,
    /// Spark's window columns (structs of `start` and `end`) whose `end` is
    /// the event time, each with its windows' size where `start` is `end`
    /// minus it (tumbling and sliding; None for sessions).
    pub windows: Vec<(String, Option<i64>)>,
    /// Whether the rows are a Spark window grouping's own results (not
    /// grouped again): each comes before the watermark reaches its window's
    /// end - 1 ms, so `window_time(w)` (end - 1 ms) can time them (see
    /// [`projected`]); a regrouped row comes only after it.
    pub window_rows: bool,
    /// Columns holding a session window's `start` (of `windows`), no fixed
    /// offset from its end: a `GROUP BY` of them cannot close on the watermark.
    pub session_starts: Vec<String>,
}

impl Timed {
    /// The window size of `column` where it is one of Spark's window
    /// columns timing the step (`Some(None)` for a session window).
    pub(crate) fn window(&self, column: &str) -> Option<Option<i64>> {
        self.windows
            .iter()
            .find(|(w, _)| w == column)
            .map(|(_, size)| *size)
    }
}

/// `column.field` as an expression (None only if the library lacked
/// `get_field`, with which sql/provider.rs plans `window.end`).
fn field_of(column: &str, field: &str) -> Option<Expr> {
    Expr::call(
        "get_field",
        vec![
            Expr::col(column.to_string()),
            Expr::lit(ScalarValue::Utf8(field.to_string())),
        ],
    )
    .ok()
}

/// The struct column and field `e` reads where it is `column.field` (a
/// DataFusion plan's `get_field(column, 'field')`).
pub(crate) fn df_field_of(e: &DfExpr) -> Option<(&Column, &str)> {
    let DfExpr::ScalarFunction(f) = e else {
        return None;
    };
    if f.func.name() != "get_field" {
        return None;
    }
    match f.args.as_slice() {
        [DfExpr::Column(c), DfExpr::Literal(DfScalar::Utf8(Some(field)), _)] => {
            Some((c, field.as_str()))
        }
        _ => None,
    }
}

/// Whether `data_type` is a Spark window struct of int64 milliseconds.
pub(crate) fn int_ms_window(data_type: &DataType) -> bool {
    match data_type {
        DataType::Struct(fields) => fields
            .iter()
            .any(|f| f.name() == "end" && f.data_type() == &DataType::Int64),
        _ => false,
    }
}

impl Lowering<'_> {
    /// The column by which a `GROUP BY keys` of `input` is a window again
    /// (see the module docs): `input`'s event time where it is a windowed
    /// aggregate's and among the keys, or a Spark window column timing it;
    /// where a key is a fixed offset from the event time (a tumbling or
    /// sliding window's start), the event time, or the Spark window column
    /// whose end it is (each start has one end: the groups are the same). A
    /// session's start as a key without its end is an error: it is no fixed
    /// offset from the end, which is the time the group could close at.
    pub(crate) fn regroup_time(
        &self,
        input: &SqlNode,
        keys: &[String],
    ) -> Result<Option<String>, SqlError> {
        let Some(t) = self.timed(input).filter(|t| t.windowed) else {
            return Ok(None);
        };
        let keyed = |c: &String| keys.contains(c);
        let found = t.column.clone().filter(keyed).or_else(|| {
            t.windows
                .iter()
                .map(|(w, _)| w.clone())
                .find(|w| keys.contains(w))
        });
        if found.is_some() {
            return Ok(found);
        }
        if t.offsets.iter().any(|(c, _)| keyed(c)) {
            let time = t
                .column
                .clone()
                .or_else(|| t.windows.first().map(|(w, _)| w.clone()));
            return Ok(time);
        }
        if let Some(start) = t.session_starts.iter().find(|c| keyed(c)) {
            return Err(SqlError::new(
                "GROUP BY",
                format!(
                    "GROUP BY {start} (a session window's start) over the results of \
                     session_window(...): a session's start is no fixed offset from its end, so \
                     the group cannot close when the watermark passes the end; group by the \
                     session's end too (GROUP BY session_window.start, session_window.end)"
                ),
            ));
        }
        Ok(None)
    }

    /// `GROUP BY keys` of `input` by its windowed event time `time` (see
    /// [`regroup`]); where `time` is a Spark window column, by its `end`,
    /// added as a column.
    pub(crate) fn regroup(
        &self,
        input: SqlNode,
        time: &str,
        keys: &[String],
        aggregates: Vec<AggregateCall>,
        out: &[String],
    ) -> Result<SqlNode, SqlError> {
        let timed = self.timed(&input);
        if let Some(session) = timed
            .as_ref()
            .and_then(|t| keys.iter().find(|k| t.window(k.as_str()) == Some(None)))
        {
            // Spark groups by a session window column by merging the sessions
            // that overlap (so one group may hold sessions of several ends),
            // which no window here computes.
            return Err(SqlError::new(
                "GROUP BY",
                format!(
                    "GROUP BY {session} over the results of session_window(...): Spark merges \
                     the overlapping sessions of such a grouping, which is not supported; \
                     group by {session}.end (and {session}.start) instead"
                ),
            ));
        }
        let spark = timed.is_some_and(|t| t.window(time).is_some());
        if !spark {
            // Grouped by a column a fixed offset from `time` (a window's
            // start), by `time` too: the same groups.
            let mut keys = keys.to_vec();
            if !keys.iter().any(|k| k == time) {
                keys.push(time.to_string());
            }
            return regroup(input, time, &keys, aggregates, out);
        }
        let input = add_event_time(input, time)?;
        let mut keys = keys.to_vec();
        keys.push(EVENT_TIME.to_string());
        regroup(input, EVENT_TIME, &keys, aggregates, out)
    }

    /// `node` with its event time as a column: where only Spark's window
    /// columns time it, their `end` added as [`EVENT_TIME`] (see the module
    /// docs), and `timed` of the result.
    pub(crate) fn with_time_column(
        &self,
        node: SqlNode,
        timed: Option<Timed>,
    ) -> Result<(SqlNode, Option<Timed>), SqlError> {
        match timed {
            Some(t) if t.column.is_none() => {
                let Some((window, _)) = t.windows.first() else {
                    return Ok((node, Some(t)));
                };
                let node = add_event_time(node, window)?;
                let column = Some(EVENT_TIME.to_string());
                Ok((node, Some(Timed { column, ..t })))
            }
            other => Ok((node, other)),
        }
    }

    /// Refuses `construct` over a running `GROUP BY`'s updates (see [`running`]).
    pub(crate) fn refuse_running(&self, node: &SqlNode, construct: &str) -> Result<(), SqlError> {
        if running(node) {
            return Err(over_running(construct));
        }
        Ok(())
    }

    /// The event time of `node`'s stream, where the lowering can tell.
    pub(crate) fn timed(&self, node: &SqlNode) -> Option<Timed> {
        match node {
            SqlNode::Scan { view, .. } => Some(Timed {
                column: Some(
                    self.views
                        .iter()
                        .find(|v| v.name == *view)?
                        .time_column
                        .clone()?,
                ),
                windowed: false,
                offsets: Vec::new(),
                windows: Vec::new(),
                window_rows: false,
                session_starts: Vec::new(),
            }),
            SqlNode::Filter { input, .. } | SqlNode::Window { input, .. } => self.timed(input),
            // An over window emits each row timed by its own event time.
            SqlNode::Over { input, .. } => self.timed(input),
            SqlNode::Project { input, exprs } => projected(self.timed(input)?, exprs),
            SqlNode::Aggregate {
                input,
                keys,
                window: None,
                ..
            } => self.aggregate_time(input, keys),
            SqlNode::Aggregate {
                window: Some((_, kind)),
                columns,
                ..
            } => {
                // Spark's window grouping: its rows timed by `window.end`.
                let column = spark_window_column(kind);
                let size = match kind {
                    WindowKind::Tumble { size_ms } | WindowKind::Hop { size_ms, .. } => {
                        Some(*size_ms)
                    }
                    WindowKind::Session { .. } => None,
                };
                columns.iter().any(|c| c == column).then(|| Timed {
                    column: None,
                    windowed: true,
                    offsets: Vec::new(),
                    windows: vec![(column.to_string(), size)],
                    window_rows: true,
                    session_starts: Vec::new(),
                })
            }
            _ => None,
        }
    }

    /// The event time of a windowing table function's `GROUP BY` (see the
    /// module docs): the time column where it is a key of 1 ms windows (with
    /// what times the rows below them and is a key too), else `window_end`.
    fn aggregate_time(&self, input: &SqlNode, keys: &[String]) -> Option<Timed> {
        if let SqlNode::Window {
            input: below,
            time_column,
            kind,
            ..
        } = input
        {
            if *kind == REGROUP && keys.contains(time_column) {
                let t = self.timed(below);
                let keyed = |c: &String| keys.contains(c);
                return Some(Timed {
                    column: Some(time_column.clone()),
                    windowed: true,
                    offsets: t
                        .as_ref()
                        .map(|t| {
                            t.offsets
                                .iter()
                                .filter(|(c, _)| keyed(c))
                                .cloned()
                                .collect()
                        })
                        .unwrap_or_default(),
                    windows: t
                        .map(|t| t.windows.into_iter().filter(|(c, _)| keyed(c)).collect())
                        .unwrap_or_default(),
                    window_rows: false,
                    session_starts: Vec::new(),
                });
            }
        }
        if !(input.passes_window_rows() && keys.iter().any(|k| k == "window_end")) {
            return None;
        }
        let offsets = match window_kind(input) {
            Some(WindowKind::Tumble { size_ms } | WindowKind::Hop { size_ms, .. })
                if keys.iter().any(|k| k == "window_start") =>
            {
                vec![("window_start".to_string(), -*size_ms)]
            }
            _ => Vec::new(),
        };
        Some(Timed {
            column: Some("window_end".into()),
            windowed: true,
            offsets,
            windows: Vec::new(),
            window_rows: false,
            session_starts: Vec::new(),
        })
    }
}

/// The event time `t` of a projection's input after the projection `exprs`
/// (see the module docs), None where it selects nothing that times it.
fn projected(t: Timed, exprs: &[(String, Expr)]) -> Option<Timed> {
    let named = |e: &Expr| exprs.iter().find(|(_, x)| x == e).map(|(n, _)| n.clone());
    let column = match &t.column {
        Some(c) => {
            let own = Expr::col(c.clone());
            exprs
                .iter()
                .find(|(n, e)| n == c && *e == own)
                .map(|(n, _)| n.clone())
                .or_else(|| named(&own))
        }
        None => None,
    }
    .or_else(|| {
        t.windows
            .iter()
            .find_map(|(w, _)| field_of(w, "end").and_then(|f| named(&f)))
    });
    let mut offsets = Vec::new();
    let mut windows = Vec::new();
    let mut session_starts = Vec::new();
    for (n, e) in exprs {
        if let Some((_, off)) = t.offsets.iter().find(|(c, _)| *e == Expr::col(c.clone())) {
            offsets.push((n.clone(), *off));
        }
        if t.session_starts.iter().any(|c| *e == Expr::col(c.clone())) {
            session_starts.push(n.clone());
        }
        for (w, size) in &t.windows {
            if *e == Expr::col(w.clone()) {
                windows.push((n.clone(), *size));
            }
            if field_of(w, "start").is_some_and(|f| *e == f) {
                match size {
                    Some(size) => offsets.push((n.clone(), -size)),
                    None => session_starts.push(n.clone()),
                }
            }
            if window_time_of(w).is_some_and(|f| *e == f) {
                offsets.push((n.clone(), -1));
            }
        }
    }
    let mut column = column;
    if column.is_none() && windows.is_empty() && t.window_rows && !t.windows.is_empty() {
        // Only `window_time(w)` (end - 1 ms) is left of the windows' ends: it
        // times the rows, which come before the watermark reaches it; the
        // offsets are from it from now on.
        if let Some(at) = offsets.iter().position(|(_, off)| *off == -1) {
            let (time, _) = offsets.remove(at);
            column = Some(time);
            for (_, off) in &mut offsets {
                *off += 1;
            }
        }
    }
    if column.is_none() && windows.is_empty() {
        return None;
    }
    Some(Timed {
        column,
        windowed: t.windowed,
        offsets,
        windows,
        window_rows: t.window_rows,
        session_starts,
    })
}

/// `window_time(column)` as an expression (None only if the library lacked it).
fn window_time_of(column: &str) -> Option<Expr> {
    Expr::call(WINDOW_TIME, vec![Expr::col(column.to_string())]).ok()
}

/// `input` with `window.end` of its Spark window column `window` added as
/// [`EVENT_TIME`].
fn add_event_time(input: SqlNode, window: &str) -> Result<SqlNode, SqlError> {
    let mut exprs: Vec<(String, Expr)> = input
        .columns()
        .into_iter()
        .map(|c| (c.clone(), Expr::col(c)))
        .collect();
    if exprs.iter().any(|(c, _)| c == EVENT_TIME) {
        return Err(SqlError::new(
            "window",
            format!(
                "the results of GROUP BY {window}(...) have a column named {EVENT_TIME}; \
                 rename it"
            ),
        ));
    }
    let end = field_of(window, "end")
        .ok_or_else(|| SqlError::new("window", "no get_field function to read window.end"))?;
    exprs.push((EVENT_TIME.to_string(), end));
    Ok(project(input, exprs))
}

/// The windows of the windowing table function whose rows `node` passes on.
fn window_kind(node: &SqlNode) -> Option<&WindowKind> {
    match node {
        SqlNode::Window { kind, .. } => Some(kind),
        SqlNode::Filter { input, .. } | SqlNode::Project { input, .. } => window_kind(input),
        _ => None,
    }
}

/// `GROUP BY keys` with `aggregates` over `input`, whose event time `time`
/// (a windowed aggregate's) is among the keys: a window of 1 ms on it (see
/// the module docs), the query's columns `out` (keys, then aggregates) named
/// back by a projection. Keys named `window_start`/`window_end` are renamed
/// below the window, which adds its own.
fn regroup(
    input: SqlNode,
    time: &str,
    keys: &[String],
    aggregates: Vec<AggregateCall>,
    out: &[String],
) -> Result<SqlNode, SqlError> {
    let hidden = |c: &str| {
        if BOUNDS.contains(&c) {
            format!("__sql_{c}")
        } else {
            c.to_string()
        }
    };
    for call in &aggregates {
        if let Some(c) = call
            .args
            .iter()
            .flat_map(Expr::columns)
            .find(|c| BOUNDS.contains(c))
        {
            return Err(SqlError::new(
                "GROUP BY",
                format!(
                    "{}: an aggregate of a window's results grouped by its window cannot read \
                     {c}; group by it",
                    call.name
                ),
            ));
        }
    }
    let columns = input.columns();
    if let Some(taken) = columns
        .iter()
        .find(|c| BOUNDS.iter().any(|b| hidden(b) == **c))
    {
        return Err(SqlError::new(
            "GROUP BY",
            format!("the input has a column named {taken}; rename it"),
        ));
    }
    let input = if columns.iter().any(|c| BOUNDS.contains(&c.as_str())) {
        project(
            input,
            columns
                .iter()
                .map(|c| (hidden(c), Expr::col(c.clone())))
                .collect(),
        )
    } else {
        input
    };
    let mut window_columns = input.columns();
    window_columns.extend(BOUNDS.map(String::from));
    let window = SqlNode::Window {
        input: Box::new(input),
        time_column: hidden(time),
        kind: REGROUP,
        columns: window_columns,
    };
    let mut group_keys: Vec<String> = keys.iter().map(|k| hidden(k)).collect();
    group_keys.extend(BOUNDS.map(String::from));
    let mut columns = group_keys.clone();
    columns.extend(aggregates.iter().map(|a| a.name.clone()));
    let exprs = out
        .iter()
        .map(|o| {
            let source = if keys.contains(o) {
                hidden(o)
            } else {
                o.clone()
            };
            (o.clone(), Expr::col(source))
        })
        .collect();
    let grouped = SqlNode::Aggregate {
        input: Box::new(window),
        keys: group_keys,
        aggregates,
        window: None,
        columns,
    };
    Ok(SqlNode::Project {
        input: Box::new(grouped),
        exprs,
    })
}

/// Whether `node`'s rows are a running `GROUP BY`'s updates (an upsert
/// stream: each input batch re-emits its keys' current values), where
/// another aggregate or a join would take every update for a row.
fn running(node: &SqlNode) -> bool {
    match node {
        SqlNode::Aggregate {
            input,
            window: None,
            ..
        } => !input.passes_window_rows(),
        SqlNode::Filter { input, .. } | SqlNode::Project { input, .. } => running(input),
        SqlNode::Union { inputs } => inputs.iter().any(running),
        _ => false,
    }
}

/// The error of `construct` reading a running `GROUP BY`'s updates.
fn over_running(construct: &str) -> SqlError {
    SqlError::new(
        construct,
        format!(
            "{construct} over a running GROUP BY (one without a window) is not supported: its \
             rows are updates of each key's current value, and {construct} would take every \
             update as a row of its own; group by a window (TUMBLE, HOP, SESSION) instead"
        ),
    )
}
