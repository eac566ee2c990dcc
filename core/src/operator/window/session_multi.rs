//! Session windows of multi-aggregates:
//! `keyed.window(ed.Session("5m")).agg(F.count("*"), F.avg("lat"))`
//! (DESIGN.md "Aggregates"), on the accumulators of [`AggregateSlots`]; a
//! slot is one open session of one key.
//!
//! # Semantics
//!
//! Those of the native session windows ([`crate::operator::session`]): per
//! key, a row at `t` opens the session `[t, t + gap)`; sessions of one key
//! that overlap merge, so rows closer than `gap` form one session and rows
//! exactly `gap` apart start a new one. `window_start` is the first row's
//! time, `window_end` the last row's time + `gap`. A session fires when the
//! watermark reaches its last millisecond (`window_end - 1 <= w`), emitting
//! one row: the key columns, `window_start`, `window_end` (of the
//! event-time column's type), then every aggregate under its name; rows
//! ordered by `window_end`, then by when the session was first seen. A row
//! whose own session `[t, t + gap)` is over and that touches no open
//! session of its key is late (counted, dropped or sent to [`LATE_PORT`]),
//! by its own key group's watermark after a restore ([`KeyGroupWatermarks`]).
//!
//! # Merging
//!
//! When a row bridges sessions, their accumulators merge: the intermediate
//! state of each merged-away session (`Accumulator::state`) is merged into
//! the surviving one (`merge_batch`), the session with the earliest start.
//! A batch is resolved in two passes: the first walks its rows in arrival
//! order, forming and merging the sessions of every key and recording
//! which slot each merged-away slot went to; the second merges the states
//! of the sessions that existed before the batch into their survivors (in
//! order of their start) and then adds every row to its survivor with one
//! [`AggregateSlots::update`]. So the rows of a batch always come after the
//! state the sessions held before it, in arrival order; `first`, `last` and
//! `collect_list` of a merged session see the merged sessions' earlier rows
//! in order of the sessions' starts.
//!
//! # Serialization format (version 1)
//!
//! ```text
//! byte 0      format version, currently 1
//! bytes 1..   an Arrow IPC stream; schema metadata:
//!               "eddyline.session_aggs"            "<name>=<function>,..."
//!               "eddyline.session_aggs.gap"        the gap in ms (decimal)
//!               "eddyline.session_aggs.watermark"  the key group's watermark (decimal)
//!             columns: the key columns (nullable), window_start and
//!               window_end (Int64 ms), __eddyline_seq (UInt64), every
//!               aggregate's current value under its name, then the
//!               accumulators' states
//! ```
//!
//! Every owned key group is written once the operator has a watermark (its
//! watermark is state). A key group is owned by one subtask, so a restore at
//! another parallelism never meets two overlapping sessions of one key.
//! `read_state` shows keys, `window_start`, `window_end` and the values.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arrow::array::{ArrayRef, AsArray, BooleanArray, Int64Array, RecordBatch, UInt64Array};
use arrow::buffer::BooleanBuffer;
use arrow::compute::filter_record_batch;
use arrow::datatypes::{DataType, Field, FieldRef, Int64Type, Schema, SchemaRef, UInt64Type};
use arrow::row::{RowConverter, Rows};
use rustc_hash::{FxHashMap, FxHashSet};

use super::time_array;
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
pub const SESSION_AGGS_FORMAT_VERSION: u8 = 1;

const META_AGGS: &str = "eddyline.session_aggs";
const META_GAP: &str = "eddyline.session_aggs.gap";
const META_WATERMARK: &str = "eddyline.session_aggs.watermark";
const SEQ_FIELD: &str = "__eddyline_seq";

/// Builds [`SessionAggsOperator`]s.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionAggsFactory {
    pub keys: Vec<String>,
    pub time_column: String,
    pub gap_ms: i64,
    pub aggregates: Vec<(String, Aggregate)>,
    /// Late records go to [`LATE_PORT`] instead of being dropped.
    pub late_output: bool,
    /// The input schema when the graph knows it: the operator binds its
    /// aggregates at once, so sessions restored from a checkpoint fire even
    /// when no batch comes after the restore.
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
    /// The blob schema without its metadata.
    blob_fields: Vec<FieldRef>,
}

impl SessionAggsFactory {
    /// The output schema for `input`: keys, `window_start`, `window_end`,
    /// then one field per aggregate. Errors name `operator`.
    pub fn output_schema(&self, operator: &str, input: &SchemaRef) -> Result<SchemaRef> {
        Ok(self.bind(operator, input)?.output)
    }

    fn validate(&self, operator: &str) -> Result<()> {
        if self.gap_ms <= 0 {
            return Err(Error::graph(
                operator,
                format!("a session gap must be positive, got {} ms", self.gap_ms),
            ));
        }
        Ok(())
    }

    fn bind(&self, operator: &str, input: &SchemaRef) -> Result<Binding> {
        self.validate(operator)?;
        let (key_idx, key_fields) =
            window_key_columns(operator, input, &self.keys, "a session window agg()")?;
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
        blob_fields.push(Arc::new(Field::new("window_end", DataType::Int64, false)));
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

impl OperatorFactory for SessionAggsFactory {
    fn create(&self, ctx: &OperatorContext) -> Result<Box<dyn Operator>> {
        self.validate(&ctx.name)?;
        let own = KeyGroupOwnership::from_context(ctx)?;
        let mut op = Box::new(SessionAggsOperator {
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

/// One open session of one key.
#[derive(Debug, Clone, Copy)]
struct Session {
    start: i64,
    /// The last row time + gap (exclusive).
    end: i64,
    /// Orders the fired rows (first seen first).
    seq: u64,
    slot: u32,
}

/// The open sessions of one key group.
#[derive(Debug, Default)]
struct Group {
    sessions: FxHashMap<Box<[u8]>, Vec<Session>>,
    /// The smallest end of an open session (`i64::MAX`: none).
    min_end: i64,
}

impl Group {
    fn new() -> Self {
        Group {
            sessions: FxHashMap::default(),
            min_end: i64::MAX,
        }
    }
}

struct Keyed {
    converter: RowConverter,
    rows: Rows,
    groups: Vec<Group>,
    slots: AggregateSlots,
}

/// How one batch changed the sessions (see "Merging" in the module
/// documentation).
#[derive(Default)]
struct BatchMerges {
    /// Merged-away slot -> the slot it went to.
    redirect: FxHashMap<u32, u32>,
    /// Slots allocated in this batch (they hold no state yet).
    fresh: FxHashSet<u32>,
    /// Merged-away slots that held state: (start, seq, slot).
    stateful: Vec<(i64, u64, u32)>,
}

impl BatchMerges {
    fn resolve(&self, mut slot: u32) -> u32 {
        while let Some(&to) = self.redirect.get(&slot) {
            slot = to;
        }
        slot
    }
}

/// Session windows of multi-aggregates; see the module documentation.
pub struct SessionAggsOperator {
    factory: SessionAggsFactory,
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

/// Adds a row at `t` of key `key` to `group` (at `watermark`): the slot it
/// goes to, or `None` when it is late. Sessions it bridges are merged into
/// the earliest, recorded in `merges`.
#[allow(clippy::too_many_arguments)]
fn add_row(
    group: &mut Group,
    key: &[u8],
    t: i64,
    gap: i64,
    watermark: i64,
    slots: &mut AggregateSlots,
    next_seq: &mut u64,
    merges: &mut BatchMerges,
) -> crate::expr::ExprResult<Option<u32>> {
    let end = t.saturating_add(gap);
    let touches = |s: &Session| s.start < end && t < s.end;
    let list = group.sessions.get_mut(key);
    let any = list.as_ref().is_some_and(|l| l.iter().any(touches));
    if !any && end - 1 <= watermark {
        return Ok(None);
    }
    let list = match list {
        Some(l) => l,
        None => group.sessions.entry(Box::from(key)).or_default(),
    };
    if !any {
        let slot = slots.allocate()?;
        merges.fresh.insert(slot);
        list.push(Session {
            start: t,
            end,
            seq: *next_seq,
            slot,
        });
        *next_seq += 1;
        group.min_end = group.min_end.min(end);
        return Ok(Some(slot));
    }
    // The survivor: the touched session with the earliest start (then seq).
    let mut survivor: Option<usize> = None;
    for (j, s) in list.iter().enumerate() {
        if touches(s) && survivor.is_none_or(|k| (s.start, s.seq) < (list[k].start, list[k].seq)) {
            survivor = Some(j);
        }
    }
    let keep = survivor.expect("invariant: some session is touched");
    let mut merged = list[keep];
    merged.start = merged.start.min(t);
    merged.end = merged.end.max(end);
    let survivor_slot = merged.slot;
    list.retain(|s| {
        if s.slot == survivor_slot || !touches(s) {
            return true;
        }
        merged.start = merged.start.min(s.start);
        merged.end = merged.end.max(s.end);
        merged.seq = merged.seq.min(s.seq);
        merges.redirect.insert(s.slot, survivor_slot);
        if !merges.fresh.contains(&s.slot) {
            merges.stateful.push((s.start, s.seq, s.slot));
        }
        false
    });
    let at = list
        .iter()
        .position(|s| s.slot == survivor_slot)
        .expect("invariant: the survivor stays");
    list[at] = merged;
    group.min_end = group.min_end.min(merged.end);
    Ok(Some(merged.slot))
}

impl SessionAggsOperator {
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
                    "the input schema changed in a way the session state cannot hold",
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
            groups: (0..self.own.key_groups.len())
                .map(|_| Group::new())
                .collect(),
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
                format!("the session window agg() state of key group {kg} {msg}"),
            )
        };
        let reader = open_blob(&bytes, SESSION_AGGS_FORMAT_VERSION, &bad)?;
        let schema = reader.schema();
        let meta = schema.metadata();
        let expected = binding.set.describe();
        let held = meta.get(META_AGGS).cloned().unwrap_or_default();
        let gap = meta.get(META_GAP).cloned().unwrap_or_default();
        let types_match = schema.fields().len() == binding.blob_fields.len()
            && schema
                .fields()
                .iter()
                .zip(&binding.blob_fields)
                .all(|(a, b)| a.data_type() == b.data_type());
        if held != expected || gap != self.factory.gap_ms.to_string() || !types_match {
            return Err(bad(format!(
                "holds the aggregates ({held}) over sessions of gap {gap} ms, but the operator \
                 computes ({expected}) over sessions of gap {} ms",
                self.factory.gap_ms
            )));
        }
        let watermark: i64 = meta
            .get(META_WATERMARK)
            .and_then(|w| w.parse().ok())
            .ok_or_else(|| bad("has no watermark".to_string()))?;
        let local = kg - self.own.key_groups.start;
        self.reached.restore(local, watermark);
        let n_keys = binding.key_idx.len();
        let first_state = n_keys + 3 + binding.set.len();
        let group = &mut state.groups[local];
        for batch in reader {
            let batch = batch.map_err(|e| bad(format!("cannot be read: {e}")))?;
            if batch.num_rows() == 0 {
                continue;
            }
            let key_cols = &batch.columns()[..n_keys];
            check_key_group(
                &self.own.name,
                "the session window agg() state",
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
            let ends = batch.column(n_keys + 1).as_primitive::<Int64Type>();
            let seqs = batch.column(n_keys + 2).as_primitive::<UInt64Type>();
            let states = &batch.columns()[first_state..];
            for (i, key) in keys.iter().enumerate() {
                let slot = state.slots.allocate().map_err(|e| e.at(&self.own.name))?;
                state
                    .slots
                    .merge_row(slot, states, i)
                    .map_err(|e| e.at(&self.own.name))?;
                let (start, end, seq) = (starts.value(i), ends.value(i), seqs.value(i));
                if start >= end {
                    return Err(bad(format!("holds a session [{start}, {end})")));
                }
                self.next_seq = self.next_seq.max(seq + 1);
                let list = group.sessions.entry(Box::from(key.as_ref())).or_default();
                if list.iter().any(|s| s.start < end && start < s.end) {
                    return Err(bad("holds two overlapping sessions of one key".to_string()));
                }
                list.push(Session {
                    start,
                    end,
                    seq,
                    slot,
                });
                group.min_end = group.min_end.min(end);
            }
        }
        Ok(())
    }

    /// Forms the batch's sessions; the (row, slot) entries to add and the
    /// late rows' mask.
    fn assign(&mut self, n: usize) -> Result<(Vec<u32>, Vec<u32>, Vec<bool>)> {
        let (Some(state), name) = (&mut self.state, &self.own.name) else {
            return Err(Error::operator(&self.own.name, "no state after binding"));
        };
        let gap = self.factory.gap_ms;
        let mut rows: Vec<u32> = Vec::with_capacity(n);
        let mut slots: Vec<u32> = Vec::with_capacity(n);
        let mut late = vec![false; n];
        let mut merges = BatchMerges::default();
        for (i, key) in state.rows.iter().enumerate() {
            let local = self.own.local_index(self.hashes[i])?;
            let watermark = self.reached.at(local, self.watermark);
            let slot = add_row(
                &mut state.groups[local],
                key.as_ref(),
                self.times[i],
                gap,
                watermark,
                &mut state.slots,
                &mut self.next_seq,
                &mut merges,
            )
            .map_err(|e| e.at(name))?;
            match slot {
                Some(slot) => {
                    rows.push(i as u32);
                    slots.push(slot);
                }
                None => late[i] = true,
            }
        }
        if !merges.redirect.is_empty() {
            merges.stateful.sort_unstable();
            for &(_, _, from) in &merges.stateful {
                let into = merges.resolve(from);
                state
                    .slots
                    .merge_slots(into, from)
                    .map_err(|e| e.at(name))?;
            }
            for slot in &mut slots {
                *slot = merges.resolve(*slot);
            }
            for (&from, _) in merges.redirect.iter() {
                if merges.fresh.contains(&from) {
                    state.slots.release(from);
                }
            }
        }
        Ok((rows, slots, late))
    }
}

impl Operator for SessionAggsOperator {
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
        let (rows, slots, late) = self.assign(n)?;
        let name = &self.own.name;
        let state = self
            .state
            .as_mut()
            .expect("invariant: bound before assigning");
        state
            .slots
            .update(&batch, Some(&rows), &slots)
            .map_err(|e| e.at(name))?;
        let n_late = (n - rows.len()) as u64;
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
            // Restored sessions cannot fire before the aggregates are bound
            // (the graph did not know the input schema): refuse rather than
            // drop them.
            return Err(Error::operator(
                &self.own.name,
                "a watermark came before any record after a restore, and the input schema \
                 is not known to bind the restored sessions' aggregates; declare the source's \
                 schema",
            ));
        }
        self.watermark = watermark;
        if let (Some(binding), Some(state)) = (&self.binding, &mut self.state) {
            let name = &self.own.name;
            let fired = fire(&mut state.groups, watermark);
            if !fired.is_empty() {
                let parser = state.converter.parser();
                let mut columns = state
                    .converter
                    .convert_rows(fired.iter().map(|f| parser.parse(&f.0)))
                    .for_operator(name)?;
                let starts = fired.iter().map(|f| f.1.start);
                let ends = fired.iter().map(|f| f.1.end);
                columns.push(time_array(name, starts, &binding.time_type)?);
                columns.push(time_array(name, ends, &binding.time_type)?);
                let ids: Vec<u32> = fired.iter().map(|f| f.1.slot).collect();
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

/// The sessions of `groups` over at `watermark` (all for
/// [`MAX_WATERMARK`]), removed, as (key, session), ordered by (end, seq).
fn fire(groups: &mut [Group], watermark: i64) -> Vec<(Box<[u8]>, Session)> {
    let mut out = Vec::new();
    let over = |end: i64| watermark == MAX_WATERMARK || end - 1 <= watermark;
    for group in groups.iter_mut() {
        if group.min_end == i64::MAX || !over(group.min_end) {
            continue;
        }
        let mut min_end = i64::MAX;
        group.sessions.retain(|key, list| {
            list.retain(|s| {
                if over(s.end) {
                    out.push((key.clone(), *s));
                    false
                } else {
                    min_end = min_end.min(s.end);
                    true
                }
            });
            !list.is_empty()
        });
        group.min_end = min_end;
    }
    out.sort_unstable_by_key(|(_, s)| (s.end, s.seq));
    out
}

impl CheckpointedState for SessionAggsOperator {
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
        let first = self.own.key_groups.start;
        let mut keyed = Vec::new();
        for (local, group) in state.groups.iter().enumerate() {
            let has_state = !group.sessions.is_empty();
            if !self.reached.snapshots(local, self.watermark, has_state) {
                continue;
            }
            let mut keys: Vec<&[u8]> = Vec::new();
            let (mut starts, mut ends, mut seqs, mut ids) =
                (Vec::new(), Vec::new(), Vec::new(), Vec::new());
            for (key, list) in &group.sessions {
                for s in list {
                    keys.push(key);
                    starts.push(s.start);
                    ends.push(s.end);
                    seqs.push(s.seq);
                    ids.push(s.slot);
                }
            }
            let parser = state.converter.parser();
            let mut columns = state
                .converter
                .convert_rows(keys.iter().map(|k| parser.parse(k)))
                .for_operator(name)?;
            columns.push(Arc::new(Int64Array::from(starts)));
            columns.push(Arc::new(Int64Array::from(ends)));
            columns.push(Arc::new(UInt64Array::from(seqs)));
            columns.extend(state.slots.evaluate(&ids).map_err(|e| e.at(name))?);
            columns.extend(state.slots.states(&ids).map_err(|e| e.at(name))?);
            let metadata = HashMap::from([
                (META_AGGS.to_string(), binding.set.describe()),
                (
                    META_INPUT_SCHEMA.to_string(),
                    encode_schema(name, &binding.input)?,
                ),
                (META_GAP.to_string(), self.factory.gap_ms.to_string()),
                (
                    META_WATERMARK.to_string(),
                    self.reached.at(local, self.watermark).to_string(),
                ),
            ]);
            let schema = Arc::new(Schema::new_with_metadata(
                binding.blob_fields.clone(),
                metadata,
            ));
            let bytes =
                crate::state::encode_ipc_blob(SESSION_AGGS_FORMAT_VERSION, &schema, columns)
                    .for_operator(name)?;
            keyed.push(((first + local) as u32, StateBlob::Bytes(Arc::new(bytes))));
        }
        Ok(OperatorState {
            operator: None,
            keyed,
        })
    }

    fn restore_state(&mut self, state: OperatorState) -> Result<()> {
        let groups = owned_key_groups(state, &self.own, "a session window agg()")?;
        if self.binding.is_none() {
            // The graph did not know the input schema: bind with the one the
            // state was written for, so restored windows can fire before the
            // first record (a watermark may come first).
            let recorded = groups
                .iter()
                .find_map(|(_, blob)| recorded_input_schema(blob, SESSION_AGGS_FORMAT_VERSION));
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

/// Whether a decoded blob schema is a session multi-aggregate's.
pub(crate) fn is_state_schema(schema: &Schema) -> bool {
    schema.metadata().contains_key(META_AGGS)
}

/// One key-group blob as `read_state` shows it: the keys, `window_start`,
/// `window_end` (ms) and every aggregate's current value.
pub(crate) fn state_table(bytes: &[u8], kg: u32) -> Result<Vec<RecordBatch>> {
    let bad = |msg: String| {
        Error::checkpoint(
            None,
            format!("the session window agg() state of key group {kg} {msg}"),
        )
    };
    let reader = open_blob(bytes, SESSION_AGGS_FORMAT_VERSION, &bad)?;
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
#[path = "session_multi_tests.rs"]
mod tests;
