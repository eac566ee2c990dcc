//! DataFusion's logical plan lowered to streaming steps (docs/DESIGN.md
//! "SQL"): `Projection`, `Filter`, `Aggregate`, `Union`, `SubqueryAlias` and
//! `TableScan` become [`SqlNode`]s; every other node is a [`SqlError`] naming
//! the construct and why a stream cannot run it (yet).
//!
//! Column names: a view's columns keep their names; a projection names a
//! column by its alias, a bare column keeps its name, any other expression
//! gets DataFusion's display name; a `GROUP BY` names its keys as they are
//! and its aggregates as the DSL job it lowers to does (`aggregate.rs`): a
//! single `sum/min/max(col)` by the column and `count(*)` as `count`, else
//! Spark's way (`avg(v)`, `count(1)`), as `keyed.agg(...)` names them.

use datafusion_expr::{Expr as DfExpr, LogicalPlan};

use super::aggregate;
use super::closing::{closing_column, with_closing_hint};
use super::convert::{to_expr, Columns};
use super::rename::{filter, project};
use super::tvf::{TemporalTable, WindowTable};
use super::{spark_window, spark_window_column, SqlError, SqlNode, View};
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
            LogicalPlan::Window(w) => self.over(w),
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
            // A projection wider than its input is no identity (and has no names[i]).
            identity &= matches!(e, DfExpr::Column(_)) && names.get(i) == Some(&name);
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
        let (input, exprs) = fold_aliases(input, exprs);
        let (input, exprs) = self.fold_over_aliases(input, exprs);
        if super::prune::is_identity(&exprs, &input.columns()) {
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

    fn aggregate(&self, a: &datafusion_expr::logical_plan::Aggregate) -> Result<SqlNode, SqlError> {
        // Spark's `GROUP BY window(...)`: the rewritten subquery adding the
        // window column is not run; its input is grouped into the windows.
        let spark = spark_window::grouped_input(&a.input);
        let (input, names, window) = match &spark {
            Some((below, time, kind)) => {
                let input = self.lower(below)?;
                let mut names = input.columns();
                let time_column = Columns {
                    schema: below.schema(),
                    names: &names,
                }
                .name_of(time)?;
                names.push(spark_window_column(kind).to_string());
                (input, names, Some((time_column, kind.clone())))
            }
            None => {
                let input = self.lower(&a.input)?;
                let names = input.columns();
                (input, names, None)
            }
        };
        self.refuse_running(&input, "GROUP BY")
            .map_err(|e| with_closing_hint(e, &input))?;
        let columns = Columns {
            schema: a.input.schema(),
            names: &names,
        };
        // GROUP BY expressions are computed by a projection first, named as
        // DataFusion shows them (the name a SELECT of them without AS gets).
        let mut keys = Vec::with_capacity(a.group_expr.len());
        let mut computed: Vec<(String, Expr)> = Vec::new();
        for e in &a.group_expr {
            match e {
                DfExpr::Column(c) => keys.push(columns.name_of(c)?),
                other => {
                    let name = other.human_display().to_string();
                    if names.contains(&name) || computed.iter().any(|(n, _)| *n == name) {
                        return Err(refused(
                            "GROUP BY",
                            &format!(
                                "GROUP BY {name}: the name is taken; group by it AS in a subquery"
                            ),
                        ));
                    }
                    computed.push((name.clone(), to_expr(other, &columns)?));
                    keys.push(name);
                }
            }
        }
        let aggregates = aggregate::calls(&a.aggr_expr, &columns)?;
        let mut out = keys.clone();
        out.extend(aggregates.iter().map(|c| c.name.clone()));
        let window_column = window.as_ref().map(|(_, kind)| spark_window_column(kind));
        let keys: Vec<String> = keys
            .into_iter()
            .filter(|k| Some(k.as_str()) != window_column)
            .collect();
        let input = if computed.is_empty() {
            input
        } else {
            with_computed(input, computed)?
        };
        if window.is_none() {
            // Grouped by a windowed aggregate's event time: a window again (time.rs).
            if let Some(time) = self.regroup_time(&input, &keys)? {
                return self.regroup(input, &time, &keys, aggregates, &out);
            }
            // Grouped by a per-row bound of a join's rows (an auction's
            // expires): each group closes when the watermark passes it, as a
            // window of 1 ms on that column (sql/join.rs, time.rs).
            if let Some(column) = closing_column(&input).filter(|c| keys.contains(c)) {
                return self.regroup(input, &column, &keys, aggregates, &out);
            }
        }
        Ok(SqlNode::Aggregate {
            input: Box::new(input),
            keys,
            aggregates,
            window,
            columns: out,
        })
    }
}

/// Names each aggregate of `aggregates` by its alias in projection `exprs`
/// where the projection reads it once, as a plain column, under a name no
/// other column of `columns` has; the projection then reads it by that name.
pub(super) fn name_by_aliases(
    aggregates: &mut [super::AggregateCall],
    columns: &mut [String],
    exprs: &mut [(String, Expr)],
) {
    for call in aggregates.iter_mut() {
        let own = Expr::col(call.name.clone());
        let reads = exprs
            .iter()
            .filter(|(_, e)| e.columns().contains(&call.name.as_str()))
            .count();
        let Some(at) = exprs.iter().position(|(_, e)| *e == own) else {
            continue;
        };
        let alias = exprs[at].0.clone();
        if reads != 1 || alias == call.name || columns.contains(&alias) {
            continue;
        }
        if let Some(c) = columns.iter_mut().find(|c| **c == call.name) {
            c.clone_from(&alias);
        }
        exprs[at].1 = Expr::col(alias.clone());
        call.name = alias;
    }
}

/// A projection's aliases of an aggregate's output folded into the aggregate
/// (`avg(x) AS m` names the aggregate `m`), as the DSL twin writes
/// `.agg(F.avg("x").alias("m"))` and needs no select after it. Not for the
/// single `sum/min/max(col)` or `count(*)` that lower to the DSL's
/// `.sum(col)` / `.count()`, which name their column themselves.
fn fold_aliases(input: SqlNode, mut exprs: Vec<(String, Expr)>) -> (SqlNode, Vec<(String, Expr)>) {
    let SqlNode::Aggregate {
        input: below,
        keys,
        mut aggregates,
        window,
        mut columns,
    } = input
    else {
        return (input, exprs);
    };
    let dsl_named = matches!(aggregates.as_slice(), [a] if
        (matches!(a.function.as_str(), "sum" | "min" | "max")
            && a.column.as_deref() == Some(a.name.as_str()))
        || (a.function == "count" && a.name == "count"));
    if !dsl_named {
        name_by_aliases(&mut aggregates, &mut columns, &mut exprs);
    }
    let node = SqlNode::Aggregate {
        input: below,
        keys,
        aggregates,
        window,
        columns,
    };
    (node, exprs)
}

/// `input` with the `computed` group keys added as columns. Over a windowing
/// table function they are computed below it, on the rows, as the window's
/// `window_start`/`window_end` exist only once the rows are grouped (a key
/// cannot read them).
fn with_computed(input: SqlNode, computed: Vec<(String, Expr)>) -> Result<SqlNode, SqlError> {
    if let SqlNode::Window {
        input,
        time_column,
        kind,
        ..
    } = input
    {
        if let Some((name, _)) = computed.iter().find(|(_, e)| {
            e.columns()
                .iter()
                .any(|c| *c == "window_start" || *c == "window_end")
        }) {
            return Err(refused(
                "GROUP BY",
                &format!(
                    "GROUP BY {name}: a group key cannot compute with window_start or \
                     window_end; group by them and compute after the GROUP BY"
                ),
            ));
        }
        let below = with_computed(*input, computed)?;
        let mut columns = below.columns();
        columns.extend(["window_start".to_string(), "window_end".to_string()]);
        return Ok(SqlNode::Window {
            input: Box::new(below),
            time_column,
            kind,
            columns,
        });
    }
    let mut exprs: Vec<(String, Expr)> = input
        .columns()
        .into_iter()
        .map(|c| (c.clone(), Expr::col(c)))
        .collect();
    exprs.extend(computed);
    Ok(project(input, exprs))
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
