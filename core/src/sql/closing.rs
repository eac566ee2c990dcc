//! Groups that close by a per-row bound of a join's rows (docs/API.md "SQL",
//! closing groups; Nexmark q4's auctions closing at their `expires`).
//!
//! An inner interval join whose condition also bounds one input's event
//! time by a column of each row of the other (`b.ts <= a.expires`, sorted
//! out by join.rs) keeps that condition as a filter of the joined rows.
//! Where its interval keeps the bounding input's time at or before the
//! other's (`b.ts >= a.ts`), a joined row is emitted when the later of its
//! two input rows arrives, so before the watermark passes that row's time,
//! which is at most `a.expires`: each joined row comes before the watermark
//! passes its own `expires`. The join's rows are then marked
//! [`SqlNode::Closing`] by that column, and a `GROUP BY` whose keys hold it
//! (lower.rs) is a window of 1 ms on it (time.rs's `regroup`): each group is
//! aggregated once, complete, when the watermark passes its `expires`, and
//! emitted once, its rows timed by `expires`, an append-only stream another
//! `GROUP BY` may read (q4's average per category).

use super::{JoinKind, SqlError, SqlNode};
use crate::expr::Expr;

/// The input and column of a per-row bound that closes the joined rows'
/// groups (see the module docs), where the join is an inner interval join
/// whose interval keeps the bounding input's event time at or before the
/// other's.
pub(super) fn closing(
    how: &str,
    kind: &JoinKind,
    found: Option<(usize, usize)>,
) -> Option<(usize, usize)> {
    let (s, i) = found?;
    let JoinKind::Interval { lower_ms, upper_ms } = kind else {
        return None;
    };
    let ordered = if s == 0 {
        *lower_ms >= 0
    } else {
        *upper_ms <= 0
    };
    (how == "inner" && ordered).then_some((s, i))
}

/// A join's rows (its renaming projection, maybe over a filter) marked as
/// closing by `column` (the join operator's name of it), below the renaming
/// projection, which merges with what reads it.
pub(super) fn close(node: SqlNode, column: Option<String>) -> SqlNode {
    match (column, node) {
        (Some(column), SqlNode::Project { input, exprs }) => SqlNode::Project {
            input: Box::new(SqlNode::Closing { input, column }),
            exprs,
        },
        (_, node) => node,
    }
}

/// The column by which the rows of `node` close (`SqlNode::Closing`), under
/// the name the projections above it select it (the name it keeps where
/// selected as it is, else the first it is renamed to; `eddyline/sql.py`
/// follows an event time the same way).
pub(super) fn closing_column(node: &SqlNode) -> Option<String> {
    match node {
        SqlNode::Closing { column, .. } => Some(column.clone()),
        SqlNode::Filter { input, .. } => closing_column(input),
        SqlNode::Project { input, exprs } => {
            let column = closing_column(input)?;
            let own = Expr::col(column.clone());
            exprs
                .iter()
                .find(|(n, e)| *n == column && *e == own)
                .or_else(|| exprs.iter().find(|(_, e)| *e == own))
                .map(|(n, _)| n.clone())
        }
        _ => None,
    }
}

/// `error` (a `GROUP BY` over a running `GROUP BY`) telling, where that one
/// groups rows that close by a column it does not group by, to group by it.
pub(super) fn with_closing_hint(mut error: SqlError, node: &SqlNode) -> SqlError {
    let below = match node {
        SqlNode::Filter { input, .. } | SqlNode::Project { input, .. } => {
            return with_closing_hint(error, input)
        }
        SqlNode::Aggregate { input, .. } => input,
        _ => return error,
    };
    if let Some(column) = closing_column(below) {
        error.message.push_str(&format!(
            ". The inner GROUP BY reads a join bounded by {column} of each row: with \
             {column} among its keys each group closes when the watermark passes it and \
             is emitted once, final, and may be grouped again"
        ));
    }
    error
}
