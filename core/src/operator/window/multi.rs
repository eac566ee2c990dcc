//! Tumbling and sliding windows of multi-aggregates:
//! `keyed.window(ed.Tumbling("1m")).agg(F.count("*"), F.approx_percentile("lat", 0.99))`
//! (DESIGN.md "Aggregates"), on the accumulators of [`AggregateSlots`]; a
//! slot is a (key, window).
//!
//! # Semantics
//!
//! Those of the parent module's windows: epoch-aligned windows, a window is
//! over when the watermark reaches its last millisecond, a record whose
//! windows are all over is late (counted, dropped or sent to [`LATE_PORT`]),
//! late by its own key group's watermark after a restore
//! ([`KeyGroupWatermarks`]). When the watermark passes a window's end it
//! emits one row per key: the key columns, `window_start`, `window_end` (of
//! the event-time column's type), then every aggregate under its name; rows
//! ordered by `window_end`, then by the order in which the (key, window)
//! pair was first seen. Fired slots are released.
//!
//! # Serialization format (version 1)
//!
//! ```text
//! byte 0      format version, currently 1
//! bytes 1..   an Arrow IPC stream; schema metadata:
//!               "eddyline.window_aggs"            "<name>=<function>,..."
//!               "eddyline.window_aggs.assigner"   as the parent module writes it
//!               "eddyline.window_aggs.watermark"  the key group's watermark (decimal)
//!             columns: the key columns (nullable), window_start (Int64 ms),
//!               __eddyline_seq (UInt64), every aggregate's current value
//!               under its name, then the accumulators' states
//! ```
//!
//! Every owned key group is written once the operator has a watermark (its
//! watermark is state); `read_state` shows keys, `window_start` and the values.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arrow::array::{ArrayRef, AsArray, BooleanArray, Int64Array, RecordBatch, UInt64Array};
use arrow::buffer::BooleanBuffer;
use arrow::compute::filter_record_batch;
use arrow::datatypes::{DataType, Field, FieldRef, Int64Type, Schema, SchemaRef, UInt64Type};
use arrow::row::{RowConverter, Rows};
use rustc_hash::FxHashMap;

use super::{time_array, WindowAssigner};
use crate::error::{Error, ForOperator, Result};
use crate::event::MAX_WATERMARK;
use crate::expr::{Aggregate, AggregateSet, AggregateSlots, STATE_COLUMN_PREFIX};
use crate::keygroup::{hash_keys, KeyGroupOwnership};
use crate::operator::timestamps::{event_time_column, event_times_millis};
use crate::operator::{
    CheckpointedState, Collector, Operator, OperatorContext, OperatorFactory, LATE_PORT,
};
use crate::state::group_watermarks::KeyGroupWatermarks;
use crate::state::keyed::{
    check_key_group, encode_schema, open_blob, owned_key_groups, recorded_input_schema, same_input,
    sort_fields, window_key_columns, META_INPUT_SCHEMA,
};
use crate::state::{OperatorState, StateBlob};

/// The version byte that opens every serialized key-group blob.
pub const MULTI_FORMAT_VERSION: u8 = 1;

const META_AGGS: &str = "eddyline.window_aggs";
const META_ASSIGNER: &str = "eddyline.window_aggs.assigner";
const META_WATERMARK: &str = "eddyline.window_aggs.watermark";
const SEQ_FIELD: &str = "__eddyline_seq";

/// Builds [`WindowAggsOperator`]s.
#[derive(Debug, Clone, PartialEq)]
pub struct WindowAggsFactory {
    pub keys: Vec<String>,
    pub time_column: String,
    pub assigner: WindowAssigner,
    pub aggregates: Vec<(String, Aggregate)>,
    /// Late records go to [`LATE_PORT`] instead of being dropped.
    pub late_output: bool,
    /// The input schema when the graph knows it: the operator binds its
    /// aggregates at once, so windows restored from a checkpoint fire even
    /// when no batch comes after the restore (a source that had finished).
    pub input: Option<SchemaRef>,
}

#[derive(Debug, Clone)]
struct Binding {
    input: SchemaRef,
    key_idx: Vec<usize>,
    time_idx: usize,
    time_type: DataType,
    set: Arc<AggregateSet>,
    output: SchemaRef,
    /// The blob schema without its watermark metadata.
    blob_fields: Vec<FieldRef>,
}

impl WindowAggsFactory {
    /// The output schema for `input`: keys, `window_start`, `window_end`,
    /// then one field per aggregate. Errors name `operator`.
    pub fn output_schema(&self, operator: &str, input: &SchemaRef) -> Result<SchemaRef> {
        Ok(self.bind(operator, input)?.output)
    }

    fn bind(&self, operator: &str, input: &SchemaRef) -> Result<Binding> {
        self.assigner.validate(operator)?;
        let (key_idx, key_fields) =
            window_key_columns(operator, input, &self.keys, "a window agg()")?;
        let time_idx = event_time_column(operator, input, &self.time_column)?;
        let time_type = input.field(time_idx).data_type().clone();
        let set = AggregateSet::bind(&self.aggregates, input).map_err(|e| e.at(operator))?;
        let values = set.output_fields();
        let reserved =
            |n: &str| self.keys.iter().any(|k| k == n) || n == "window_start" || n == "window_end";
        if let Some(clash) = values.iter().find(|v| reserved(v.name())) {
            return Err(Error::graph(
                operator,
                format!(
                    "aggregate '{}' has the name of a key or window column; give it another \
                     with .alias(...)",
                    clash.name()
                ),
            ));
        }
        let mut output = key_fields.clone();
        output.push(Arc::new(Field::new(
            "window_start",
            time_type.clone(),
            false,
        )));
        output.push(Arc::new(Field::new("window_end", time_type.clone(), false)));
        output.extend(values.iter().cloned());
        let mut blob_fields = key_fields;
        blob_fields.push(Arc::new(Field::new("window_start", DataType::Int64, false)));
        blob_fields.push(Arc::new(Field::new(SEQ_FIELD, DataType::UInt64, false)));
        blob_fields.extend(values);
        blob_fields.extend(set.state_fields().iter().cloned());
        Ok(Binding {
            input: input.clone(),
            key_idx,
            time_idx,
            time_type,
            set: Arc::new(set),
            output: Arc::new(Schema::new(output)),
            blob_fields,
        })
    }
}

impl OperatorFactory for WindowAggsFactory {
    fn create(&self, ctx: &OperatorContext) -> Result<Box<dyn Operator>> {
        self.assigner.validate(&ctx.name)?;
        let own = KeyGroupOwnership::from_context(ctx)?;
        let mut op = Box::new(WindowAggsOperator {
            factory: self.clone(),
            reached: KeyGroupWatermarks::new(own.key_groups.len()),
            own,
            binding: None,
            state: None,
            pending: Vec::new(),
            watermark: i64::MIN,
            next_seq: 0,
            late: Arc::new(AtomicU64::new(0)),
            hashes: Vec::new(),
            times: Vec::new(),
        });
        if let Some(input) = &self.input {
            op.bind(input)?;
        }
        Ok(op)
    }
}

/// One key group: window start -> key bytes -> (first-seen sequence, slot).
type Windows = BTreeMap<i64, FxHashMap<Box<[u8]>, (u64, u32)>>;

struct Keyed {
    converter: RowConverter,
    rows: Rows,
    groups: Vec<Windows>,
    slots: AggregateSlots,
}

/// Windows of multi-aggregates; see the module documentation.
pub struct WindowAggsOperator {
    factory: WindowAggsFactory,
    own: KeyGroupOwnership,
    binding: Option<Binding>,
    state: Option<Keyed>,
    pending: Vec<(usize, StateBlob)>,
    watermark: i64,
    reached: KeyGroupWatermarks,
    next_seq: u64,
    late: Arc<AtomicU64>,
    hashes: Vec<u64>,
    times: Vec<i64>,
}

impl WindowAggsOperator {
    fn bind(&mut self, schema: &SchemaRef) -> Result<()> {
        if let Some(b) = &self.binding {
            if same_input(&b.input, schema) {
                return Ok(());
            }
        }
        let binding = self.factory.bind(&self.own.name, schema)?;
        if let Some(held) = &self.binding {
            if held.blob_fields != binding.blob_fields || held.time_type != binding.time_type {
                return Err(Error::schema(
                    &self.own.name,
                    "the input schema changed in a way the window state cannot hold",
                ));
            }
            self.binding = Some(binding);
            return Ok(());
        }
        let key_fields: Vec<FieldRef> = binding
            .key_idx
            .iter()
            .map(|&i| schema.fields()[i].clone())
            .collect();
        let converter = RowConverter::new(sort_fields(&key_fields)).for_operator(&self.own.name)?;
        self.state = Some(Keyed {
            rows: converter.empty_rows(0, 0),
            converter,
            groups: vec![Windows::new(); self.own.key_groups.len()],
            slots: AggregateSlots::new(binding.set.clone()),
        });
        self.binding = Some(binding);
        for (kg, blob) in std::mem::take(&mut self.pending) {
            self.restore_blob(kg, &blob)?;
        }
        self.watermark = self.reached.continue_from(self.watermark);
        Ok(())
    }

    fn restore_blob(&mut self, kg: usize, blob: &StateBlob) -> Result<()> {
        let (Some(binding), Some(state)) = (&self.binding, &mut self.state) else {
            return Err(Error::operator(&self.own.name, "restoring before binding"));
        };
        let bytes = blob.to_bytes()?;
        let bad = |msg: String| {
            Error::checkpoint(
                None,
                format!("the window agg() state of key group {kg} {msg}"),
            )
        };
        let reader = open_blob(&bytes, MULTI_FORMAT_VERSION, &bad)?;
        let schema = reader.schema();
        let meta = schema.metadata();
        let expected = binding.set.describe();
        let held = meta.get(META_AGGS).cloned().unwrap_or_default();
        let assigner = meta.get(META_ASSIGNER).cloned().unwrap_or_default();
        let types_match = schema.fields().len() == binding.blob_fields.len()
            && schema
                .fields()
                .iter()
                .zip(&binding.blob_fields)
                .all(|(a, b)| a.data_type() == b.data_type());
        if held != expected || assigner != self.factory.assigner.describe() || !types_match {
            return Err(bad(format!(
                "holds the aggregates ({held}) over {assigner} windows, but the operator \
                 computes ({expected}) over {} windows",
                self.factory.assigner.describe()
            )));
        }
        let watermark: i64 = meta
            .get(META_WATERMARK)
            .and_then(|w| w.parse().ok())
            .ok_or_else(|| bad("has no watermark".to_string()))?;
        let local = kg - self.own.key_groups.start;
        self.reached.restore(local, watermark);
        let n_keys = binding.key_idx.len();
        let first_state = n_keys + 2 + binding.set.len();
        for batch in reader {
            let batch = batch.map_err(|e| bad(format!("cannot be read: {e}")))?;
            if batch.num_rows() == 0 {
                continue;
            }
            let key_cols = &batch.columns()[..n_keys];
            check_key_group(
                &self.own.name,
                "the window agg() state",
                key_cols,
                &mut self.hashes,
                kg,
                self.own.max_parallelism,
            )?;
            let keys = state
                .converter
                .convert_columns(key_cols)
                .for_operator(&self.own.name)?;
            let starts = batch.column(n_keys).as_primitive::<Int64Type>();
            let seqs = batch.column(n_keys + 1).as_primitive::<UInt64Type>();
            let states = &batch.columns()[first_state..];
            for (i, key) in keys.iter().enumerate() {
                let slot = state.slots.allocate().map_err(|e| e.at(&self.own.name))?;
                state
                    .slots
                    .merge_row(slot, states, i)
                    .map_err(|e| e.at(&self.own.name))?;
                let seq = seqs.value(i);
                self.next_seq = self.next_seq.max(seq + 1);
                let window = state.groups[local].entry(starts.value(i)).or_default();
                if window
                    .insert(Box::from(key.as_ref()), (seq, slot))
                    .is_some()
                {
                    return Err(bad("holds a key and window twice".to_string()));
                }
            }
        }
        Ok(())
    }
}

impl Operator for WindowAggsOperator {
    fn late_records(&self) -> u64 {
        self.late.load(Ordering::Relaxed)
    }

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
        event_times_millis(
            name,
            batch.column(binding.time_idx),
            &self.factory.time_column,
            &mut self.times,
        )?;
        let key_cols: Vec<ArrayRef> = binding
            .key_idx
            .iter()
            .map(|&i| batch.column(i).clone())
            .collect();
        hash_keys(&key_cols, &mut self.hashes).for_operator(name)?;
        state.rows.clear();
        state
            .converter
            .append(&mut state.rows, &key_cols)
            .for_operator(name)?;
        let (size, slide) = (
            self.factory.assigner.size_ms(),
            self.factory.assigner.slide_ms(),
        );
        let mut rows: Vec<u32> = Vec::with_capacity(n);
        let mut slots: Vec<u32> = Vec::with_capacity(n);
        let mut late = vec![false; n];
        let mut n_late = 0u64;
        for (i, key) in state.rows.iter().enumerate() {
            let local = self.own.local_index(self.hashes[i])?;
            let watermark = self.reached.at(local, self.watermark);
            let t = self.times[i];
            let mut start = t - t.rem_euclid(slide);
            let mut any = false;
            while start > t.saturating_sub(size) {
                // Over: start + size - 1 <= watermark.
                if i128::from(start) + i128::from(size) - 1 > i128::from(watermark) {
                    let window = state.groups[local].entry(start).or_default();
                    let slot = match window.get(key.as_ref()) {
                        Some(&(_, slot)) => slot,
                        None => {
                            let slot = state.slots.allocate().map_err(|e| e.at(name))?;
                            window.insert(Box::from(key.as_ref()), (self.next_seq, slot));
                            self.next_seq += 1;
                            slot
                        }
                    };
                    rows.push(i as u32);
                    slots.push(slot);
                    any = true;
                }
                start -= slide;
            }
            if !any {
                late[i] = true;
                n_late += 1;
            }
        }
        state
            .slots
            .update(&batch, Some(&rows), &slots)
            .map_err(|e| e.at(name))?;
        if n_late > 0 {
            self.late.fetch_add(n_late, Ordering::Relaxed);
            if self.factory.late_output {
                let mask = BooleanArray::new(BooleanBuffer::from(late), None);
                let rows =
                    filter_record_batch(&batch, &mask).map_err(|e| Error::arrow(name, &e))?;
                out.emit_to_port(LATE_PORT, rows)?;
            }
        }
        Ok(())
    }

    fn process_watermark(&mut self, watermark: i64, out: &mut dyn Collector) -> Result<()> {
        if watermark < self.watermark {
            return Ok(());
        }
        if !self.pending.is_empty() {
            // Restored windows cannot fire before the aggregates are bound
            // (the graph did not know the input schema): refuse rather than
            // drop them.
            return Err(Error::operator(
                &self.own.name,
                "a watermark came before any record after a restore, and the input schema \
                 is not known to bind the restored windows' aggregates; declare the source's \
                 schema",
            ));
        }
        self.watermark = watermark;
        let size = self.factory.assigner.size_ms();
        if let (Some(binding), Some(state)) = (&self.binding, &mut self.state) {
            let name = &self.own.name;
            // (end, seq, key bytes, slot) of every window that is over.
            let mut fired: Vec<(i64, u64, Box<[u8]>, u32)> = Vec::new();
            for windows in &mut state.groups {
                while let Some(entry) = windows.first_entry() {
                    let start = *entry.key();
                    let over = watermark == MAX_WATERMARK
                        || i128::from(start) + i128::from(size) - 1 <= i128::from(watermark);
                    if !over {
                        break;
                    }
                    for (key, (seq, slot)) in entry.remove() {
                        fired.push((start.saturating_add(size), seq, key, slot));
                    }
                }
            }
            if !fired.is_empty() {
                fired.sort_unstable_by_key(|f| (f.0, f.1));
                let parser = state.converter.parser();
                let mut columns = state
                    .converter
                    .convert_rows(fired.iter().map(|f| parser.parse(&f.2)))
                    .for_operator(name)?;
                let ends = fired.iter().map(|f| f.0);
                let starts = fired.iter().map(|f| f.0 - size);
                columns.push(time_array(name, starts, &binding.time_type)?);
                columns.push(time_array(name, ends, &binding.time_type)?);
                let ids: Vec<u32> = fired.iter().map(|f| f.3).collect();
                columns.extend(state.slots.evaluate(&ids).map_err(|e| e.at(name))?);
                for id in ids {
                    state.slots.release(id);
                }
                let batch = RecordBatch::try_new(binding.output.clone(), columns)
                    .map_err(|e| Error::arrow(name, &e))?;
                out.emit(batch)?;
            }
        }
        out.emit_watermark(watermark)
    }

    fn state(&mut self) -> Option<&mut dyn CheckpointedState> {
        Some(self)
    }
}

impl CheckpointedState for WindowAggsOperator {
    fn snapshot_state(&mut self, _checkpoint_id: u64) -> Result<OperatorState> {
        let (Some(binding), Some(state)) = (&self.binding, &mut self.state) else {
            let keyed = self
                .pending
                .iter()
                .map(|(kg, blob)| (*kg as u32, blob.clone()))
                .collect();
            return Ok(OperatorState {
                operator: None,
                keyed,
            });
        };
        let name = &self.own.name;
        let start = self.own.key_groups.start;
        let mut keyed = Vec::new();
        for (local, windows) in state.groups.iter().enumerate() {
            let has_state = !windows.is_empty();
            if !self.reached.snapshots(local, self.watermark, has_state) {
                continue;
            }
            let mut keys: Vec<&[u8]> = Vec::new();
            let (mut starts, mut seqs, mut ids) = (Vec::new(), Vec::new(), Vec::new());
            for (window, entries) in windows {
                for (key, (seq, slot)) in entries {
                    keys.push(key);
                    starts.push(*window);
                    seqs.push(*seq);
                    ids.push(*slot);
                }
            }
            let parser = state.converter.parser();
            let mut columns = state
                .converter
                .convert_rows(keys.iter().map(|k| parser.parse(k)))
                .for_operator(name)?;
            columns.push(Arc::new(Int64Array::from(starts)));
            columns.push(Arc::new(UInt64Array::from(seqs)));
            columns.extend(state.slots.evaluate(&ids).map_err(|e| e.at(name))?);
            columns.extend(state.slots.states(&ids).map_err(|e| e.at(name))?);
            let metadata = HashMap::from([
                (META_AGGS.to_string(), binding.set.describe()),
                (
                    META_INPUT_SCHEMA.to_string(),
                    encode_schema(name, &binding.input)?,
                ),
                (META_ASSIGNER.to_string(), self.factory.assigner.describe()),
                (
                    META_WATERMARK.to_string(),
                    self.reached.at(local, self.watermark).to_string(),
                ),
            ]);
            let schema = Arc::new(Schema::new_with_metadata(
                binding.blob_fields.clone(),
                metadata,
            ));
            let bytes = crate::state::encode_ipc_blob(MULTI_FORMAT_VERSION, &schema, columns)
                .for_operator(name)?;
            keyed.push(((start + local) as u32, StateBlob::Bytes(Arc::new(bytes))));
        }
        Ok(OperatorState {
            operator: None,
            keyed,
        })
    }

    fn restore_state(&mut self, state: OperatorState) -> Result<()> {
        let groups = owned_key_groups(state, &self.own, "a window agg()")?;
        if self.binding.is_none() {
            // The graph did not know the input schema: bind with the one the
            // state was written for, so restored windows can fire before the
            // first record (a watermark may come first).
            let recorded = groups
                .iter()
                .find_map(|(_, blob)| recorded_input_schema(blob, MULTI_FORMAT_VERSION));
            if let Some(input) = recorded {
                self.bind(&input)?;
            }
        }
        for (kg, blob) in groups {
            if self.binding.is_some() {
                self.restore_blob(kg, &blob)?;
            } else {
                self.pending.push((kg, blob));
            }
        }
        if self.binding.is_some() {
            self.watermark = self.reached.continue_from(self.watermark);
        }
        Ok(())
    }
}

/// Whether a decoded blob schema is a window multi-aggregate's.
pub(crate) fn is_state_schema(schema: &Schema) -> bool {
    schema.metadata().contains_key(META_AGGS)
}

/// One key-group blob as `read_state` shows it: the keys, `window_start`
/// (ms) and every aggregate's current value.
pub(crate) fn state_table(bytes: &[u8], kg: u32) -> Result<Vec<RecordBatch>> {
    let bad = |msg: String| {
        Error::checkpoint(
            None,
            format!("the window agg() state of key group {kg} {msg}"),
        )
    };
    let reader = open_blob(bytes, MULTI_FORMAT_VERSION, &bad)?;
    let schema = reader.schema();
    let keep: Vec<usize> = schema
        .fields()
        .iter()
        .enumerate()
        .filter(|(_, f)| !f.name().starts_with(STATE_COLUMN_PREFIX) && f.name() != SEQ_FIELD)
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

#[cfg(test)]
#[path = "multi_tests.rs"]
mod tests;
