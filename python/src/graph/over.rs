//! `over_rows`: the event-time `ROWS ... PRECEDING` over window per key
//! (`keyed.over_rows(...)`, SQL's `agg(col) OVER (...)`), read from its
//! typed spec (`OverRowsSpec` in `eddyline/_specs.py`).

use std::sync::Arc;

use eddyline_core::error::Error;
use eddyline_core::operator::over_rows::{OverAggregate, OverFunction, OverRowsFactory};
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
/// `order_by` columns, the frame's preceding rows and the aggregates.
#[derive(FromPyObject)]
pub(super) struct OverRowsSpec {
    keys: Vec<String>,
    time_column: String,
    order_by: Vec<String>,
    preceding: usize,
    aggregates: Vec<OverAggregateSpec>,
}

/// `over_rows`: the operator and its output schema (the input's columns,
/// then the aggregates).
pub(super) fn over_rows_node(cx: &Ctx<'_>, spec: OverRowsSpec) -> Result<NodeParts, NodeError> {
    let aggregates = spec
        .aggregates
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
        keys: spec.keys,
        time_column: spec.time_column,
        order_by: spec.order_by,
        preceding: spec.preceding,
        aggregates,
    };
    let s = cx.output_of(|s| f.output_schema(cx.name, s))?;
    Ok(operator(Arc::new(f), s))
}
