//! Projections and filters over a join's renaming projection (docs/API.md
//! "SQL", joins): a join is lowered to the join operator and a projection
//! that names its columns as SQL does; the projection or filter the query puts
//! above it is merged into that projection (a filter goes below it), so a
//! query pays for one select after a join, as its DSL twin does.

use std::collections::HashMap;

use super::{SqlNode, REGROUP};
use crate::expr::Expr;

/// Whether `exprs` only pick columns of `input` (maybe renamed); the map
/// from output name to input name.
fn renames(exprs: &[(String, Expr)]) -> Option<HashMap<String, String>> {
    exprs
        .iter()
        .map(|(n, e)| match e {
            Expr::Column(c) => Some((n.clone(), c.clone())),
            _ => None,
        })
        .collect()
}

/// Whether `node` is a join, maybe filtered (the joins' renaming projection
/// is merged into what reads it), or a `GROUP BY` of a window's results
/// (time.rs), whose renaming projection is merged likewise.
fn is_join(node: &SqlNode) -> bool {
    if is_regroup(node) {
        return true;
    }
    match node {
        SqlNode::Join { .. } => true,
        SqlNode::Filter { input, .. } | SqlNode::Closing { input, .. } => is_join(input),
        _ => false,
    }
}

/// `e` with its columns renamed by `map`.
fn substitute(e: &Expr, map: &HashMap<String, String>) -> Expr {
    let sub = |e: &Expr| substitute(e, map);
    match e {
        Expr::Column(c) => Expr::Column(map.get(c).cloned().unwrap_or_else(|| c.clone())),
        Expr::Literal(_) => e.clone(),
        Expr::Binary { op, left, right } => Expr::binary(*op, sub(left), sub(right)),
        Expr::Unary { op, expr } => Expr::unary(*op, sub(expr)),
        Expr::Call { function, args } => Expr::Call {
            function: function.clone(),
            args: args.iter().map(sub).collect(),
        },
        Expr::Cast { expr, to } => Expr::Cast {
            expr: Box::new(sub(expr)),
            to: to.clone(),
        },
        Expr::Case {
            branches,
            otherwise,
        } => Expr::Case {
            branches: branches.iter().map(|(w, t)| (sub(w), sub(t))).collect(),
            otherwise: otherwise.as_deref().map(|o| Box::new(sub(o))),
        },
    }
}

/// `exprs` over `input`; over a join's renaming projection, one projection.
pub(crate) fn project(input: SqlNode, exprs: Vec<(String, Expr)>) -> SqlNode {
    match input {
        SqlNode::Project {
            input: inner,
            exprs: below,
        } if is_join(&inner) && renames(&below).is_some() => {
            let map = renames(&below).expect("invariant: checked in the guard");
            let exprs: Vec<(String, Expr)> = exprs
                .into_iter()
                .map(|(n, e)| (n, substitute(&e, &map)))
                .collect();
            SqlNode::Project {
                input: inner,
                exprs,
            }
        }
        input => SqlNode::Project {
            input: Box::new(input),
            exprs,
        },
    }
}

/// Rows of `input` where `predicate` holds; below a join's renaming projection.
pub(crate) fn filter(input: SqlNode, predicate: Expr) -> SqlNode {
    match input {
        SqlNode::Project {
            input: inner,
            exprs,
        } if is_join(&inner) && renames(&exprs).is_some() => {
            let map = renames(&exprs).expect("invariant: checked in the guard");
            let predicate = substitute(&predicate, &map);
            let columns = inner.columns();
            SqlNode::Project {
                input: Box::new(SqlNode::Filter {
                    input: inner,
                    predicate,
                    columns,
                }),
                exprs,
            }
        }
        input => {
            let columns = input.columns();
            SqlNode::Filter {
                input: Box::new(input),
                predicate,
                columns,
            }
        }
    }
}

/// Whether `node` is a `GROUP BY` of a window's results (see the module
/// docs): its renaming projection is merged with what reads it.
fn is_regroup(node: &SqlNode) -> bool {
    match node {
        SqlNode::Aggregate { input, keys, .. } => matches!(input.as_ref(),
            SqlNode::Window { time_column, kind, .. } if *kind == REGROUP && keys.contains(time_column)),
        SqlNode::Filter { input, .. } => is_regroup(input),
        _ => false,
    }
}
