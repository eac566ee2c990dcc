//! Running keyed multi-aggregates: `keyed.agg(F.sum("x").alias("total"),
//! F.avg("y"), F.approx_percentile("lat", 0.99), ...)` (DESIGN.md
//! "Aggregates"), on the accumulators of [`AggregateSlots`].
//!
//! # Semantics
//!
//! As the single-column running aggregates of the parent module: for each
//! input batch one row per distinct key of the batch, in first-occurrence
//! order, holding the key columns (input names and types) and the updated
//! value of every aggregate, named by its alias or by Spark's default name
//! (`avg(y)`), typed as Spark types it (`avg` and `stddev` are doubles,
//! `sum` of integers a long, `count` a long). An upsert stream of the
//! current values per key. Null keys are a key of their own.
//!
//! # State and snapshots
//!
//! Per owned key group, a map from the key's Arrow row-format bytes to its
//! slot in [`AggregateSlots`]. A snapshot copies, on the task thread, the
//! key groups changed since the previous snapshot into Arrow columns (keys,
//! current values, accumulator states) and hands them to the checkpoint
//! writer as a deferred blob; an unchanged key group hands over the copy of
//! the previous snapshot with the same change token, so incremental
//! checkpoints do not write it again. Blobs restored before the first batch
//! (whose schema binds the aggregates) are kept as they are until it comes,
//! and checkpointed as they are meanwhile.
//!
//! # Serialization format (version 1)
//!
//! ```text
//! byte 0      format version, currently 1
//! bytes 1..   an Arrow IPC stream; schema metadata {"eddyline.keyed_aggs": "<name>=<function>,..."}
//!             columns: the key columns (input names and types, nullable), then every
//!             aggregate's current value under its output name (what `read_state` shows),
//!             then the accumulators' states `__eddyline_state.<i>.<field>`;
//!             one row per key of the key group
//! ```
//!
//! Restoring checks the version, the aggregates and their state types, and
//! that every key hashes to the key group the blob claims; the value
//! columns are not read back (the states are the truth).

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch, UInt32Array};
use arrow::compute::take;
use arrow::datatypes::{Field, FieldRef, Schema, SchemaRef};
use rustc_hash::FxHashMap;

use crate::error::{Error, ForOperator, Result};
use crate::expr::{Aggregate, AggregateSet};
use crate::keygroup::KeyGroupOwnership;
use crate::operator::{CheckpointedState, Collector, Operator, OperatorContext, OperatorFactory};
use crate::state::keyed::{key_columns, open_blob, owned_key_groups};
use crate::state::keyed_slots::{
    blob_error, columns_at, held_blobs, same_field_types, visible_state_table, KeyedSlots,
    SlotGroups,
};
use crate::state::{DeferredState, OperatorState, StateBlob};

/// The version byte that opens every serialized key-group blob.
pub const MULTI_FORMAT_VERSION: u8 = 1;

/// Schema metadata key naming the aggregates of a serialized blob.
const META_AGGS: &str = "eddyline.keyed_aggs";

/// Builds [`MultiAggOperator`]s: `aggregates` (output name, aggregate) of
/// the rows of every key of `keys`.
#[derive(Debug, Clone, PartialEq)]
pub struct MultiAggFactory {
    pub keys: Vec<String>,
    pub aggregates: Vec<(String, Aggregate)>,
}

/// An input schema resolved against a factory.
#[derive(Debug, Clone)]
struct Binding {
    input: SchemaRef,
    key_idx: Vec<usize>,
    set: Arc<AggregateSet>,
    output: SchemaRef,
    /// The schema of a key group's blob.
    blob: SchemaRef,
}

impl MultiAggFactory {
    /// A factory for `aggregates` grouped by `keys`.
    pub fn new(keys: Vec<String>, aggregates: Vec<(String, Aggregate)>) -> Self {
        MultiAggFactory { keys, aggregates }
    }

    /// The schema of the operator's output for `input` (build-time
    /// validation): the key fields, then one field per aggregate. Errors
    /// name `operator` and, for an aggregate, the aggregate and its columns.
    pub fn output_schema(&self, operator: &str, input: &SchemaRef) -> Result<SchemaRef> {
        Ok(self.bind(operator, input)?.output)
    }

    fn bind(&self, operator: &str, input: &SchemaRef) -> Result<Binding> {
        if self.keys.is_empty() {
            return Err(Error::graph(
                operator,
                "agg() needs at least one key column",
            ));
        }
        let (key_idx, key_fields) = key_columns(operator, input, &self.keys, "")?;
        let set = AggregateSet::bind(&self.aggregates, input).map_err(|e| e.at(operator))?;
        let values = set.output_fields();
        if let Some(clash) = values.iter().find(|v| self.keys.contains(v.name())) {
            return Err(Error::graph(
                operator,
                format!(
                    "aggregate '{}' has the name of a key column; give it another with .alias(...)",
                    clash.name()
                ),
            ));
        }
        let output: Vec<FieldRef> = key_fields.iter().cloned().chain(values.clone()).collect();
        let mut blob: Vec<FieldRef> = key_fields
            .iter()
            .map(|f| Arc::new(Field::new(f.name(), f.data_type().clone(), true)))
            .collect();
        blob.extend(values);
        blob.extend(set.state_fields().iter().cloned());
        let metadata = HashMap::from([(META_AGGS.to_string(), set.describe())]);
        Ok(Binding {
            input: input.clone(),
            key_idx,
            set: Arc::new(set),
            output: Arc::new(Schema::new(output)),
            blob: Arc::new(Schema::new_with_metadata(blob, metadata)),
        })
    }
}

impl OperatorFactory for MultiAggFactory {
    fn create(&self, ctx: &OperatorContext) -> Result<Box<dyn Operator>> {
        Ok(Box::new(MultiAggOperator::new(self, ctx)?))
    }
}

/// One owned key group: its keys' slots and the copy of its last snapshot.
#[derive(Default)]
struct Group {
    index: FxHashMap<Box<[u8]>, u32>,
    /// The snapshot epoch in which it was last modified.
    changed: u64,
    /// The last snapshot's copy, reused while the group is unchanged.
    copy: Option<Arc<GroupCopy>>,
}

/// A running keyed multi-aggregate; see the module documentation.
pub struct MultiAggOperator {
    factory: MultiAggFactory,
    own: KeyGroupOwnership,
    binding: Option<Binding>,
    state: Option<SlotGroups<Group>>,
    /// Blobs restored before the input schema was known.
    pending: Vec<(usize, StateBlob)>,
    hashes: Vec<u64>,
    slot_of_row: Vec<u32>,
    epoch: u64,
    token_base: u64,
}

impl std::fmt::Debug for MultiAggOperator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MultiAggOperator")
            .field("factory", &self.factory)
            .field("key_groups", &self.own.key_groups)
            .finish_non_exhaustive()
    }
}

impl MultiAggOperator {
    /// An operator for the subtask described by `ctx`.
    pub fn new(factory: &MultiAggFactory, ctx: &OperatorContext) -> Result<Self> {
        Ok(MultiAggOperator {
            factory: factory.clone(),
            own: KeyGroupOwnership::from_context(ctx)?,
            binding: None,
            state: None,
            pending: Vec::new(),
            hashes: Vec::new(),
            slot_of_row: Vec::new(),
            epoch: 0,
            token_base: crate::state::change_token_base(),
        })
    }

    /// Resolves `schema`; the first binding creates the state and restores
    /// the pending blobs. A later schema must bind to the same state.
    fn bind(&mut self, schema: &SchemaRef) -> Result<()> {
        if let Some(b) = &self.binding {
            if crate::state::keyed::same_input(&b.input, schema) {
                return Ok(());
            }
        }
        let binding = self.factory.bind(&self.own.name, schema)?;
        if let Some(held) = &self.binding {
            if held.blob.fields() != binding.blob.fields() {
                return Err(Error::schema(
                    &self.own.name,
                    format!(
                        "the input schema changed from {:?} to {:?}, which the aggregate state \
                         cannot hold",
                        held.input, schema
                    ),
                ));
            }
            self.binding = Some(binding);
            return Ok(());
        }
        self.state = Some(SlotGroups::new(
            &self.own,
            schema,
            &binding.key_idx,
            binding.set.clone(),
        )?);
        self.binding = Some(binding);
        for (kg, blob) in std::mem::take(&mut self.pending) {
            self.restore_blob(kg, &blob)?;
        }
        Ok(())
    }

    fn restore_blob(&mut self, kg: usize, blob: &StateBlob) -> Result<()> {
        let (Some(binding), Some(state)) = (&self.binding, &mut self.state) else {
            return Err(Error::operator(&self.own.name, "restoring before binding"));
        };
        let bytes = blob.to_bytes()?;
        let bad = blob_error("the keyed aggregate state", kg);
        let reader = open_blob(&bytes, MULTI_FORMAT_VERSION, &bad)?;
        let schema = reader.schema();
        let held = schema
            .metadata()
            .get(META_AGGS)
            .cloned()
            .unwrap_or_default();
        let expected = binding.set.describe();
        if held != expected || !same_field_types(&schema, binding.blob.fields()) {
            return Err(bad(format!(
                "holds the aggregates ({held}) with columns {:?}, but the operator computes \
                 ({expected}) with columns {:?}",
                schema.fields(),
                binding.blob.fields()
            )));
        }
        let n_keys = binding.key_idx.len();
        let n_values = binding.set.len();
        let local = kg - self.own.key_groups.start;
        let group = &mut state.groups[local];
        group.changed = self.epoch;
        group.copy = None;
        state.keyed.restore_rows(
            &self.own,
            "the keyed aggregate state",
            kg,
            reader,
            (n_keys, n_keys + n_values),
            &mut self.hashes,
            &bad,
            |_, _, key, slot| {
                if group.index.insert(Box::from(key), slot).is_some() {
                    return Err(bad("holds a key twice".to_string()));
                }
                Ok(())
            },
        )
    }
}

impl Operator for MultiAggOperator {
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
        let (Some(binding), Some(state)) = (&self.binding, &mut self.state) else {
            return Err(Error::operator(&self.own.name, "no state after binding"));
        };
        let name = &self.own.name;
        let key_cols = columns_at(&batch, &binding.key_idx);
        state.keyed.encode_keys(name, &key_cols, &mut self.hashes)?;
        self.slot_of_row.clear();
        let slots = &mut state.keyed.slots;
        for (i, key) in state.keyed.rows.iter().enumerate() {
            let local = self.own.local_index(self.hashes[i])?;
            let group = &mut state.groups[local];
            group.changed = self.epoch;
            let slot = match group.index.get(key.as_ref()) {
                Some(&slot) => slot,
                None => {
                    let slot = slots.allocate().map_err(|e| e.at(name))?;
                    group.index.insert(Box::from(key.as_ref()), slot);
                    slot
                }
            };
            self.slot_of_row.push(slot);
        }
        slots
            .update(&batch, None, &self.slot_of_row)
            .map_err(|e| e.at(name))?;
        let (distinct, first) = slots.last_update();
        let (distinct, first) = (distinct.to_vec(), first.to_vec());
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(binding.output.fields().len());
        if first.len() == n {
            columns.extend(key_cols);
        } else {
            let indices = UInt32Array::from(first);
            for col in &key_cols {
                columns
                    .push(take(col.as_ref(), &indices, None).map_err(|e| Error::arrow(name, &e))?);
            }
        }
        columns.extend(slots.evaluate(&distinct).map_err(|e| e.at(name))?);
        let output = RecordBatch::try_new(binding.output.clone(), columns)
            .map_err(|e| Error::arrow(name, &e))?;
        out.emit(output)
    }

    fn state(&mut self) -> Option<&mut dyn CheckpointedState> {
        Some(self)
    }
}

impl CheckpointedState for MultiAggOperator {
    fn snapshot_state(&mut self, _checkpoint_id: u64) -> Result<OperatorState> {
        let epoch = self.epoch;
        self.epoch += 1;
        let start = self.own.key_groups.start;
        let (Some(binding), Some(state)) = (&self.binding, &mut self.state) else {
            return Ok(held_blobs(&self.pending));
        };
        let name = &self.own.name;
        let mut keyed = Vec::new();
        for (i, group) in state.groups.iter_mut().enumerate() {
            if group.index.is_empty() {
                group.copy = None;
                continue;
            }
            let copy = match &group.copy {
                Some(copy) if group.changed != epoch => copy.clone(),
                _ => {
                    let copy = Arc::new(GroupCopy::take(
                        name,
                        binding,
                        &mut state.keyed,
                        &group.index,
                        self.token_base | group.changed,
                    )?);
                    group.copy = Some(copy.clone());
                    copy
                }
            };
            keyed.push(((start + i) as u32, StateBlob::Deferred(copy)));
        }
        Ok(OperatorState {
            operator: None,
            keyed,
        })
    }

    fn restore_state(&mut self, state: OperatorState) -> Result<()> {
        for (kg, blob) in owned_key_groups(state, &self.own, "a keyed agg()")? {
            if self.binding.is_some() {
                self.restore_blob(kg, &blob)?;
            } else {
                self.pending.push((kg, blob));
            }
        }
        Ok(())
    }
}

/// A key group's keys, values and accumulator states, copied at a snapshot
/// and serialized on the checkpoint writer thread.
struct GroupCopy {
    name: Arc<str>,
    schema: SchemaRef,
    columns: Vec<ArrayRef>,
    token: u64,
}

impl GroupCopy {
    fn take(
        name: &str,
        binding: &Binding,
        keyed: &mut KeyedSlots,
        index: &FxHashMap<Box<[u8]>, u32>,
        token: u64,
    ) -> Result<Self> {
        let ids: Vec<u32> = index.values().copied().collect();
        let mut columns = keyed.key_columns(name, index.keys().map(|k| &k[..]))?;
        keyed.append_values_and_states(name, &ids, &mut columns)?;
        Ok(GroupCopy {
            name: Arc::from(name),
            schema: binding.blob.clone(),
            columns,
            token,
        })
    }
}

impl DeferredState for GroupCopy {
    fn token(&self) -> Option<u64> {
        Some(self.token)
    }

    fn serialize(&self) -> Result<Vec<u8>> {
        crate::state::encode_ipc_blob(MULTI_FORMAT_VERSION, &self.schema, self.columns.clone())
            .for_operator(&self.name)
    }
}

/// Whether a decoded blob schema is a keyed multi-aggregate's.
pub(crate) fn is_state_schema(schema: &Schema) -> bool {
    schema.metadata().contains_key(META_AGGS)
}

/// One key-group blob as `read_state` shows it: the key columns and every
/// aggregate's value under its output name (the accumulator states left out).
pub(crate) fn state_table(bytes: &[u8], kg: u32) -> Result<Vec<RecordBatch>> {
    visible_state_table(
        bytes,
        kg,
        MULTI_FORMAT_VERSION,
        "the keyed aggregate state",
        &[],
    )
}

#[cfg(test)]
#[path = "multi_tests.rs"]
mod tests;
