//! Aggregate slots per key: what the keyed and windowed multi-aggregates
//! (`operator/keyed_agg/multi.rs`, `operator/window/multi.rs`,
//! `operator/window/session_multi.rs`; DESIGN.md "Aggregates") share to
//! hold, snapshot and restore the [`AggregateSlots`] of their keys.
//!
//! Each of them keeps its own index from a key's Arrow row-format bytes
//! (and a window) to a slot id, and its own blob format. What they share is
//! the key encoding, the columns a snapshot writes after the keys (every
//! aggregate's current value, then the accumulators' states), the restore
//! of a blob's rows into fresh slots, and what `read_state` shows of a blob.

use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch};
use arrow::datatypes::{FieldRef, Schema};
use arrow::row::{RowConverter, Rows};

use super::keyed::{check_key_group, open_blob, sort_fields};
use crate::error::{Error, ForOperator, Result};
use crate::expr::{AggregateSet, AggregateSlots, STATE_COLUMN_PREFIX};
use crate::keygroup::{hash_keys, KeyGroupOwnership};
use crate::state::{OperatorState, StateBlob};

/// The aggregate slots of an operator's keys, with the converter that
/// encodes the keys into the row format its indexes hold.
pub(crate) struct KeyedSlots {
    converter: RowConverter,
    /// The keys of the current batch, encoded by [`KeyedSlots::encode_keys`].
    pub rows: Rows,
    pub slots: AggregateSlots,
}

impl KeyedSlots {
    /// Empty slots of `set` for keys of the columns `key_idx` of `input`.
    /// Errors name `operator`.
    pub fn new(
        operator: &str,
        input: &Schema,
        key_idx: &[usize],
        set: Arc<AggregateSet>,
    ) -> Result<Self> {
        let key_fields: Vec<FieldRef> =
            key_idx.iter().map(|&i| input.fields()[i].clone()).collect();
        let converter = RowConverter::new(sort_fields(&key_fields)).for_operator(operator)?;
        Ok(KeyedSlots {
            rows: converter.empty_rows(0, 0),
            converter,
            slots: AggregateSlots::new(set),
        })
    }

    /// Encodes a batch's key columns into [`KeyedSlots::rows`] and their
    /// hashes into `hashes`.
    pub fn encode_keys(
        &mut self,
        operator: &str,
        key_cols: &[ArrayRef],
        hashes: &mut Vec<u64>,
    ) -> Result<()> {
        hash_keys(key_cols, hashes).for_operator(operator)?;
        self.rows.clear();
        self.converter
            .append(&mut self.rows, key_cols)
            .for_operator(operator)
    }

    /// The key columns of `keys` (row-format bytes), in order.
    pub fn key_columns<'a>(
        &self,
        operator: &str,
        keys: impl IntoIterator<Item = &'a [u8]>,
    ) -> Result<Vec<ArrayRef>> {
        let parser = self.converter.parser();
        self.converter
            .convert_rows(keys.into_iter().map(|k| parser.parse(k)))
            .for_operator(operator)
    }

    /// Appends what a snapshot writes of the slots `ids` after their keys
    /// (and windows): every aggregate's current value (what `read_state`
    /// shows), then the accumulators' states (what a restore reads).
    pub fn append_values_and_states(
        &mut self,
        operator: &str,
        ids: &[u32],
        columns: &mut Vec<ArrayRef>,
    ) -> Result<()> {
        columns.extend(self.slots.evaluate(ids).map_err(|e| e.at(operator))?);
        columns.extend(self.slots.states(ids).map_err(|e| e.at(operator))?);
        Ok(())
    }

    /// The values of the slots `ids`, whose windows fired, which are then
    /// released.
    pub fn fire(&mut self, operator: &str, ids: &[u32]) -> Result<Vec<ArrayRef>> {
        let values = self.slots.evaluate(ids).map_err(|e| e.at(operator))?;
        for &id in ids {
            self.slots.release(id);
        }
        Ok(values)
    }

    /// Restores the rows of key group `kg`'s blob into fresh slots. Per
    /// batch it checks that every key (the first `n_keys` columns) hashes
    /// to `kg`; per row it allocates a slot, merges the row's accumulator
    /// states (the columns from `first_state` on) into it and hands the
    /// batch, the row, the key's bytes and the slot to `place`, which
    /// indexes the slot (and refuses what the operator cannot hold).
    /// `what` names the state in errors; `bad` makes a corrupt blob's error.
    #[allow(clippy::too_many_arguments)]
    pub fn restore_rows(
        &mut self,
        own: &KeyGroupOwnership,
        what: &str,
        kg: usize,
        batches: impl IntoIterator<Item = std::result::Result<RecordBatch, arrow::error::ArrowError>>,
        (n_keys, first_state): (usize, usize),
        hashes: &mut Vec<u64>,
        bad: &dyn Fn(String) -> Error,
        mut place: impl FnMut(&RecordBatch, usize, &[u8], u32) -> Result<()>,
    ) -> Result<()> {
        let name = &own.name;
        for batch in batches {
            let batch = batch.map_err(|e| bad(format!("cannot be read: {e}")))?;
            if batch.num_rows() == 0 {
                continue;
            }
            let key_cols = &batch.columns()[..n_keys];
            check_key_group(name, what, key_cols, hashes, kg, own.max_parallelism)?;
            let keys = self
                .converter
                .convert_columns(key_cols)
                .for_operator(name)?;
            let states = &batch.columns()[first_state..];
            for (i, key) in keys.iter().enumerate() {
                let slot = self.slots.allocate().map_err(|e| e.at(name))?;
                self.slots
                    .merge_row(slot, states, i)
                    .map_err(|e| e.at(name))?;
                place(&batch, i, key.as_ref(), slot)?;
            }
        }
        Ok(())
    }
}

/// The state of a multi-aggregate once its input schema is known: the
/// slots of its keys and, per owned key group, what indexes them (`G`: a
/// key's slot, or its windows' slots).
pub(crate) struct SlotGroups<G> {
    pub keyed: KeyedSlots,
    pub groups: Vec<G>,
}

impl<G: Default> SlotGroups<G> {
    /// Empty slots of `set` for keys of the columns `key_idx` of `input`,
    /// and an empty `G` per key group `own` owns. Errors name the operator.
    pub fn new(
        own: &KeyGroupOwnership,
        input: &Schema,
        key_idx: &[usize],
        set: Arc<AggregateSet>,
    ) -> Result<Self> {
        Ok(SlotGroups {
            keyed: KeyedSlots::new(&own.name, input, key_idx, set)?,
            groups: (0..own.key_groups.len()).map(|_| G::default()).collect(),
        })
    }
}

/// The columns `idx` of `batch` (its key columns), shared, not copied.
pub(crate) fn columns_at(batch: &RecordBatch, idx: &[usize]) -> Vec<ArrayRef> {
    idx.iter().map(|&i| batch.column(i).clone()).collect()
}

/// The state of an operator that has not bound its aggregates yet: the
/// blobs it restored, passed on as they are.
pub(crate) fn held_blobs(pending: &[(usize, StateBlob)]) -> OperatorState {
    OperatorState {
        operator: None,
        keyed: pending
            .iter()
            .map(|(kg, blob)| (*kg as u32, blob.clone()))
            .collect(),
    }
}

/// The error of a corrupt or mismatched blob of key group `kg` of the state
/// `what` ("the keyed aggregate state"): `bad(msg)` says
/// "`what` of key group `kg` `msg`".
pub(crate) fn blob_error(what: &str, kg: impl std::fmt::Display) -> impl Fn(String) -> Error {
    let prefix = format!("{what} of key group {kg}");
    move |msg| Error::checkpoint(None, format!("{prefix} {msg}"))
}

/// Whether a blob's `schema` has the columns `fields` (by type; names are
/// the aggregates', checked through their description).
pub(crate) fn same_field_types(schema: &Schema, fields: &[FieldRef]) -> bool {
    schema.fields().len() == fields.len()
        && schema
            .fields()
            .iter()
            .zip(fields)
            .all(|(a, b)| a.data_type() == b.data_type())
}

/// One key-group blob (format `version`) of a multi-aggregate as
/// `read_state` shows it: its columns but the accumulators' states and the
/// `hidden` ones, in a schema without metadata (`read_state` concatenates
/// the key groups). `what` names the state in errors.
pub(crate) fn visible_state_table(
    bytes: &[u8],
    kg: u32,
    version: u8,
    what: &str,
    hidden: &[&str],
) -> Result<Vec<RecordBatch>> {
    let bad = blob_error(what, kg);
    let reader = open_blob(bytes, version, &bad)?;
    let schema = reader.schema();
    let keep: Vec<usize> = schema
        .fields()
        .iter()
        .enumerate()
        .filter(|(_, f)| {
            !f.name().starts_with(STATE_COLUMN_PREFIX) && !hidden.contains(&f.name().as_str())
        })
        .map(|(i, _)| i)
        .collect();
    reader
        .map(|batch| {
            let batch = batch
                .map_err(|e| bad(format!("cannot be read: {e}")))?
                .project(&keep)
                .map_err(|e| bad(format!("cannot be read: {e}")))?;
            let plain = Arc::new(Schema::new(batch.schema().fields().clone()));
            RecordBatch::try_new(plain, batch.columns().to_vec())
                .map_err(|e| bad(format!("cannot be read: {e}")))
        })
        .collect()
}
