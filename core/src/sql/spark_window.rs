//! Spark's window grouping, `GROUP BY window(ts, '10 seconds'[, '5
//! seconds'])` and `GROUP BY session_window(ts, '10 seconds')`, with the
//! window read as a struct column `window` (`session_window`) of fields
//! `start` and `end` (docs/DESIGN.md "SQL").
//!
//! Before planning, each such `SELECT` is rewritten so that its one table
//! (and its `WHERE`) becomes a subquery adding the window column, computed
//! by the planning-only function `__spark_window(ts, kind, size, slide)`,
//! and its `GROUP BY` names that column; `window.start` is then a field of
//! it. DataFusion types all of it; the lowering of the `GROUP BY` reads the
//! call back as the window to group by (`SqlNode::Aggregate::window`) and
//! never evaluates it.
//!
//! `GROUP BY window(window_time(w), ...)` (Spark's chaining of windows on
//! window results) reads `window_time(w)`, computed below as
//! `__sql_window_time` in place of `w`, so the grouping's new `window` column
//! does not clash with `w` and the rows are timed by it (sql/time.rs).

use std::sync::Arc;

use arrow::datatypes::{DataType, Field, FieldRef, Fields};
use datafusion_common::{not_impl_err, Result as DfResult, ScalarValue as DfScalar};
use datafusion_expr::logical_plan::{LogicalPlan, Projection};
use datafusion_expr::{
    ColumnarValue, Expr as DfExpr, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    Volatility,
};
use datafusion_sql::sqlparser::ast::{
    Expr as SqlExpr, FunctionArg, FunctionArgExpr, FunctionArguments, GroupByExpr, Ident, Query,
    Select, SetExpr, Statement, TableFactor, TableWithJoins,
};
use datafusion_sql::sqlparser::dialect::GenericDialect;
use datafusion_sql::sqlparser::parser::Parser;

use super::tvf::sql_interval_ms;
use super::{SqlError, WindowKind};

/// The planning-only function computing a Spark window column.
pub(crate) const FUNCTION: &str = "__spark_window";

/// The column a Spark window grouping is read as: `window` for `window()`,
/// `session_window` for `session_window()`.
pub fn column_name(kind: &WindowKind) -> &'static str {
    match kind {
        WindowKind::Session { .. } => "session_window",
        _ => "window",
    }
}

fn wrong(message: impl Into<String>) -> SqlError {
    SqlError::new("window", message)
}

/// Rewrites every `SELECT ... GROUP BY window(...)` of `statement`.
pub(crate) fn rewrite(statement: &mut Statement) -> Result<(), SqlError> {
    match statement {
        Statement::Query(query) => query_(query),
        _ => Ok(()),
    }
}

fn query_(query: &mut Query) -> Result<(), SqlError> {
    if let Some(with) = &mut query.with {
        for cte in &mut with.cte_tables {
            query_(&mut cte.query)?;
        }
    }
    set_expr(&mut query.body)
}

fn set_expr(body: &mut SetExpr) -> Result<(), SqlError> {
    match body {
        SetExpr::Select(select) => {
            for table in &mut select.from {
                relation(&mut table.relation)?;
                for join in &mut table.joins {
                    relation(&mut join.relation)?;
                }
            }
            select_(select)
        }
        SetExpr::Query(query) => query_(query),
        SetExpr::SetOperation { left, right, .. } => {
            set_expr(left)?;
            set_expr(right)
        }
        _ => Ok(()),
    }
}

fn relation(factor: &mut TableFactor) -> Result<(), SqlError> {
    match factor {
        TableFactor::Derived { subquery, .. } => query_(subquery),
        _ => Ok(()),
    }
}

/// The column a rewritten `GROUP BY window(window_time(w), ...)` computes
/// `window_time(w)` as, below the grouping (see [`derived`]).
const WINDOW_TIME_COLUMN: &str = "__sql_window_time";

/// A Spark window call: its time column as written (or, for
/// `window(window_time(w), ...)`, [`WINDOW_TIME_COLUMN`] and `w`) and its
/// windows.
struct Call {
    time_column: String,
    window_time_of: Option<SqlExpr>,
    kind: WindowKind,
}

/// The column `w` of a first argument `window_time(w)`, if it is one.
fn window_time_arg(expr: &SqlExpr) -> Option<&SqlExpr> {
    let SqlExpr::Function(f) = expr else {
        return None;
    };
    if !f.name.to_string().eq_ignore_ascii_case("window_time") {
        return None;
    }
    let FunctionArguments::List(list) = &f.args else {
        return None;
    };
    match list.args.as_slice() {
        [FunctionArg::Unnamed(FunctionArgExpr::Expr(
            e @ (SqlExpr::Identifier(_) | SqlExpr::CompoundIdentifier(_)),
        ))] => Some(e),
        _ => None,
    }
}

fn call(expr: &SqlExpr) -> Result<Option<Call>, SqlError> {
    let SqlExpr::Function(f) = expr else {
        return Ok(None);
    };
    let name = f.name.to_string().to_ascii_lowercase();
    if name != "window" && name != "session_window" {
        return Ok(None);
    }
    let FunctionArguments::List(list) = &f.args else {
        return Err(wrong(format!(
            "{expr}: expected {name}(time column, duration, ...)"
        )));
    };
    let args: Vec<&SqlExpr> = list
        .args
        .iter()
        .map(|a| match a {
            FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => Ok(e),
            other => Err(wrong(format!("{name}(): unexpected argument {other}"))),
        })
        .collect::<Result<_, _>>()?;
    let usage = if name == "window" {
        "window(ts, '10 seconds'[, '5 seconds'])"
    } else {
        "session_window(ts, '10 seconds')"
    };
    let window_time_of = args.first().and_then(|a| window_time_arg(a)).cloned();
    let time_column = match args.first() {
        _ if window_time_of.is_some() => WINDOW_TIME_COLUMN.to_string(),
        Some(SqlExpr::Identifier(ident)) => ident.value.clone(),
        Some(SqlExpr::CompoundIdentifier(parts)) if !parts.is_empty() => parts
            .iter()
            .map(|p| p.value.clone())
            .collect::<Vec<_>>()
            .join("."),
        _ => {
            return Err(wrong(format!(
                "{expr}: the first argument must be a column (or window_time(w) of a \
                 window column w of window results); expected {usage}"
            )))
        }
    };
    let duration = |i: usize| -> Result<i64, SqlError> {
        sql_interval_ms(args[i]).ok_or_else(|| {
            wrong(format!(
                "{expr}: {} is not a positive whole number of milliseconds; expected {usage}",
                args[i]
            ))
        })
    };
    let kind = match (name.as_str(), args.len()) {
        ("session_window", 2) => WindowKind::Session {
            gap_ms: duration(1)?,
        },
        ("window", 2) => WindowKind::Tumble {
            size_ms: duration(1)?,
        },
        ("window", 3) => {
            let (size_ms, slide_ms) = (duration(1)?, duration(2)?);
            if slide_ms == size_ms {
                WindowKind::Tumble { size_ms }
            } else {
                WindowKind::Hop { size_ms, slide_ms }
            }
        }
        ("window", 4) => {
            return Err(wrong(format!(
                "{expr}: a window startTime (offset) is not supported; windows start at \
                 multiples of the slide from the epoch"
            )))
        }
        _ => {
            return Err(wrong(format!(
                "{expr}: {} arguments; expected {usage}",
                args.len()
            )))
        }
    };
    Ok(Some(Call {
        time_column,
        window_time_of,
        kind,
    }))
}

fn select_(select: &mut Select) -> Result<(), SqlError> {
    let GroupByExpr::Expressions(exprs, _) = &mut select.group_by else {
        return Ok(());
    };
    let mut found = None;
    for (i, e) in exprs.iter().enumerate() {
        if let Some(c) = call(e)? {
            if found.is_some() {
                return Err(wrong(
                    "a GROUP BY takes one window(...) or session_window(...)",
                ));
            }
            found = Some((i, c));
        }
    }
    let Some((i, window)) = found else {
        return Ok(());
    };
    let column = column_name(&window.kind);
    if window
        .time_column
        .split('.')
        .rev()
        .skip(1)
        .any(|p| p == column)
    {
        // The window column this GROUP BY adds would hide the one it reads.
        return Err(wrong(format!(
            "GROUP BY {column}({}, ...) over the results of another {column}(...): the \
             grouping adds a column {column} too; select {}.end AS we in a subquery and \
             group by {column}(we, ...)",
            window.time_column, column
        )));
    }
    if select.from.len() != 1 || !select.from[0].joins.is_empty() {
        return Err(wrong(format!(
            "GROUP BY {}(...) reads one table or subquery in FROM; join in a subquery first",
            column
        )));
    }
    exprs[i] = SqlExpr::Identifier(Ident::with_quote('"', column));
    let selection = select.selection.take();
    select.from[0] = derived(
        &select.from[0].relation,
        &window,
        column,
        selection.as_ref(),
    )?;
    Ok(())
}

/// `relation` (and `WHERE selection`) as a subquery adding the window column,
/// under the relation's name.
fn derived(
    relation: &TableFactor,
    window: &Call,
    column: &str,
    selection: Option<&SqlExpr>,
) -> Result<TableWithJoins, SqlError> {
    let alias = match relation {
        TableFactor::Table { name, alias, .. } => {
            alias.as_ref().map(|a| a.name.value.clone()).or_else(|| {
                name.0
                    .last()
                    .map(|p| p.to_string().trim_matches('"').to_string())
            })
        }
        TableFactor::Derived { alias, .. } => alias.as_ref().map(|a| a.name.value.clone()),
        _ => None,
    }
    .ok_or_else(|| {
        wrong(format!(
            "GROUP BY {column}(...) over {relation}: name the subquery"
        ))
    })?;
    let (kind, a, b) = match window.kind {
        WindowKind::Tumble { size_ms } => ("tumble", size_ms, size_ms),
        WindowKind::Hop { size_ms, slide_ms } => ("hop", size_ms, slide_ms),
        WindowKind::Session { gap_ms } => ("session", gap_ms, gap_ms),
    };
    let filter = selection.map(|s| format!(" WHERE {s}")).unwrap_or_default();
    let source = match &window.window_time_of {
        None => format!("{relation}{filter}"),
        // `window_time(w)` computed below, in place of `w`: the rows are then
        // timed by it (sql/time.rs), and the grouping's own window column
        // does not clash with `w` where `w` is named as it.
        Some(w) => {
            let name = match w {
                SqlExpr::CompoundIdentifier(parts) => parts.last(),
                SqlExpr::Identifier(ident) => Some(ident),
                _ => None,
            }
            .map(|i| i.value.replace('"', "\"\""))
            .unwrap_or_default();
            format!(
                "(SELECT * EXCLUDE (\"{name}\"), window_time({w}) AS \"{WINDOW_TIME_COLUMN}\" \
                 FROM {relation}{filter}) AS \"{alias}\""
            )
        }
    };
    let sql = format!(
        "SELECT * FROM (SELECT *, {FUNCTION}({}, '{kind}', {a}, {b}) AS \"{column}\" FROM \
         {source}) AS \"{alias}\"",
        window.time_column
    );
    let parsed = Parser::parse_sql(&GenericDialect {}, &sql)
        .map_err(|e| wrong(format!("GROUP BY {column}(...): {e}")))?;
    let from = match parsed.into_iter().next() {
        Some(Statement::Query(query)) => match *query.body {
            SetExpr::Select(mut select) if select.from.len() == 1 => select.from.pop(),
            _ => None,
        },
        _ => None,
    };
    // invariant: the text above is one SELECT with one FROM.
    from.ok_or_else(|| wrong(format!("GROUP BY {column}(...): cannot rewrite the query")))
}

/// The planning-only window function: a struct of `start` and `end` of the
/// time column's type.
#[derive(Debug, PartialEq, Eq, Hash)]
pub(crate) struct SparkWindowFunction {
    signature: Signature,
}

impl SparkWindowFunction {
    pub(crate) fn udf() -> Arc<ScalarUDF> {
        Arc::new(ScalarUDF::from(SparkWindowFunction {
            signature: Signature::any(4, Volatility::Immutable),
        }))
    }
}

/// The type of Spark's window column over a time column of type `t`.
fn struct_type(t: &DataType) -> DataType {
    let fields: Vec<FieldRef> = vec![
        Arc::new(Field::new("start", t.clone(), true)),
        Arc::new(Field::new("end", t.clone(), true)),
    ];
    DataType::Struct(Fields::from(fields))
}

impl ScalarUDFImpl for SparkWindowFunction {
    fn name(&self) -> &str {
        FUNCTION
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> DfResult<DataType> {
        Ok(struct_type(arg_types.first().unwrap_or(&DataType::Int64)))
    }

    fn invoke_with_args(&self, _args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        not_impl_err!("{FUNCTION} is only planned, never run")
    }
}

/// The window of a `GROUP BY` input that is the rewritten subquery: the
/// plan below it, the time column (a column of that plan) and the windows.
pub(crate) fn grouped_input(
    plan: &LogicalPlan,
) -> Option<(&LogicalPlan, &datafusion_common::Column, WindowKind)> {
    let mut plan = plan;
    while let LogicalPlan::SubqueryAlias(s) = plan {
        plan = &s.input;
    }
    let LogicalPlan::Projection(Projection { expr, input, .. }) = plan else {
        return None;
    };
    let (last, rest) = expr.split_last()?;
    if !rest.iter().all(|e| matches!(e, DfExpr::Column(_)))
        || rest.len() != input.schema().fields().len()
    {
        return None;
    }
    let DfExpr::Alias(alias) = last else {
        return None;
    };
    let DfExpr::ScalarFunction(f) = alias.expr.as_ref() else {
        return None;
    };
    if f.func.name() != FUNCTION {
        return None;
    }
    let [DfExpr::Column(time), DfExpr::Literal(kind, _), DfExpr::Literal(a, _), DfExpr::Literal(b, _)] =
        f.args.as_slice()
    else {
        return None;
    };
    let number = |v: &DfScalar| match v {
        DfScalar::Int64(Some(n)) => Some(*n),
        _ => None,
    };
    let (a, b) = (number(a)?, number(b)?);
    let kind = match kind {
        DfScalar::Utf8(Some(k)) if k == "tumble" => WindowKind::Tumble { size_ms: a },
        DfScalar::Utf8(Some(k)) if k == "hop" => WindowKind::Hop {
            size_ms: a,
            slide_ms: b,
        },
        DfScalar::Utf8(Some(k)) if k == "session" => WindowKind::Session { gap_ms: a },
        _ => return None,
    };
    Some((input.as_ref(), time, kind))
}
