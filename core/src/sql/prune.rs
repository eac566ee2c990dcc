//! Column pruning of a lowered query (docs/DESIGN.md "SQL"): each step
//! keeps only the columns the steps above it read, and a view's scan that
//! has more becomes a projection of the ones read, right at the source, as
//! a hand-written job selects its columns before a `key_by` (DataFusion's
//! `OptimizeProjections` does the same for a batch plan). Without it every
//! column of a view flows through every step and every exchange, and into
//! a join's state. A join's inputs keep their keys, their event time (a
//! time bound or a `state_ttl` reads it) and what is read above the join.

use std::collections::HashSet;

use super::{JoinKind, SqlNode};
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

/// Whether a projection of `exprs` over columns `names` passes them on as
/// they are (same names, same order): no step is needed.
pub(crate) fn is_identity(exprs: &[(String, Expr)], names: &[String]) -> bool {
    exprs.len() == names.len()
        && exprs
            .iter()
            .zip(names)
            .all(|((n, e), c)| n == c && *e == Expr::col(c.clone()))
}

/// Whether `exprs` only pick columns, each under its own name.
fn picks_columns(exprs: &[(String, Expr)]) -> bool {
    exprs
        .iter()
        .all(|(n, e)| matches!(e, Expr::Column(c) if c == n))
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
        node @ SqlNode::Filter { .. } => pruned_filter(node, required),
        SqlNode::Project { input, exprs } => {
            let names: Vec<String> = exprs.iter().map(|(n, _)| n.clone()).collect();
            let wanted: HashSet<String> = kept(&names, required).into_iter().collect();
            let exprs: Vec<(String, Expr)> = exprs
                .into_iter()
                .filter(|(n, _)| wanted.contains(n))
                .collect();
            let input = match pruned(*input, &reads(exprs.iter().map(|(_, e)| e))) {
                // A view's columns picked below a projection, which picks
                // its own anyway: one select, as the DSL twin writes it.
                SqlNode::Project {
                    input: below,
                    exprs: picked,
                } if picks_columns(&picked) => *below,
                input => input,
            };
            if is_identity(&exprs, &input.columns()) {
                return input;
            }
            SqlNode::Project {
                input: Box::new(input),
                exprs,
            }
        }
        node @ SqlNode::Join { .. } => pruned_join(node, required),
        // Read by a GROUP BY that closes its groups by the column (lower.rs), else not needed.
        SqlNode::Closing { input, column } => {
            if !required.contains(&column) {
                return pruned(*input, required);
            }
            SqlNode::Closing {
                input: Box::new(pruned(*input, required)),
                column,
            }
        }
        node @ SqlNode::Over { .. } => pruned_over(node, required),
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

/// An over window reading only its keys, event time, `ORDER BY` columns,
/// aggregated columns and the `required` ones (ties of event time are then
/// ordered by the columns the query reads: docs/API.md "SQL", over windows).
fn pruned_over(node: SqlNode, required: &HashSet<String>) -> SqlNode {
    let SqlNode::Over {
        input,
        frame,
        aggregates,
        ..
    } = node
    else {
        return node;
    };
    let mut below: HashSet<String> = required.clone();
    below.extend(frame.keys.iter().cloned());
    below.insert(frame.time_column.clone());
    below.extend(frame.order_by.iter().cloned());
    below.extend(aggregates.iter().filter_map(|a| a.column.clone()));
    let input = pruned(*input, &below);
    let mut columns = input.columns();
    columns.extend(aggregates.iter().map(|a| a.name.clone()));
    SqlNode::Over {
        input: Box::new(input),
        frame,
        aggregates,
        columns,
    }
}

/// The join operator's output names (sql/join.rs "Output"): the left's keys,
/// the window bounds of a window join, then each input's other columns, a
/// name already taken getting `_right`.
fn join_output(sides: &[Vec<String>; 2], keys: [&Vec<String>; 2], windowed: bool) -> Vec<String> {
    let mut out: Vec<String> = keys[0].clone();
    if windowed {
        out.extend(["window_start".to_string(), "window_end".to_string()]);
    }
    out.extend(
        join_names(sides, keys, windowed)
            .into_iter()
            .flatten()
            .map(|(_, name)| name),
    );
    out
}

/// Each input's non-key columns with their names in the join's output.
fn join_names(
    sides: &[Vec<String>; 2],
    keys: [&Vec<String>; 2],
    windowed: bool,
) -> [Vec<(String, String)>; 2] {
    let mut taken: HashSet<String> = keys[0].iter().cloned().collect();
    if windowed {
        taken.extend(["window_start".to_string(), "window_end".to_string()]);
    }
    let mut named: [Vec<(String, String)>; 2] = [Vec::new(), Vec::new()];
    for s in 0..2 {
        for n in &sides[s] {
            if keys[s].contains(n) {
                continue;
            }
            let name = if taken.contains(n) {
                format!("{n}_right")
            } else {
                n.clone()
            };
            taken.insert(name.clone());
            named[s].push((n.clone(), name));
        }
    }
    named
}

/// A join (see `pruned`) keeping in each input only its keys, its event time,
/// the columns read above it, and on the left those whose name a column read
/// from the right has (so that one keeps its `_right`).
fn pruned_join(node: SqlNode, required: &HashSet<String>) -> SqlNode {
    let SqlNode::Join {
        left,
        right,
        how,
        left_on,
        right_on,
        kind,
        time_columns,
        columns,
    } = node
    else {
        return node;
    };
    let windowed = matches!(kind, JoinKind::Window(_));
    let sides = [left.columns(), right.columns()];
    let keys = [&left_on, &right_on];
    let times = time_columns.as_ref().map(|(l, r)| [l.clone(), r.clone()]);
    let named = join_names(&sides, keys, windowed);
    let mut below: [HashSet<String>; 2] = [HashSet::new(), HashSet::new()];
    for s in 0..2 {
        below[s].extend(keys[s].iter().cloned());
        if let Some(t) = &times {
            below[s].insert(t[s].clone());
        }
        for (input, output) in &named[s] {
            if required.contains(output) {
                below[s].insert(input.clone());
            }
        }
    }
    for (input, output) in &named[1] {
        if required.contains(output) && input != output {
            below[0].insert(input.clone());
        }
    }
    let left = pruned(*left, &below[0]);
    let right = pruned(*right, &below[1]);
    let sides = [left.columns(), right.columns()];
    let out = join_output(&sides, keys, windowed);
    debug_assert!(out.iter().all(|c| columns.contains(c)));
    SqlNode::Join {
        left: Box::new(left),
        right: Box::new(right),
        how,
        left_on,
        right_on,
        kind,
        time_columns,
        columns: out,
    }
}

/// A filter (see `pruned`): a column only its predicate reads is dropped
/// after it, as a hand-written job filters and then selects (before a join,
/// it would be carried into the join's state).
fn pruned_filter(node: SqlNode, required: &HashSet<String>) -> SqlNode {
    let SqlNode::Filter {
        input, predicate, ..
    } = node
    else {
        return node;
    };
    let mut below = required.clone();
    below.extend(reads([&predicate]));
    let input = pruned(*input, &below);
    let columns = input.columns();
    let wanted = kept(&columns, required);
    let node = SqlNode::Filter {
        input: Box::new(input),
        predicate,
        columns: columns.clone(),
    };
    // Not over a windowing table function's rows: a projection may not
    // pass on their window bounds before the GROUP BY.
    if wanted.len() == columns.len() || node.passes_window_rows() {
        return node;
    }
    SqlNode::Project {
        input: Box::new(node),
        exprs: wanted
            .into_iter()
            .map(|c| (c.clone(), Expr::col(c)))
            .collect(),
    }
}
