//! Joins in SQL lowered to the DSL's joins (docs/API.md "SQL" and "Joins"):
//! DataFusion plans `a JOIN b ON ...` as one join whose condition is a
//! single expression; its conjuncts are sorted here into what eddyline's
//! join operator takes and what runs around it:
//!
//! - `a.k = b.k` (a left and a right column): the join keys;
//! - comparisons of the two inputs' event-time columns with constant
//!   offsets (`a.ts BETWEEN b.ts - INTERVAL '5' SECOND AND b.ts + ...`, or
//!   `>=`/`<=`/`>`/`<`): an interval join, `lower <= b.ts - a.ts <= upper`
//!   (event time is in milliseconds, so a strict bound is one ms tighter);
//! - `L.window_start = R.window_start AND L.window_end = R.window_end` over
//!   two inputs through the same windowing table function: a window join;
//! - a right table read `FOR SYSTEM_TIME AS OF a.ts` (the left's event
//!   time): a temporal join (tvf.rs cuts the clause out);
//! - a condition on one input only: a filter of that input before the join
//!   where SQL allows it (an inner join; the non-preserved side of an outer
//!   join's `ON`; the preserved side of its `WHERE`);
//! - anything else: a filter after an inner join (or after any join, from
//!   `WHERE`); in an outer join's `ON` it is refused.
//!
//! Output: SQL's columns of a join are the left's then the right's; the left
//! keep their names and a right column whose name is taken gets the suffix
//! `_right`, as the DSL names them (so `SELECT *` over `a JOIN b ON a.k = b.k`
//! has `k` and `k_right`). The join operator holds each key once; where an
//! outer join may leave a side's keys null, that side's key columns travel
//! through the join as copies so `b.k` is null where SQL says so.

use std::collections::{HashMap, HashSet};

use arrow::datatypes::DataType;
use datafusion_common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion_common::Column;
use datafusion_expr::logical_plan::{Join, JoinType};
use datafusion_expr::utils::split_conjunction;
use datafusion_expr::{Expr as DfExpr, LogicalPlan, Operator};

use super::closing::{close, closing};
use super::convert::{to_expr, Columns};
use super::lower::Lowering;
use super::rename::filter;
use super::time::{df_field_of, int_ms_window};
use super::tvf::TemporalTable;
use super::unwindow::{unwindow, SideCol};
use super::{JoinKind, SqlError, SqlNode, WindowKind};
use crate::expr::{BinaryOp, Expr};

/// The prefix of the key copies an outer join carries (see the module docs).
#[path = "join_time.rs"]
mod join_time;
use join_time::{time_bound, time_compare, time_term, window_time_call};

const KEY_COPY: &str = "__sql_key";

fn refused(why: impl Into<String>) -> SqlError {
    SqlError::new("JOIN", why)
}

/// A join input: its stream, its columns as SQL names them (aligned with
/// DataFusion's schema of the input), its event-time column and the windows
/// of a windowing table function it reads.
struct Side {
    node: SqlNode,
    cols: Vec<(String, SideCol)>,
    time: Option<String>,
    /// Columns a fixed offset (ms) from the event time (time.rs).
    offsets: Vec<(String, i64)>,
    /// Spark's window columns whose `end` is the event time (time.rs).
    windows: Vec<(String, Option<i64>)>,
    window: Option<(WindowKind, String)>,
}

/// Where a conjunct of the condition came from: `ON` or the `WHERE` above.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Clause {
    On,
    Where,
}

impl Lowering<'_> {
    fn side(&self, plan: &LogicalPlan) -> Result<Side, SqlError> {
        let node = self.lower(plan)?;
        self.refuse_running(&node, "JOIN")?;
        let timed = self.timed(&node);
        let (node, cols, window) = unwindow(node)?;
        // A Spark window's end as a column the join can read (time.rs).
        let (node, timed) = self.with_time_column(node, timed)?;
        let (time, offsets, windows) = match timed {
            Some(t) => (t.column, t.offsets, t.windows),
            None => (None, Vec::new(), Vec::new()),
        };
        Ok(Side {
            node,
            cols,
            time,
            offsets,
            windows,
            window,
        })
    }

    /// The versioned table `plan` reads, if it is one.
    fn temporal_of(&self, plan: &LogicalPlan) -> Option<&TemporalTable> {
        match plan {
            LogicalPlan::SubqueryAlias(s) => self.temporal_of(&s.input),
            LogicalPlan::TableScan(scan) => self
                .temporals
                .iter()
                .find(|t| t.name == scan.table_name.table()),
            _ => None,
        }
    }

    /// Lowers `j` (with the predicate of a `WHERE` right above it).
    pub(crate) fn join(&self, j: &Join, where_: Option<&DfExpr>) -> Result<SqlNode, SqlError> {
        let how = match j.join_type {
            JoinType::Inner => "inner",
            JoinType::Left => "left",
            JoinType::Right => "right",
            JoinType::Full => "outer",
            other => {
                return Err(refused(format!(
                    "{other} joins are not supported; JOIN, LEFT, RIGHT and FULL [OUTER] JOIN are"
                )))
            }
        };
        if let Some(t) = self.temporal_of(&j.left) {
            return Err(SqlError::new(
                "FOR SYSTEM_TIME AS OF",
                format!(
                    "'{}' FOR SYSTEM_TIME AS OF must be the right table of a JOIN (the \
                     versioned one)",
                    t.view
                ),
            ));
        }
        let temporal = self.temporal_of(&j.right);
        let mut sides = [self.side(&j.left)?, self.side(&j.right)?];
        let window = window_of(&sides)?;
        let sorted = Sorter {
            j,
            how,
            sides: &sides,
            timed: window.is_none() && temporal.is_none(),
            temporal: temporal.is_some(),
        }
        .sort(where_)?;
        let (kind, time_columns) = self.kind(j, how, &sides, window, temporal, &sorted)?;
        push_filters(j, &mut sides, &sorted.pushed)?;
        let keys: [Vec<String>; 2] = [0, 1].map(|s| {
            sorted
                .keys
                .iter()
                .map(|(l, r)| if s == 0 { l.clone() } else { r.clone() })
                .collect()
        });
        // Where an outer join may leave a side's keys null, they travel as copies.
        let copies = [
            matches!(how, "right" | "outer"),
            matches!(how, "left" | "outer"),
        ];
        for s in 0..2 {
            if copies[s] {
                let node = std::mem::replace(&mut sides[s].node, placeholder());
                let mut exprs: Vec<(String, Expr)> = node
                    .columns()
                    .into_iter()
                    .map(|n| (n.clone(), Expr::col(n)))
                    .collect();
                for (i, k) in keys[s].iter().enumerate() {
                    exprs.push((copy_name(s, i), Expr::col(k.clone())));
                }
                sides[s].node = SqlNode::Project {
                    input: Box::new(node),
                    exprs,
                };
            }
        }
        let windowed = matches!(kind, JoinKind::Window(_));
        let (out, renamed) = output_names(&sides, &keys, windowed)?;
        let (sql_names, exprs) = sql_columns(&sides, &keys, copies, &renamed)?;
        // The closing column (closing.rs), as the join operator names it.
        let closing = closing(how, &kind, sorted.closing).map(|(s, i)| {
            exprs[if s == 0 { i } else { sides[0].cols.len() + i }]
                .1
                .columns()[0]
                .to_string()
        });
        let [left, right] = sides;
        let [left_on, right_on] = keys;
        let joined = SqlNode::Join {
            left: Box::new(left.node),
            right: Box::new(right.node),
            how: how.to_string(),
            left_on,
            right_on,
            kind,
            time_columns,
            columns: out,
        };
        let node = SqlNode::Project {
            input: Box::new(joined),
            exprs,
        };
        let columns = Columns {
            schema: &j.schema,
            names: &sql_names,
        };
        let node = match conjunction(&sorted.residual, &columns)? {
            Some(predicate) => filter(node, predicate),
            None => node,
        };
        Ok(close(node, closing))
    }

    /// The kind of join the sorted condition makes, and the event-time
    /// columns its bound reads.
    fn kind(
        &self,
        j: &Join,
        how: &str,
        sides: &[Side; 2],
        window: Option<(WindowKind, String, String)>,
        temporal: Option<&TemporalTable>,
        sorted: &Sorted<'_>,
    ) -> Result<(JoinKind, Option<(String, String)>), SqlError> {
        if sorted.keys.is_empty() {
            return Err(refused(
                "a streaming join needs an equality of a left and a right column (ON a.k = \
                 b.k): without keys every row would be kept and matched against every other",
            ));
        }
        Ok(match (window, temporal, sorted.lower, sorted.upper) {
            (Some((kind, lt, rt)), _, _, _) => {
                if sorted.bounds_matched != [true, true] {
                    return Err(refused(
                        "a join of two windowing table functions is a window join: its ON \
                         needs L.window_start = R.window_start AND L.window_end = \
                         R.window_end (and the keys)",
                    ));
                }
                (JoinKind::Window(kind), Some((lt, rt)))
            }
            (None, Some(t), _, _) => {
                if how != "inner" && how != "left" {
                    return Err(refused(format!(
                        "a temporal join (FOR SYSTEM_TIME AS OF) is an inner or LEFT join, \
                         got {how}"
                    )));
                }
                let lt = self.as_of(t, j, &sides[0])?;
                let Some(rt) = sides[1].time.clone() else {
                    return Err(SqlError::new(
                        "FOR SYSTEM_TIME AS OF",
                        format!(
                            "the versioned table '{}' has no event time: call \
                             assign_timestamps on its stream before registering it",
                            t.view
                        ),
                    ));
                };
                (JoinKind::Temporal, Some((lt, rt)))
            }
            (None, None, Some(lower_ms), Some(upper_ms)) => {
                if lower_ms > upper_ms {
                    return Err(refused(format!(
                        "the time condition leaves no interval: the right's event time must \
                         be at least {lower_ms} ms and at most {upper_ms} ms after the left's"
                    )));
                }
                let times = sides[0].time.clone().zip(sides[1].time.clone());
                (JoinKind::Interval { lower_ms, upper_ms }, times)
            }
            (None, None, None, None) => {
                if how != "inner" {
                    return Err(refused(format!(
                        "a {} join needs a time bound: without one an unmatched row could \
                         still match later and would never be emitted; bound the event times \
                         (a.ts BETWEEN b.ts - INTERVAL ... AND b.ts + INTERVAL ...)",
                        how.to_uppercase()
                    )));
                }
                // The event times a state_ttl reads (the Python lowering
                // decides the TTL), so pruning keeps them.
                let times = sides[0].time.clone().zip(sides[1].time.clone());
                (JoinKind::Regular, times)
            }
            (None, None, _, _) if sorted.row_bound.is_some() => {
                return Err(refused(format!(
                    "{}: a bound of the event time by a column of each row (an auction's \
                     expires) cannot bound the join's state by itself, as no constant says \
                     how long a row waits for its matches: add a constant bound on both \
                     sides, such as b.ts >= a.ts AND b.ts <= a.ts + INTERVAL '10' MINUTE (the \
                     longest an auction runs), and keep the per-row bound as a condition \
                     (docs/API.md \"SQL\", closing groups)",
                    sorted.row_bound.as_deref().unwrap_or_default()
                )))
            }
            (None, None, _, _) => {
                return Err(refused(
                    "an interval join needs a lower and an upper bound of the event times \
                     (a.ts BETWEEN b.ts - INTERVAL ... AND b.ts + INTERVAL ...); with one \
                     bound every row would be kept forever",
                ))
            }
        })
    }

    /// The left's column `FOR SYSTEM_TIME AS OF` names, which must be its event time.
    fn as_of(&self, t: &TemporalTable, j: &Join, left: &Side) -> Result<String, SqlError> {
        let written = t.as_of.join(".");
        let column = match t.as_of.as_slice() {
            [name] => Column::from_name(name.clone()),
            [qualifier @ .., name] => Column::new(Some(qualifier.join(".")), name.clone()),
            [] => Column::from_name(""),
        };
        let wrong = |why: String| SqlError::new("FOR SYSTEM_TIME AS OF", why);
        let index = j
            .left
            .schema()
            .index_of_column(&column)
            .map_err(|_| wrong(format!("AS OF {written}: no such column of the left table")))?;
        match (&left.cols[index].1, &left.time) {
            (SideCol::Col(n), Some(time)) if n == time => Ok(n.clone()),
            (_, time) => Err(wrong(format!(
                "AS OF {written} must be the left table's event-time column{}",
                time.as_ref()
                    .map(|t| format!(" ('{t}')"))
                    .unwrap_or_else(|| " (it has none: call assign_timestamps)".into())
            ))),
        }
    }
}

/// The conjuncts of a join's condition, sorted (see the module docs).
struct Sorted<'e> {
    /// `(left column, right column)` pairs.
    keys: Vec<(String, String)>,
    /// Bounds of `right.ts - left.ts` in ms.
    lower: Option<i64>,
    upper: Option<i64>,
    /// Whether `window_start` and `window_end` are equated.
    bounds_matched: [bool; 2],
    /// The inputs' event-time columns, where equated.
    time_key: Option<(String, String)>,
    /// A comparison of an input's event time with a column of the other
    /// input that is not its event time (a bound that differs per row).
    row_bound: Option<String>,
    /// The input and column of a per-row upper bound of the other input's
    /// event time (`b.ts <= a.expires`: input 0, the index of `expires`).
    closing: Option<(usize, usize)>,
    /// Conditions on one input, run before the join.
    pushed: [Vec<&'e DfExpr>; 2],
    /// Conditions run after the join.
    residual: Vec<&'e DfExpr>,
}

impl Sorted<'_> {
    /// Narrows the bounds of `right.ts - left.ts` to `found`.
    fn narrow(&mut self, found: Vec<(Option<i64>, Option<i64>)>) {
        for (lo, hi) in found {
            if let Some(lo) = lo {
                self.lower = Some(self.lower.map_or(lo, |l| l.max(lo)));
            }
            if let Some(hi) = hi {
                self.upper = Some(self.upper.map_or(hi, |u| u.min(hi)));
            }
        }
    }
}

/// How a conjunct bounds the inputs' event times.
enum TimeBound {
    /// By constants only: the join's interval is all it is.
    Constant,
    /// By a column of each row too: it filters the joined rows as well.
    PerRow,
}

/// What a conjunct bounding an event time by a column of each row bounds.
struct RowBound {
    /// Its constant bounds of `right.ts - left.ts` (a `BETWEEN`'s other end).
    time: Vec<(Option<i64>, Option<i64>)>,
    /// The input and column bounding the other input's event time from above.
    closing: Option<(usize, usize)>,
}

struct Sorter<'a, 's> {
    j: &'a Join,
    how: &'s str,
    sides: &'s [Side; 2],
    timed: bool,
    temporal: bool,
}

impl<'a> Sorter<'a, '_> {
    /// The input and the input's column that `c` names.
    fn resolve(&self, c: &Column) -> Result<(usize, usize), SqlError> {
        let n_left = self.j.left.schema().fields().len();
        let i = self
            .j
            .schema
            .index_of_column(c)
            .map_err(|e| SqlError::new("column", e.strip_backtrace()))?;
        Ok(if i < n_left { (0, i) } else { (1, i - n_left) })
    }

    /// Whether each input's event time is int64 milliseconds (then plain
    /// integers offset it, in ms).
    fn int_ms(&self) -> [bool; 2] {
        [0, 1].map(|s| {
            let schema = if s == 0 {
                self.j.left.schema()
            } else {
                self.j.right.schema()
            };
            let side = &self.sides[s];
            let window = side.windows.first().map(|(w, _)| w);
            side.cols
                .iter()
                .position(|(_, c)| matches!((c, &side.time), (SideCol::Col(n), Some(t)) if n == t))
                .map(|i| schema.field(i).data_type() == &DataType::Int64)
                .or_else(|| {
                    let i = side.cols.iter().position(
                        |(_, c)| matches!((c, window), (SideCol::Col(n), Some(w)) if n == w),
                    )?;
                    Some(int_ms_window(schema.field(i).data_type()))
                })
                .unwrap_or(false)
        })
    }

    /// Where `c` compares an input's event time with a column of the other
    /// input that is not its event time (`b.ts <= a.expires`, or a `BETWEEN`
    /// with such a bound and a constant one): what it bounds.
    fn row_bound(&self, c: &DfExpr) -> Option<RowBound> {
        let parts: Vec<(&DfExpr, Operator, &DfExpr)> = match c {
            DfExpr::BinaryExpr(b) => vec![(b.left.as_ref(), b.op, b.right.as_ref())],
            DfExpr::Between(b) if !b.negated => vec![
                (b.expr.as_ref(), Operator::GtEq, b.low.as_ref()),
                (b.expr.as_ref(), Operator::LtEq, b.high.as_ref()),
            ],
            _ => return None,
        };
        let int_ms = self.int_ms();
        let resolve = |col: &Column| self.resolve(col);
        let mut bound = RowBound {
            time: Vec::new(),
            closing: None,
        };
        let mut per_row = false;
        for (l, op, r) in parts {
            if let Some(found) = time_compare(l, op, r, self.sides, &resolve, int_ms) {
                bound.time.push(found);
            } else if let Some(closing) = self.per_row(l, op, r) {
                per_row = true;
                bound.closing = bound.closing.or(closing);
            } else {
                return None;
            }
        }
        per_row.then_some(bound)
    }

    /// Whether `l op r` bounds an input's event time by a column of the other
    /// input that is not its event time; `Some(Some((input, column)))` where
    /// it is an upper bound by a plain column (`b.ts <= a.expires`, `b.ts + 5
    /// < a.expires`): each joined row's `b.ts` is at most that column.
    fn per_row(&self, l: &DfExpr, op: Operator, r: &DfExpr) -> Option<Option<(usize, usize)>> {
        if !matches!(
            op,
            Operator::Lt | Operator::LtEq | Operator::Gt | Operator::GtEq
        ) {
            return None;
        }
        let int_ms = self.int_ms();
        let time = |e: &DfExpr| time_term(e, self.sides, &|col| self.resolve(col), int_ms);
        let (s, offset, op, other) = match (time(l), time(r)) {
            (Some((s, off)), None) => (s, off, op, r),
            (None, Some((s, off))) => (s, off, op.swap()?, l),
            _ => return None,
        };
        let reads_other = other
            .column_refs()
            .iter()
            .any(|col| self.resolve(col).is_ok_and(|(side, _)| side != s));
        if !reads_other {
            return None;
        }
        let upper = matches!(op, Operator::Lt | Operator::LtEq) && offset >= 0;
        let column = match other {
            DfExpr::Column(col) => self.resolve(col).ok().filter(|(side, i)| {
                *side != s && matches!(self.sides[*side].cols[*i].1, SideCol::Col(_))
            }),
            _ => None,
        };
        Some(column.filter(|_| upper))
    }

    /// `w.start` (as written) where `c` reads the start of a Spark session
    /// window that times an input (time.rs).
    fn session_start(&self, c: &DfExpr) -> Option<String> {
        let mut found = None;
        // The visitor never fails: an error could only come from it.
        c.apply(|e| {
            let session = df_field_of(e)
                .filter(|(_, f)| *f == "start")
                .and_then(|(col, _)| {
                    let (s, i) = self.resolve(col).ok()?;
                    let SideCol::Col(n) = &self.sides[s].cols[i].1 else {
                        return None;
                    };
                    self.sides[s]
                        .windows
                        .iter()
                        .any(|(w, size)| w == n && size.is_none())
                        .then(|| format!("{col}.start"))
                });
            Ok(match session {
                Some(name) => {
                    found = Some(name);
                    TreeNodeRecursion::Stop
                }
                None => TreeNodeRecursion::Continue,
            })
        })
        .ok()?;
        found
    }

    fn sort(&self, where_: Option<&'a DfExpr>) -> Result<Sorted<'a>, SqlError> {
        let j: &'a Join = self.j;
        let mut sorted = Sorted {
            keys: Vec::new(),
            lower: None,
            upper: None,
            bounds_matched: [false, false],
            time_key: None,
            row_bound: None,
            closing: None,
            pushed: [Vec::new(), Vec::new()],
            residual: Vec::new(),
        };
        for (l, r) in &j.on {
            // USING (a, b): pairs of columns.
            let (DfExpr::Column(lc), DfExpr::Column(rc)) = (l, r) else {
                return Err(refused(format!("join on {l} = {r} is not supported")));
            };
            let (li, ri) = (self.resolve(lc)?.1, self.resolve(rc)?.1);
            match (&self.sides[0].cols[li].1, &self.sides[1].cols[ri].1) {
                (SideCol::Col(a), SideCol::Col(b)) => sorted.keys.push((a.clone(), b.clone())),
                _ => return Err(refused("USING cannot name window_start/window_end")),
            }
        }
        let mut conjuncts: Vec<(&'a DfExpr, Clause)> = Vec::new();
        if let Some(f) = &j.filter {
            conjuncts.extend(split_conjunction(f).into_iter().map(|c| (c, Clause::On)));
        }
        if let Some(f) = where_ {
            conjuncts.extend(split_conjunction(f).into_iter().map(|c| (c, Clause::Where)));
        }
        for (c, clause) in conjuncts {
            self.sort_one(c, clause, &mut sorted)?;
        }
        if sorted.keys.is_empty() {
            sorted.keys.extend(sorted.time_key.clone());
        }
        Ok(sorted)
    }

    /// Sorts `c` where it equates a left and a right column (a key, the
    /// event times, window bounds); whether it did.
    fn sort_equality(&self, c: &'a DfExpr, sorted: &mut Sorted<'a>) -> Result<bool, SqlError> {
        let DfExpr::BinaryExpr(b) = c else {
            return Ok(false);
        };
        let (Operator::Eq, DfExpr::Column(x), DfExpr::Column(y)) =
            (b.op, b.left.as_ref(), b.right.as_ref())
        else {
            return Ok(false);
        };
        let ((sx, ix), (sy, iy)) = (self.resolve(x)?, self.resolve(y)?);
        if sx == sy {
            return Ok(false);
        }
        let (li, ri) = if sx == 0 { (ix, iy) } else { (iy, ix) };
        match (&self.sides[0].cols[li].1, &self.sides[1].cols[ri].1) {
            (SideCol::Col(a), SideCol::Col(b))
                if self.timed
                    && self.sides[0].time.as_ref() == Some(a)
                    && self.sides[1].time.as_ref() == Some(b) =>
            {
                // Equal event times: an interval of 0 ms (a key only where
                // there is no other).
                sorted.lower = Some(sorted.lower.map_or(0, |l| l.max(0)));
                sorted.upper = Some(sorted.upper.map_or(0, |u| u.min(0)));
                sorted.time_key = Some((a.clone(), b.clone()));
            }
            (SideCol::Col(a), SideCol::Col(b))
                if self.timed
                    && self.sides[0].windows.iter().any(|(w, _)| w == a)
                    && self.sides[1].windows.iter().any(|(w, _)| w == b) =>
            {
                // Equal Spark windows have equal ends, their event times: an
                // interval of 0 ms, and a key (a session's start is not fixed).
                sorted.lower = Some(sorted.lower.map_or(0, |l| l.max(0)));
                sorted.upper = Some(sorted.upper.map_or(0, |u| u.min(0)));
                sorted.keys.push((a.clone(), b.clone()));
            }
            (SideCol::Col(a), SideCol::Col(b)) => sorted.keys.push((a.clone(), b.clone())),
            (SideCol::WindowStart, SideCol::WindowStart) => sorted.bounds_matched[0] = true,
            (SideCol::WindowEnd, SideCol::WindowEnd) => sorted.bounds_matched[1] = true,
            _ => {
                return Err(refused(format!(
                    "{c}: a window join equates window_start with window_start and \
                     window_end with window_end"
                )))
            }
        }
        Ok(true)
    }

    /// Sorts `c` where it bounds the inputs' event times (join_time.rs):
    /// what kind of bound it is, if it is one.
    fn sort_time(&self, c: &'a DfExpr, sorted: &mut Sorted<'a>) -> Option<TimeBound> {
        if let Some(found) = time_bound(c, self.sides, &|col| self.resolve(col), self.int_ms()) {
            if found == [(Some(0), Some(0))] && sorted.time_key.is_none() {
                // Equal event times (`a.window.end = b.window.end`): a key
                // where there is no other, as for equal time columns.
                let times = self.sides[0].time.clone().zip(self.sides[1].time.clone());
                sorted.time_key = times;
            }
            sorted.narrow(found);
            return Some(TimeBound::Constant);
        }
        let bound = self.row_bound(c)?;
        // `b.ts BETWEEN a.ts AND a.expires`: the constant part bounds the
        // interval; the whole condition filters the joined rows.
        sorted.narrow(bound.time);
        sorted
            .row_bound
            .get_or_insert_with(|| match self.session_start(c) {
                Some(start) => format!(
                    "{c} ({start}: a session window's start is no fixed offset from its \
                     end, the event time)"
                ),
                None => c.to_string(),
            });
        if sorted.closing.is_none() {
            sorted.closing = bound.closing;
        }
        Some(TimeBound::PerRow)
    }

    fn sort_one(
        &self,
        c: &'a DfExpr,
        clause: Clause,
        sorted: &mut Sorted<'a>,
    ) -> Result<(), SqlError> {
        let outer = self.how != "inner";
        let after_outer = outer && clause == Clause::Where;
        // Equalities of a left and a right column: keys or window bounds.
        if !after_outer && self.sort_equality(c, sorted)? {
            return Ok(());
        }
        let mut row_bounded = false;
        if self.timed && !after_outer {
            match self.sort_time(c, sorted) {
                Some(TimeBound::Constant) => return Ok(()),
                Some(TimeBound::PerRow) => row_bounded = true,
                None => {}
            }
        }
        let mut read = HashSet::new();
        let mut bounds = false;
        for col in c.column_refs() {
            let (s, i) = self.resolve(col)?;
            read.insert(s);
            bounds |= !matches!(self.sides[s].cols[i].1, SideCol::Col(_));
        }
        if read.len() == 1 && !bounds {
            let s = *read.iter().next().expect("invariant: one side read");
            // Whether filtering side `s` before the join gives SQL's answer.
            let preserved = |side: usize| match self.how {
                "inner" => true,
                "left" => side == 0,
                "right" => side == 1,
                _ => false,
            };
            // A versioned table's rows are its versions: a filter of them
            // would change which version is the newest.
            let pushable = !(self.temporal && s == 1)
                && match clause {
                    Clause::On => self.how == "inner" || !preserved(s) && self.how != "outer",
                    Clause::Where => preserved(s),
                };
            if pushable {
                sorted.pushed[s].push(c);
                return Ok(());
            }
        }
        if read.len() == 2 && !row_bounded && !after_outer {
            if let Some(call) = window_time_call(c) {
                // Not an event-time bound (join_time.rs): as a condition
                // after the join it would leave the join without one, its
                // state kept forever, where the query reads as bounded.
                return Err(refused(format!(
                    "{c}: {call} in a join's condition bounds the join only where its \
                     argument is the Spark window column (of a GROUP BY window(...) or \
                     session_window(...)) whose end times its input, compared with the \
                     other input's event time, window end or window_time plus constants \
                     (docs/API.md \"SQL\")"
                )));
            }
        }
        if outer && clause == Clause::On {
            return Err(refused(format!(
                "{c}: the ON of an outer join takes key equalities, the interval on the \
                 event-time columns and conditions on the side whose rows may go \
                 unmatched; move this condition to WHERE or into a subquery"
            )));
        }
        sorted.residual.push(c);
        Ok(())
    }
}

/// `predicates` over `columns`, and-ed (None when there are none).
fn conjunction(predicates: &[&DfExpr], columns: &Columns<'_>) -> Result<Option<Expr>, SqlError> {
    let mut out: Option<Expr> = None;
    for p in predicates {
        let e = to_expr(p, columns)?;
        out = Some(match out {
            None => e,
            Some(acc) => Expr::binary(BinaryOp::And, acc, e),
        });
    }
    Ok(out)
}

/// Filters each input by the conditions on it alone.
fn push_filters(
    j: &Join,
    sides: &mut [Side; 2],
    pushed: &[Vec<&DfExpr>; 2],
) -> Result<(), SqlError> {
    for (s, predicates) in pushed.iter().enumerate() {
        let schema = if s == 0 {
            j.left.schema()
        } else {
            j.right.schema()
        };
        let names: Vec<String> = sides[s].cols.iter().map(|(n, _)| n.clone()).collect();
        let columns = Columns {
            schema,
            names: &names,
        };
        if let Some(predicate) = conjunction(predicates, &columns)? {
            let node = std::mem::replace(&mut sides[s].node, placeholder());
            sides[s].node = filter(node, predicate);
        }
    }
    Ok(())
}

type Renamed = [HashMap<String, String>; 2];

/// The join operator's output names (its module's "Output"), and each
/// input's non-key columns' names in it.
fn output_names(
    sides: &[Side; 2],
    keys: &[Vec<String>; 2],
    windowed: bool,
) -> Result<(Vec<String>, Renamed), SqlError> {
    let mut out: Vec<String> = keys[0].clone();
    if windowed {
        out.push("window_start".into());
        out.push("window_end".into());
    }
    let mut taken: HashSet<String> = out.iter().cloned().collect();
    let mut renamed: Renamed = [HashMap::new(), HashMap::new()];
    for s in 0..2 {
        for n in sides[s].node.columns() {
            if keys[s].contains(&n) {
                continue;
            }
            let mut name = n.clone();
            if taken.contains(&name) {
                name = format!("{n}_right");
                if s == 0 || taken.contains(&name) {
                    return Err(clash(&n, &name));
                }
            }
            taken.insert(name.clone());
            out.push(name.clone());
            renamed[s].insert(n, name);
        }
    }
    Ok((out, renamed))
}

fn clash(a: &str, b: &str) -> SqlError {
    refused(format!(
        "the join's inputs both have columns '{a}' and '{b}'; rename one with AS in a subquery"
    ))
}

/// The join's SQL column names, and for each the expression picking it
/// from the join operator's output.
type SqlColumns = (Vec<String>, Vec<(String, Expr)>);

/// SQL's columns of the join (the left's, then the right's; a taken name
/// gets `_right`), each picking a column of the join operator's output.
fn sql_columns(
    sides: &[Side; 2],
    keys: &[Vec<String>; 2],
    copies: [bool; 2],
    renamed: &Renamed,
) -> Result<SqlColumns, SqlError> {
    let mut names: Vec<String> = Vec::new();
    let mut exprs: Vec<(String, Expr)> = Vec::new();
    for s in 0..2 {
        for (name, col) in &sides[s].cols {
            let source = match col {
                SideCol::WindowStart => "window_start".to_string(),
                SideCol::WindowEnd => "window_end".to_string(),
                SideCol::Col(n) => match keys[s].iter().position(|k| k == n) {
                    Some(i) if copies[s] => copy_name(s, i),
                    Some(i) => keys[0][i].clone(),
                    None => renamed[s][n].clone(),
                },
            };
            let mut sql = name.clone();
            if names.contains(&sql) {
                sql = format!("{name}_right");
                if names.contains(&sql) {
                    return Err(clash(name, &sql));
                }
            }
            names.push(sql.clone());
            exprs.push((sql, Expr::col(source)));
        }
    }
    Ok((names, exprs))
}

fn copy_name(side: usize, i: usize) -> String {
    format!("{KEY_COPY}_{}{i}", if side == 0 { "l" } else { "r" })
}

fn placeholder() -> SqlNode {
    SqlNode::Union { inputs: Vec::new() }
}

/// Both inputs' windows (kind, left and right time column), or none;
/// anything else is refused.
fn window_of(sides: &[Side; 2]) -> Result<Option<(WindowKind, String, String)>, SqlError> {
    match (&sides[0].window, &sides[1].window) {
        (None, None) => Ok(None),
        (Some((a, lt)), Some((b, rt))) if a == b => Ok(Some((a.clone(), lt.clone(), rt.clone()))),
        (Some(_), Some(_)) => Err(refused(
            "a window join needs both inputs through the same windowing table function \
             (same kind and sizes)",
        )),
        _ => Err(refused(
            "a window join needs both inputs through a windowing table function (TUMBLE, \
             HOP or SESSION); only one is",
        )),
    }
}
