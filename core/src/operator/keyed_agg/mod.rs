//! Running keyed aggregates (`sum`, `count`, `min`, `max`) with keyed state
//! stored per key group and copy-on-write snapshots (DESIGN.md "Runtime":
//! keyed state per key group; "Checkpoints" / ABS: state is snapshotted
//! asynchronously, copy-on-write).
//!
//! # Semantics
//!
//! For each input batch the operator emits one row per distinct key present
//! in that batch, in first-occurrence order, holding the key columns (same
//! names and types as the input) and the updated running aggregate, named
//! after the aggregated column (`count` for count). Integer inputs of any
//! width aggregate as `Int64` (sums wrap on overflow), floating-point inputs
//! as `Float64` (min/max follow IEEE `minNum`/`maxNum`, so NaN is ignored
//! when another value exists); counts are `Int64`. Nulls in the aggregated
//! column are ignored: a key seen only with null values has a null sum, min
//! or max, and a count of 0 when counting a column. Null keys are a group of
//! their own.
//!
//! # Processing a batch
//!
//! 1. The rows of the batch are grouped with a batch-local open-addressing
//!    table that is reused across batches (only its used slots are cleared).
//!    Key hashes come from [`crate::keygroup`]: a single `Int64` key column
//!    is hashed by [`hash_keys`]; any other key is encoded with Arrow's row
//!    format and hashed with xxh3 over the row bytes, which is exactly what
//!    [`hash_keys`] does (a unit test holds the two equal), without encoding
//!    the rows twice.
//! 2. One partial aggregate per distinct key is computed over the batch.
//! 3. Each partial is merged into the state with one lookup per distinct key;
//!    the output is `take` of the key columns at the first rows plus the new
//!    aggregate values.
//!
//! # State and snapshots
//!
//! State is a `Vec<Arc<map>>` indexed by `key_group - key_groups.start`,
//! mutated through `Arc::make_mut`. `snapshot_state` gives one
//! [`StateBlob::Deferred`] view per non-empty key group, serialized on a
//! checkpoint writer thread. A key group not modified since the last
//! snapshot is shared: its `Arc` is cloned (microseconds whatever its
//! size), and the first write after the snapshot copies its map. A single
//! `Int64` key's group that was modified since is copied flat at once into
//! key and accumulator arrays (`IntFlat`): it will almost surely be written
//! again, and copying two arrays now costs less than cloning the hash table
//! then and serializing from it (benches/RESULTS.md "W3: the checkpoint
//! cost, cut"), and its map stays unshared. A single `Int64` key uses a map
//! keyed by `i64` plus a separate null slot; any other key uses a map keyed by
//! the Arrow row-format bytes (`Box<[u8]>`, allocated only when a key is
//! first inserted).
//!
//! # Serialization format (version 1)
//!
//! One blob per non-empty key group:
//!
//! ```text
//! byte 0      format version, currently 1
//! bytes 1..   an Arrow IPC stream: schema metadata {"eddyline.keyed_agg": "<sum|count|min|max>",
//!             "eddyline.keyed_agg.column": the output column's name (absent in blobs
//!             written before `read_state` existed)},
//!             columns = the key columns (input names and types, nullable) followed by
//!             the accumulator (last column, Int64 or Float64, null = no value seen yet),
//!             one row per key of the key group
//! ```
//!
//! Keys are stored as Arrow columns rather than row-format bytes, because the
//! row format is not promised to be stable across arrow-rs versions, while
//! the IPC format is. Restoring checks the version, the aggregate kind, the
//! key and accumulator types and that every key hashes to the key group the
//! blob claims.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, PrimitiveArray, RecordBatch, UInt32Array};
use arrow::buffer::NullBuffer;
use arrow::compute::take;
use arrow::datatypes::{DataType, Field, FieldRef, Float64Type, Int64Type, Schema, SchemaRef};

use crate::error::{Error, Result};
use crate::keygroup::KeyGroupOwnership;
use crate::operator::{CheckpointedState, Collector, Operator, OperatorContext, OperatorFactory};
use crate::state::keyed::{
    check_key_group, column_index, key_columns, native_values, numeric_column, owned_key_groups,
    rebinding, Acc, AggKind, Num, ValueKind,
};
use crate::state::{OperatorState, StateBlob};

pub mod multi;
mod snapshot;
#[cfg(test)]
pub(crate) use snapshot::encode_state;
/// `read_state`'s view of this operator's blobs.
pub(crate) use snapshot::{is_state_schema, state_table};
mod store;
use snapshot::*;
use store::*;

/// The version byte that opens every serialized key-group blob.
pub const STATE_FORMAT_VERSION: u8 = 1;

/// Schema metadata key naming the aggregate kind of a serialized blob.
const KIND_METADATA_KEY: &str = "eddyline.keyed_agg";

/// Schema metadata key naming the aggregate's output column (what
/// `read_state` calls the state's column); restore ignores it.
const COLUMN_METADATA_KEY: &str = "eddyline.keyed_agg.column";

/// Name of the accumulator column in a serialized blob (always the last).
const ACC_FIELD: &str = "__eddyline_acc";

/// Builds [`KeyedAggOperator`]s: `keys` are the key column names, `column`
/// the aggregated column (required for sum/min/max; optional for count,
/// which then counts the column's non-null values instead of rows).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyedAggFactory {
    pub keys: Vec<String>,
    pub agg: AggKind,
    pub column: Option<String>,
}

/// An input schema resolved against a factory.
#[derive(Debug, Clone)]
struct Binding {
    input: SchemaRef,
    key_idx: Vec<usize>,
    value_idx: Option<usize>,
    value_kind: ValueKind,
    output: SchemaRef,
}

impl KeyedAggFactory {
    /// A factory for `agg` of `column` grouped by `keys`.
    pub fn new(keys: Vec<String>, agg: AggKind, column: Option<String>) -> Self {
        KeyedAggFactory { keys, agg, column }
    }

    /// The schema of the operator's output for `input` (build-time
    /// validation): the key fields followed by the aggregate field.
    /// Errors name `operator`.
    pub fn output_schema(&self, operator: &str, input: &SchemaRef) -> Result<SchemaRef> {
        Ok(self.bind(operator, input)?.output)
    }

    fn bind(&self, operator: &str, input: &SchemaRef) -> Result<Binding> {
        if self.keys.is_empty() {
            return Err(Error::graph(
                operator,
                format!("{} needs at least one key column", self.agg.name()),
            ));
        }
        let (key_idx, mut fields) = key_columns(operator, input, &self.keys, "")?;
        let (value_idx, value_kind, out_name, nullable) = match (self.agg, &self.column) {
            (AggKind::Count, None) => (None, ValueKind::Int, "count".to_string(), false),
            (AggKind::Count, Some(col)) => (
                Some(column_index(operator, input, col)?),
                ValueKind::Int,
                "count".to_string(),
                false,
            ),
            (agg, None) => {
                return Err(Error::graph(
                    operator,
                    format!("{} needs a column to aggregate", agg.name()),
                ))
            }
            (agg, Some(col)) => {
                let (idx, kind) = numeric_column(operator, input, agg, col)?;
                (Some(idx), kind, col.clone(), true)
            }
        };
        fields.push(Arc::new(Field::new(
            out_name,
            value_kind.data_type(),
            nullable,
        )));
        Ok(Binding {
            input: input.clone(),
            key_idx,
            value_idx,
            value_kind,
            output: Arc::new(Schema::new(fields)),
        })
    }
}

impl OperatorFactory for KeyedAggFactory {
    fn create(&self, ctx: &OperatorContext) -> Result<Box<dyn crate::operator::Operator>> {
        Ok(Box::new(KeyedAggOperator::new(self, ctx)?))
    }
}

// ---------------------------------------------------------------------------
// Accumulators

/// What the aggregated column contributes to a batch.
enum ValueInput<V: Num> {
    /// `count` without a column: every row counts.
    AllRows,
    /// `count(column)`: rows whose column value is valid count.
    Valid(Option<NullBuffer>),
    /// `sum`/`min`/`max` over values already cast to the accumulator type.
    Values(PrimitiveArray<V::Arrow>),
}

fn value_input<V: Num>(
    agg: AggKind,
    column: Option<&ArrayRef>,
    operator: &str,
) -> Result<ValueInput<V>> {
    let Some(column) = column else {
        return Ok(ValueInput::AllRows);
    };
    if agg == AggKind::Count {
        return Ok(ValueInput::Valid(column.logical_nulls()));
    }
    Ok(ValueInput::Values(native_values::<V>(operator, column)?))
}

/// Computes one partial aggregate per group of the batch into `partials`.
fn partial_aggregate<V: Num>(
    agg: AggKind,
    input: &ValueInput<V>,
    group_of_row: &[u32],
    n_groups: usize,
    partials: &mut Vec<Acc<V>>,
) {
    partials.clear();
    match input {
        ValueInput::AllRows => {
            partials.resize(
                n_groups,
                Acc {
                    value: V::default(),
                    has: true,
                },
            );
            for &g in group_of_row {
                let p = &mut partials[g as usize];
                p.value = p.value.combine(AggKind::Count, V::ONE);
            }
        }
        ValueInput::Valid(nulls) => {
            partials.resize(
                n_groups,
                Acc {
                    value: V::default(),
                    has: true,
                },
            );
            match nulls {
                None => {
                    for &g in group_of_row {
                        let p = &mut partials[g as usize];
                        p.value = p.value.combine(AggKind::Count, V::ONE);
                    }
                }
                Some(nulls) => {
                    for i in nulls.valid_indices() {
                        let p = &mut partials[group_of_row[i] as usize];
                        p.value = p.value.combine(AggKind::Count, V::ONE);
                    }
                }
            }
        }
        ValueInput::Values(values) => {
            partials.resize(n_groups, Acc::default());
            let vals = values.values();
            match (agg, values.nulls().filter(|n| n.null_count() > 0)) {
                (AggKind::Sum, None) => {
                    for (&g, &v) in group_of_row.iter().zip(vals.iter()) {
                        let p = &mut partials[g as usize];
                        p.value = p.value.combine(AggKind::Sum, v);
                        p.has = true;
                    }
                }
                (_, None) => {
                    for (&g, &v) in group_of_row.iter().zip(vals.iter()) {
                        let p = &mut partials[g as usize];
                        p.value = if p.has { p.value.combine(agg, v) } else { v };
                        p.has = true;
                    }
                }
                (_, Some(nulls)) => {
                    for i in nulls.valid_indices() {
                        let v = vals[i];
                        let p = &mut partials[group_of_row[i] as usize];
                        p.value = if p.has { p.value.combine(agg, v) } else { v };
                        p.has = true;
                    }
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Batch-local grouping

/// Groups the rows of one batch: an open-addressing table of group ids,
/// reused across batches (only used slots are cleared).
#[derive(Debug, Default)]
struct BatchGroups {
    /// Group id of every row.
    group_of_row: Vec<u32>,
    /// First row index of every group (first-occurrence order).
    first_rows: Vec<u32>,
    /// Key hash of every group (dense, so probing stays in cache).
    group_hashes: Vec<u64>,
    /// `0` = empty, else group id + 1.
    slots: Vec<u32>,
    /// Slots in use (to clear them cheaply).
    used: Vec<usize>,
    mask: usize,
    /// Number of groups of the previous batch (sizing hint).
    last_groups: usize,
    /// The group kept outside the table (the null key of the `Int64` path).
    untracked: Option<u32>,
}

impl BatchGroups {
    fn begin(&mut self, rows: usize) {
        for &s in &self.used {
            self.slots[s] = 0;
        }
        self.used.clear();
        self.group_of_row.clear();
        self.group_of_row.reserve(rows);
        self.first_rows.clear();
        self.group_hashes.clear();
        self.untracked = None;
        let want = (self.last_groups.min(rows).max(16) * 2).next_power_of_two();
        if self.slots.len() < want {
            // Every slot is zero here, so growing keeps the table empty.
            self.slots.resize(want, 0);
        }
        self.mask = self.slots.len() - 1;
    }

    fn end(&mut self) {
        self.last_groups = self.first_rows.len();
    }

    fn n_groups(&self) -> usize {
        self.first_rows.len()
    }

    /// A new group outside the table (the null key of the `Int64` path).
    #[inline]
    fn push_untracked_group(&mut self, row: u32, hash: u64) -> u32 {
        let g = self.first_rows.len() as u32;
        self.first_rows.push(row);
        self.group_hashes.push(hash);
        self.group_of_row.push(g);
        self.untracked = Some(g);
        g
    }

    /// Assigns `row` (with `hash`) to its group and returns whether the group
    /// is new; `same_key(g, first_row)` tells whether group `g`, first seen
    /// at `first_row`, has the same key as `row`.
    #[inline]
    fn assign(&mut self, row: u32, hash: u64, same_key: impl Fn(usize, usize) -> bool) -> bool {
        let mut s = hash as usize & self.mask;
        loop {
            let e = self.slots[s];
            if e == 0 {
                let g = self.first_rows.len() as u32;
                self.slots[s] = g + 1;
                self.used.push(s);
                self.first_rows.push(row);
                self.group_hashes.push(hash);
                self.group_of_row.push(g);
                if self.first_rows.len() * 2 > self.slots.len() {
                    self.grow();
                }
                return true;
            }
            let g = e - 1;
            if self.group_hashes[g as usize] == hash
                && same_key(g as usize, self.first_rows[g as usize] as usize)
            {
                self.group_of_row.push(g);
                return false;
            }
            s = (s + 1) & self.mask;
        }
    }

    fn grow(&mut self) {
        for &s in &self.used {
            self.slots[s] = 0;
        }
        self.used.clear();
        let n = self.slots.len() * 2;
        self.slots.resize(n, 0);
        self.mask = n - 1;
        for (g, &hash) in self.group_hashes.iter().enumerate() {
            // The group outside the table (the Int64 null key) stays outside.
            if self.untracked == Some(g as u32) {
                continue;
            }
            let mut s = hash as usize & self.mask;
            while self.slots[s] != 0 {
                s = (s + 1) & self.mask;
            }
            self.slots[s] = g as u32 + 1;
            self.used.push(s);
        }
    }
}

/// Per-batch scratch buffers, reused across batches.
#[derive(Debug, Default)]
struct Scratch {
    hashes: Vec<u64>,
    groups: BatchGroups,
    /// Key of every group (single `Int64` key path).
    group_keys: Vec<i64>,
    out_valid: Vec<bool>,
}

// ---------------------------------------------------------------------------
// The operator

/// A running keyed aggregate; see the module documentation.
pub struct KeyedAggOperator {
    factory: KeyedAggFactory,
    own: KeyGroupOwnership,
    binding: Option<Binding>,
    engine: Option<Engine>,
    scratch: Scratch,
    key_cols: Vec<ArrayRef>,
}

impl std::fmt::Debug for KeyedAggOperator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyedAggOperator")
            .field("factory", &self.factory)
            .field("key_groups", &self.own.key_groups)
            .finish_non_exhaustive()
    }
}

impl KeyedAggOperator {
    /// An operator for the subtask described by `ctx` (its key groups and
    /// `max_parallelism` decide which keys it may hold).
    pub fn new(factory: &KeyedAggFactory, ctx: &OperatorContext) -> Result<Self> {
        let own = KeyGroupOwnership::from_context(ctx)?;
        Ok(KeyedAggOperator {
            factory: factory.clone(),
            own,
            binding: None,
            engine: None,
            scratch: Scratch::default(),
            key_cols: Vec::new(),
        })
    }

    /// Resolves `schema` (cached while the input schema stays the same) and
    /// creates or checks the state layout.
    fn bind(&mut self, schema: &SchemaRef) -> Result<()> {
        let held = self.binding.as_ref().map(|b| &b.input);
        let name = &self.own.name;
        let Some(binding) = rebinding(name, held, schema, || self.factory.bind(name, schema))?
        else {
            return Ok(());
        };
        let key_fields: Vec<FieldRef> = binding
            .key_idx
            .iter()
            .map(|&i| schema.fields()[i].clone())
            .collect();
        match &self.engine {
            Some(engine) => {
                let types: Vec<&DataType> = key_fields.iter().map(|f| f.data_type()).collect();
                if !engine.matches(&types, binding.value_kind) {
                    let input = key_fields
                        .iter()
                        .map(|f| format!("{}: {}", f.name(), f.data_type()))
                        .collect::<Vec<_>>()
                        .join(", ");
                    return Err(Error::schema(
                        &self.own.name,
                        format!(
                            "the state holds {}, but the input has keys ({input}) with a {} accumulator",
                            engine.describe(),
                            binding.value_kind.data_type()
                        ),
                    ));
                }
            }
            None => {
                self.engine = Some(Engine::new(
                    &self.own.name,
                    binding.value_kind,
                    key_fields,
                    self.own.key_groups.len(),
                )?);
            }
        }
        self.binding = Some(binding);
        Ok(())
    }

    fn restore_blob(&mut self, kg: usize, blob: &StateBlob) -> Result<()> {
        let bytes = blob.to_bytes()?;
        let (schema, batches) = decode_state(&bytes, kg, self.factory.agg)?;
        let n_keys = schema.fields().len() - 1;
        let key_fields: Vec<FieldRef> = schema.fields()[..n_keys].to_vec();
        let kind = match schema.field(n_keys).data_type() {
            DataType::Int64 => ValueKind::Int,
            DataType::Float64 => ValueKind::Float,
            other => {
                return Err(Error::checkpoint(
                    None,
                    format!("the keyed state of key group {kg} has an accumulator of type {other}"),
                ))
            }
        };
        let types: Vec<&DataType> = key_fields.iter().map(|f| f.data_type()).collect();
        match &self.engine {
            Some(engine) if !engine.matches(&types, kind) => {
                return Err(Error::checkpoint(
                    None,
                    format!(
                        "the keyed state of key group {kg} does not match the other key groups: it holds keys ({}) with a {} accumulator, the others {}",
                        key_fields
                            .iter()
                            .map(|f| format!("{}: {}", f.name(), f.data_type()))
                            .collect::<Vec<_>>()
                            .join(", "),
                        kind.data_type(),
                        engine.describe()
                    ),
                ))
            }
            Some(_) => {}
            None => {
                self.engine = Some(Engine::new(
                    &self.own.name,
                    kind,
                    key_fields,
                    self.own.key_groups.len(),
                )?)
            }
        }
        let local = kg - self.own.key_groups.start;
        for batch in batches {
            let key_cols = &batch.columns()[..n_keys];
            check_key_group(
                &self.own.name,
                "the keyed state",
                key_cols,
                &mut self.scratch.hashes,
                kg,
                self.own.max_parallelism,
            )?;
            let acc = batch.column(n_keys);
            match self.engine.as_mut() {
                Some(Engine::Int(store)) => {
                    store.restore_entries(local, kg, key_cols, acc.as_primitive::<Int64Type>())?
                }
                Some(Engine::Float(store)) => {
                    store.restore_entries(local, kg, key_cols, acc.as_primitive::<Float64Type>())?
                }
                None => {}
            }
        }
        Ok(())
    }
}

impl Operator for KeyedAggOperator {
    fn process_batch(
        &mut self,
        _input: usize,
        batch: RecordBatch,
        out: &mut dyn Collector,
    ) -> Result<()> {
        let n = batch.num_rows();
        if n == 0 {
            return Ok(());
        }
        self.bind(batch.schema_ref())?;
        let (Some(binding), Some(engine)) = (&self.binding, &mut self.engine) else {
            return Err(Error::operator(
                &self.own.name,
                "the operator has no state layout after binding its input",
            ));
        };
        self.key_cols.clear();
        self.key_cols
            .extend(binding.key_idx.iter().map(|&i| batch.column(i).clone()));
        let value_col = binding.value_idx.map(|i| batch.column(i));
        let agg = self.factory.agg;
        let values = match engine {
            Engine::Int(store) => {
                let input = value_input::<i64>(agg, value_col, &self.own.name)?;
                store.process(agg, &self.key_cols, &input, &mut self.scratch, &self.own)?
            }
            Engine::Float(store) => {
                let input = value_input::<f64>(agg, value_col, &self.own.name)?;
                store.process(agg, &self.key_cols, &input, &mut self.scratch, &self.own)?
            }
        };
        let first_rows = &self.scratch.groups.first_rows;
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(self.key_cols.len() + 1);
        if first_rows.len() == n {
            // Every row is its own key: the first rows are 0..n.
            columns.extend(self.key_cols.iter().cloned());
        } else {
            let indices = UInt32Array::from(first_rows.clone());
            for col in &self.key_cols {
                columns.push(
                    take(col.as_ref(), &indices, None)
                        .map_err(|e| Error::arrow(&self.own.name, &e))?,
                );
            }
        }
        columns.push(values);
        let output = RecordBatch::try_new(binding.output.clone(), columns)
            .map_err(|e| Error::arrow(&self.own.name, &e))?;
        out.emit(output)
    }

    fn state(&mut self) -> Option<&mut dyn CheckpointedState> {
        Some(self)
    }
}

impl CheckpointedState for KeyedAggOperator {
    fn snapshot_state(&mut self, _checkpoint_id: u64) -> Result<OperatorState> {
        let (agg, start) = (self.factory.agg, self.own.key_groups.start);
        let column: Arc<str> = match (agg, &self.factory.column) {
            (AggKind::Sum | AggKind::Min | AggKind::Max, Some(col)) => Arc::from(col.as_str()),
            _ => Arc::from("count"),
        };
        let keyed = match &mut self.engine {
            None => Vec::new(),
            Some(Engine::Int(store)) => store.snapshot(agg, start, &column),
            Some(Engine::Float(store)) => store.snapshot(agg, start, &column),
        };
        Ok(OperatorState {
            operator: None,
            keyed,
        })
    }

    fn restore_state(&mut self, state: OperatorState) -> Result<()> {
        let kind = &format!("a keyed {}", self.factory.agg.name());
        for (kg, blob) in owned_key_groups(state, &self.own, kind)? {
            self.restore_blob(kg, &blob)?;
        }
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::keygroup::hash_keys;
    use crate::state::keyed::sort_fields;
    use arrow::array::Int64Array;
    use arrow::array::{Float32Array, Float64Array, StringArray, UInt32Array};
    use arrow::row::{RowConverter, SortField};

    struct VecCollector(Vec<RecordBatch>);

    impl Collector for VecCollector {
        fn emit(&mut self, batch: RecordBatch) -> Result<()> {
            self.0.push(batch);
            Ok(())
        }
        fn emit_watermark(&mut self, _watermark: i64) -> Result<()> {
            Ok(())
        }
    }

    fn ctx(key_groups: std::ops::Range<usize>, max_parallelism: usize) -> OperatorContext {
        crate::operator::testing::context("agg", key_groups, max_parallelism)
    }

    fn factory(keys: &[&str], agg: AggKind, column: Option<&str>) -> KeyedAggFactory {
        KeyedAggFactory::new(
            keys.iter().map(|k| k.to_string()).collect(),
            agg,
            column.map(str::to_string),
        )
    }

    fn batch(cols: Vec<(&str, ArrayRef)>) -> RecordBatch {
        RecordBatch::try_from_iter(cols).unwrap()
    }

    fn int_batch(keys: Vec<Option<i64>>, values: Vec<Option<i64>>) -> RecordBatch {
        batch(vec![
            ("k", Arc::new(Int64Array::from(keys)) as ArrayRef),
            ("v", Arc::new(Int64Array::from(values)) as ArrayRef),
        ])
    }

    fn run(op: &mut KeyedAggOperator, b: RecordBatch) -> RecordBatch {
        let mut out = VecCollector(Vec::new());
        op.process_batch(0, b, &mut out).unwrap();
        assert_eq!(out.0.len(), 1);
        out.0.remove(0)
    }

    fn ints(col: &ArrayRef) -> Vec<Option<i64>> {
        col.as_primitive::<Int64Type>().iter().collect()
    }

    #[test]
    fn test_output_schema_unknown_column_lists_available_columns() {
        let schema = int_batch(vec![], vec![]).schema();
        let err = factory(&["x"], AggKind::Sum, Some("v"))
            .output_schema("op", &schema)
            .unwrap_err();
        assert!(matches!(err, Error::Graph { .. }));
        assert!(
            err.to_string()
                .contains("column 'x' does not exist; available columns: k, v"),
            "{err}"
        );
        let err = factory(&["k"], AggKind::Max, Some("y"))
            .output_schema("op", &schema)
            .unwrap_err();
        assert!(
            err.to_string().contains("column 'y' does not exist"),
            "{err}"
        );
        let err = factory(&["k"], AggKind::Min, None)
            .output_schema("op", &schema)
            .unwrap_err();
        assert!(matches!(err, Error::Graph { .. }));
    }

    #[test]
    fn test_output_schema_non_numeric_column_is_schema_error() {
        let b = batch(vec![
            ("k", Arc::new(Int64Array::from(vec![1])) as ArrayRef),
            ("s", Arc::new(StringArray::from(vec!["a"])) as ArrayRef),
        ]);
        let err = factory(&["k"], AggKind::Sum, Some("s"))
            .output_schema("op", &b.schema())
            .unwrap_err();
        assert!(matches!(err, Error::Schema { .. }));
        assert!(
            err.to_string().contains("column 's' has type Utf8"),
            "{err}"
        );
        // Counting a string column is fine.
        let out = factory(&["k"], AggKind::Count, Some("s"))
            .output_schema("op", &b.schema())
            .unwrap();
        assert_eq!(out.field(1).name(), "count");
    }

    #[test]
    fn test_output_schema_widens_ints_and_floats() {
        let b = batch(vec![
            ("k", Arc::new(StringArray::from(vec!["a"])) as ArrayRef),
            ("u", Arc::new(UInt32Array::from(vec![1])) as ArrayRef),
            ("f", Arc::new(Float32Array::from(vec![1.0])) as ArrayRef),
        ]);
        let s = b.schema();
        let out = factory(&["k"], AggKind::Sum, Some("u"))
            .output_schema("op", &s)
            .unwrap();
        assert_eq!(out.field(0), s.field(0));
        assert_eq!(
            (out.field(1).name().as_str(), out.field(1).data_type()),
            ("u", &DataType::Int64)
        );
        let out = factory(&["k"], AggKind::Max, Some("f"))
            .output_schema("op", &s)
            .unwrap();
        assert_eq!(out.field(1).data_type(), &DataType::Float64);
        let out = factory(&["k", "u"], AggKind::Count, None)
            .output_schema("op", &s)
            .unwrap();
        assert_eq!(out.fields().len(), 3);
        assert_eq!(
            (out.field(2).name().as_str(), out.field(2).data_type()),
            ("count", &DataType::Int64)
        );
    }

    #[test]
    fn test_sum_emits_updated_row_per_key_in_first_occurrence_order() {
        let f = factory(&["k"], AggKind::Sum, Some("v"));
        let mut op = KeyedAggOperator::new(&f, &ctx(0..128, 128)).unwrap();
        let out = run(
            &mut op,
            int_batch(
                vec![Some(3), Some(1), Some(3), None, Some(1)],
                vec![Some(1), Some(2), Some(3), Some(4), None],
            ),
        );
        assert_eq!(ints(out.column(0)), vec![Some(3), Some(1), None]);
        assert_eq!(ints(out.column(1)), vec![Some(4), Some(2), Some(4)]);
        let out = run(
            &mut op,
            int_batch(vec![None, Some(7), Some(3)], vec![Some(10), None, Some(5)]),
        );
        assert_eq!(ints(out.column(0)), vec![None, Some(7), Some(3)]);
        // Key 7 was only seen with a null value.
        assert_eq!(ints(out.column(1)), vec![Some(14), None, Some(9)]);
        let expected = f
            .output_schema("op", &int_batch(vec![None], vec![None]).schema())
            .unwrap();
        assert_eq!(out.schema(), expected);
    }

    #[test]
    fn test_min_max_count_over_composite_key_with_nulls() {
        let b = || {
            batch(vec![
                (
                    "s",
                    Arc::new(StringArray::from(vec![
                        Some("a"),
                        None,
                        Some("a"),
                        None,
                        Some("a"),
                    ])) as ArrayRef,
                ),
                (
                    "i",
                    Arc::new(Int64Array::from(vec![
                        Some(1),
                        Some(1),
                        Some(1),
                        Some(1),
                        Some(2),
                    ])) as ArrayRef,
                ),
                (
                    "v",
                    Arc::new(Float64Array::from(vec![
                        Some(2.5),
                        Some(1.0),
                        Some(-1.0),
                        None,
                        None,
                    ])) as ArrayRef,
                ),
            ])
        };
        let c = ctx(0..128, 128);
        let mut min =
            KeyedAggOperator::new(&factory(&["s", "i"], AggKind::Min, Some("v")), &c).unwrap();
        let out = run(&mut min, b());
        assert_eq!(out.num_rows(), 3);
        let vals: Vec<Option<f64>> = out.column(2).as_primitive::<Float64Type>().iter().collect();
        assert_eq!(vals, vec![Some(-1.0), Some(1.0), None]);
        let strs: Vec<Option<&str>> = out.column(0).as_string::<i32>().iter().collect();
        assert_eq!(strs, vec![Some("a"), None, Some("a")]);
        let mut max =
            KeyedAggOperator::new(&factory(&["s", "i"], AggKind::Max, Some("v")), &c).unwrap();
        let vals: Vec<Option<f64>> = run(&mut max, b())
            .column(2)
            .as_primitive::<Float64Type>()
            .iter()
            .collect();
        assert_eq!(vals, vec![Some(2.5), Some(1.0), None]);
        let mut count =
            KeyedAggOperator::new(&factory(&["s", "i"], AggKind::Count, None), &c).unwrap();
        assert_eq!(
            ints(run(&mut count, b()).column(2)),
            vec![Some(2), Some(2), Some(1)]
        );
        let mut count_v =
            KeyedAggOperator::new(&factory(&["s", "i"], AggKind::Count, Some("v")), &c).unwrap();
        assert_eq!(
            ints(run(&mut count_v, b()).column(2)),
            vec![Some(2), Some(1), Some(0)]
        );
        assert_eq!(
            ints(run(&mut count_v, b()).column(2)),
            vec![Some(4), Some(2), Some(0)]
        );
    }

    #[test]
    fn test_uint32_values_sum_as_int64() {
        let b = batch(vec![
            ("k", Arc::new(Int64Array::from(vec![1, 1])) as ArrayRef),
            (
                "u",
                Arc::new(UInt32Array::from(vec![u32::MAX, u32::MAX])) as ArrayRef,
            ),
        ]);
        let mut op =
            KeyedAggOperator::new(&factory(&["k"], AggKind::Sum, Some("u")), &ctx(0..128, 128))
                .unwrap();
        assert_eq!(
            ints(run(&mut op, b).column(1)),
            vec![Some(2 * u32::MAX as i64)]
        );
    }

    #[test]
    fn test_many_keys_grow_the_batch_table() {
        let mut op =
            KeyedAggOperator::new(&factory(&["k"], AggKind::Count, None), &ctx(0..16, 16)).unwrap();
        let keys: Vec<Option<i64>> = (0..5000)
            .map(|i| if i % 7 == 0 { None } else { Some(i % 1000) })
            .collect();
        let out = run(&mut op, int_batch(keys.clone(), vec![Some(1); 5000]));
        // 1000 distinct values plus the null key.
        assert_eq!(out.num_rows(), 1001);
        let out = run(&mut op, int_batch(keys, vec![Some(1); 5000]));
        let counts = ints(out.column(1));
        let total: i64 = counts.iter().flatten().sum();
        assert_eq!(total, 10_000);
        let mut op =
            KeyedAggOperator::new(&factory(&["s"], AggKind::Count, None), &ctx(0..16, 16)).unwrap();
        let strs: Vec<String> = (0..5000).map(|i| format!("key{}", i % 1500)).collect();
        let b = batch(vec![("s", Arc::new(StringArray::from(strs)) as ArrayRef)]);
        assert_eq!(run(&mut op, b).num_rows(), 1500);
    }

    #[test]
    fn test_row_hashes_equal_hash_keys() {
        let cols: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from(vec![Some("x"), None, Some("y")])),
            Arc::new(Int64Array::from(vec![Some(1), Some(2), None])),
        ];
        let fields: Vec<FieldRef> = cols
            .iter()
            .map(|c| Arc::new(Field::new("c", c.data_type().clone(), true)))
            .collect();
        let converter = RowConverter::new(sort_fields(&fields)).unwrap();
        let mut rows = converter.empty_rows(0, 0);
        let (mut ours, mut theirs) = (Vec::new(), Vec::new());
        encode_and_hash(&converter, &mut rows, &cols, &mut ours).unwrap();
        hash_keys(&cols, &mut theirs).unwrap();
        assert_eq!(ours, theirs);
        let single: Vec<ArrayRef> = vec![Arc::new(UInt32Array::from(vec![1, 2]))];
        let converter = RowConverter::new(vec![SortField::new(DataType::UInt32)]).unwrap();
        let mut rows = converter.empty_rows(0, 0);
        encode_and_hash(&converter, &mut rows, &single, &mut ours).unwrap();
        hash_keys(&single, &mut theirs).unwrap();
        assert_eq!(ours, theirs);
    }

    #[test]
    fn test_key_of_foreign_key_group_is_an_error() {
        // With max_parallelism 2 and only key group 0 owned, some key lands in group 1.
        let mut op =
            KeyedAggOperator::new(&factory(&["k"], AggKind::Sum, Some("v")), &ctx(0..1, 2))
                .unwrap();
        let mut out = VecCollector(Vec::new());
        let keys: Vec<Option<i64>> = (0..16).map(Some).collect();
        let err = op
            .process_batch(0, int_batch(keys, vec![Some(1); 16]), &mut out)
            .unwrap_err();
        assert!(err.to_string().contains("does not own"), "{err}");
    }

    #[test]
    fn test_snapshot_is_copy_on_write_and_round_trips() {
        let f = factory(&["k"], AggKind::Sum, Some("v"));
        let mut op = KeyedAggOperator::new(&f, &ctx(0..128, 128)).unwrap();
        run(
            &mut op,
            int_batch(vec![Some(1), None, Some(2)], vec![Some(1), Some(2), None]),
        );
        let snap = op.snapshot_state(1).unwrap();
        assert!(snap
            .keyed
            .iter()
            .all(|(_, b)| matches!(b, StateBlob::Deferred(_))));
        // Mutate after the snapshot; the snapshot must not see it.
        run(
            &mut op,
            int_batch(
                vec![Some(1), None, Some(2)],
                vec![Some(100), Some(100), Some(100)],
            ),
        );
        let bytes: Vec<(u32, StateBlob)> = snap
            .keyed
            .iter()
            .map(|(kg, b)| (*kg, StateBlob::Bytes(b.to_bytes().unwrap())))
            .collect();
        assert!(bytes
            .iter()
            .all(|(_, b)| b.as_bytes().unwrap()[0] == STATE_FORMAT_VERSION));
        let mut fresh = KeyedAggOperator::new(&f, &ctx(0..128, 128)).unwrap();
        fresh
            .restore_state(OperatorState {
                operator: None,
                keyed: bytes,
            })
            .unwrap();
        let out = run(
            &mut fresh,
            int_batch(
                vec![Some(1), None, Some(2)],
                vec![Some(0), Some(0), Some(0)],
            ),
        );
        assert_eq!(ints(out.column(1)), vec![Some(1), Some(2), Some(0)]);
    }

    /// Key groups modified since the last snapshot are copied flat at the
    /// snapshot (the store keeps its map unshared), the others are shared
    /// copy-on-write with their change token kept; either kind keeps the
    /// state of its snapshot whatever is written afterwards.
    #[test]
    fn test_snapshot_copies_changed_groups_and_shares_unchanged_ones() {
        let f = factory(&["k"], AggKind::Sum, Some("v"));
        let mut op = KeyedAggOperator::new(&f, &ctx(0..128, 128)).unwrap();
        let keys: Vec<Option<i64>> = (0..400).map(Some).collect();
        run(&mut op, int_batch(keys.clone(), vec![Some(1); 400]));
        let first = op.snapshot_state(1).unwrap();
        run(&mut op, int_batch(vec![Some(0)], vec![Some(10)]));
        let second = op.snapshot_state(2).unwrap();
        let mut hashes = Vec::new();
        let zero: ArrayRef = Arc::new(Int64Array::from(vec![0i64]));
        hash_keys(&[zero], &mut hashes).unwrap();
        let kg0 = crate::keygroup::key_group(hashes[0], 128) as u32;
        assert_eq!(first.keyed.len(), second.keyed.len());
        for ((g1, b1), (g2, b2)) in first.keyed.iter().zip(&second.keyed) {
            assert_eq!(g1, g2);
            assert_eq!(b1.token() == b2.token(), *g1 != kg0, "key group {g1}");
        }
        let Some(Engine::Int(store)) = &op.engine else {
            panic!("an Int64 key and an integer sum")
        };
        let KeyState::Int64 { groups } = &store.keys else {
            panic!("a single Int64 key")
        };
        for (g, _) in &second.keyed {
            let shared = Arc::strong_count(&groups[*g as usize]) > 1;
            assert_eq!(shared, *g != kg0, "key group {g}");
        }
        // Everything changes after both snapshots: neither sees it.
        run(&mut op, int_batch(keys.clone(), vec![Some(100); 400]));
        for (snap, key0) in [(first, 1), (second, 11)] {
            let bytes: Vec<(u32, StateBlob)> = snap
                .keyed
                .iter()
                .map(|(kg, b)| (*kg, StateBlob::Bytes(b.to_bytes().unwrap())))
                .collect();
            let mut fresh = KeyedAggOperator::new(&f, &ctx(0..128, 128)).unwrap();
            fresh
                .restore_state(OperatorState {
                    operator: None,
                    keyed: bytes,
                })
                .unwrap();
            let out = run(&mut fresh, int_batch(keys.clone(), vec![Some(0); 400]));
            let mut want = vec![Some(1); 400];
            want[0] = Some(key0);
            assert_eq!(ints(out.column(1)), want);
        }
    }

    #[test]
    fn test_restore_rejects_foreign_key_group_bad_version_and_other_aggregate() {
        let f = factory(&["k"], AggKind::Sum, Some("v"));
        let mut op = KeyedAggOperator::new(&f, &ctx(0..128, 128)).unwrap();
        run(
            &mut op,
            int_batch((0..64).map(Some).collect(), vec![Some(1); 64]),
        );
        let snap = op.snapshot_state(1).unwrap();
        let (kg, blob) = snap.keyed[0].clone();
        let bytes = blob.to_bytes().unwrap();

        let other = (kg as usize + 1) % 128;
        let mut narrow = KeyedAggOperator::new(&f, &ctx(other..other + 1, 128)).unwrap();
        let err = narrow
            .restore_state(OperatorState {
                operator: None,
                keyed: vec![(kg, blob.clone())],
            })
            .unwrap_err();
        assert!(matches!(err, Error::Checkpoint { .. }));
        assert!(
            err.to_string().contains(&format!("key group {kg}")),
            "{err}"
        );

        let mut wrong_version = bytes.as_ref().clone();
        wrong_version[0] = 9;
        let mut fresh = KeyedAggOperator::new(&f, &ctx(0..128, 128)).unwrap();
        let err = fresh
            .restore_state(OperatorState {
                operator: None,
                keyed: vec![(kg, StateBlob::Bytes(Arc::new(wrong_version)))],
            })
            .unwrap_err();
        assert!(err.to_string().contains("format version 9"), "{err}");

        let mut max =
            KeyedAggOperator::new(&factory(&["k"], AggKind::Max, Some("v")), &ctx(0..128, 128))
                .unwrap();
        let err = max
            .restore_state(OperatorState {
                operator: None,
                keyed: vec![(kg, StateBlob::Bytes(bytes.clone()))],
            })
            .unwrap_err();
        assert!(err.to_string().contains("'sum'"), "{err}");

        // The blob of one key group presented as another's is refused.
        let mut fresh = KeyedAggOperator::new(&f, &ctx(0..128, 128)).unwrap();
        let err = fresh
            .restore_state(OperatorState {
                operator: None,
                keyed: vec![(other as u32, StateBlob::Bytes(bytes))],
            })
            .unwrap_err();
        assert!(
            err.to_string().contains("holds a key of key group"),
            "{err}"
        );
    }

    #[test]
    fn test_restored_state_must_match_input_types() {
        let f = factory(&["k"], AggKind::Sum, Some("v"));
        let mut op = KeyedAggOperator::new(&f, &ctx(0..128, 128)).unwrap();
        run(&mut op, int_batch(vec![Some(1)], vec![Some(1)]));
        let snap = op.snapshot_state(1).unwrap();
        let mut fresh = KeyedAggOperator::new(&f, &ctx(0..128, 128)).unwrap();
        fresh.restore_state(snap).unwrap();
        let b = batch(vec![
            ("k", Arc::new(Int64Array::from(vec![1])) as ArrayRef),
            ("v", Arc::new(Float64Array::from(vec![1.0])) as ArrayRef),
        ]);
        let mut out = VecCollector(Vec::new());
        let err = fresh.process_batch(0, b, &mut out).unwrap_err();
        assert!(matches!(err, Error::Schema { .. }), "{err}");
    }
}
