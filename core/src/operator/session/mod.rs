//! Keyed event-time session windows with native aggregates (API.md
//! "Windows": `ed.Session(gap)`; Flink's `EventTimeSessionWindows` with
//! merging windows and an event-time trigger).
//!
//! # Semantics
//!
//! Per key, a row at `t` opens the session `[t, t + gap)`; sessions of one
//! key that overlap merge (their accumulators combine), so rows closer than
//! `gap` form one session and rows exactly `gap` apart start a new one. A
//! row that bridges two sessions merges them. `window_start` is the
//! session's first row time and `window_end` its last row time + `gap`.
//! A session fires when the watermark `w` reaches its last millisecond
//! (`window_end - 1 <= w`, as for tumbling windows), emitting one row: the
//! key columns, `window_start`, `window_end` (the event-time column's type)
//! and the aggregate (named after the aggregated column, `count` for count),
//! rows ordered by `window_end`, then by when the session was first seen.
//!
//! A row is *late* when its own session `[t, t + gap)` is already over and
//! it touches no open session of its key (Flink merges first, then checks
//! the merged window): it is counted and dropped, or sent unchanged to the
//! late side output [`LATE_PORT`]. Aggregates are those of
//! [`crate::operator::window`]: integers as `Int64` (sums wrap), floats as
//! `Float64`, nulls in the aggregated column ignored, null keys a key of
//! their own.
//!
//! # State
//!
//! Per key group ([`Group`]): the open sessions of each key (row-format key
//! bytes), each with its start, end, first-seen sequence number, the first
//! checkpoint epoch of its rows and its accumulator, in a copy-on-write
//! `Arc` snapshotted without copying. The blob ([`snapshot`]) is an Arrow
//! IPC stream of the sessions with the watermark its key group had reached;
//! restoring at another parallelism takes the key groups a subtask owns,
//! continues from the smallest of their watermarks and keeps each key group
//! at its own (`reached`): subtasks checkpointed by an unaligned barrier may
//! have reached different watermarks, and a row stays late, or on time, as
//! it was for the subtask that owned its key group. Session windows
//! report a FLINK-4120 null-state watermark (the oldest epoch of a row in an
//! open session), so they work with `recovery="recompute"`.

mod snapshot;

pub(crate) use snapshot::{is_state_schema, state_table};

#[cfg(test)]
mod tests;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, BooleanArray, BooleanBufferBuilder, RecordBatch};
use arrow::compute::filter_record_batch;
use arrow::datatypes::{DataType, Field, FieldRef, Schema, SchemaRef};
use arrow::row::{RowConverter, SortField};

use crate::error::{Error, Result};
use crate::keygroup::KeyGroupOwnership;
use crate::operator::timestamps::{event_time_column, keyed_event_times};
use crate::operator::window::open_sessions::{in_firing_order, SessionBounds, SessionGroup};
use crate::operator::window::time_array;
use crate::operator::{
    CheckpointedState, Collector, Operator, OperatorContext, OperatorFactory, Recompute, LATE_PORT,
};
use crate::state::group_watermarks::KeyGroupWatermarks;
use crate::state::keyed::{
    acc_array, native_values, owned_key_groups, window_agg_column, window_key_columns, Acc,
    AggKind, Num, ValueKind,
};
use crate::state::OperatorState;

/// One open session of one key.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Session<V> {
    pub start: i64,
    /// The last row time + gap (exclusive).
    pub end: i64,
    /// Orders the fired rows (first seen first).
    pub seq: u64,
    /// The oldest checkpoint epoch of its rows (FLINK-4120).
    pub epoch: u64,
    pub acc: Acc<V>,
}

/// The open sessions of one key group.
pub(crate) type Group<V> = SessionGroup<Session<V>>;

impl<V: Num> SessionBounds for Session<V> {
    fn end(&self) -> i64 {
        self.end
    }

    fn seq(&self) -> u64 {
        self.seq
    }
}

/// Builds [`SessionOperator`]s: `keys` are the key columns, `time_column`
/// the event-time column (a timestamp or `Int64` ms).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionFactory {
    pub keys: Vec<String>,
    pub time_column: String,
    pub gap_ms: i64,
    pub agg: AggKind,
    /// The aggregated column (optional for count).
    pub column: Option<String>,
    /// Late rows go to [`LATE_PORT`] instead of being dropped.
    pub late_output: bool,
}

/// An input schema resolved against a factory.
#[derive(Debug, Clone)]
struct Binding {
    input: SchemaRef,
    key_idx: Vec<usize>,
    key_fields: Vec<FieldRef>,
    time_idx: usize,
    time_type: DataType,
    value_idx: Option<usize>,
    value_kind: ValueKind,
    output: SchemaRef,
}

impl SessionFactory {
    /// The output schema for `input`: the key fields, `window_start`,
    /// `window_end`, then the aggregate. Errors name `operator`.
    pub fn output_schema(&self, operator: &str, input: &SchemaRef) -> Result<SchemaRef> {
        Ok(self.bind(operator, input)?.output)
    }

    fn bind(&self, operator: &str, input: &SchemaRef) -> Result<Binding> {
        if self.gap_ms <= 0 {
            return Err(Error::graph(
                operator,
                format!("a session gap must be positive, got {} ms", self.gap_ms),
            ));
        }
        let kind = format!("a session window {}", self.agg.name());
        let (key_idx, key_fields) = window_key_columns(operator, input, &self.keys, &kind)?;
        let time_idx = event_time_column(operator, input, &self.time_column)?;
        let (value_idx, value_kind) =
            window_agg_column(operator, input, self.agg, self.column.as_deref(), &kind)?;
        let time_type = input.field(time_idx).data_type().clone();
        let (name, nullable) = match (self.agg, &self.column) {
            (AggKind::Count, _) | (_, None) => ("count", false),
            (_, Some(c)) => (c.as_str(), true),
        };
        let output = output_schema(&key_fields, &time_type, name, value_kind, nullable);
        Ok(Binding {
            input: input.clone(),
            key_idx,
            key_fields,
            time_idx,
            time_type,
            value_idx,
            value_kind,
            output,
        })
    }
}

impl OperatorFactory for SessionFactory {
    /// Open sessions are rebuilt by replaying from the checkpoint before the
    /// oldest row of the oldest one (FLINK-4120).
    fn recomputable(&self) -> bool {
        true
    }

    fn replayable_from_earlier(&self) -> bool {
        true
    }

    fn create(&self, ctx: &OperatorContext) -> Result<Box<dyn Operator>> {
        Ok(Box::new(SessionOperator::new(self, ctx)?))
    }
}

/// The groups, by accumulator type.
#[derive(Debug, Clone)]
enum Groups {
    Int(Vec<Arc<Group<i64>>>),
    Float(Vec<Arc<Group<f64>>>),
}

/// Runs `$body` with `$g` bound to the groups of either accumulator type.
macro_rules! with_groups {
    ($groups:expr, $g:ident => $body:expr) => {
        match $groups {
            Groups::Int($g) => $body,
            Groups::Float($g) => $body,
        }
    };
}

/// Per-batch scratch buffers, reused across batches.
#[derive(Debug, Default)]
struct Scratch {
    hashes: Vec<u64>,
    times: Vec<i64>,
    late_rows: Vec<u32>,
    /// Sessions a row touches (indices into its key's list).
    touched: Vec<usize>,
}

/// What firing needs: the key fields, the event-time type and the output
/// schema (from the first batch's binding, or from restored state).
#[derive(Debug, Clone)]
struct Layout {
    key_fields: Vec<FieldRef>,
    time_type: DataType,
    output: SchemaRef,
}

/// The output schema of sessions over `key_fields` (the key columns,
/// `window_start`, `window_end`, then the aggregate `column`).
fn output_schema(
    key_fields: &[FieldRef],
    time_type: &DataType,
    column: &str,
    kind: ValueKind,
    nullable: bool,
) -> SchemaRef {
    let mut fields: Vec<FieldRef> = key_fields.to_vec();
    fields.push(Arc::new(Field::new(
        "window_start",
        time_type.clone(),
        false,
    )));
    fields.push(Arc::new(Field::new("window_end", time_type.clone(), false)));
    fields.push(Arc::new(Field::new(column, kind.data_type(), nullable)));
    Arc::new(Schema::new(fields))
}

/// Keyed session windows; see the module documentation.
pub struct SessionOperator {
    factory: SessionFactory,
    own: KeyGroupOwnership,
    binding: Option<Binding>,
    layout: Option<Layout>,
    codec: Option<RowConverter>,
    groups: Option<Groups>,
    watermark: i64,
    /// Per local key group, the watermark its state had reached where it
    /// was checkpointed, when above `watermark`: a restore at another
    /// parallelism joins key groups of subtasks that had reached different
    /// watermarks (an unaligned barrier overtakes watermarks) and continues
    /// from the smallest; a row is late by its own key group's.
    reached: KeyGroupWatermarks,
    next_seq: u64,
    epoch: u64,
    late: Arc<AtomicU64>,
    scratch: Scratch,
}

impl std::fmt::Debug for SessionOperator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionOperator")
            .field("factory", &self.factory)
            .field("key_groups", &self.own.key_groups)
            .field("watermark", &self.watermark)
            .finish_non_exhaustive()
    }
}

/// What one batch contributes to the sessions.
struct Rows<'a, V: Num> {
    agg: AggKind,
    gap: i64,
    watermark: i64,
    /// Per local key group, see `SessionOperator::reached`.
    reached: &'a KeyGroupWatermarks,
    epoch: u64,
    times: &'a [i64],
    values: Option<arrow::array::PrimitiveArray<V::Arrow>>,
    skip: Option<arrow::buffer::NullBuffer>,
}

impl<V: Num> Rows<'_, V> {
    /// The accumulator of row `i` alone.
    #[inline]
    fn acc(&self, i: usize) -> Acc<V> {
        let mut a = Acc::empty(self.agg);
        if self.skip.as_ref().is_some_and(|s| s.is_null(i)) {
            return a;
        }
        a.add(
            self.agg,
            self.values.as_ref().map_or(V::ONE, |v| v.values()[i]),
        );
        a
    }
}

/// Adds row `i` (key `key`) to `group`, whose key group is at `watermark`;
/// false when it is late.
fn add_row<V: Num>(
    group: &mut Group<V>,
    key: &[u8],
    i: usize,
    rows: &Rows<'_, V>,
    watermark: i64,
    next_seq: &mut u64,
    touched: &mut Vec<usize>,
) -> bool {
    let t = rows.times[i];
    let end = t.saturating_add(rows.gap);
    let list = group.sessions.get_mut(key);
    touched.clear();
    if let Some(list) = &list {
        touched.extend(
            list.iter()
                .enumerate()
                .filter(|(_, s)| s.start < end && t < s.end)
                .map(|(j, _)| j),
        );
    }
    if touched.is_empty() && end - 1 <= watermark {
        return false;
    }
    let mut merged = Session {
        start: t,
        end,
        seq: u64::MAX,
        epoch: rows.epoch,
        acc: rows.acc(i),
    };
    let list = match list {
        Some(l) => l,
        None => group.sessions.entry(Box::from(key)).or_default(),
    };
    // Remove the touched sessions (highest index first) into `merged`.
    for &j in touched.iter().rev() {
        let s = list.swap_remove(j);
        merged.start = merged.start.min(s.start);
        merged.end = merged.end.max(s.end);
        merged.seq = merged.seq.min(s.seq);
        merged.epoch = merged.epoch.min(s.epoch);
        merged.acc = s.acc.merge(rows.agg, merged.acc);
    }
    if merged.seq == u64::MAX {
        merged.seq = *next_seq;
        *next_seq += 1;
    }
    group.min_end = group.min_end.min(merged.end);
    list.push(merged);
    true
}

/// The sessions of `groups` over at `watermark` (all for
/// [`crate::event::MAX_WATERMARK`]), removed, as (key, session), ordered by (end, seq).
fn fire<V: Num>(groups: &mut [Arc<Group<V>>], watermark: i64) -> Vec<(Box<[u8]>, Session<V>)> {
    let mut out = Vec::new();
    for g in groups.iter_mut().filter(|g| g.any_over(watermark)) {
        Arc::make_mut(g).take_over(watermark, &mut out);
    }
    in_firing_order(out)
}

impl SessionOperator {
    /// An operator for the subtask `ctx` describes.
    pub fn new(factory: &SessionFactory, ctx: &OperatorContext) -> Result<Self> {
        let own = KeyGroupOwnership::from_context(ctx)?;
        let own_groups = own.key_groups.len();
        if factory.gap_ms <= 0 {
            return Err(Error::graph(&ctx.name, "a session gap must be positive"));
        }
        Ok(SessionOperator {
            factory: factory.clone(),
            own,
            binding: None,
            layout: None,
            codec: None,
            groups: None,
            watermark: i64::MIN,
            reached: KeyGroupWatermarks::new(own_groups),
            next_seq: 0,
            epoch: 0,
            late: Arc::new(AtomicU64::new(0)),
            scratch: Scratch::default(),
        })
    }

    /// The current watermark (`i64::MIN` before the first).
    pub fn current_watermark(&self) -> i64 {
        self.watermark
    }

    /// How many sessions are open.
    pub fn open_sessions(&self) -> usize {
        self.groups.as_ref().map_or(0, |groups| {
            with_groups!(groups, gs => gs
                .iter()
                .map(|g| g.sessions.values().map(Vec::len).sum::<usize>())
                .sum())
        })
    }

    /// Binds `schema` (once per input schema) and makes the state.
    fn bind(&mut self, schema: &SchemaRef) -> Result<()> {
        if let Some(b) = &self.binding {
            if crate::state::keyed::same_input(&b.input, schema) {
                return Ok(());
            }
        }
        let name = &self.own.name;
        let b = self
            .factory
            .bind(name, schema)
            .map_err(|e| e.in_operator(name))?;
        self.adopt(&b.key_fields, b.value_kind)?;
        if let Some(l) = &self.layout {
            if l.time_type != b.time_type {
                return Err(Error::schema(
                    &self.own.name,
                    format!(
                        "the session state holds event times of type {}, but the input's are {}",
                        l.time_type, b.time_type
                    ),
                ));
            }
        }
        self.layout = Some(Layout {
            key_fields: b.key_fields.clone(),
            time_type: b.time_type.clone(),
            output: b.output.clone(),
        });
        self.binding = Some(b);
        Ok(())
    }

    /// Creates the state for keys `fields` and accumulator `kind`, or checks
    /// that the existing state has that layout.
    fn adopt(&mut self, fields: &[FieldRef], kind: ValueKind) -> Result<()> {
        let n = self.own.key_groups.len();
        match (&self.groups, kind) {
            (None, ValueKind::Int) => {
                self.groups = Some(Groups::Int((0..n).map(|_| Arc::default()).collect()))
            }
            (None, ValueKind::Float) => {
                self.groups = Some(Groups::Float((0..n).map(|_| Arc::default()).collect()))
            }
            (Some(Groups::Int(_)), ValueKind::Int) | (Some(Groups::Float(_)), ValueKind::Float) => {
            }
            _ => {
                return Err(Error::schema(
                    &self.own.name,
                    format!(
                        "the session state holds {} accumulators, but the input needs {}",
                        match kind {
                            ValueKind::Int => "Float64",
                            ValueKind::Float => "Int64",
                        },
                        kind.data_type()
                    ),
                ))
            }
        }
        if self.codec.is_none() {
            let sort: Vec<SortField> = fields
                .iter()
                .map(|f| SortField::new(f.data_type().clone()))
                .collect();
            self.codec =
                Some(RowConverter::new(sort).map_err(|e| Error::arrow(&self.own.name, &e))?);
        }
        Ok(())
    }

    /// Adds one batch's rows; returns the number of late rows (their
    /// indices in `scratch.late_rows` when there is a late output).
    fn add_batch<V: Num>(
        groups: &mut [Arc<Group<V>>],
        keys: &arrow::row::Rows,
        rows: &Rows<'_, V>,
        own: &KeyGroupOwnership,
        scratch: &mut Scratch,
        next_seq: &mut u64,
        late_output: bool,
    ) -> Result<u64> {
        let mut late = 0;
        scratch.late_rows.clear();
        for (i, key) in keys.iter().enumerate() {
            let local = own.local_index(scratch.hashes[i])?;
            let group = Arc::make_mut(&mut groups[local]);
            let watermark = rows.reached.at(local, rows.watermark);
            if !add_row(
                group,
                key.as_ref(),
                i,
                rows,
                watermark,
                next_seq,
                &mut scratch.touched,
            ) {
                late += 1;
                if late_output {
                    scratch.late_rows.push(i as u32);
                }
            }
        }
        Ok(late)
    }

    fn process<V: Num>(
        &mut self,
        batch: &RecordBatch,
        key_rows: &arrow::row::Rows,
        groups: &mut [Arc<Group<V>>],
    ) -> Result<u64> {
        let value_idx = self
            .binding
            .as_ref()
            .expect("invariant: bound before processing")
            .value_idx;
        let (values, skip) = match value_idx {
            None => (None, None),
            Some(i) => {
                let col = batch.column(i);
                let skip = col.logical_nulls().filter(|n| n.null_count() > 0);
                let values = (self.factory.agg != AggKind::Count)
                    .then(|| native_values::<V>(&self.own.name, col))
                    .transpose()?;
                (values, skip)
            }
        };
        let times = std::mem::take(&mut self.scratch.times);
        let rows = Rows {
            agg: self.factory.agg,
            gap: self.factory.gap_ms,
            watermark: self.watermark,
            reached: &self.reached,
            epoch: self.epoch,
            times: &times,
            values,
            skip,
        };
        let result = Self::add_batch(
            groups,
            key_rows,
            &rows,
            &self.own,
            &mut self.scratch,
            &mut self.next_seq,
            self.factory.late_output,
        );
        self.scratch.times = times;
        result
    }

    /// Fires the sessions over at `watermark` as one output batch.
    fn fire_batch(&mut self, watermark: i64) -> Result<Option<RecordBatch>> {
        let (Some(b), Some(codec), Some(groups)) = (&self.layout, &self.codec, &mut self.groups)
        else {
            return Ok(None);
        };
        let name = &self.own.name;
        let ((keys, starts, ends), acc): (Split, ArrayRef) = with_groups!(groups, g => {
            let fired = fire(g, watermark);
            if fired.is_empty() {
                return Ok(None);
            }
            let acc = acc_array(fired.iter().map(|(_, s)| s.acc));
            (split(fired), acc)
        });
        let parser = codec.parser();
        let mut columns = codec
            .convert_rows(keys.iter().map(|k| parser.parse(k)))
            .map_err(|e| Error::arrow(name, &e))?;
        columns.push(time_array(name, starts.into_iter(), &b.time_type)?);
        columns.push(time_array(name, ends.into_iter(), &b.time_type)?);
        columns.push(acc);
        let batch =
            RecordBatch::try_new(b.output.clone(), columns).map_err(|e| Error::arrow(name, &e))?;
        Ok(Some(batch))
    }

    /// The oldest epoch of a row in an open session.
    fn oldest_epoch(&self) -> Option<u64> {
        fn oldest<V>(gs: &[Arc<Group<V>>]) -> Option<u64> {
            gs.iter()
                .flat_map(|g| g.sessions.values().flatten().map(|s| s.epoch))
                .min()
        }
        self.groups
            .as_ref()
            .and_then(|groups| with_groups!(groups, g => oldest(g)))
    }
}

/// Keys, starts and ends of fired sessions.
type Split = (Vec<Box<[u8]>>, Vec<i64>, Vec<i64>);

fn split<V>(fired: Vec<(Box<[u8]>, Session<V>)>) -> Split {
    let mut keys = Vec::with_capacity(fired.len());
    let mut starts = Vec::with_capacity(fired.len());
    let mut ends = Vec::with_capacity(fired.len());
    for (k, s) in fired {
        keys.push(k);
        starts.push(s.start);
        ends.push(s.end);
    }
    (keys, starts, ends)
}

/// The late rows of `batch` (indices `late`, ascending): the batch itself
/// when every row is late, else one filtered copy.
fn late_batch(
    batch: RecordBatch,
    late: &[u32],
) -> std::result::Result<RecordBatch, arrow::error::ArrowError> {
    let n = batch.num_rows();
    if late.len() == n {
        return Ok(batch);
    }
    let mut mask = BooleanBufferBuilder::new(n);
    mask.append_n(n, false);
    for &i in late {
        mask.set_bit(i as usize, true);
    }
    filter_record_batch(&batch, &BooleanArray::new(mask.finish(), None))
}

impl Operator for SessionOperator {
    fn late_records(&self) -> u64 {
        self.late.load(Ordering::Relaxed)
    }

    fn process_batch(
        &mut self,
        _input: usize,
        batch: RecordBatch,
        out: &mut dyn Collector,
    ) -> Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        self.bind(batch.schema_ref())?;
        let name = self.own.name.clone();
        let b = self.binding.as_ref().expect("invariant: bound just above");
        let key_cols = keyed_event_times(
            &name,
            &batch,
            (b.time_idx, &self.factory.time_column),
            &b.key_idx,
            &mut self.scratch.times,
            &mut self.scratch.hashes,
        )?;
        let key_rows = self
            .codec
            .as_ref()
            .expect("invariant: made when bound")
            .convert_columns(&key_cols)
            .map_err(|e| Error::arrow(&name, &e))?;
        let mut groups = self.groups.take().expect("invariant: made when bound");
        let late = match &mut groups {
            Groups::Int(g) => self.process::<i64>(&batch, &key_rows, g),
            Groups::Float(g) => self.process::<f64>(&batch, &key_rows, g),
        };
        self.groups = Some(groups);
        let late = late?;
        if late > 0 {
            self.late.fetch_add(late, Ordering::Relaxed);
            if self.factory.late_output {
                let rows = late_batch(batch, &self.scratch.late_rows)
                    .map_err(|e| Error::arrow(&name, &e))?;
                out.emit_to_port(LATE_PORT, rows)?;
            }
        }
        Ok(())
    }

    fn process_watermark(&mut self, watermark: i64, out: &mut dyn Collector) -> Result<()> {
        if watermark < self.watermark {
            return Ok(());
        }
        self.watermark = watermark;
        if let Some(batch) = self.fire_batch(watermark)? {
            out.emit(batch)?;
        }
        out.emit_watermark(watermark)
    }

    fn state(&mut self) -> Option<&mut dyn CheckpointedState> {
        Some(self)
    }

    fn recompute(&mut self) -> Option<&mut dyn Recompute> {
        Some(self)
    }
}

impl CheckpointedState for SessionOperator {
    fn snapshot_state(&mut self, _checkpoint_id: u64) -> Result<OperatorState> {
        let (Some(b), Some(groups)) = (&self.layout, &self.groups) else {
            return Ok(OperatorState::default());
        };
        let meta = Arc::new(snapshot::SnapshotMeta {
            name: Arc::from(self.own.name.as_str()),
            agg: self.factory.agg,
            gap_ms: self.factory.gap_ms,
            key_fields: b.key_fields.clone(),
            time_type: b.time_type.clone(),
            column: b.output.field(b.output.fields().len() - 1).name().clone(),
        });
        let start = self.own.key_groups.start;
        let (watermark, reached) = (self.watermark, &self.reached);
        let keyed =
            with_groups!(groups, g => snapshot::snapshot(&meta, g, start, watermark, reached));
        Ok(OperatorState {
            operator: None,
            keyed,
        })
    }

    /// The subtask continues from the smallest watermark of the key groups it
    /// restores, each key group at its own (`reached`).
    fn restore_state(&mut self, state: OperatorState) -> Result<()> {
        for (kg, blob) in owned_key_groups(state, &self.own, "a session window")? {
            let bytes = blob.to_bytes()?;
            let decoded =
                snapshot::decode_group(&bytes, kg, self.factory.agg, self.factory.gap_ms)?;
            self.reached
                .restore(kg - self.own.key_groups.start, decoded.watermark);
            if decoded.batch.num_rows() == 0 {
                continue;
            }
            self.adopt(&decoded.key_fields, decoded.value_kind)?;
            if self.layout.is_none() {
                let nullable = self.factory.agg != AggKind::Count;
                self.layout = Some(Layout {
                    key_fields: decoded.key_fields.clone(),
                    time_type: decoded.time_type.clone(),
                    output: output_schema(
                        &decoded.key_fields,
                        &decoded.time_type,
                        &decoded.column,
                        decoded.value_kind,
                        nullable,
                    ),
                });
            }
            let codec = self.codec.as_ref().expect("invariant: made by adopt");
            let local = kg - self.own.key_groups.start;
            let groups = self.groups.as_mut().expect("invariant: made by adopt");
            let hashes = &mut self.scratch.hashes;
            let max_seq = with_groups!(groups, g => snapshot::restore_rows(
                &self.own,
                kg,
                &decoded,
                codec,
                Arc::make_mut(&mut g[local]),
                hashes,
            )?);
            self.next_seq = self.next_seq.max(max_seq + 1);
        }
        self.watermark = self.reached.continue_from(self.watermark);
        Ok(())
    }
}

impl Recompute for SessionOperator {
    fn null_state_watermark(&self, checkpoint_id: u64) -> Result<Option<u64>> {
        Ok(Some(self.oldest_epoch().unwrap_or(checkpoint_id)))
    }

    fn on_barrier(&mut self, checkpoint_id: u64) -> Result<()> {
        self.epoch = checkpoint_id;
        Ok(())
    }
}
