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
use datafusion_common::{Column, ScalarValue as DfScalar};
use datafusion_expr::logical_plan::{Join, JoinType};
use datafusion_expr::utils::split_conjunction;
use datafusion_expr::{Expr as DfExpr, LogicalPlan, Operator};

use super::convert::{to_expr, Columns};
use super::lower::Lowering;
use super::rename::{filter, project};
use super::tvf::TemporalTable;
use super::{JoinKind, SqlError, SqlNode, WindowKind};
use crate::expr::{BinaryOp, Expr};

/// The prefix of the key copies an outer join carries (see the module docs).
const KEY_COPY: &str = "__sql_key";

fn refused(why: impl Into<String>) -> SqlError {
    SqlError::new("JOIN", why)
}

/// A column of a join input as SQL sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum SideCol {
    /// A column of the input's stream.
    Col(String),
    /// The bounds a windowing table function adds (made by a window join).
    WindowStart,
    WindowEnd,
}

/// A join input: its stream, its columns as SQL names them (aligned with
/// DataFusion's schema of the input), its event-time column and the windows
/// of a windowing table function it reads.
struct Side {
    node: SqlNode,
    cols: Vec<(String, SideCol)>,
    time: Option<String>,
    window: Option<(WindowKind, String)>,
}

/// Where a conjunct of the condition came from: `ON` or the `WHERE` above.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Clause {
    On,
    Where,
}

impl Lowering<'_> {
    /// The event-time column of `node`'s stream, where the lowering can tell.
    fn event_time(&self, node: &SqlNode) -> Option<String> {
        match node {
            SqlNode::Scan { view, .. } => self
                .views
                .iter()
                .find(|v| v.name == *view)?
                .time_column
                .clone(),
            SqlNode::Filter { input, .. } | SqlNode::Window { input, .. } => self.event_time(input),
            SqlNode::Project { input, exprs } => {
                let t = self.event_time(input)?;
                exprs
                    .iter()
                    .any(|(n, e)| *n == t && *e == Expr::col(t.clone()))
                    .then_some(t)
            }
            _ => None,
        }
    }

    fn side(&self, plan: &LogicalPlan) -> Result<Side, SqlError> {
        let node = self.lower(plan)?;
        let time = self.event_time(&node);
        let (node, cols, window) = unwindow(node)?;
        Ok(Side {
            node,
            cols,
            time,
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
        let keys = [
            sorted
                .keys
                .iter()
                .map(|(l, _)| l.clone())
                .collect::<Vec<_>>(),
            sorted
                .keys
                .iter()
                .map(|(_, r)| r.clone())
                .collect::<Vec<_>>(),
        ];
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
        Ok(match conjunction(&sorted.residual, &columns)? {
            Some(predicate) => filter(node, predicate),
            None => node,
        })
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
    /// Conditions on one input, run before the join.
    pushed: [Vec<&'e DfExpr>; 2],
    /// Conditions run after the join.
    residual: Vec<&'e DfExpr>,
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
            side.cols
                .iter()
                .position(|(_, c)| matches!((c, &side.time), (SideCol::Col(n), Some(t)) if n == t))
                .is_some_and(|i| schema.field(i).data_type() == &DataType::Int64)
        })
    }

    fn sort(&self, where_: Option<&'a DfExpr>) -> Result<Sorted<'a>, SqlError> {
        let j: &'a Join = self.j;
        let mut sorted = Sorted {
            keys: Vec::new(),
            lower: None,
            upper: None,
            bounds_matched: [false, false],
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
        Ok(sorted)
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
        if let DfExpr::BinaryExpr(b) = c {
            if let (Operator::Eq, DfExpr::Column(x), DfExpr::Column(y)) =
                (b.op, b.left.as_ref(), b.right.as_ref())
            {
                let ((sx, ix), (sy, iy)) = (self.resolve(x)?, self.resolve(y)?);
                if sx != sy && !after_outer {
                    let (li, ri) = if sx == 0 { (ix, iy) } else { (iy, ix) };
                    match (&self.sides[0].cols[li].1, &self.sides[1].cols[ri].1) {
                        (SideCol::Col(a), SideCol::Col(b)) => {
                            sorted.keys.push((a.clone(), b.clone()));
                        }
                        (SideCol::WindowStart, SideCol::WindowStart) => {
                            sorted.bounds_matched[0] = true;
                        }
                        (SideCol::WindowEnd, SideCol::WindowEnd) => {
                            sorted.bounds_matched[1] = true;
                        }
                        _ => {
                            return Err(refused(format!(
                                "{c}: a window join equates window_start with window_start \
                                 and window_end with window_end"
                            )))
                        }
                    }
                    return Ok(());
                }
            }
        }
        if self.timed && !after_outer {
            if let Some(found) = time_bound(c, self.sides, &|col| self.resolve(col), self.int_ms())
            {
                for (lo, hi) in found {
                    if let Some(lo) = lo {
                        sorted.lower = Some(sorted.lower.map_or(lo, |l| l.max(lo)));
                    }
                    if let Some(hi) = hi {
                        sorted.upper = Some(sorted.upper.map_or(hi, |u| u.min(hi)));
                    }
                }
                return Ok(());
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

/// The bounds on `right.ts - left.ts` a conjunct sets, if it compares
/// the two inputs' event-time columns: `(lower, upper)` pairs.
fn time_bound(
    c: &DfExpr,
    sides: &[Side; 2],
    resolve: Resolve<'_>,
    int_ms: [bool; 2],
) -> Option<Vec<(Option<i64>, Option<i64>)>> {
    let term = |e: &DfExpr| time_term(e, sides, resolve, int_ms);
    let compare = |l: &DfExpr, op: Operator, r: &DfExpr| -> Option<(Option<i64>, Option<i64>)> {
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
    };
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

/// Which input and which of its columns a column names.
type Resolve<'r> = &'r dyn Fn(&Column) -> Result<(usize, usize), SqlError>;

/// `e` as an input's event-time column plus a constant (ms): the side and
/// the offset.
fn time_term(
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

type Unwindowed = (
    SqlNode,
    Vec<(String, SideCol)>,
    Option<(WindowKind, String)>,
);

/// `node` with its windowing table function taken out (a window join adds
/// the bounds), the columns as SQL sees them and the windows; filters and
/// projections above it may pass the bounds through but not compute with them.
fn unwindow(node: SqlNode) -> Result<Unwindowed, SqlError> {
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
