//! Column pruning of a lowered query (docs/DESIGN.md "SQL"): each step
//! keeps only the columns the steps above it read, and a view's scan that
//! has more becomes a projection of the ones read, right at the source, as
//! a hand-written job selects its columns before a `key_by` (DataFusion's
//! `OptimizeProjections` does the same for a batch plan). Without it every
//! column of a view flows through every step and every exchange.

use std::collections::HashSet;

use super::SqlNode;
use crate::expr::Expr;

/// `node` reading no column it does not need; its own output columns are
/// unchanged.
pub(crate) fn prune(node: SqlNode) -> SqlNode {
    let all: HashSet<String> = node.columns().into_iter().collect();
    pruned(node, &all)
}

/// The names of `columns` that are `required`, in order; never none (a batch
/// without columns has no rows), so at least the first.
fn kept(columns: &[String], required: &HashSet<String>) -> Vec<String> {
    let out: Vec<String> = columns
        .iter()
        .filter(|c| required.contains(*c))
        .cloned()
        .collect();
    if out.is_empty() {
        columns.iter().take(1).cloned().collect()
    } else {
        out
    }
}

fn reads<'a>(exprs: impl IntoIterator<Item = &'a Expr>) -> HashSet<String> {
    exprs
        .into_iter()
        .flat_map(|e| e.columns())
        .map(str::to_string)
        .collect()
}

/// `node` with only the `required` columns (and what computing them reads).
fn pruned(node: SqlNode, required: &HashSet<String>) -> SqlNode {
    match node {
        SqlNode::Scan { view, columns } => {
            let wanted = kept(&columns, required);
            if wanted.len() == columns.len() {
                return SqlNode::Scan { view, columns };
            }
            SqlNode::Project {
                input: Box::new(SqlNode::Scan { view, columns }),
                exprs: wanted
                    .into_iter()
                    .map(|c| (c.clone(), Expr::col(c)))
                    .collect(),
            }
        }
        SqlNode::Window {
            input,
            time_column,
            kind,
            ..
        } => {
            let mut below: HashSet<String> = required
                .iter()
                .filter(|c| *c != "window_start" && *c != "window_end")
                .cloned()
                .collect();
            below.insert(time_column.clone());
            let input = pruned(*input, &below);
            let mut columns = input.columns();
            columns.extend(["window_start".to_string(), "window_end".to_string()]);
            SqlNode::Window {
                input: Box::new(input),
                time_column,
                kind,
                columns,
            }
        }
        SqlNode::Filter {
            input, predicate, ..
        } => {
            let mut below = required.clone();
            below.extend(reads([&predicate]));
            let input = pruned(*input, &below);
            let columns = input.columns();
            SqlNode::Filter {
                input: Box::new(input),
                predicate,
                columns,
            }
        }
        SqlNode::Project { input, exprs } => {
            let names: Vec<String> = exprs.iter().map(|(n, _)| n.clone()).collect();
            let wanted: HashSet<String> = kept(&names, required).into_iter().collect();
            let exprs: Vec<(String, Expr)> = exprs
                .into_iter()
                .filter(|(n, _)| wanted.contains(n))
                .collect();
            let input = pruned(*input, &reads(exprs.iter().map(|(_, e)| e)));
            let names = input.columns();
            let identity = exprs.len() == names.len()
                && exprs
                    .iter()
                    .zip(&names)
                    .all(|((n, e), c)| n == c && *e == Expr::col(c.clone()));
            if identity {
                return input;
            }
            SqlNode::Project {
                input: Box::new(input),
                exprs,
            }
        }
        // A join's output names depend on both inputs' columns (a clash
        // gets `_right`): each input is pruned on its own, keeping all of
        // its output columns.
        SqlNode::Join {
            left,
            right,
            how,
            left_on,
            right_on,
            kind,
            time_columns,
            columns,
        } => SqlNode::Join {
            left: Box::new(prune(*left)),
            right: Box::new(prune(*right)),
            how,
            left_on,
            right_on,
            kind,
            time_columns,
            columns,
        },
        // By position: each input keeps every column the union outputs.
        SqlNode::Union { inputs } => SqlNode::Union {
            inputs: inputs.into_iter().map(prune).collect(),
        },
        SqlNode::Aggregate {
            input,
            keys,
            aggregates,
            window,
            columns,
        } => {
            let mut below: HashSet<String> = keys.iter().cloned().collect();
            below.extend(reads(aggregates.iter().flat_map(|a| &a.args)));
            if let Some((time_column, _)) = &window {
                below.insert(time_column.clone());
            }
            SqlNode::Aggregate {
                input: Box::new(pruned(*input, &below)),
                keys,
                aggregates,
                window,
                columns,
            }
        }
    }
}
