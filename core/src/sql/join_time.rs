//! The join condition's terms in the inputs' event time (join.rs): a
//! conjunct's bounds on `right.ts - left.ts`, from event-time columns, the
//! columns a fixed offset from them (time.rs), Spark window columns' `end`
//! and `start`, Spark's `window_time(w)` of them (`end` - 1 ms), and interval
//! literals.

use datafusion_common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion_common::{Column, ScalarValue as DfScalar};
use datafusion_expr::{Expr as DfExpr, Operator};

use super::super::time::{df_field_of, WINDOW_TIME};
use super::super::unwindow::SideCol;
use super::super::SqlError;
use super::Side;

/// The bounds on `right.ts - left.ts` a conjunct sets, if it compares
/// the two inputs' event-time columns: `(lower, upper)` pairs.
pub(super) fn time_bound(
    c: &DfExpr,
    sides: &[Side; 2],
    resolve: Resolve<'_>,
    int_ms: [bool; 2],
) -> Option<Vec<(Option<i64>, Option<i64>)>> {
    let compare =
        |l: &DfExpr, op: Operator, r: &DfExpr| time_compare(l, op, r, sides, resolve, int_ms);
    match c {
        DfExpr::BinaryExpr(b) => compare(&b.left, b.op, &b.right).map(|x| vec![x]),
        DfExpr::Between(b) if !b.negated => {
            match (
                compare(&b.expr, Operator::GtEq, &b.low),
                compare(&b.expr, Operator::LtEq, &b.high),
            ) {
                (Some(lo), Some(hi)) => Some(vec![lo, hi]),
                _ => None,
            }
        }
        _ => None,
    }
}

/// The bounds on `right.ts - left.ts` that `l op r` sets, if it compares the
/// two inputs' event-time columns (each plus a constant).
pub(super) fn time_compare(
    l: &DfExpr,
    op: Operator,
    r: &DfExpr,
    sides: &[Side; 2],
    resolve: Resolve<'_>,
    int_ms: [bool; 2],
) -> Option<(Option<i64>, Option<i64>)> {
    let term = |e: &DfExpr| time_term(e, sides, resolve, int_ms);
    let ((sl, a), (sr, b)) = (term(l)?, term(r)?);
    if sl == sr {
        return None;
    }
    // right.ts - left.ts `op` c
    let (op, c) = if sl == 1 {
        (op, b - a)
    } else {
        (op.swap()?, a - b)
    };
    Some(match op {
        Operator::Eq => (Some(c), Some(c)),
        Operator::GtEq => (Some(c), None),
        Operator::Gt => (Some(c + 1), None),
        Operator::LtEq => (None, Some(c)),
        Operator::Lt => (None, Some(c - 1)),
        _ => return None,
    })
}

/// Which input and which of its columns a column names.
pub(super) type Resolve<'r> = &'r dyn Fn(&Column) -> Result<(usize, usize), SqlError>;

/// `e` as an input's event-time column plus a constant (ms): the side and
/// the offset.
pub(super) fn time_term(
    e: &DfExpr,
    sides: &[Side; 2],
    resolve: Resolve<'_>,
    int_ms: [bool; 2],
) -> Option<(usize, i64)> {
    match e {
        DfExpr::Column(c) => {
            let (s, i) = resolve(c).ok()?;
            match (&sides[s].cols[i].1, &sides[s].time) {
                (SideCol::Col(n), Some(t)) if n == t => Some((s, 0)),
                (SideCol::Col(n), Some(_)) => sides[s]
                    .offsets
                    .iter()
                    .find(|(c, _)| c == n)
                    .map(|(_, off)| (s, *off)),
                _ => None,
            }
        }
        DfExpr::ScalarFunction(f) if f.func.name().eq_ignore_ascii_case(WINDOW_TIME) => {
            // Spark's `window_time(w)` of a Spark window column timing an
            // input: its `end` - 1 ms, a fixed offset from the event time
            // (docs/API.md "SQL", Spark's spelling), for sessions too.
            let [DfExpr::Column(c)] = f.args.as_slice() else {
                return None;
            };
            let (s, i) = resolve(c).ok()?;
            let SideCol::Col(n) = &sides[s].cols[i].1 else {
                return None;
            };
            sides[s]
                .windows
                .iter()
                .any(|(w, _)| w == n)
                .then_some((s, -1))
        }
        DfExpr::ScalarFunction(_) => {
            // `w.end` / `w.start` of a Spark window column timing an input.
            let (c, field) = df_field_of(e)?;
            let (s, i) = resolve(c).ok()?;
            let SideCol::Col(n) = &sides[s].cols[i].1 else {
                return None;
            };
            let (_, size) = sides[s].windows.iter().find(|(w, _)| w == n)?;
            match (field, size) {
                ("end", _) => Some((s, 0)),
                ("start", Some(size)) => Some((s, -size)),
                _ => None,
            }
        }
        DfExpr::BinaryExpr(b) if matches!(b.op, Operator::Plus | Operator::Minus) => {
            if let Some((s, off)) = time_term(&b.left, sides, resolve, int_ms) {
                let ms = literal_ms(&b.right, int_ms[s])?;
                return Some((
                    s,
                    if b.op == Operator::Plus {
                        off + ms
                    } else {
                        off - ms
                    },
                ));
            }
            if b.op == Operator::Plus {
                let (s, off) = time_term(&b.right, sides, resolve, int_ms)?;
                return Some((s, off + literal_ms(&b.left, int_ms[s])?));
            }
            None
        }
        _ => None,
    }
}

/// An interval literal (or, for an int64 event time, an integer of ms) in ms.
fn literal_ms(e: &DfExpr, int_ms: bool) -> Option<i64> {
    let DfExpr::Literal(value, _) = e else {
        return None;
    };
    match value {
        DfScalar::IntervalMonthDayNano(Some(v))
            if v.months == 0 && v.nanoseconds % 1_000_000 == 0 =>
        {
            Some(i64::from(v.days) * 86_400_000 + v.nanoseconds / 1_000_000)
        }
        DfScalar::IntervalDayTime(Some(v)) => {
            Some(i64::from(v.days) * 86_400_000 + i64::from(v.milliseconds))
        }
        DfScalar::Int64(Some(v)) if int_ms => Some(*v),
        DfScalar::Int32(Some(v)) if int_ms => Some(i64::from(*v)),
        _ => None,
    }
}

/// The first `window_time(...)` call `c` holds, as written, if any: in a
/// join's `ON` it must bound the event times ([`time_term`]), or the join
/// would keep every row (sql/join.rs refuses it otherwise).
pub(super) fn window_time_call(c: &DfExpr) -> Option<String> {
    let mut found = None;
    // The visitor never fails: an error could only come from it.
    c.apply(|e| {
        Ok(match e {
            DfExpr::ScalarFunction(f) if f.func.name().eq_ignore_ascii_case(WINDOW_TIME) => {
                found = Some(e.to_string());
                TreeNodeRecursion::Stop
            }
            _ => TreeNodeRecursion::Continue,
        })
    })
    .ok()?;
    found
}
