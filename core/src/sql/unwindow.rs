//! A join input's windowing table function taken out of its plan (sql/join.rs,
//! window joins): a window join groups both inputs' rows into the windows
//! itself and adds `window_start`/`window_end`, so an input passes its rows
//! on and only names the bounds it selects.

use super::rename::project;
use super::{SqlError, SqlNode, WindowKind};
use crate::expr::Expr;

fn refused(why: impl Into<String>) -> SqlError {
    SqlError::new("JOIN", why)
}

/// A column of a join input as SQL sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum SideCol {
    /// A column of the input's stream.
    Col(String),
    /// The bounds a windowing table function adds (made by a window join).
    WindowStart,
    WindowEnd,
}

pub(super) type Unwindowed = (
    SqlNode,
    Vec<(String, SideCol)>,
    Option<(WindowKind, String)>,
);

/// `node` with its windowing table function taken out (a window join adds
/// the bounds), the columns as SQL sees them and the windows; filters and
/// projections above it may pass the bounds through but not compute with them.
pub(super) fn unwindow(node: SqlNode) -> Result<Unwindowed, SqlError> {
    match node {
        SqlNode::Window {
            input,
            time_column,
            kind,
            ..
        } => {
            let (input, mut cols, _) = plain(*input);
            cols.push(("window_start".into(), SideCol::WindowStart));
            cols.push(("window_end".into(), SideCol::WindowEnd));
            Ok((input, cols, Some((kind, time_column))))
        }
        SqlNode::Filter {
            input, predicate, ..
        } => {
            let (inner, cols, window) = unwindow(*input)?;
            if window.is_some() {
                if let Some(name) = bound_read(&predicate, &cols) {
                    return Err(computed(&name));
                }
            }
            let columns = inner.columns();
            let node = SqlNode::Filter {
                input: Box::new(inner),
                predicate,
                columns,
            };
            Ok(match window {
                Some(_) => (node, cols, window),
                None => plain(node),
            })
        }
        SqlNode::Project { input, exprs } => {
            let (inner, cols, window) = unwindow(*input)?;
            match window {
                Some(window) => unwindow_project(inner, exprs, &cols, window),
                None => Ok(plain(SqlNode::Project {
                    input: Box::new(inner),
                    exprs,
                })),
            }
        }
        other => Ok(plain(other)),
    }
}

/// A node's own columns, no windows.
fn plain(node: SqlNode) -> Unwindowed {
    let cols = node
        .columns()
        .into_iter()
        .map(|n| (n.clone(), SideCol::Col(n)))
        .collect();
    (node, cols, None)
}

/// The window bound `e` reads, if any.
fn bound_read(e: &Expr, cols: &[(String, SideCol)]) -> Option<String> {
    e.columns()
        .into_iter()
        .find(|c| {
            cols.iter()
                .any(|(n, s)| n == c && !matches!(s, SideCol::Col(_)))
        })
        .map(str::to_string)
}

fn computed(name: &str) -> SqlError {
    refused(format!(
        "a window join's inputs may select {name} but not compute with it before the join"
    ))
}

/// A projection `exprs` above a windowing table function (whose columns
/// are `cols`), without the window bounds it passes through.
fn unwindow_project(
    inner: SqlNode,
    exprs: Vec<(String, Expr)>,
    cols: &[(String, SideCol)],
    window: (WindowKind, String),
) -> Result<Unwindowed, SqlError> {
    let mut kept = Vec::new();
    let mut out = Vec::new();
    for (name, e) in exprs {
        if let Expr::Column(c) = &e {
            if let Some((_, s)) = cols.iter().find(|(n, _)| n == c) {
                if !matches!(s, SideCol::Col(_)) {
                    out.push((name, s.clone()));
                    continue;
                }
            }
        }
        if let Some(bound) = bound_read(&e, cols) {
            return Err(computed(&bound));
        }
        out.push((name.clone(), SideCol::Col(name.clone())));
        kept.push((name, e));
    }
    if kept.is_empty() {
        return Err(refused(
            "a window join's input selects only window_start/window_end; it needs its key \
             columns too",
        ));
    }
    // The window join reads the rows' event time: it stays in the stream
    // even where the query does not select it.
    let time = &window.1;
    match kept.iter().find(|(n, _)| n == time) {
        Some((_, e)) if *e != Expr::col(time.clone()) => {
            return Err(refused(format!(
                "a window join's input names another column '{time}', the name of its \
                 event-time column; rename it"
            )))
        }
        Some(_) => {}
        None => kept.push((time.clone(), Expr::col(time.clone()))),
    }
    Ok((project(inner, kept), out, Some(window)))
}
