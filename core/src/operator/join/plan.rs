//! How a join is resolved against its two inputs' schemas (the parent
//! module's "Output"): each side's key, time and column bindings, and the
//! output layout (keys once, a window join's bounds, the left's other
//! columns, then the right's, `_right` on a clash).

use std::collections::HashSet;
use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch};
use arrow::datatypes::{DataType, Field, FieldRef, Schema, SchemaRef};

use super::{JoinBounds, JoinType};
use crate::error::{Error, Result};
use crate::operator::timestamps::event_time_column;
use crate::state::keyed::key_columns;

/// One input side resolved against its schema.
#[derive(Debug, Clone)]
pub(super) struct SideBinding {
    pub(super) schema: SchemaRef,
    pub(super) key_idx: Vec<usize>,
    pub(super) time_idx: Option<usize>,
    pub(super) time_name: Option<String>,
}

impl SideBinding {
    /// The key columns of a batch of this side.
    pub(super) fn key_columns(&self, batch: &RecordBatch) -> Vec<ArrayRef> {
        self.key_idx
            .iter()
            .map(|&i| batch.column(i).clone())
            .collect()
    }
}

/// Where an output column comes from.
#[derive(Debug, Clone, Copy)]
pub(super) enum OutColumn {
    /// Key column `i` (from whichever side is present).
    Key(usize),
    /// Column `col` of `side`.
    Side(usize, usize),
    /// A window join's `window_start` / `window_end`.
    WindowStart,
    WindowEnd,
}

/// The resolved join: both sides and the output layout.
#[derive(Debug, Clone)]
pub(super) struct Plan {
    pub(super) sides: [SideBinding; 2],
    pub(super) output: SchemaRef,
    pub(super) columns: Vec<OutColumn>,
    /// A window join's window size and the type of its bounds (the left
    /// event-time column's).
    pub(super) window: Option<(i64, DataType)>,
}

impl Plan {
    /// `side`'s key column names, then the output's, separated by U+001F
    /// (written into the state for `read_state`).
    pub(super) fn key_names(&self, side: usize) -> String {
        let names = |b: &SideBinding| -> Vec<String> {
            b.key_idx
                .iter()
                .map(|&i| b.schema.field(i).name().clone())
                .collect()
        };
        let mut all = names(&self.sides[side]);
        all.extend(names(&self.sides[0]));
        all.join("\u{1f}")
    }
}

/// Builds [`JoinOperator`]s for two inputs of known schemas.
#[derive(Debug, Clone)]
pub struct JoinFactory {
    pub how: JoinType,
    pub bounds: JoinBounds,
    pub(super) plan: Arc<Plan>,
}

/// What defines a join: its keys, time columns, type and bounds.
#[derive(Debug, Clone)]
pub struct JoinSpec {
    pub left_keys: Vec<String>,
    pub right_keys: Vec<String>,
    /// The event-time columns of the left and right inputs (needed when
    /// time bounds the state).
    pub time_columns: [Option<String>; 2],
    pub how: JoinType,
    pub bounds: JoinBounds,
}

fn bind_side(
    operator: &str,
    schema: &SchemaRef,
    keys: &[String],
    time: Option<&str>,
    needs_time: bool,
    what: &str,
) -> Result<SideBinding> {
    let (key_idx, _) = key_columns(operator, schema, keys, &format!("{what} "))?;
    let time_idx = match (needs_time, time) {
        (false, _) => None,
        (true, Some(t)) => Some(event_time_column(operator, schema, t)?),
        (true, None) => {
            return Err(Error::graph(
                operator,
                format!(
                    "the {what} input has no event time: call assign_timestamps on it (an \
                     interval join or a state_ttl needs both inputs' timestamps)"
                ),
            ))
        }
    };
    Ok(SideBinding {
        schema: schema.clone(),
        key_idx,
        time_idx,
        time_name: time.filter(|_| needs_time).map(str::to_string),
    })
}

impl JoinFactory {
    /// Resolves `spec` against the schemas of the left and right inputs;
    /// errors (missing or mistyped columns, key types that differ, bounds
    /// that cannot hold) name `operator`.
    pub fn new(
        operator: &str,
        spec: JoinSpec,
        left: &SchemaRef,
        right: &SchemaRef,
    ) -> Result<Self> {
        let JoinSpec {
            left_keys,
            right_keys,
            time_columns,
            how,
            bounds,
        } = spec;
        if left_keys.is_empty() || left_keys.len() != right_keys.len() {
            return Err(Error::graph(
                operator,
                format!(
                    "a join needs as many left as right key columns (at least one), got {} and {}",
                    left_keys.len(),
                    right_keys.len()
                ),
            ));
        }
        match bounds {
            JoinBounds::Interval { lower_ms, upper_ms } if lower_ms > upper_ms => {
                return Err(Error::graph(
                    operator,
                    format!(
                        "an interval join needs lower <= upper, got ({lower_ms} ms, {upper_ms} ms)"
                    ),
                ))
            }
            JoinBounds::Unbounded { ttl_ms: Some(t) } if t <= 0 => {
                return Err(Error::graph(
                    operator,
                    format!("state_ttl must be positive, got {t} ms"),
                ))
            }
            JoinBounds::Window { size_ms, slide_ms }
                if slide_ms <= 0 || slide_ms > size_ms || how != JoinType::Inner =>
            {
                return Err(Error::graph(
                    operator,
                    format!(
                        "a window join is an inner join over windows with 0 < slide <= size, \
                         got '{}' over {size_ms} ms sliding by {slide_ms} ms",
                        how.name()
                    ),
                ))
            }
            JoinBounds::Temporal if !matches!(how, JoinType::Inner | JoinType::Left) => {
                return Err(Error::graph(
                    operator,
                    format!("a temporal join is 'inner' or 'left', got '{}'", how.name()),
                ))
            }
            JoinBounds::Unbounded { .. } if how != JoinType::Inner => {
                return Err(Error::graph(
                    operator,
                    format!(
                        "a '{}' join needs within=(lower, upper): without a time bound an \
                         unmatched row could still match later and would never be emitted",
                        how.name()
                    ),
                ))
            }
            _ => {}
        }
        let needs_time = bounds.timed();
        let [lt, rt] = &time_columns;
        let sides = [
            bind_side(
                operator,
                left,
                &left_keys,
                lt.as_deref(),
                needs_time,
                "left",
            )?,
            bind_side(
                operator,
                right,
                &right_keys,
                rt.as_deref(),
                needs_time,
                "right",
            )?,
        ];
        for (i, (l, r)) in sides[0].key_idx.iter().zip(&sides[1].key_idx).enumerate() {
            let (lf, rf) = (left.field(*l), right.field(*r));
            if lf.data_type() != rf.data_type() {
                return Err(Error::schema(
                    operator,
                    format!(
                        "join key {} has type {} on the left ('{}') but {} on the right ('{}'); \
                         key types must match",
                        i + 1,
                        lf.data_type(),
                        lf.name(),
                        rf.data_type(),
                        rf.name()
                    ),
                ));
            }
        }
        let window = match bounds {
            JoinBounds::SessionWindow { gap_ms } if gap_ms <= 0 || how != JoinType::Inner => {
                return Err(Error::graph(
                    operator,
                    format!(
                        "a session window join is an inner join with a positive gap, got '{}' \
                         with gap {gap_ms} ms",
                        how.name()
                    ),
                ))
            }
            JoinBounds::Window { size_ms, .. } | JoinBounds::SessionWindow { gap_ms: size_ms } => {
                sides[0]
                    .time_idx
                    .map(|i| (size_ms, left.field(i).data_type().clone()))
            }
            _ => None,
        };
        let (output, columns) =
            output_layout(operator, &sides, how, window.as_ref().map(|w| &w.1))?;
        Ok(JoinFactory {
            how,
            bounds,
            plan: Arc::new(Plan {
                sides,
                output,
                columns,
                window,
            }),
        })
    }

    /// The schema of the joined rows.
    pub fn output_schema(&self) -> SchemaRef {
        self.plan.output.clone()
    }
}

/// The output schema: keys (the left's names), the left's other columns,
/// then the right's (a taken name gets `_right`).
fn output_layout(
    operator: &str,
    sides: &[SideBinding; 2],
    how: JoinType,
    window: Option<&DataType>,
) -> Result<(SchemaRef, Vec<OutColumn>)> {
    let (left, right) = (&sides[0], &sides[1]);
    let mut fields: Vec<FieldRef> = Vec::new();
    let mut columns = Vec::new();
    let mut names: HashSet<String> = HashSet::new();
    for (i, (&l, &r)) in left.key_idx.iter().zip(&right.key_idx).enumerate() {
        let lf = left.schema.field(l);
        let nullable = lf.is_nullable() || right.schema.field(r).is_nullable();
        fields.push(Arc::new(lf.clone().with_nullable(nullable)));
        names.insert(lf.name().clone());
        columns.push(OutColumn::Key(i));
    }
    if let Some(dt) = window {
        for (name, col) in [
            ("window_start", OutColumn::WindowStart),
            ("window_end", OutColumn::WindowEnd),
        ] {
            fields.push(Arc::new(Field::new(name, dt.clone(), false)));
            names.insert(name.to_string());
            columns.push(col);
        }
    }
    for (side, binding) in sides.iter().enumerate() {
        let nullable_side = how.keeps(1 - side);
        for (col, f) in binding.schema.fields().iter().enumerate() {
            if binding.key_idx.contains(&col) {
                continue;
            }
            let mut name = f.name().clone();
            if names.contains(&name) {
                if side == 0 {
                    return Err(Error::schema(
                        operator,
                        format!("the left input has two columns named '{name}'"),
                    ));
                }
                name = format!("{name}_right");
                if names.contains(&name) {
                    return Err(Error::schema(
                        operator,
                        format!(
                            "the right column '{}' clashes with a left column, and so does \
                             '{name}'; rename one of them before the join",
                            f.name()
                        ),
                    ));
                }
            }
            names.insert(name.clone());
            let nullable = f.is_nullable() || nullable_side;
            fields.push(Arc::new(
                Field::new(name, f.data_type().clone(), nullable)
                    .with_metadata(f.metadata().clone()),
            ));
            columns.push(OutColumn::Side(side, col));
        }
    }
    Ok((Arc::new(Schema::new(fields)), columns))
}
