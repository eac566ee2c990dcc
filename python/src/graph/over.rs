//! `over_rows` and `over_range`: the event-time over windows per key
//! (`keyed.over_rows(...)`, `keyed.over_range(...)`, SQL's `agg(col) OVER
//! (...)`), read from their typed specs (`OverRowsSpec`, `OverRangeSpec` in
//! `eddyline/_specs.py`).

use std::sync::Arc;

use eddyline_core::error::Error;
use eddyline_core::operator::over_rows::{
    OverAggregate, OverFunction, OverPreceding, OverRowsFactory,
};
use pyo3::prelude::*;

use super::{operator, Ctx, NodeError, NodeParts};

/// One aggregate of an over window: the function, its column (None: a
/// count of rows) and its output column.
#[derive(FromPyObject)]
struct OverAggregateSpec {
    function: String,
    column: Option<String>,
    name: String,
}

/// `over_rows`: the partition keys, the event-time column, the tie-breaking
/// `order_by` columns, the frame's preceding rows (None: every row before)
/// and the aggregates.
#[derive(FromPyObject)]
pub(super) struct OverRowsSpec {
    keys: Vec<String>,
    time_column: String,
    order_by: Vec<String>,
    preceding: Option<usize>,
    aggregates: Vec<OverAggregateSpec>,
}

/// `over_range`: the partition keys, the event-time column, the frame's
/// preceding event time in milliseconds (None: every row up to the current
/// row's time) and the aggregates; rows of one time share a frame, so no
/// column orders them.
#[derive(FromPyObject)]
pub(super) struct OverRangeSpec {
    keys: Vec<String>,
    time_column: String,
    preceding_ms: Option<i64>,
    aggregates: Vec<OverAggregateSpec>,
}

/// `over_rows`: the operator and its output schema (the input's columns,
/// then the aggregates).
pub(super) fn over_rows_node(cx: &Ctx<'_>, spec: OverRowsSpec) -> Result<NodeParts, NodeError> {
    let preceding = spec
        .preceding
        .map_or(OverPreceding::AllRows, OverPreceding::Rows);
    let parts = (spec.keys, spec.time_column, spec.order_by);
    over_node(cx, parts, preceding, spec.aggregates)
}

/// `over_range`: the operator of a `RANGE` frame and its output schema.
pub(super) fn over_range_node(cx: &Ctx<'_>, spec: OverRangeSpec) -> Result<NodeParts, NodeError> {
    let preceding = spec
        .preceding_ms
        .map_or(OverPreceding::AllRange, OverPreceding::Range);
    let parts = (spec.keys, spec.time_column, Vec::new());
    over_node(cx, parts, preceding, spec.aggregates)
}

/// An over window of `preceding` on the keys, time and `order_by` columns
/// of `parts`.
fn over_node(
    cx: &Ctx<'_>,
    (keys, time_column, order_by): (Vec<String>, String, Vec<String>),
    preceding: OverPreceding,
    aggregates: Vec<OverAggregateSpec>,
) -> Result<NodeParts, NodeError> {
    let aggregates = aggregates
        .into_iter()
        .map(|a| {
            let function = OverFunction::parse(&a.function).ok_or_else(|| {
                Error::graph(
                    cx.name,
                    format!(
                        "an over window takes sum, count, avg, min or max, not {}()",
                        a.function
                    ),
                )
            })?;
            Ok(OverAggregate {
                function,
                column: a.column,
                name: a.name,
            })
        })
        .collect::<Result<Vec<_>, Error>>()?;
    let f = OverRowsFactory {
        keys,
        time_column,
        order_by,
        preceding,
        aggregates,
    };
    let s = cx.output_of(|s| f.output_schema(cx.name, s))?;
    Ok(operator(Arc::new(f), s))
}
