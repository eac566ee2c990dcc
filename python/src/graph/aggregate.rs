//! The aggregate operators of the plan: running keyed aggregates and
//! windows, with the native `sum/count/min/max` or DataFusion's accumulators
//! (`keyed.agg`, `window(...).agg`, `group_by(...).agg`), read from their
//! typed specs (`eddyline/_specs.py`).

use std::sync::Arc;

use eddyline_core::error::Error;
use eddyline_core::expr::Aggregate;
use eddyline_core::operator::keyed_agg::multi::MultiAggFactory;
use eddyline_core::operator::keyed_agg::KeyedAggFactory;
use eddyline_core::operator::session::SessionFactory;
use eddyline_core::operator::window::multi::WindowAggsFactory;
use eddyline_core::operator::window::session_multi::SessionAggsFactory;
use eddyline_core::operator::window::{WindowAgg, WindowAssigner, WindowFactory, WindowedAggs};
use eddyline_core::state::keyed::AggKind;
use pyo3::prelude::*;

use super::{operator, Ctx, NodeError, NodeParts};
use crate::expr::PyExpr;

/// The native aggregate a spec names (`AggName` in `eddyline/_specs.py`):
/// keyed running aggregates and windows read it here, once.
fn parse_agg(node: &str, agg: &str) -> Result<AggKind, Error> {
    Ok(match agg {
        "sum" => AggKind::Sum,
        "count" => AggKind::Count,
        "min" => AggKind::Min,
        "max" => AggKind::Max,
        other => return Err(Error::graph(node, format!("unknown aggregate '{other}'"))),
    })
}

/// `keyed_agg`: a running native aggregate per key.
#[derive(FromPyObject)]
pub(super) struct KeyedAggSpec {
    keys: Vec<String>,
    agg: String,
    column: Option<String>,
}

/// One aggregate of `.agg(...)` (`AggregateSpec`): Spark's function name,
/// its arguments and its output column.
#[derive(FromPyObject)]
struct AggregateSpec<'py> {
    function: String,
    args: Vec<Bound<'py, PyExpr>>,
    name: String,
}

/// `keyed_aggs`: running DataFusion aggregates per key.
#[derive(FromPyObject)]
pub(super) struct KeyedAggsSpec<'py> {
    keys: Vec<String>,
    aggregates: Vec<AggregateSpec<'py>>,
}

/// The core aggregates of `.agg(...)`; an unknown function is a graph
/// error of `node` naming it.
fn aggregates(
    cx: &Ctx<'_>,
    specs: &[AggregateSpec<'_>],
) -> Result<Vec<(String, Aggregate)>, Error> {
    let node = cx.name;
    specs
        .iter()
        .map(|a| {
            // The arguments are native expressions like any other: in ANSI
            // mode an invalid cast inside an aggregate fails the job, and
            // so does a sum of longs that overflows.
            let args = a
                .args
                .iter()
                .map(|e| e.get().expr.clone().with_ansi(cx.ansi))
                .collect();
            let aggregate = Aggregate::new(&a.function, args)
                .map_err(|e| e.at(node))?
                .with_ansi(cx.ansi);
            Ok((a.name.clone(), aggregate))
        })
        .collect()
}

/// What the factories of `window_aggs` and `session_aggs` hold besides their
/// windows.
fn windowed_aggs(
    cx: &Ctx<'_>,
    keys: Vec<String>,
    time_column: String,
    specs: &[AggregateSpec<'_>],
    late_output: bool,
) -> Result<WindowedAggs, Error> {
    Ok(WindowedAggs {
        keys,
        time_column,
        aggregates: aggregates(cx, specs)?,
        late_output,
        input: cx.first_input(),
    })
}

/// A window assigner: tumbling (`slide_ms` None) or sliding.
#[derive(FromPyObject)]
struct WindowAssignerSpec {
    size_ms: i64,
    slide_ms: Option<i64>,
}

impl WindowAssignerSpec {
    fn assigner(&self) -> WindowAssigner {
        let size_ms = self.size_ms;
        match self.slide_ms {
            None => WindowAssigner::Tumbling { size_ms },
            Some(slide_ms) => WindowAssigner::Sliding { size_ms, slide_ms },
        }
    }
}

/// `window`: a native event-time window aggregate per key.
#[derive(FromPyObject)]
pub(super) struct WindowSpec {
    keys: Vec<String>,
    time_column: String,
    assigner: WindowAssignerSpec,
    agg: String,
    column: Option<String>,
}

/// `window_aggs`: DataFusion aggregates per key and window.
#[derive(FromPyObject)]
pub(super) struct WindowAggsSpec<'py> {
    keys: Vec<String>,
    time_column: String,
    assigner: WindowAssignerSpec,
    aggregates: Vec<AggregateSpec<'py>>,
}

/// `session_aggs`: DataFusion aggregates per key and session window.
#[derive(FromPyObject)]
pub(super) struct SessionAggsSpec<'py> {
    keys: Vec<String>,
    time_column: String,
    gap_ms: i64,
    aggregates: Vec<AggregateSpec<'py>>,
}

/// `session_window`: native session windows with an aggregate per key.
#[derive(FromPyObject)]
pub(super) struct SessionWindowSpec {
    keys: Vec<String>,
    time_column: String,
    gap_ms: i64,
    agg: String,
    column: Option<String>,
}

/// `keyed_agg`: a running native aggregate per key.
pub(super) fn keyed_agg_node(cx: &Ctx<'_>, spec: KeyedAggSpec) -> Result<NodeParts, NodeError> {
    let agg = parse_agg(cx.name, &spec.agg)?;
    let f = KeyedAggFactory::new(spec.keys, agg, spec.column);
    let s = cx.output_of(|s| f.output_schema(cx.name, s))?;
    Ok(operator(Arc::new(f), s))
}

/// `keyed_aggs`: running DataFusion aggregates per key.
pub(super) fn keyed_aggs_node(
    cx: &Ctx<'_>,
    spec: KeyedAggsSpec<'_>,
) -> Result<NodeParts, NodeError> {
    let f = MultiAggFactory::new(spec.keys, aggregates(cx, &spec.aggregates)?);
    let s = cx.output_of(|s| f.output_schema(cx.name, s))?;
    Ok(operator(Arc::new(f), s))
}

/// `window`: a native event-time window aggregate per key.
pub(super) fn window_node(
    cx: &Ctx<'_>,
    spec: WindowSpec,
    late: bool,
) -> Result<NodeParts, NodeError> {
    let name = cx.name;
    let agg = parse_agg(name, &spec.agg)?;
    let mut f = WindowFactory::new(
        spec.keys,
        spec.time_column,
        spec.assigner.assigner(),
        WindowAgg::Native(agg, spec.column),
    );
    if late {
        f = f.with_late_output();
    }
    let s = cx.output_of(|s| f.output_schema(name, s))?;
    Ok(operator(Arc::new(f), s))
}

/// `window_aggs`: DataFusion aggregates per key and window.
pub(super) fn window_aggs_node(
    cx: &Ctx<'_>,
    spec: WindowAggsSpec<'_>,
    late_output: bool,
) -> Result<NodeParts, NodeError> {
    let aggs = windowed_aggs(
        cx,
        spec.keys,
        spec.time_column,
        &spec.aggregates,
        late_output,
    )?;
    let f = WindowAggsFactory {
        aggs,
        assigner: spec.assigner.assigner(),
    };
    let s = cx.output_of(|s| f.output_schema(cx.name, s))?;
    Ok(operator(Arc::new(f), s))
}

/// `session_aggs`: DataFusion aggregates per key and session window.
pub(super) fn session_aggs_node(
    cx: &Ctx<'_>,
    spec: SessionAggsSpec<'_>,
    late_output: bool,
) -> Result<NodeParts, NodeError> {
    let aggs = windowed_aggs(
        cx,
        spec.keys,
        spec.time_column,
        &spec.aggregates,
        late_output,
    )?;
    let f = SessionAggsFactory {
        aggs,
        gap_ms: spec.gap_ms,
    };
    let s = cx.output_of(|s| f.output_schema(cx.name, s))?;
    Ok(operator(Arc::new(f), s))
}

/// `session_window`: native event-time session windows with an aggregate per key.
pub(super) fn session_node(
    cx: &Ctx<'_>,
    spec: SessionWindowSpec,
    late_output: bool,
) -> Result<NodeParts, NodeError> {
    let f = SessionFactory {
        keys: spec.keys,
        time_column: spec.time_column,
        gap_ms: spec.gap_ms,
        agg: parse_agg(cx.name, &spec.agg)?,
        column: spec.column,
        late_output,
    };
    let s = cx.output_of(|s| f.output_schema(cx.name, s))?;
    Ok(operator(Arc::new(f), s))
}
