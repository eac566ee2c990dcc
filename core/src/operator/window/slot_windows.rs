//! The operator both windowed multi-aggregates run on (DESIGN.md
//! "Aggregates"): tumbling and sliding windows ([`super::multi`]) and
//! sessions ([`super::session_multi`]) of `keyed.window(...).agg(...)`.
//!
//! [`SlotWindowsOperator`] binds the input, encodes each batch's keys and
//! event times, keeps one slot of [`SlotGroups`] per (key, window) in the
//! key groups it owns, counts and routes late rows, emits the windows that
//! fire, and writes and restores its key groups with their watermarks
//! ([`KeyGroupWatermarks`]). The factory's [`SlotWindows`] says the rest:
//! which windows a row goes to, which windows are over, and how one key
//! group's windows are written. The semantics and blob formats are in the
//! two modules' documentation.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arrow::array::{AsArray, BooleanArray, Int64Array, RecordBatch, UInt64Array};
use arrow::buffer::BooleanBuffer;
use arrow::compute::filter_record_batch;
use arrow::datatypes::{DataType, Field, FieldRef, Int64Type, Schema, SchemaRef, UInt64Type};

use super::time_array;
use crate::error::{Error, ForOperator, Result};
use crate::expr::{Aggregate, AggregateSet, AggregateSlots, ExprResult};
use crate::keygroup::KeyGroupOwnership;
use crate::operator::timestamps::{event_time_column, event_times_millis};
use crate::operator::{CheckpointedState, Collector, Operator, OperatorContext, LATE_PORT};
use crate::state::group_watermarks::KeyGroupWatermarks;
use crate::state::keyed::{
    encode_schema, open_blob, owned_key_groups, recorded_input_schema, same_input,
    window_key_columns, META_INPUT_SCHEMA,
};
use crate::state::keyed_slots::{
    blob_error, columns_at, held_blobs, same_field_types, visible_state_table, SlotGroups,
};
use crate::state::{OperatorState, StateBlob};

/// The blob column that orders the windows of a key group as first seen.
pub(super) const SEQ_FIELD: &str = "__eddyline_seq";

/// What a windowed multi-aggregate's factory says about its windows.
pub(crate) trait SlotWindows: Clone + Send + Sync + 'static {
    /// One key group's open windows.
    type Group: Default + Send;
    /// What one batch's assignment keeps between its rows.
    type Batch: Default;
    /// The operator in messages: "window agg()" or "session window agg()".
    const WHAT: &'static str;
    /// One window in messages: "window" or "session".
    const UNIT: &'static str;
    /// The version byte that opens a key group's blob.
    const VERSION: u8;
    /// The blob's schema metadata key naming the aggregates.
    const META_AGGS: &'static str;
    /// The blob's schema metadata key describing the windows.
    const META_WINDOWS: &'static str;
    /// The blob's schema metadata key of the key group's watermark.
    const META_WATERMARK: &'static str;
    /// The Int64 (ms) columns a blob holds per window, after the keys.
    const WINDOW_COLUMNS: &'static [&'static str];

    /// What the factory holds besides its windows.
    fn aggs(&self) -> &WindowedAggs;
    /// Refuses invalid window parameters; errors name `operator`.
    fn validate(&self, operator: &str) -> Result<()>;
    /// The windows, as the blob's [`SlotWindows::META_WINDOWS`] holds them.
    fn describe(&self) -> String;
    /// The windows `described` (by [`SlotWindows::describe`]) in a message.
    fn windows_text(described: &str) -> String;

    fn is_empty(group: &Self::Group) -> bool;
    /// Adds row `row`, at time `t` and of key `key`, to the windows of its
    /// key group `group` that are open at `watermark`: pushes the (row,
    /// slot) entries to `out`, or marks the row late.
    #[allow(clippy::too_many_arguments)]
    fn assign(
        &self,
        group: &mut Self::Group,
        key: &[u8],
        row: u32,
        t: i64,
        watermark: i64,
        slots: &mut AggregateSlots,
        next_seq: &mut u64,
        batch: &mut Self::Batch,
        out: &mut Assigned,
    ) -> ExprResult<()>;
    /// What is left to do once every row of a batch is assigned.
    fn finish_batch(
        &self,
        slots: &mut AggregateSlots,
        batch: Self::Batch,
        out: &mut Assigned,
    ) -> ExprResult<()>;
    /// Removes the windows of `groups` that are over at `watermark` (all of
    /// them at [`crate::event::MAX_WATERMARK`]), in the order they fire.
    fn fire(&self, groups: &mut [Self::Group], watermark: i64) -> Vec<Fired>;
    /// Every window of `group` as a blob writes it: the key, the
    /// [`SlotWindows::WINDOW_COLUMNS`], the sequence and the slot.
    fn entries<'a>(group: &'a Self::Group, each: &mut EachWindow<'a, '_>);
    /// Puts a restored window into `group`; the message when the blob holds
    /// what a key group cannot (a window twice, overlapping sessions).
    fn restore(
        group: &mut Self::Group,
        key: &[u8],
        window: &[i64],
        seq: u64,
        slot: u32,
    ) -> std::result::Result<(), String>;
}

/// What the factories of both windowed multi-aggregates hold besides their
/// windows.
#[derive(Debug, Clone, PartialEq)]
pub struct WindowedAggs {
    pub keys: Vec<String>,
    /// The event-time column.
    pub time_column: String,
    /// (output name, aggregate), in output order.
    pub aggregates: Vec<(String, Aggregate)>,
    /// Late records go to [`LATE_PORT`] instead of being dropped.
    pub late_output: bool,
    /// The input schema when the graph knows it: the operator binds its
    /// aggregates at once, so windows restored from a checkpoint fire even
    /// when no batch comes after the restore (a source that had finished).
    pub input: Option<SchemaRef>,
}

/// What [`SlotWindows::entries`] hands every window to: its key, its
/// [`SlotWindows::WINDOW_COLUMNS`], its sequence and its slot.
pub(crate) type EachWindow<'a, 'f> = dyn FnMut(&'a [u8], &[i64], u64, u32) + 'f;

/// One batch's rows in their windows: (row, slot) entries, and which rows
/// are late.
pub(crate) struct Assigned {
    pub rows: Vec<u32>,
    pub slots: Vec<u32>,
    pub late: Vec<bool>,
}

/// A window that fired: its key, bounds (ms) and slot.
pub(crate) struct Fired {
    pub key: Box<[u8]>,
    pub start: i64,
    pub end: i64,
    pub slot: u32,
}

/// An input schema resolved against a factory.
#[derive(Debug, Clone)]
struct Binding {
    input: SchemaRef,
    key_idx: Vec<usize>,
    time_idx: usize,
    time_type: DataType,
    set: Arc<AggregateSet>,
    output: SchemaRef,
    /// The blob schema without its metadata.
    blob_fields: Vec<FieldRef>,
}

/// The output schema of `factory` for `input`: keys, `window_start`,
/// `window_end`, then one field per aggregate. Errors name `operator`.
pub(super) fn output_schema<F: SlotWindows>(
    factory: &F,
    operator: &str,
    input: &SchemaRef,
) -> Result<SchemaRef> {
    Ok(bind(factory, operator, input)?.output)
}

fn bind<F: SlotWindows>(factory: &F, operator: &str, input: &SchemaRef) -> Result<Binding> {
    factory.validate(operator)?;
    let aggs = factory.aggs();
    let keys = &aggs.keys;
    let (key_idx, key_fields) =
        window_key_columns(operator, input, keys, &format!("a {}", F::WHAT))?;
    let time_idx = event_time_column(operator, input, &aggs.time_column)?;
    let time_type = input.field(time_idx).data_type().clone();
    let set = AggregateSet::bind(&aggs.aggregates, input).map_err(|e| e.at(operator))?;
    let values = set.output_fields();
    let reserved =
        |n: &str| keys.iter().any(|k| k == n) || n == "window_start" || n == "window_end";
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
    for name in F::WINDOW_COLUMNS {
        blob_fields.push(Arc::new(Field::new(*name, DataType::Int64, false)));
    }
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

/// A windowed multi-aggregate over the windows of `F`; see the module
/// documentation.
pub(crate) struct SlotWindowsOperator<F: SlotWindows> {
    factory: F,
    own: KeyGroupOwnership,
    binding: Option<Binding>,
    state: Option<SlotGroups<F::Group>>,
    /// Blobs restored before the input schema was known.
    pending: Vec<(usize, StateBlob)>,
    watermark: i64,
    reached: KeyGroupWatermarks,
    next_seq: u64,
    late: Arc<AtomicU64>,
    hashes: Vec<u64>,
    times: Vec<i64>,
}

impl<F: SlotWindows> SlotWindowsOperator<F> {
    /// The operator of the subtask `ctx` describes, bound at once when the
    /// factory knows its input schema.
    pub(super) fn create(factory: &F, ctx: &OperatorContext) -> Result<Box<dyn Operator>> {
        factory.validate(&ctx.name)?;
        let own = KeyGroupOwnership::from_context(ctx)?;
        let mut op = Box::new(SlotWindowsOperator {
            factory: factory.clone(),
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
        if let Some(input) = &factory.aggs().input {
            op.bind(input)?;
        }
        Ok(op)
    }

    /// Resolves `schema`; the first binding creates the state and restores
    /// the pending blobs. A later schema must bind to the same state.
    fn bind(&mut self, schema: &SchemaRef) -> Result<()> {
        if let Some(b) = &self.binding {
            if same_input(&b.input, schema) {
                return Ok(());
            }
        }
        let binding = bind(&self.factory, &self.own.name, schema)?;
        if let Some(held) = &self.binding {
            if held.blob_fields != binding.blob_fields || held.time_type != binding.time_type {
                return Err(Error::schema(
                    &self.own.name,
                    format!(
                        "the input schema changed in a way the {} state cannot hold",
                        F::UNIT
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
        self.watermark = self.reached.continue_from(self.watermark);
        Ok(())
    }

    fn restore_blob(&mut self, kg: usize, blob: &StateBlob) -> Result<()> {
        let (Some(binding), Some(state)) = (&self.binding, &mut self.state) else {
            return Err(Error::operator(&self.own.name, "restoring before binding"));
        };
        let bytes = blob.to_bytes()?;
        let what = format!("the {} state", F::WHAT);
        let bad = blob_error(&what, kg);
        let reader = open_blob(&bytes, F::VERSION, &bad)?;
        let schema = reader.schema();
        let meta = schema.metadata();
        let expected = binding.set.describe();
        let held = meta.get(F::META_AGGS).cloned().unwrap_or_default();
        let windows = meta.get(F::META_WINDOWS).cloned().unwrap_or_default();
        let described = self.factory.describe();
        if held != expected
            || windows != described
            || !same_field_types(&schema, &binding.blob_fields)
        {
            return Err(bad(format!(
                "holds the aggregates ({held}) over {}, but the operator computes ({expected}) \
                 over {}",
                F::windows_text(&windows),
                F::windows_text(&described)
            )));
        }
        let watermark: i64 = meta
            .get(F::META_WATERMARK)
            .and_then(|w| w.parse().ok())
            .ok_or_else(|| bad("has no watermark".to_string()))?;
        let local = kg - self.own.key_groups.start;
        self.reached.restore(local, watermark);
        let n_keys = binding.key_idx.len();
        let n_windows = F::WINDOW_COLUMNS.len();
        let first_state = n_keys + n_windows + 1 + binding.set.len();
        let group = &mut state.groups[local];
        let next_seq = &mut self.next_seq;
        let mut window = vec![0i64; n_windows];
        state.keyed.restore_rows(
            &self.own,
            &what,
            kg,
            reader,
            (n_keys, first_state),
            &mut self.hashes,
            &bad,
            |batch, i, key, slot| {
                for (c, w) in window.iter_mut().enumerate() {
                    *w = batch
                        .column(n_keys + c)
                        .as_primitive::<Int64Type>()
                        .value(i);
                }
                let seq = batch
                    .column(n_keys + n_windows)
                    .as_primitive::<UInt64Type>()
                    .value(i);
                *next_seq = (*next_seq).max(seq + 1);
                F::restore(group, key, &window, seq, slot).map_err(&bad)
            },
        )
    }
}

impl<F: SlotWindows> Operator for SlotWindowsOperator<F> {
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
            &self.factory.aggs().time_column,
            &mut self.times,
        )?;
        let key_cols = columns_at(&batch, &binding.key_idx);
        state.keyed.encode_keys(name, &key_cols, &mut self.hashes)?;
        let mut assigned = Assigned {
            rows: Vec::with_capacity(n),
            slots: Vec::with_capacity(n),
            late: vec![false; n],
        };
        let mut merges = F::Batch::default();
        let slots = &mut state.keyed.slots;
        for (i, key) in state.keyed.rows.iter().enumerate() {
            let local = self.own.local_index(self.hashes[i])?;
            let watermark = self.reached.at(local, self.watermark);
            self.factory
                .assign(
                    &mut state.groups[local],
                    key.as_ref(),
                    i as u32,
                    self.times[i],
                    watermark,
                    slots,
                    &mut self.next_seq,
                    &mut merges,
                    &mut assigned,
                )
                .map_err(|e| e.at(name))?;
        }
        self.factory
            .finish_batch(slots, merges, &mut assigned)
            .map_err(|e| e.at(name))?;
        slots
            .update(&batch, Some(&assigned.rows), &assigned.slots)
            .map_err(|e| e.at(name))?;
        let n_late = assigned.late.iter().filter(|&&l| l).count() as u64;
        if n_late > 0 {
            self.late.fetch_add(n_late, Ordering::Relaxed);
            if self.factory.aggs().late_output {
                let mask = BooleanArray::new(BooleanBuffer::from(assigned.late), None);
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
                format!(
                    "a watermark came before any record after a restore, and the input schema \
                     is not known to bind the restored {}s' aggregates; declare the source's \
                     schema",
                    F::UNIT
                ),
            ));
        }
        self.watermark = watermark;
        if let (Some(binding), Some(state)) = (&self.binding, &mut self.state) {
            let name = &self.own.name;
            let fired = self.factory.fire(&mut state.groups, watermark);
            if !fired.is_empty() {
                let mut columns = state
                    .keyed
                    .key_columns(name, fired.iter().map(|f| &*f.key))?;
                let starts = fired.iter().map(|f| f.start);
                let ends = fired.iter().map(|f| f.end);
                columns.push(time_array(name, starts, &binding.time_type)?);
                columns.push(time_array(name, ends, &binding.time_type)?);
                let ids: Vec<u32> = fired.iter().map(|f| f.slot).collect();
                columns.extend(state.keyed.fire(name, &ids)?);
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

impl<F: SlotWindows> CheckpointedState for SlotWindowsOperator<F> {
    fn snapshot_state(&mut self, _checkpoint_id: u64) -> Result<OperatorState> {
        let (Some(binding), Some(state)) = (&self.binding, &mut self.state) else {
            return Ok(held_blobs(&self.pending));
        };
        let name = &self.own.name;
        let first = self.own.key_groups.start;
        let mut keyed = Vec::new();
        for (local, group) in state.groups.iter().enumerate() {
            if !self
                .reached
                .snapshots(local, self.watermark, !F::is_empty(group))
            {
                continue;
            }
            let mut keys: Vec<&[u8]> = Vec::new();
            let mut windows: Vec<Vec<i64>> = vec![Vec::new(); F::WINDOW_COLUMNS.len()];
            let (mut seqs, mut ids) = (Vec::new(), Vec::new());
            F::entries(group, &mut |key, window, seq, slot| {
                keys.push(key);
                for (column, w) in windows.iter_mut().zip(window) {
                    column.push(*w);
                }
                seqs.push(seq);
                ids.push(slot);
            });
            let mut columns = state.keyed.key_columns(name, keys)?;
            for column in windows {
                columns.push(Arc::new(Int64Array::from(column)));
            }
            columns.push(Arc::new(UInt64Array::from(seqs)));
            state
                .keyed
                .append_values_and_states(name, &ids, &mut columns)?;
            let metadata = HashMap::from([
                (F::META_AGGS.to_string(), binding.set.describe()),
                (
                    META_INPUT_SCHEMA.to_string(),
                    encode_schema(name, &binding.input)?,
                ),
                (F::META_WINDOWS.to_string(), self.factory.describe()),
                (
                    F::META_WATERMARK.to_string(),
                    self.reached.at(local, self.watermark).to_string(),
                ),
            ]);
            let schema = Arc::new(Schema::new_with_metadata(
                binding.blob_fields.clone(),
                metadata,
            ));
            let bytes =
                crate::state::encode_ipc_blob(F::VERSION, &schema, columns).for_operator(name)?;
            keyed.push(((first + local) as u32, StateBlob::Bytes(Arc::new(bytes))));
        }
        Ok(OperatorState {
            operator: None,
            keyed,
        })
    }

    fn restore_state(&mut self, state: OperatorState) -> Result<()> {
        let groups = owned_key_groups(state, &self.own, &format!("a {}", F::WHAT))?;
        if self.binding.is_none() {
            // The graph did not know the input schema: bind with the one the
            // state was written for, so restored windows can fire before the
            // first record (a watermark may come first).
            let recorded = groups
                .iter()
                .find_map(|(_, blob)| recorded_input_schema(blob, F::VERSION));
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

/// Whether a decoded blob schema is one of `F`'s.
pub(super) fn is_state_schema<F: SlotWindows>(schema: &Schema) -> bool {
    schema.metadata().contains_key(F::META_AGGS)
}

/// One key-group blob of `F` as `read_state` shows it: the keys, the
/// window columns (ms) and every aggregate's current value.
pub(super) fn state_table<F: SlotWindows>(bytes: &[u8], kg: u32) -> Result<Vec<RecordBatch>> {
    visible_state_table(
        bytes,
        kg,
        F::VERSION,
        &format!("the {} state", F::WHAT),
        &[SEQ_FIELD],
    )
}
