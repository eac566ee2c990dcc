//! DataFusion's logical plan lowered to streaming steps (docs/DESIGN.md
//! "SQL"): `Projection`, `Filter`, `Aggregate`, `Union`, `SubqueryAlias` and
//! `TableScan` become [`SqlNode`]s; every other node is a [`SqlError`] naming
//! the construct and why a stream cannot run it (yet).
//!
//! Column names: a view's columns keep their names; a projection names a
//! column by its alias, a bare column keeps its name, any other expression
//! gets DataFusion's display name; a `GROUP BY` names its keys as they are
//! and its aggregates as the DSL's aggregate does when it is a single
//! `sum/min/max(col)` (the column's name) or `count(*)` (`count`), else
//! Spark's way, `function(column)`.

use datafusion_expr::{Expr as DfExpr, LogicalPlan};

use super::convert::{to_expr, Columns};
use super::rename::{filter, project};
use super::tvf::{TemporalTable, WindowTable};
use super::{AggregateCall, SqlError, SqlNode, View};
use crate::expr::Expr;

pub(crate) struct Lowering<'a> {
    pub views: &'a [View],
    pub windows: &'a [WindowTable],
    pub temporals: &'a [TemporalTable],
}

fn refused(construct: &str, why: &str) -> SqlError {
    SqlError::new(construct, why)
}

impl Lowering<'_> {
    pub(crate) fn lower(&self, plan: &LogicalPlan) -> Result<SqlNode, SqlError> {
        match plan {
            LogicalPlan::Projection(p) => self.projection(p),
            LogicalPlan::Filter(f) => {
                if let LogicalPlan::Join(j) = f.input.as_ref() {
                    return self.join(j, Some(&f.predicate));
                }
                let input = self.lower(&f.input)?;
                let names = input.columns();
                let predicate = to_expr(
                    &f.predicate,
                    &Columns {
                        schema: f.input.schema(),
                        names: &names,
                    },
                )?;
                Ok(filter(input, predicate))
            }
            LogicalPlan::SubqueryAlias(s) => self.lower(&s.input),
            LogicalPlan::TableScan(scan) => {
                if !scan.filters.is_empty() || scan.fetch.is_some() || scan.projection.is_some() {
                    return Err(refused("table scan", "a pushed-down scan is not expected"));
                }
                self.scan(scan.table_name.table())
            }
            LogicalPlan::Union(u) => self.union(u),
            LogicalPlan::Aggregate(a) => self.aggregate(a),
            LogicalPlan::Join(j) => self.join(j, None),
            other => Err(refusal(other)),
        }
    }

    fn projection(
        &self,
        p: &datafusion_expr::logical_plan::Projection,
    ) -> Result<SqlNode, SqlError> {
        let input = self.lower(&p.input)?;
        let names = input.columns();
        let columns = Columns {
            schema: p.input.schema(),
            names: &names,
        };
        let mut exprs: Vec<(String, Expr)> = Vec::with_capacity(p.expr.len());
        let mut identity = p.expr.len() == names.len();
        for (i, e) in p.expr.iter().enumerate() {
            let name = match e {
                DfExpr::Alias(a) => a.name.clone(),
                DfExpr::Column(c) => columns.name_of(c)?,
                _ => p.schema.field(i).name().clone(),
            };
            identity &= matches!(e, DfExpr::Column(_)) && name == names[i];
            if exprs.iter().any(|(n, _)| *n == name) {
                return Err(refused(
                    "SELECT",
                    &format!("column '{name}' is selected twice; name one with AS"),
                ));
            }
            exprs.push((name, to_expr(e, &columns)?));
        }
        if identity {
            return Ok(input);
        }
        Ok(project(input, exprs))
    }

    fn union(&self, u: &datafusion_expr::logical_plan::Union) -> Result<SqlNode, SqlError> {
        let mut inputs = Vec::with_capacity(u.inputs.len());
        let mut first: Option<Vec<String>> = None;
        for input in &u.inputs {
            let lowered = self.lower(input)?;
            let names = lowered.columns();
            match &first {
                None => {
                    first = Some(names);
                    inputs.push(lowered);
                }
                // Positional, as in SQL: rename to the first input's names.
                Some(wanted) if *wanted != names => inputs.push(SqlNode::Project {
                    input: Box::new(lowered),
                    exprs: wanted
                        .iter()
                        .zip(&names)
                        .map(|(w, n)| (w.clone(), Expr::col(n.clone())))
                        .collect(),
                }),
                Some(_) => inputs.push(lowered),
            }
        }
        Ok(SqlNode::Union { inputs })
    }

    fn scan(&self, table: &str) -> Result<SqlNode, SqlError> {
        if let Some(versioned) = self.temporals.iter().find(|t| t.name == table) {
            return self.scan(&versioned.view);
        }
        if let Some(window) = self.windows.iter().find(|w| w.name == table) {
            let input = self.scan(&window.view)?;
            let mut columns = input.columns();
            columns.push("window_start".into());
            columns.push("window_end".into());
            return Ok(SqlNode::Window {
                input: Box::new(input),
                time_column: window.time_column.clone(),
                kind: window.kind.clone(),
                columns,
            });
        }
        let view = self
            .views
            .iter()
            .find(|v| v.name == table)
            .ok_or_else(|| refused("table", &format!("unknown table '{table}'")))?;
        Ok(SqlNode::Scan {
            view: view.name.clone(),
            columns: view
                .schema
                .fields()
                .iter()
                .map(|f| f.name().clone())
                .collect(),
        })
    }

    // `Expr::Wildcard` is deprecated for plans that went through the analyzer;
    // the planner's raw `count(*)` still holds it.
    #[allow(deprecated)]
    fn aggregate(&self, a: &datafusion_expr::logical_plan::Aggregate) -> Result<SqlNode, SqlError> {
        let input = self.lower(&a.input)?;
        let names = input.columns();
        let columns = Columns {
            schema: a.input.schema(),
            names: &names,
        };
        let mut keys = Vec::with_capacity(a.group_expr.len());
        for e in &a.group_expr {
            match e {
                DfExpr::Column(c) => keys.push(columns.name_of(c)?),
                other => {
                    return Err(refused(
                        "GROUP BY",
                        &format!(
                            "GROUP BY {other}: only columns can be grouped by yet; compute \
                             the key in a subquery (SELECT ... AS key FROM ...) first"
                        ),
                    ))
                }
            }
        }
        let mut calls = Vec::with_capacity(a.aggr_expr.len());
        for e in &a.aggr_expr {
            let inner = match e {
                DfExpr::Alias(alias) => alias.expr.as_ref(),
                other => other,
            };
            let DfExpr::AggregateFunction(f) = inner else {
                return Err(refused("aggregate", &format!("{e} is not an aggregate")));
            };
            let function = f.func.name().to_ascii_lowercase();
            let params = &f.params;
            if params.distinct {
                return Err(refused(
                    "DISTINCT aggregate",
                    &format!("{function}(DISTINCT ...) is not supported yet"),
                ));
            }
            if params.filter.is_some() || !params.order_by.is_empty() {
                return Err(refused(
                    "aggregate FILTER / ORDER BY",
                    &format!("{function}() with FILTER or ORDER BY is not supported yet"),
                ));
            }
            let column = match (function.as_str(), params.args.as_slice()) {
                // `count(*)`: the planner leaves the wildcard (its analyzer,
                // which eddyline does not run, would make it `count(1)`).
                ("count", [] | [DfExpr::Wildcard { .. }]) => None,
                ("count", [DfExpr::Literal(v, _)]) if !v.is_null() => None,
                (_, [DfExpr::Column(c)]) => Some(columns.name_of(c)?),
                _ => {
                    return Err(refused(
                        "aggregate",
                        &format!(
                            "{e}: an aggregate of an expression is not supported yet; compute \
                             it in a subquery (SELECT ... AS x FROM ...) and aggregate x"
                        ),
                    ))
                }
            };
            calls.push((function, column));
        }
        let single = calls.len() == 1;
        let aggregates: Vec<AggregateCall> = calls
            .into_iter()
            .map(|(function, column)| {
                let name = match (&column, single, function.as_str()) {
                    (None, true, "count") => "count".to_string(),
                    (Some(c), true, "sum" | "min" | "max") => c.clone(),
                    (Some(c), _, _) => format!("{function}({c})"),
                    (None, _, _) => format!("{function}(*)"),
                };
                AggregateCall {
                    function,
                    column,
                    name,
                }
            })
            .collect();
        let mut out = keys.clone();
        out.extend(aggregates.iter().map(|c| c.name.clone()));
        Ok(SqlNode::Aggregate {
            input: Box::new(input),
            keys,
            aggregates,
            window: None,
            columns: out,
        })
    }
}

/// Why a stream cannot run `plan` (a node the lowering does not take).
fn refusal(plan: &LogicalPlan) -> SqlError {
    match plan {
        LogicalPlan::Sort(_) => refused(
            "ORDER BY",
            "a global ORDER BY needs the end of the stream, which never comes; sort \
             the sink's output instead (ORDER BY is only possible within a window)",
        ),
        LogicalPlan::Limit(_) => refused(
            "LIMIT",
            "a LIMIT without a window would stop the stream after a few rows; it is \
             not supported",
        ),
        LogicalPlan::Distinct(_) => refused(
            "DISTINCT",
            "SELECT DISTINCT and UNION without ALL are not supported yet; use UNION ALL \
             or GROUP BY",
        ),
        LogicalPlan::Window(_) => refused(
            "OVER",
            "window functions (OVER ...) are not supported; group by a window instead",
        ),
        LogicalPlan::EmptyRelation(_) | LogicalPlan::Values(_) => refused(
            "FROM",
            "a query needs FROM a registered view; a SELECT without one has no stream",
        ),
        other => refused(
            other.display().to_string().as_str(),
            "this construct is not supported in streaming SQL",
        ),
    }
}
