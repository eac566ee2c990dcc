//! Many aggregates per slot: the building block of the keyed and windowed
//! multi-aggregates (`keyed.agg(F.sum("x"), F.avg("y"), ...)`; DESIGN.md
//! "Aggregates").
//!
//! A *slot* is what one row of output stands for: a key of a running
//! aggregate, or a key and a window. [`AggregateSlots`] holds one
//! DataFusion accumulator per aggregate of an [`AggregateSet`] per slot,
//! under a dense `u32` slot id the operator keeps in its own index (a map
//! from key, or from key and window, to slot id); freed ids are reused.
//!
//! * **Update** ([`AggregateSlots::update`]) takes a batch and, per entry,
//!   the row and the slot it goes to (a row of a sliding window goes to
//!   several). The entries are grouped by slot with one stable counting
//!   sort (arrival order is kept within a slot, which `first`, `last` and
//!   `collect_list` see), every aggregate's arguments are evaluated once
//!   per batch and gathered once with `take` into slot order, and each slot
//!   gets zero-copy slices of them: nothing is allocated per record.
//! * **Evaluate** ([`AggregateSlots::evaluate`]) gives one output column
//!   per aggregate for a list of slots.
//! * **Snapshot** ([`AggregateSlots::states`]) gives the accumulators'
//!   intermediate states (`Accumulator::state`, what DataFusion merges
//!   partial aggregates with) as Arrow columns, one row per slot, which an
//!   operator writes into its key group's blob. `state()` may consume an
//!   accumulator's internals, so each accumulator is rebuilt from the state
//!   it returned: the live state goes through the very path a restore takes.
//! * **Restore and merge** ([`AggregateSlots::merge_row`]) merge one row of
//!   such state columns into a slot: a restore at another parallelism, or
//!   two session windows that became one.
//! * **Release** ([`AggregateSlots::release`]) drops a fired window's slot.

use std::sync::Arc;

use arrow::array::{
    new_empty_array, Array, ArrayRef, AsArray, ListArray, RecordBatch, UInt32Array,
};
use arrow::compute::take;
use arrow::datatypes::{DataType, Field, FieldRef, Float64Type, Schema};
use datafusion_common::ScalarValue as DfScalar;
use datafusion_expr::Accumulator;

use super::{Aggregate, BoundAggregate, ExprError, ExprResult};

/// The prefix of the state columns in a snapshot: `__eddyline_state.<i>.<field>`
/// for aggregate `i`.
pub const STATE_COLUMN_PREFIX: &str = "__eddyline_state";

/// Named aggregates bound to one input schema: what one `.agg(...)` computes.
#[derive(Debug)]
pub struct AggregateSet {
    aggregates: Vec<Arc<BoundAggregate>>,
    names: Vec<String>,
    /// The state columns of all aggregates, in order.
    state_fields: Vec<FieldRef>,
    /// Per aggregate, its first state column in `state_fields`.
    state_offsets: Vec<usize>,
}

impl AggregateSet {
    /// Binds `(output name, aggregate)` pairs to `schema`. Errors name the
    /// aggregate and its columns ([`Aggregate::bind`]); two aggregates of
    /// one name are a graph error.
    pub fn bind(aggregates: &[(String, Aggregate)], schema: &Schema) -> ExprResult<Self> {
        if aggregates.is_empty() {
            return Err(ExprError::graph("agg() needs at least one aggregate"));
        }
        let mut bound = Vec::with_capacity(aggregates.len());
        let mut names: Vec<String> = Vec::with_capacity(aggregates.len());
        let mut state_fields = Vec::new();
        let mut state_offsets = Vec::with_capacity(aggregates.len());
        for (i, (name, aggregate)) in aggregates.iter().enumerate() {
            if names.contains(name) {
                return Err(ExprError::graph(format!(
                    "two aggregates are named '{name}'; give one another name with .alias(...)"
                )));
            }
            let b = Arc::new(aggregate.bind(schema)?);
            state_offsets.push(state_fields.len());
            for f in b.state_schema().fields() {
                state_fields.push(Arc::new(Field::new(
                    format!("{STATE_COLUMN_PREFIX}.{i}.{}", f.name()),
                    f.data_type().clone(),
                    true,
                )));
            }
            names.push(name.clone());
            bound.push(b);
        }
        Ok(AggregateSet {
            aggregates: bound,
            names,
            state_fields,
            state_offsets,
        })
    }

    /// The number of aggregates.
    pub fn len(&self) -> usize {
        self.aggregates.len()
    }

    /// Whether the set has no aggregate (never, once bound).
    pub fn is_empty(&self) -> bool {
        self.aggregates.is_empty()
    }

    /// The output fields: each aggregate under its name, nullable.
    pub fn output_fields(&self) -> Vec<FieldRef> {
        self.aggregates
            .iter()
            .zip(&self.names)
            .map(|(a, n)| Arc::new(Field::new(n, a.data_type().clone(), true)))
            .collect()
    }

    /// The state columns of a snapshot, all aggregates in order.
    pub fn state_fields(&self) -> &[FieldRef] {
        &self.state_fields
    }

    /// The aggregates' names and functions, `name=function` joined by `,`
    /// (written into snapshots, checked on restore).
    pub fn describe(&self) -> String {
        self.aggregates
            .iter()
            .zip(&self.names)
            .map(|(a, n)| format!("{n}={}", a.name()))
            .collect::<Vec<_>>()
            .join(",")
    }

    fn accumulators(&self) -> ExprResult<Vec<Box<dyn Accumulator>>> {
        self.aggregates.iter().map(|a| a.accumulator()).collect()
    }
}

/// Batch-local grouping scratch, reused across batches.
#[derive(Debug, Default)]
struct Grouping {
    /// Per slot id, the batch number that last saw it.
    stamp: Vec<u64>,
    /// Per slot id seen in this batch, its local group.
    local: Vec<u32>,
    batch: u64,
    /// Distinct slots of the batch, in first-occurrence order.
    slots: Vec<u32>,
    /// The first entry of every distinct slot.
    first: Vec<u32>,
    /// Local group of every entry.
    group_of: Vec<u32>,
    /// Entries per group, then the groups' start offsets.
    offsets: Vec<u32>,
    /// Rows in slot order.
    order: Vec<u32>,
}

/// The accumulators of every slot; see the module documentation.
pub struct AggregateSlots {
    set: Arc<AggregateSet>,
    slots: Vec<Option<Vec<Box<dyn Accumulator>>>>,
    free: Vec<u32>,
    live: usize,
    grouping: Grouping,
}

impl std::fmt::Debug for AggregateSlots {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AggregateSlots")
            .field("aggregates", &self.set.describe())
            .field("live", &self.live)
            .finish_non_exhaustive()
    }
}

impl AggregateSlots {
    /// No slots yet, for the aggregates of `set`.
    pub fn new(set: Arc<AggregateSet>) -> Self {
        AggregateSlots {
            set,
            slots: Vec::new(),
            free: Vec::new(),
            live: 0,
            grouping: Grouping::default(),
        }
    }

    /// The aggregates.
    pub fn set(&self) -> &Arc<AggregateSet> {
        &self.set
    }

    /// The number of slots in use.
    pub fn live(&self) -> usize {
        self.live
    }

    /// A new slot with empty accumulators.
    pub fn allocate(&mut self) -> ExprResult<u32> {
        let accumulators = self.set.accumulators()?;
        self.live += 1;
        if let Some(id) = self.free.pop() {
            self.slots[id as usize] = Some(accumulators);
            return Ok(id);
        }
        let id = u32::try_from(self.slots.len())
            .map_err(|_| ExprError::operator("more than 2^32 aggregate slots"))?;
        self.slots.push(Some(accumulators));
        Ok(id)
    }

    /// Drops a slot's accumulators; its id is reused.
    pub fn release(&mut self, slot: u32) {
        if let Some(s) = self.slots.get_mut(slot as usize) {
            if s.take().is_some() {
                self.live -= 1;
                self.free.push(slot);
            }
        }
    }

    fn slot_mut(&mut self, slot: u32) -> ExprResult<&mut Vec<Box<dyn Accumulator>>> {
        self.slots
            .get_mut(slot as usize)
            .and_then(Option::as_mut)
            .ok_or_else(|| ExprError::operator(format!("aggregate slot {slot} is not in use")))
    }

    /// Adds rows of `batch` (of the schema the set was bound to): entry `i`
    /// adds row `rows[i]` (row `i` when `rows` is `None`) to slot
    /// `slots[i]`. Within a slot, rows are added in entry order.
    pub fn update(
        &mut self,
        batch: &RecordBatch,
        rows: Option<&[u32]>,
        slots: &[u32],
    ) -> ExprResult<()> {
        if slots.is_empty() {
            return Ok(());
        }
        self.group(rows, slots);
        let g = &self.grouping;
        let identity = rows.is_none() && g.order.iter().enumerate().all(|(i, &r)| i as u32 == r);
        let indices = (!identity).then(|| UInt32Array::from(g.order.clone()));
        for (a, aggregate) in self.set.aggregates.iter().enumerate() {
            let mut args = aggregate.arguments(batch)?;
            if let Some(indices) = &indices {
                for arg in &mut args {
                    *arg = take(arg.as_ref(), indices, None)
                        .map_err(|e| aggregate.failed("gather its input", &e))?;
                }
            }
            let mut sliced: Vec<ArrayRef> = Vec::with_capacity(args.len());
            for (l, &slot) in g.slots.iter().enumerate() {
                let (start, end) = (g.offsets[l] as usize, g.offsets[l + 1] as usize);
                sliced.clear();
                sliced.extend(args.iter().map(|arg| arg.slice(start, end - start)));
                let accs = self
                    .slots
                    .get_mut(slot as usize)
                    .and_then(Option::as_mut)
                    .ok_or_else(|| {
                        ExprError::operator(format!("aggregate slot {slot} is not in use"))
                    })?;
                accs[a]
                    .update_batch(&sliced)
                    .map_err(|e| aggregate.failed("add rows", &e))?;
            }
        }
        Ok(())
    }

    /// Groups the entries by slot (stable counting sort) into `grouping`.
    fn group(&mut self, rows: Option<&[u32]>, slots: &[u32]) {
        let g = &mut self.grouping;
        g.batch += 1;
        if g.stamp.len() < self.slots.len() {
            g.stamp.resize(self.slots.len(), 0);
            g.local.resize(self.slots.len(), 0);
        }
        g.slots.clear();
        g.first.clear();
        g.group_of.clear();
        g.offsets.clear();
        for (i, &slot) in slots.iter().enumerate() {
            let s = slot as usize;
            if g.stamp[s] != g.batch {
                g.stamp[s] = g.batch;
                g.local[s] = g.slots.len() as u32;
                g.slots.push(slot);
                g.first.push(i as u32);
                g.offsets.push(0);
            }
            let l = g.local[s];
            g.group_of.push(l);
            g.offsets[l as usize] += 1;
        }
        // Counts to start offsets (one more for the end).
        let mut at = 0u32;
        for o in g.offsets.iter_mut() {
            let n = *o;
            *o = at;
            at += n;
        }
        g.offsets.push(at);
        g.order.clear();
        g.order.resize(slots.len(), 0);
        let mut next: Vec<u32> = g.offsets[..g.slots.len()].to_vec();
        for (i, &l) in g.group_of.iter().enumerate() {
            let row = rows.map_or(i as u32, |r| r[i]);
            let at = &mut next[l as usize];
            g.order[*at as usize] = row;
            *at += 1;
        }
    }

    /// The distinct slots of the last [`update`](Self::update), in order of
    /// their first entry, and that entry's index.
    pub fn last_update(&self) -> (&[u32], &[u32]) {
        (&self.grouping.slots, &self.grouping.first)
    }

    /// The aggregates' current values for `slots`: one column per aggregate.
    pub fn evaluate(&mut self, slots: &[u32]) -> ExprResult<Vec<ArrayRef>> {
        let set = Arc::clone(&self.set);
        let mut columns = Vec::with_capacity(set.len());
        for (a, aggregate) in set.aggregates.iter().enumerate() {
            let mut values: Vec<DfScalar> = Vec::with_capacity(slots.len());
            for &slot in slots {
                let accs = self.slot_mut(slot)?;
                values.push(
                    accs[a]
                        .evaluate()
                        .map_err(|e| aggregate.failed("compute its result", &e))?,
                );
            }
            let column = to_array(values, aggregate.data_type(), aggregate)?;
            columns.push(
                if matches!(aggregate.name(), "collect_list" | "collect_set") {
                    empty_for_null(column)
                } else {
                    column
                },
            );
        }
        Ok(columns)
    }

    /// The accumulators' intermediate states for `slots`, as the columns
    /// [`AggregateSet::state_fields`] describe, one row per slot. Each
    /// accumulator is rebuilt from the state it gave (see the module
    /// documentation).
    pub fn states(&mut self, slots: &[u32]) -> ExprResult<Vec<ArrayRef>> {
        let set = Arc::clone(&self.set);
        let mut per_field: Vec<Vec<DfScalar>> = (0..set.state_fields.len())
            .map(|_| Vec::with_capacity(slots.len()))
            .collect();
        for &slot in slots {
            let accs = self.slot_mut(slot)?;
            for (a, aggregate) in set.aggregates.iter().enumerate() {
                let state = accs[a]
                    .state()
                    .map_err(|e| aggregate.failed("snapshot its state", &e))?;
                let arrays = state
                    .iter()
                    .map(DfScalar::to_array)
                    .collect::<datafusion_common::Result<Vec<_>>>()
                    .map_err(|e| aggregate.failed("snapshot its state", &e))?;
                let mut fresh = aggregate.accumulator()?;
                fresh
                    .merge_batch(&arrays)
                    .map_err(|e| aggregate.failed("snapshot its state", &e))?;
                accs[a] = fresh;
                let offset = set.state_offsets[a];
                for (j, value) in state.into_iter().enumerate() {
                    per_field[offset + j].push(value);
                }
            }
        }
        per_field
            .into_iter()
            .zip(&set.state_fields)
            .enumerate()
            .map(|(j, (values, field))| {
                let a = set.state_offsets.partition_point(|&o| o <= j) - 1;
                to_array(values, field.data_type(), &set.aggregates[a])
            })
            .collect()
    }

    /// Merges row `row` of state columns (of [`AggregateSet::state_fields`],
    /// as [`states`](Self::states) wrote them) into `slot`.
    pub fn merge_row(&mut self, slot: u32, states: &[ArrayRef], row: usize) -> ExprResult<()> {
        let set = Arc::clone(&self.set);
        if states.len() != set.state_fields.len() {
            return Err(ExprError::operator(format!(
                "a saved aggregate state has {} columns, the aggregates ({}) {}",
                states.len(),
                set.describe(),
                set.state_fields.len()
            )));
        }
        let accs = self.slot_mut(slot)?;
        for (a, aggregate) in set.aggregates.iter().enumerate() {
            let start = set.state_offsets[a];
            let end = set
                .state_offsets
                .get(a + 1)
                .copied()
                .unwrap_or(set.state_fields.len());
            let columns: Vec<ArrayRef> =
                states[start..end].iter().map(|c| c.slice(row, 1)).collect();
            accs[a]
                .merge_batch(&columns)
                .map_err(|e| aggregate.failed("merge a saved state", &e))?;
        }
        Ok(())
    }

    /// Merges every aggregate of slot `from` into slot `into` and releases
    /// `from` (two session windows that became one).
    pub fn merge_slots(&mut self, into: u32, from: u32) -> ExprResult<()> {
        let states = self.states(&[from])?;
        self.merge_row(into, &states, 0)?;
        self.release(from);
        Ok(())
    }
}

/// A list column whose nulls become empty lists: Spark's `collect_list`
/// and `collect_set` of no (non-null) value is `[]`, DataFusion's null. A
/// null list entry has no elements (equal offsets), so dropping the
/// validity is enough.
fn empty_for_null(column: ArrayRef) -> ArrayRef {
    if column.null_count() == 0 {
        return column;
    }
    match column.as_list_opt::<i32>() {
        Some(list) => {
            let (field, offsets, values, _) = list.clone().into_parts();
            Arc::new(ListArray::new(field, offsets, values, None))
        }
        None => column,
    }
}

/// `values` as an array of `data_type` (an empty one for no values).
fn to_array(
    values: Vec<DfScalar>,
    data_type: &DataType,
    aggregate: &BoundAggregate,
) -> ExprResult<ArrayRef> {
    if values.is_empty() {
        return Ok(new_empty_array(data_type));
    }
    let array = DfScalar::iter_to_array(values)
        .map_err(|e| aggregate.failed("build its result column", &e))?;
    if array.data_type() == data_type {
        return Ok(array);
    }
    // A double result of an integer type (approx_percentile) is rounded,
    // not truncated, to the nearest integer.
    let array: ArrayRef = match array.as_primitive_opt::<Float64Type>() {
        Some(doubles) if data_type.is_integer() => {
            Arc::new(doubles.unary::<_, Float64Type>(f64::round))
        }
        _ => array,
    };
    arrow::compute::cast(&array, data_type)
        .map_err(|e| aggregate.failed("build its result column", &e))
}

#[cfg(test)]
#[path = "aggregate_set_tests.rs"]
mod tests;
