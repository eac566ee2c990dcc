//! Keyed event-time windows (tumbling and sliding) with native aggregates
//! (DESIGN.md "Event time"; the window semantics are Flink's
//! `WindowOperator` with `TumblingEventTimeWindows` /
//! `SlidingEventTimeWindows` and an event-time trigger; keyed state per key
//! group with copy-on-write snapshots as in [`crate::operator::keyed_agg`],
//! DESIGN.md "Runtime" and "Checkpoints").
//!
//! # Semantics
//!
//! Windows are aligned to the epoch: a record with event time `t` (ms)
//! belongs to every window `[start, start + size)` with
//! `start = t - t.rem_euclid(slide) - i * slide` that contains `t`
//! (tumbling windows have `slide = size`; `0 < slide <= size`).
//!
//! A window is *over* when the watermark `w` reaches its last millisecond:
//! `end - 1 <= w`. A record whose windows are all over is *late*: it is
//! counted ([`WindowOperator::late_records`], also shared as an atomic
//! counter through [`WindowOperator::late_records_handle`] so the runtime
//! can report it as a metric) and dropped, or, with
//! [`WindowFactory::with_late_output`], emitted unchanged on the side output
//! port [`LATE_PORT`] (Flink's `sideOutputLateData`) right when its batch is
//! processed, so late rows keep their order relative to the data and the
//! barriers. A batch whose rows are all late is passed on as it is; otherwise
//! the late rows are selected with one filter kernel per batch. A record some
//! of whose (sliding) windows are over is added to the others only, as Flink
//! does.
//!
//! `process_watermark(w)` fires every window that is over, emitting one batch
//! with one row per (key, window): the key columns (input names and types,
//! always nullable since the rows hold keys of many batches),
//! `window_start`, `window_end` (the type of the event-time column: `Int64`
//! milliseconds or the same timestamp type; seconds round towards negative
//! infinity) and the aggregate, named after the aggregated column (`count`
//! for count). Rows are ordered by `window_end`, then by the order in which
//! the (key, window) pair was first seen. Fired windows are removed, then the
//! watermark is forwarded. [`MAX_WATERMARK`] fires every window; `finish`
//! fires nothing (a bounded input ends with `MAX_WATERMARK`). Watermarks that
//! would regress are ignored.
//!
//! Aggregates follow [`crate::operator::keyed_agg`]: integers aggregate as
//! `Int64` (sums wrap), floats as `Float64`, counts are `Int64`; nulls in the
//! aggregated column are ignored (a window with only nulls has a null sum,
//! min or max); null keys are a key of their own.
//!
//! # Processing a batch
//!
//! Keys are hashed once per batch ([`hash_keys`] for a single `Int64` key;
//! otherwise the Arrow row format, encoded into a reused buffer and hashed
//! with xxh3 exactly as [`hash_keys`] does), event times are converted to
//! milliseconds in one pass and the aggregated column is cast once. Each
//! record then updates its windows' accumulators in place; for an `Int64`
//! key a new (key, window) pair allocates its map slot, nothing else
//! allocates per record. Row-format keys (`row_store`) are probed by that
//! xxh3 hash in one table per window, their bytes appended to the window's
//! buffer: nothing allocates per record but the buffers' growth.
//!
//! # State and snapshots
//!
//! For an `Int64` key, state is a `Vec<Arc<group>>` indexed by
//! `key_group - key_groups.start`, mutated through `Arc::make_mut`; a group
//! is a `BTreeMap` from window start to a map from key to (first-seen
//! sequence number, accumulator), so firing pops the first windows and the
//! earliest open window start of a key group is its first entry
//! ([`WindowOperator::earliest_open_window_start`]). `snapshot_state` clones
//! the `Arc`s into [`StateBlob::Deferred`] views. Row-format keys keep one
//! `BTreeMap` from window start to an `Arc` table of the subtask's entries
//! in first-seen order, each with its key group; a snapshot shares the
//! tables and splits them by key group off the task thread (`row_store`).
//! Both write the blobs below.
//!
//! Besides the windows, the current watermark is part of the state (unlike
//! Flink, where it restarts at `Long.MIN_VALUE`), so records that were late
//! before a failure are late after it and restored runs emit exactly the
//! same windows. It is written into every key group's blob: once the
//! operator has a watermark every owned key group is written, even an empty
//! one. A subtask restored from several old subtasks continues from the
//! smallest of their watermarks and keeps each key group at its own
//! (`reached`): subtasks checkpointed by an unaligned barrier may have
//! reached different watermarks, and a record stays late, or on time, as it
//! was for the subtask that owned its key group.
//!
//! # Serialization format (version 1)
//!
//! One blob per key group:
//!
//! ```text
//! byte 0      format version, currently 1
//! bytes 1..   an Arrow IPC stream; schema metadata:
//!               "eddyline.window"           the aggregate: sum | count | min | max
//!               "eddyline.window.assigner"  "tumbling <size>" | "sliding <size> <slide>" (ms)
//!               "eddyline.window.time_type" the event-time column's Arrow type (Display form)
//!               "eddyline.window.watermark" the operator's watermark (decimal i64)
//!               "eddyline.window.column"    the aggregate's output column name (absent
//!                                           in blobs written before `read_state` existed)
//!             columns: the key columns (input names and types, nullable), then
//!               __eddyline_window_start  Int64 (ms)
//!               __eddyline_seq           UInt64 (first-seen order of the pair)
//!               __eddyline_acc           Int64 or Float64, null = no value seen yet
//!             one row per (key, window), ordered by (window_start, seq)
//! ```
//!
//! Restoring checks the version, aggregate, assigner and layout, and that
//! every key hashes to the key group the blob claims.

use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, PrimitiveArray, RecordBatch};
use arrow::array::{BooleanArray, BooleanBufferBuilder};
use arrow::buffer::NullBuffer;
use arrow::compute::filter_record_batch;
use arrow::datatypes::{
    DataType, Field, FieldRef, Float64Type, Int64Type, Schema, SchemaRef, UInt64Type,
};

use crate::error::{Error, Result};

#[cfg(test)]
mod format_tests;
mod keys;
pub mod multi;
pub(crate) mod open_sessions;
mod row_store;
#[cfg(test)]
mod row_store_tests;
pub mod session_multi;
mod slot_windows;
pub use slot_windows::WindowedAggs;
mod snapshot;
/// `read_state`'s view of this operator's blobs.
pub(crate) use snapshot::{is_state_schema, state_table};
pub(crate) use store::time_array;
mod store;
use keys::*;
use snapshot::*;
use store::*;

type ArrowResult<T> = std::result::Result<T, arrow::error::ArrowError>;
use crate::event::MAX_WATERMARK;
use crate::keygroup::{hash_keys, KeyGroupOwnership};
use crate::operator::timestamps::{event_time_column, event_times_millis, from_millis};
use crate::operator::{
    CheckpointedState, Collector, Operator, OperatorContext, OperatorFactory, Recompute, LATE_PORT,
};
use crate::state::group_watermarks::KeyGroupWatermarks;
use crate::state::keyed::{
    acc_array, check_key_group, native_values, owned_key_groups, rebinding, sort_fields,
    window_agg_column, window_key_columns, Acc, AggKind, Num, ValueKind,
};
use crate::state::{DeferredState, OperatorState, StateBlob};

/// The version byte that opens every serialized key-group blob.
pub const STATE_FORMAT_VERSION: u8 = 1;

const META_AGG: &str = "eddyline.window";
const META_ASSIGNER: &str = "eddyline.window.assigner";
const META_TIME_TYPE: &str = "eddyline.window.time_type";
const META_WATERMARK: &str = "eddyline.window.watermark";
const META_COLUMN: &str = "eddyline.window.column";
const START_FIELD: &str = "__eddyline_window_start";
const SEQ_FIELD: &str = "__eddyline_seq";
const ACC_FIELD: &str = "__eddyline_acc";

/// How records are assigned to windows (sizes in milliseconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WindowAssigner {
    /// Consecutive, non-overlapping windows of `size_ms`.
    Tumbling { size_ms: i64 },
    /// Windows of `size_ms` starting every `slide_ms` (`0 < slide <= size`).
    Sliding { size_ms: i64, slide_ms: i64 },
}

impl WindowAssigner {
    /// The window length in milliseconds.
    pub fn size_ms(&self) -> i64 {
        match *self {
            WindowAssigner::Tumbling { size_ms } | WindowAssigner::Sliding { size_ms, .. } => {
                size_ms
            }
        }
    }

    /// The distance between window starts in milliseconds.
    pub fn slide_ms(&self) -> i64 {
        match *self {
            WindowAssigner::Tumbling { size_ms } => size_ms,
            WindowAssigner::Sliding { slide_ms, .. } => slide_ms,
        }
    }

    fn validate(&self, operator: &str) -> Result<()> {
        let (size, slide) = (self.size_ms(), self.slide_ms());
        if size <= 0 || slide <= 0 || slide > size {
            return Err(Error::graph(
                operator,
                format!(
                    "a window needs 0 < slide <= size, got size {size} ms and slide {slide} ms"
                ),
            ));
        }
        Ok(())
    }

    /// The form written into the state metadata.
    fn describe(&self) -> String {
        match *self {
            WindowAssigner::Tumbling { size_ms } => format!("tumbling {size_ms}"),
            WindowAssigner::Sliding { size_ms, slide_ms } => {
                format!("sliding {size_ms} {slide_ms}")
            }
        }
    }
}

/// What a window computes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WindowAgg {
    /// A native aggregate of `column` (optional for count, which then counts
    /// rows instead of the column's non-null values).
    Native(AggKind, Option<String>),
}

/// Builds [`WindowOperator`]s: `keys` are the key columns, `time_column`
/// the event-time column (a timestamp or `Int64` ms).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WindowFactory {
    pub keys: Vec<String>,
    pub time_column: String,
    pub assigner: WindowAssigner,
    pub agg: WindowAgg,
    /// Late records go to the side output [`LATE_PORT`] instead of being
    /// dropped (they are counted either way).
    pub late_output: bool,
}

/// The state layout: what the keyed state holds and what it emits.
#[derive(Debug, Clone, PartialEq)]
struct Layout {
    key_fields: Vec<FieldRef>,
    time_type: DataType,
    value_kind: ValueKind,
}

impl Layout {
    fn describe(&self) -> String {
        format!(
            "keys ({}), event time {} and a {} accumulator",
            self.key_fields
                .iter()
                .map(|f| format!("{}: {}", f.name(), f.data_type()))
                .collect::<Vec<_>>()
                .join(", "),
            self.time_type,
            self.value_kind.data_type()
        )
    }

    fn same_as(&self, other: &Layout) -> bool {
        self.time_type == other.time_type
            && self.value_kind == other.value_kind
            && self.key_fields.len() == other.key_fields.len()
            && self
                .key_fields
                .iter()
                .zip(&other.key_fields)
                .all(|(a, b)| a.data_type() == b.data_type())
    }
}

/// An input schema resolved against a factory.
#[derive(Debug, Clone)]
struct Binding {
    input: SchemaRef,
    key_idx: Vec<usize>,
    time_idx: usize,
    value_idx: Option<usize>,
    layout: Layout,
    output: SchemaRef,
}

impl WindowFactory {
    /// A factory for `agg` over `assigner` windows of `time_column`, grouped
    /// by `keys`.
    pub fn new(
        keys: Vec<String>,
        time_column: String,
        assigner: WindowAssigner,
        agg: WindowAgg,
    ) -> Self {
        WindowFactory {
            keys,
            time_column,
            assigner,
            agg,
            late_output: false,
        }
    }

    /// Sends late records to the side output [`LATE_PORT`] (unchanged, with
    /// the input schema) instead of dropping them.
    pub fn with_late_output(mut self) -> Self {
        self.late_output = true;
        self
    }

    /// The schema of the operator's output for `input` (build-time
    /// validation): the key fields, `window_start`, `window_end`, then the
    /// aggregate field.
    /// Errors name `operator`.
    pub fn output_schema(&self, operator: &str, input: &SchemaRef) -> Result<SchemaRef> {
        Ok(self.bind(operator, input)?.output)
    }

    fn kind(&self) -> AggKind {
        let WindowAgg::Native(kind, _) = &self.agg;
        *kind
    }

    fn agg_column(&self) -> Option<&str> {
        let WindowAgg::Native(_, column) = &self.agg;
        column.as_deref()
    }

    fn output_for(&self, layout: &Layout) -> SchemaRef {
        let mut fields: Vec<FieldRef> = layout.key_fields.clone();
        fields.push(Arc::new(Field::new(
            "window_start",
            layout.time_type.clone(),
            false,
        )));
        fields.push(Arc::new(Field::new(
            "window_end",
            layout.time_type.clone(),
            false,
        )));
        let (name, nullable) = match (self.kind(), self.agg_column()) {
            (AggKind::Count, _) | (_, None) => ("count", false),
            (_, Some(col)) => (col, true),
        };
        fields.push(Arc::new(Field::new(
            name,
            layout.value_kind.data_type(),
            nullable,
        )));
        Arc::new(Schema::new(fields))
    }

    fn bind(&self, operator: &str, input: &SchemaRef) -> Result<Binding> {
        self.assigner.validate(operator)?;
        let agg = self.kind();
        let kind = format!("a window {}", agg.name());
        let (key_idx, key_fields) = window_key_columns(operator, input, &self.keys, &kind)?;
        let time_idx = event_time_column(operator, input, &self.time_column)?;
        let (value_idx, value_kind) =
            window_agg_column(operator, input, agg, self.agg_column(), &kind)?;
        let layout = Layout {
            key_fields,
            time_type: input.field(time_idx).data_type().clone(),
            value_kind,
        };
        Ok(Binding {
            input: input.clone(),
            key_idx,
            time_idx,
            value_idx,
            output: self.output_for(&layout),
            layout,
        })
    }
}

impl OperatorFactory for WindowFactory {
    /// Open windows are rebuilt by replaying from the checkpoint before the
    /// first record of the oldest one (FLINK-4120).
    fn recomputable(&self) -> bool {
        true
    }

    fn replayable_from_earlier(&self) -> bool {
        true
    }

    fn create(&self, ctx: &OperatorContext) -> Result<Box<dyn Operator>> {
        Ok(Box::new(WindowOperator::new(self, ctx)?))
    }
}

// ---------------------------------------------------------------------------
// Accumulators

/// One (key, window) of the state.
#[derive(Debug, Clone, Copy)]
struct Entry<V> {
    /// Order in which the pair was first seen (orders the fired rows).
    seq: u64,
    acc: Acc<V>,
}

/// What the aggregated column contributes in one batch: row `i` adds
/// `values[i]` (or one, for counts) unless `skip` marks it null.
struct Contribution<V: Num> {
    values: Option<PrimitiveArray<V::Arrow>>,
    skip: Option<NullBuffer>,
}

impl<V: Num> Contribution<V> {
    fn new(operator: &str, agg: AggKind, column: Option<&ArrayRef>) -> Result<Self> {
        let Some(column) = column else {
            return Ok(Contribution {
                values: None,
                skip: None,
            });
        };
        let skip = column.logical_nulls().filter(|n| n.null_count() > 0);
        if agg == AggKind::Count {
            return Ok(Contribution { values: None, skip });
        }
        let values = native_values::<V>(operator, column)?;
        Ok(Contribution {
            values: Some(values),
            skip,
        })
    }

    /// The value row `i` adds, if any.
    #[inline]
    fn at(&self, i: usize) -> Option<V> {
        if let Some(skip) = &self.skip {
            if skip.is_null(i) {
                return None;
            }
        }
        Some(self.values.as_ref().map_or(V::ONE, |v| v.values()[i]))
    }
}

// ---------------------------------------------------------------------------
// The operator

/// Per-batch scratch buffers, reused across batches.
#[derive(Debug, Default)]
struct Scratch {
    hashes: Vec<u64>,
    times: Vec<i64>,
    key_cols: Vec<ArrayRef>,
    /// The indices of the late rows of the batch (with a late output).
    late_rows: Vec<u32>,
}

/// Keyed event-time windows; see the module documentation.
pub struct WindowOperator {
    factory: WindowFactory,
    own: KeyGroupOwnership,
    binding: Option<Binding>,
    /// The state layout, once known (first batch or restore).
    layout: Option<(Layout, SchemaRef)>,
    engine: Option<Engine>,
    watermark: i64,
    /// Per local key group, the watermark its state had reached where it
    /// was checkpointed, when above `watermark`: a restore at another
    /// parallelism joins key groups of subtasks that had reached different
    /// watermarks (an unaligned barrier overtakes watermarks) and continues
    /// from the smallest; a record is late by its own key group's.
    reached: KeyGroupWatermarks,
    next_seq: u64,
    late: Arc<AtomicU64>,
    scratch: Scratch,
    /// The last checkpoint whose barrier passed (FLINK-4120 epochs).
    epoch: u64,
    /// Per epoch that received records, oldest first: the largest window
    /// start a record of that epoch touched. An epoch stays while that
    /// start is open; the first one left is the null-state watermark.
    epochs: std::collections::VecDeque<(u64, i64)>,
}

impl std::fmt::Debug for WindowOperator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WindowOperator")
            .field("factory", &self.factory)
            .field("key_groups", &self.own.key_groups)
            .field("watermark", &self.watermark)
            .finish_non_exhaustive()
    }
}

impl WindowOperator {
    /// An operator for the subtask described by `ctx` (its key groups and
    /// `max_parallelism` decide which keys it may hold).
    pub fn new(factory: &WindowFactory, ctx: &OperatorContext) -> Result<Self> {
        factory.assigner.validate(&ctx.name)?;
        let own = KeyGroupOwnership::from_context(ctx)?;
        let reached = KeyGroupWatermarks::new(own.key_groups.len());
        Ok(WindowOperator {
            factory: factory.clone(),
            own,
            binding: None,
            layout: None,
            engine: None,
            watermark: i64::MIN,
            reached,
            next_seq: 0,
            late: Arc::new(AtomicU64::new(0)),
            scratch: Scratch::default(),
            epoch: 0,
            epochs: std::collections::VecDeque::new(),
        })
    }

    /// How many records were late (all their windows were over; dropped or
    /// sent to the late output) in this operator instance. Not checkpointed.
    pub fn late_records(&self) -> u64 {
        self.late.load(Ordering::Relaxed)
    }

    /// The late-record counter itself, for the runtime to read as a metric
    /// after the operator was boxed.
    pub fn late_records_handle(&self) -> Arc<AtomicU64> {
        self.late.clone()
    }

    /// The current watermark (`i64::MIN` before the first one).
    pub fn current_watermark(&self) -> i64 {
        self.watermark
    }

    /// The earliest start of a window still open in any owned key group
    /// (`None` when no window is open).
    pub fn earliest_open_window_start(&self) -> Option<i64> {
        self.engine
            .as_ref()
            .and_then(|e| with_store!(e, s => s.earliest_open_window_start()))
    }

    /// Creates the state for `layout` or checks that it matches.
    fn adopt_layout(&mut self, layout: &Layout) -> Result<bool> {
        match &self.layout {
            Some((existing, _)) => Ok(existing.same_as(layout)),
            None => {
                self.engine = Some(Engine::new(
                    &self.own.name,
                    layout,
                    self.own.key_groups.len(),
                )?);
                let output = self.factory.output_for(layout);
                self.layout = Some((layout.clone(), output));
                Ok(true)
            }
        }
    }

    /// Resolves `schema` (cached while the input schema stays the same).
    fn bind(&mut self, schema: &SchemaRef) -> Result<()> {
        let held = self.binding.as_ref().map(|b| &b.input);
        let name = &self.own.name;
        let Some(binding) = rebinding(name, held, schema, || self.factory.bind(name, schema))?
        else {
            return Ok(());
        };
        if !self.adopt_layout(&binding.layout)? {
            let held = self
                .layout
                .as_ref()
                .map(|(l, _)| l.describe())
                .unwrap_or_default();
            return Err(Error::schema(
                &self.own.name,
                format!(
                    "the state holds {held}, but the input has {}",
                    binding.layout.describe()
                ),
            ));
        }
        self.binding = Some(binding);
        Ok(())
    }

    /// Restores one key group and the watermark it had reached.
    fn restore_blob(&mut self, kg: usize, blob: &StateBlob) -> Result<()> {
        let bytes = blob.to_bytes()?;
        let decoded = decode_group(&bytes, kg, self.factory.kind(), self.factory.assigner)?;
        if !self.adopt_layout(&decoded.layout)? {
            let held = self
                .layout
                .as_ref()
                .map(|(l, _)| l.describe())
                .unwrap_or_default();
            return Err(Error::checkpoint(
                None,
                format!(
                    "the window state of key group {kg} holds {}, but the operator holds {held}",
                    decoded.layout.describe()
                ),
            ));
        }
        let n_keys = decoded.layout.key_fields.len();
        let local = kg - self.own.key_groups.start;
        self.reached.restore(local, decoded.watermark);
        for batch in decoded.batches {
            if batch.num_rows() == 0 {
                continue;
            }
            let key_cols = &batch.columns()[..n_keys];
            check_key_group(
                &self.own.name,
                "the window state",
                key_cols,
                &mut self.scratch.hashes,
                kg,
                self.own.max_parallelism,
            )?;
            let starts = batch.column(n_keys).as_primitive::<Int64Type>();
            let seqs = batch.column(n_keys + 1).as_primitive::<UInt64Type>();
            let acc = batch.column(n_keys + 2);
            let max_seq = match self.engine.as_mut() {
                Some(Engine::IntInt(s)) => s.restore_rows(
                    local,
                    kg,
                    key_cols,
                    starts,
                    seqs,
                    acc.as_primitive::<Int64Type>(),
                )?,
                Some(Engine::RowInt(s)) => s.restore_rows(
                    local,
                    kg,
                    key_cols,
                    starts,
                    seqs,
                    acc.as_primitive::<Int64Type>(),
                )?,
                Some(Engine::IntFloat(s)) => s.restore_rows(
                    local,
                    kg,
                    key_cols,
                    starts,
                    seqs,
                    acc.as_primitive::<Float64Type>(),
                )?,
                Some(Engine::RowFloat(s)) => s.restore_rows(
                    local,
                    kg,
                    key_cols,
                    starts,
                    seqs,
                    acc.as_primitive::<Float64Type>(),
                )?,
                None => 0,
            };
            self.next_seq = self.next_seq.max(max_seq + 1);
        }
        Ok(())
    }
}

/// What [`process_rows`] needs of the operator for one batch.
struct BatchArgs<'a> {
    factory: &'a WindowFactory,
    batch: &'a RecordBatch,
    value_idx: Option<usize>,
    watermark: i64,
    reached: &'a KeyGroupWatermarks,
    own: &'a KeyGroupOwnership,
}

/// Adds one batch (its times and key columns already in `scratch`) to
/// `store`; returns the number of late records.
fn process_rows<V: Num>(
    store: &mut impl WindowStore<V>,
    args: &BatchArgs<'_>,
    scratch: &mut Scratch,
    next_seq: &mut u64,
) -> Result<u64> {
    let agg = args.factory.kind();
    let contribution = Contribution::<V>::new(
        &args.own.name,
        agg,
        args.value_idx.map(|i| args.batch.column(i)),
    )?;
    let input = BatchInput {
        agg,
        size: args.factory.assigner.size_ms(),
        slide: args.factory.assigner.slide_ms(),
        watermark: args.watermark,
        reached: args.reached,
        times: &scratch.times,
        contribution: &contribution,
    };
    scratch.late_rows.clear();
    let late_rows = args.factory.late_output.then_some(&mut scratch.late_rows);
    store.process(
        &scratch.key_cols,
        &input,
        &mut scratch.hashes,
        args.own,
        next_seq,
        late_rows,
    )
}

/// The late rows of `batch` (indices `late_rows`, ascending): the batch
/// itself when every row is late, else one filtered copy.
fn late_batch(
    batch: RecordBatch,
    late_rows: &[u32],
) -> std::result::Result<RecordBatch, arrow::error::ArrowError> {
    let n = batch.num_rows();
    if late_rows.len() == n {
        return Ok(batch);
    }
    let mut mask = BooleanBufferBuilder::new(n);
    mask.append_n(n, false);
    for &i in late_rows {
        mask.set_bit(i as usize, true);
    }
    filter_record_batch(&batch, &BooleanArray::new(mask.finish(), None))
}

impl Operator for WindowOperator {
    fn late_records(&self) -> u64 {
        WindowOperator::late_records(self)
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
        let (Some(binding), Some(engine)) = (&self.binding, &mut self.engine) else {
            return Err(Error::operator(
                &self.own.name,
                "the operator has no state layout after binding its input",
            ));
        };
        event_times_millis(
            &self.own.name,
            batch.column(binding.time_idx),
            &self.factory.time_column,
            &mut self.scratch.times,
        )?;
        self.scratch.key_cols.clear();
        self.scratch
            .key_cols
            .extend(binding.key_idx.iter().map(|&i| batch.column(i).clone()));
        let args = BatchArgs {
            factory: &self.factory,
            batch: &batch,
            value_idx: binding.value_idx,
            watermark: self.watermark,
            reached: &self.reached,
            own: &self.own,
        };
        let (scratch, next_seq) = (&mut self.scratch, &mut self.next_seq);
        let late = with_store!(engine, s => process_rows(s, &args, scratch, next_seq))?;
        if let Some(&t) = self.scratch.times.iter().max() {
            let touched = t - t.rem_euclid(self.factory.assigner.slide_ms());
            match self.epochs.back_mut() {
                Some((e, hi)) if *e == self.epoch => *hi = (*hi).max(touched),
                _ => self.epochs.push_back((self.epoch, touched)),
            }
        }
        if late > 0 {
            self.late.fetch_add(late, Ordering::Relaxed);
            if self.factory.late_output {
                let rows = late_batch(batch, &self.scratch.late_rows)
                    .map_err(|e| Error::arrow(&self.own.name, &e))?;
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
        let size = self.factory.assigner.size_ms();
        // Windows with start + size - 1 <= watermark are over.
        let cut = if watermark == MAX_WATERMARK {
            None
        } else {
            let c = i128::from(watermark) - i128::from(size) + 2;
            Some(c.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64)
        };
        if let Some(c) = cut {
            // Epochs whose records touched only windows that are now over
            // no longer hold state.
            while self.epochs.front().is_some_and(|(_, hi)| *hi < c) {
                self.epochs.pop_front();
            }
        } else {
            self.epochs.clear();
        }
        if let (Some(engine), Some((layout, output))) = (&mut self.engine, &self.layout) {
            let fired = with_store!(engine, s => s.fire(cut, &layout.key_fields))
                .map_err(|e| e.in_operator(&self.own.name))?;
            if let Some(Fired { keys, starts, acc }) = fired {
                let mut columns = keys;
                columns.push(time_array(
                    &self.own.name,
                    starts.iter().copied(),
                    &layout.time_type,
                )?);
                columns.push(
                    time_array(
                        &self.own.name,
                        starts.iter().map(|s| s.saturating_add(size)),
                        &layout.time_type,
                    )
                    .map_err(|e| e.in_operator(&self.own.name))?,
                );
                columns.push(acc);
                let batch = RecordBatch::try_new(output.clone(), columns)
                    .map_err(|e| Error::arrow(&self.own.name, &e))?;
                out.emit(batch)?;
            }
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

impl CheckpointedState for WindowOperator {
    fn snapshot_state(&mut self, _checkpoint_id: u64) -> Result<OperatorState> {
        let (Some(engine), Some((layout, _))) = (&self.engine, &self.layout) else {
            return Ok(OperatorState::default());
        };
        let meta = Arc::new(SnapshotMeta {
            name: Arc::from(self.own.name.as_str()),
            agg: self.factory.kind(),
            assigner: self.factory.assigner,
            layout: layout.clone(),
            column: Arc::from(match (self.factory.kind(), self.factory.agg_column()) {
                (AggKind::Count, _) | (_, None) => "count",
                (_, Some(col)) => col,
            }),
        });
        let start = self.own.key_groups.start;
        let (watermark, reached) = (self.watermark, &self.reached);
        let keyed = with_store!(engine, s => s.snapshot(&meta, start, watermark, reached));
        Ok(OperatorState {
            operator: None,
            keyed,
        })
    }

    /// The subtask continues from the smallest watermark of the key groups it
    /// restores, each key group at its own (`reached`).
    fn restore_state(&mut self, state: OperatorState) -> Result<()> {
        let kind = &format!("a window {}", self.factory.kind().name());
        for (kg, blob) in owned_key_groups(state, &self.own, kind)? {
            self.restore_blob(kg, &blob)?;
        }
        self.watermark = self.reached.continue_from(self.watermark);
        Ok(())
    }
}

impl Recompute for WindowOperator {
    fn null_state_watermark(&self, checkpoint_id: u64) -> Result<Option<u64>> {
        Ok(Some(self.epochs.front().map_or(checkpoint_id, |(e, _)| *e)))
    }

    fn on_barrier(&mut self, checkpoint_id: u64) -> Result<()> {
        self.epoch = checkpoint_id;
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use arrow::array::Int64Array;
    use arrow::array::{StringArray, TimestampMicrosecondArray};
    use arrow::datatypes::{TimeUnit, TimestampMicrosecondType};

    #[derive(Default)]
    struct Recorder {
        batches: Vec<RecordBatch>,
        watermarks: Vec<i64>,
        /// Batches emitted on a side port, with the port.
        side: Vec<(u8, RecordBatch)>,
    }

    impl Collector for Recorder {
        fn emit(&mut self, batch: RecordBatch) -> Result<()> {
            self.batches.push(batch);
            Ok(())
        }
        fn emit_watermark(&mut self, watermark: i64) -> Result<()> {
            self.watermarks.push(watermark);
            Ok(())
        }
        fn emit_to_port(&mut self, port: u8, batch: RecordBatch) -> Result<()> {
            if port == 0 {
                return self.emit(batch);
            }
            self.side.push((port, batch));
            Ok(())
        }
    }

    fn ctx(key_groups: std::ops::Range<usize>) -> OperatorContext {
        OperatorContext {
            name: "win".to_string(),
            uid: "win".to_string(),
            subtask_index: 0,
            parallelism: 1,
            max_parallelism: 128,
            key_groups,
            attempt: 0,
        }
    }

    fn factory(assigner: WindowAssigner, agg: AggKind, column: Option<&str>) -> WindowFactory {
        WindowFactory::new(
            vec!["k".into()],
            "t".into(),
            assigner,
            WindowAgg::Native(agg, column.map(str::to_string)),
        )
    }

    fn batch(k: Vec<Option<i64>>, t: Vec<i64>, v: Vec<Option<i64>>) -> RecordBatch {
        RecordBatch::try_from_iter(vec![
            ("k", Arc::new(Int64Array::from(k)) as ArrayRef),
            ("t", Arc::new(Int64Array::from(t)) as ArrayRef),
            ("v", Arc::new(Int64Array::from(v)) as ArrayRef),
        ])
        .unwrap()
    }

    fn ints(col: &ArrayRef) -> Vec<Option<i64>> {
        col.as_primitive::<Int64Type>().iter().collect()
    }

    const TUMBLE_10: WindowAssigner = WindowAssigner::Tumbling { size_ms: 10 };

    /// A key of the first half of the key groups and one of the second.
    fn keys_of_both_halves() -> (i64, i64) {
        let kg = |k: i64| {
            let mut hashes = Vec::new();
            let col: ArrayRef = Arc::new(Int64Array::from(vec![k]));
            crate::keygroup::hash_keys(&[col], &mut hashes).unwrap();
            crate::keygroup::key_group(hashes[0], 128)
        };
        let low = (0..1000).find(|&k| kg(k) < 64).unwrap();
        let high = (0..1000).find(|&k| kg(k) >= 64).unwrap();
        (low, high)
    }

    /// Two subtasks that had reached different watermarks (an unaligned
    /// barrier overtakes watermarks) restored into one: a record of the
    /// subtask behind stays on time (its window still fires), one of the
    /// subtask ahead stays late (its window fired before, never again).
    #[test]
    fn test_restore_from_subtasks_at_different_watermarks_keeps_each_key_group_at_its_own() {
        let (behind, ahead) = keys_of_both_halves();
        let f = factory(TUMBLE_10, AggKind::Sum, Some("v")).with_late_output();
        let mut out = Recorder::default();
        let mut a = WindowOperator::new(&f, &ctx(64..128)).unwrap();
        let mut b = WindowOperator::new(&f, &ctx(0..64)).unwrap();
        a.process_batch(
            0,
            batch(vec![Some(ahead)], vec![3], vec![Some(1)]),
            &mut out,
        )
        .unwrap();
        a.process_watermark(19, &mut out).unwrap();
        b.process_batch(
            0,
            batch(vec![Some(behind)], vec![3], vec![Some(1)]),
            &mut out,
        )
        .unwrap();
        b.process_watermark(5, &mut out).unwrap();
        assert_eq!(
            out.batches.len(),
            1,
            "only the subtask ahead fired its window"
        );
        let mut keyed = a.snapshot_state(1).unwrap().keyed;
        keyed.extend(b.snapshot_state(1).unwrap().keyed);
        let mut op = WindowOperator::new(&f, &ctx(0..128)).unwrap();
        op.restore_state(OperatorState {
            operator: None,
            keyed,
        })
        .unwrap();
        // In-flight records of both, for the window [0, 10).
        op.process_batch(
            0,
            batch(
                vec![Some(behind), Some(ahead)],
                vec![7, 8],
                vec![Some(10), Some(100)],
            ),
            &mut out,
        )
        .unwrap();
        assert_eq!(op.late_records(), 1);
        assert_eq!(ints(out.side[0].1.column(0)), vec![Some(ahead)]);
        op.process_watermark(MAX_WATERMARK, &mut out).unwrap();
        let fired: Vec<(Option<i64>, Option<i64>)> = out.batches[1..]
            .iter()
            .flat_map(|b| ints(b.column(0)).into_iter().zip(ints(b.column(3))))
            .collect();
        assert_eq!(fired, vec![(Some(behind), Some(11))]);
    }

    #[test]
    fn test_tumbling_sum_fires_in_window_end_then_first_seen_order() {
        let f = factory(TUMBLE_10, AggKind::Sum, Some("v"));
        let mut op = WindowOperator::new(&f, &ctx(0..128)).unwrap();
        let mut out = Recorder::default();
        op.process_batch(
            0,
            batch(
                vec![Some(2), Some(1), None, Some(2), Some(1)],
                vec![3, 12, 5, 9, -1],
                vec![Some(1), Some(2), Some(3), None, Some(5)],
            ),
            &mut out,
        )
        .unwrap();
        assert_eq!(op.earliest_open_window_start(), Some(-10));
        op.process_watermark(9, &mut out).unwrap();
        assert_eq!(out.watermarks, vec![9]);
        let b = &out.batches[0];
        let expected = f
            .output_schema("op", &batch(vec![None], vec![0], vec![None]).schema())
            .unwrap();
        assert_eq!(b.schema(), expected);
        assert_eq!(ints(b.column(0)), vec![Some(1), Some(2), None]);
        assert_eq!(ints(b.column(1)), vec![Some(-10), Some(0), Some(0)]);
        assert_eq!(ints(b.column(2)), vec![Some(0), Some(10), Some(10)]);
        assert_eq!(ints(b.column(3)), vec![Some(5), Some(1), Some(3)]);
        assert_eq!(op.earliest_open_window_start(), Some(10));
        // A record of a window that is over is late.
        op.process_batch(0, batch(vec![Some(1)], vec![4], vec![Some(1)]), &mut out)
            .unwrap();
        assert_eq!(op.late_records(), 1);
        assert_eq!(op.late_records_handle().load(Ordering::Relaxed), 1);
        op.process_watermark(MAX_WATERMARK, &mut out).unwrap();
        assert_eq!(ints(out.batches[1].column(3)), vec![Some(2)]);
        assert_eq!(op.earliest_open_window_start(), None);
    }

    #[test]
    fn test_sliding_count_skips_windows_that_are_over() {
        let assigner = WindowAssigner::Sliding {
            size_ms: 10,
            slide_ms: 5,
        };
        let f = factory(assigner, AggKind::Count, None);
        let mut op = WindowOperator::new(&f, &ctx(0..128)).unwrap();
        let mut out = Recorder::default();
        op.process_watermark(4, &mut out).unwrap();
        // t = 7 belongs to [0, 10) and [5, 15); [0, 10) is not over yet.
        op.process_batch(0, batch(vec![Some(1)], vec![7], vec![None]), &mut out)
            .unwrap();
        op.process_watermark(9, &mut out).unwrap();
        // t = 8 now only joins [5, 15).
        op.process_batch(0, batch(vec![Some(1)], vec![8], vec![None]), &mut out)
            .unwrap();
        op.process_watermark(MAX_WATERMARK, &mut out).unwrap();
        let rows: Vec<_> = out
            .batches
            .iter()
            .flat_map(|b| {
                let s = ints(b.column(1));
                let c = ints(b.column(3));
                s.into_iter().zip(c)
            })
            .collect();
        assert_eq!(rows, vec![(Some(0), Some(1)), (Some(5), Some(2))]);
        assert_eq!(op.late_records(), 0);
    }

    #[test]
    fn test_timestamp_time_column_keeps_its_type() {
        let ty = DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()));
        let t = TimestampMicrosecondArray::from(vec![1_500, 12_000]).with_timezone("UTC");
        let b = RecordBatch::try_from_iter(vec![
            ("k", Arc::new(StringArray::from(vec!["a", "a"])) as ArrayRef),
            ("t", Arc::new(t) as ArrayRef),
        ])
        .unwrap();
        let f = WindowFactory::new(
            vec!["k".into()],
            "t".into(),
            TUMBLE_10,
            WindowAgg::Native(AggKind::Count, None),
        );
        let schema = f.output_schema("op", &b.schema()).unwrap();
        assert_eq!(schema.field(1).data_type(), &ty);
        assert_eq!(schema.field(3).name(), "count");
        let mut op = WindowOperator::new(&f, &ctx(0..128)).unwrap();
        let mut out = Recorder::default();
        op.process_batch(0, b, &mut out).unwrap();
        op.process_watermark(MAX_WATERMARK, &mut out).unwrap();
        let o = &out.batches[0];
        assert_eq!(o.schema(), schema);
        let ends: Vec<i64> = o
            .column(2)
            .as_primitive::<TimestampMicrosecondType>()
            .values()
            .to_vec();
        assert_eq!(ends, vec![10_000, 20_000]);
    }

    #[test]
    fn test_build_errors() {
        let s = batch(vec![], vec![], vec![]).schema();
        let bad = factory(
            WindowAssigner::Sliding {
                size_ms: 5,
                slide_ms: 10,
            },
            AggKind::Count,
            None,
        );
        assert!(matches!(
            bad.output_schema("op", &s),
            Err(Error::Graph { .. })
        ));
        let mut f = factory(TUMBLE_10, AggKind::Sum, Some("v"));
        f.time_column = "k2".into();
        let err = f.output_schema("op", &s).unwrap_err();
        assert!(err.to_string().contains("'k2' does not exist"), "{err}");
        let sb = RecordBatch::try_from_iter(vec![
            ("k", Arc::new(Int64Array::from(vec![1])) as ArrayRef),
            ("t", Arc::new(StringArray::from(vec!["x"])) as ArrayRef),
        ])
        .unwrap();
        let err = factory(TUMBLE_10, AggKind::Count, None)
            .output_schema("op", &sb.schema())
            .unwrap_err();
        assert!(matches!(err, Error::Schema { .. }));
        assert!(err.to_string().contains("'t' has type Utf8"), "{err}");
    }

    #[test]
    fn test_snapshot_is_copy_on_write_and_restore_checks_ownership() {
        let f = factory(TUMBLE_10, AggKind::Max, Some("v"));
        let mut op = WindowOperator::new(&f, &ctx(0..128)).unwrap();
        let mut out = Recorder::default();
        op.process_batch(
            0,
            batch(vec![Some(1), Some(2)], vec![1, 2], vec![Some(4), None]),
            &mut out,
        )
        .unwrap();
        let snap = op.snapshot_state(1).unwrap();
        // No watermark yet: only the non-empty key groups are written.
        assert_eq!(snap.keyed.len(), 2);
        assert!(snap
            .keyed
            .iter()
            .all(|(_, b)| matches!(b, StateBlob::Deferred(_))));
        op.process_batch(0, batch(vec![Some(1)], vec![3], vec![Some(9)]), &mut out)
            .unwrap();
        let bytes: Vec<(u32, StateBlob)> = snap
            .keyed
            .iter()
            .map(|(kg, b)| (*kg, StateBlob::Bytes(b.to_bytes().unwrap())))
            .collect();
        let mut fresh = WindowOperator::new(&f, &ctx(0..128)).unwrap();
        fresh
            .restore_state(OperatorState {
                operator: None,
                keyed: bytes.clone(),
            })
            .unwrap();
        // Restored before any batch: the output schema comes from the state.
        fresh.process_watermark(MAX_WATERMARK, &mut out).unwrap();
        let b = out.batches.last().unwrap();
        assert_eq!(ints(b.column(3)), vec![Some(4), None]);

        let (kg, blob) = bytes[0].clone();
        let other = (kg as usize + 1) % 128;
        let mut narrow = WindowOperator::new(&f, &ctx(other..other + 1)).unwrap();
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
        let mut wrong = blob.as_bytes().unwrap().to_vec();
        wrong[0] = 7;
        let err = WindowOperator::new(&f, &ctx(0..128))
            .unwrap()
            .restore_state(OperatorState {
                operator: None,
                keyed: vec![(kg, StateBlob::Bytes(Arc::new(wrong)))],
            })
            .unwrap_err();
        assert!(err.to_string().contains("format version 7"), "{err}");
        let sum = factory(TUMBLE_10, AggKind::Sum, Some("v"));
        let err = WindowOperator::new(&sum, &ctx(0..128))
            .unwrap()
            .restore_state(OperatorState {
                operator: None,
                keyed: vec![(kg, blob)],
            })
            .unwrap_err();
        assert!(err.to_string().contains("'max'"), "{err}");
    }

    /// Runs the same input through a window with and without a late output.
    fn run_late(late_output: bool) -> (WindowOperator, Recorder) {
        let mut f = factory(TUMBLE_10, AggKind::Sum, Some("v"));
        if late_output {
            f = f.with_late_output();
        }
        let mut op = WindowOperator::new(&f, &ctx(0..128)).unwrap();
        let mut out = Recorder::default();
        op.process_batch(
            0,
            batch(vec![Some(1), Some(2)], vec![3, 15], vec![Some(1), Some(2)]),
            &mut out,
        )
        .unwrap();
        op.process_watermark(12, &mut out).unwrap();
        // [0, 10) is over: the records at 4 and 9 are late, 11 and 25 are not.
        op.process_batch(
            0,
            batch(
                vec![Some(1), Some(2), Some(3), None],
                vec![4, 11, 9, 25],
                vec![Some(10), Some(20), Some(30), Some(40)],
            ),
            &mut out,
        )
        .unwrap();
        op.process_watermark(MAX_WATERMARK, &mut out).unwrap();
        (op, out)
    }

    #[test]
    fn test_late_output_emits_exactly_the_late_rows_unchanged() {
        let (op, out) = run_late(true);
        assert_eq!(op.late_records(), 2);
        assert_eq!(out.side.len(), 1);
        let (port, late) = &out.side[0];
        assert_eq!(*port, LATE_PORT);
        // The schema of the input batch (only `k` holds nulls) and the late
        // rows, in arrival order.
        assert_eq!(
            late.schema(),
            batch(vec![None], vec![0], vec![Some(0)]).schema()
        );
        assert_eq!(ints(late.column(0)), vec![Some(1), Some(3)]);
        assert_eq!(ints(late.column(1)), vec![Some(4), Some(9)]);
        assert_eq!(ints(late.column(2)), vec![Some(10), Some(30)]);
    }

    #[test]
    fn test_late_output_leaves_the_main_output_unchanged() {
        let (with_op, with) = run_late(true);
        let (without_op, without) = run_late(false);
        assert_eq!(with.batches, without.batches);
        assert_eq!(with.watermarks, without.watermarks);
        assert_eq!(with_op.late_records(), without_op.late_records());
        // Without a late output late records are only counted.
        assert!(without.side.is_empty());
        assert!(!with.batches.is_empty());
    }

    #[test]
    fn test_late_output_passes_an_all_late_batch_through_without_copying() {
        let f = factory(TUMBLE_10, AggKind::Sum, Some("v")).with_late_output();
        let mut op = WindowOperator::new(&f, &ctx(0..128)).unwrap();
        let mut out = Recorder::default();
        op.process_watermark(100, &mut out).unwrap();
        let all_late = batch(vec![Some(1), Some(2)], vec![1, 50], vec![Some(1), None]);
        op.process_batch(0, all_late.clone(), &mut out).unwrap();
        assert_eq!(op.late_records(), 2);
        let (_, late) = &out.side[0];
        for (a, b) in late.columns().iter().zip(all_late.columns()) {
            assert!(Arc::ptr_eq(a, b), "an all-late batch was copied");
        }
        // A batch without late rows emits nothing on the side.
        op.process_batch(0, batch(vec![Some(1)], vec![101], vec![Some(1)]), &mut out)
            .unwrap();
        assert_eq!(out.side.len(), 1);
        assert_eq!(op.late_records(), 2);
    }

    #[test]
    fn test_late_output_of_a_sliding_window_only_takes_records_with_every_window_over() {
        let slide = WindowAssigner::Sliding {
            size_ms: 10,
            slide_ms: 5,
        };
        let f = factory(slide, AggKind::Count, None).with_late_output();
        let mut op = WindowOperator::new(&f, &ctx(0..128)).unwrap();
        let mut out = Recorder::default();
        op.process_watermark(9, &mut out).unwrap();
        // t=7 is in [0, 10) (over) and [5, 15) (open): not late. t=3 is in
        // [-5, 5) and [0, 10), both over: late.
        op.process_batch(
            0,
            batch(vec![Some(1), Some(1)], vec![7, 3], vec![None, None]),
            &mut out,
        )
        .unwrap();
        assert_eq!(op.late_records(), 1);
        assert_eq!(ints(out.side[0].1.column(1)), vec![Some(3)]);
    }

    #[test]
    fn test_default_collector_rejects_side_ports() {
        struct PortZeroOnly(Vec<RecordBatch>);
        impl Collector for PortZeroOnly {
            fn emit(&mut self, batch: RecordBatch) -> Result<()> {
                self.0.push(batch);
                Ok(())
            }
            fn emit_watermark(&mut self, _watermark: i64) -> Result<()> {
                Ok(())
            }
        }
        let mut c = PortZeroOnly(Vec::new());
        let b = batch(vec![Some(1)], vec![1], vec![Some(1)]);
        c.emit_to_port(0, b.clone()).unwrap();
        assert_eq!(c.0.len(), 1);
        let err = c.emit_to_port(LATE_PORT, b).unwrap_err();
        assert!(matches!(err, Error::Runtime { .. }), "{err}");
        assert!(err.to_string().contains("output port 1"), "{err}");
    }
}
