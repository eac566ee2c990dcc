//! Event-time over-aggregation per key (docs/API.md "Over windows"; Flink's
//! `OVER (PARTITION BY k ORDER BY rowtime ... PRECEDING AND CURRENT ROW)`:
//! its `RowTimeRowsBoundedPrecedingFunction`, `RowTimeRowsUnboundedPreceding
//! Function`, `RowTimeRangeBoundedPrecedingFunction` and
//! `RowTimeRangeUnboundedPrecedingFunction`, one operator here).
//!
//! # Semantics
//!
//! Each row of a partition (the key columns) is held until the watermark
//! passes its event time, then the partition's rows are taken in event-time
//! order and each is emitted once, unchanged, with the aggregates of its
//! frame ([`OverPreceding`]):
//!
//! - `ROWS BETWEEN n PRECEDING AND CURRENT ROW`: itself and the `n` rows
//!   before it in that order;
//! - `ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW`: itself and every
//!   row before it (a running aggregate);
//! - `RANGE BETWEEN x PRECEDING AND CURRENT ROW`: every row of the partition
//!   whose event time is in `[t - x, t]` for the row's time `t`, so rows of
//!   one time (peers) get one value, computed over all of them;
//! - `RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW` (SQL's default
//!   frame of an `OVER` with `ORDER BY`): every row up to the row's time,
//!   its peers included.
//!
//! Rows of one time all fire together: once the watermark passes a time, a
//! row of it is late. Rows of one event time are ordered by the `order_by`
//! columns, then by all their columns in schema order (arrow's row format,
//! ascending, nulls first), so equal times give one result whatever the
//! arrival order: rows that tie on every column are interchangeable. A row
//! at or before the watermark when it arrives is late: counted
//! (`late_records`) and dropped, as a window's. Output: the input columns,
//! then one column per aggregate; append-only, each row timed by its own
//! event time, all of a watermark's rows emitted before the watermark.
//!
//! Aggregates (the windows' native accumulators of `state/keyed.rs`): `sum`,
//! `min`, `max` as `Int64` of an integer column (sums wrap) or `Float64`,
//! `count` of rows (no column) or of a column's non-null values, `avg` as
//! `Float64` (an integer column summed exactly, then divided). Nulls are
//! ignored; an aggregate of no value is null (a count 0).
//!
//! # State
//!
//! Per key group ([`Group`]): the pending rows (Arrow batches of the input
//! schema) and per partition its history, a list of [`Value`]s in a
//! copy-on-write `Arc`: for `n PRECEDING` rows the aggregated values of its
//! last `n` rows; for an unbounded frame only the running accumulators (a
//! few words per aggregate, [`running_slots`], however many rows came); for
//! a `RANGE` of `x` the time and values of its rows in the last `x`. The
//! blob is the format version, the watermark the key group had reached, the
//! pending rows as one Arrow IPC stream and the partitions' histories (the
//! same layout for every frame, so a `ROWS n PRECEDING` checkpoint of an
//! older build restores unchanged); a restore at another parallelism takes
//! the key groups a subtask owns and keeps each at its own watermark
//! (`state/group_watermarks.rs`).

use std::collections::{HashMap, VecDeque};
use std::io::{Cursor, Read};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arrow::array::{Array, BooleanArray, UInt32Array};
use arrow::compute::{concat_batches, filter_record_batch, take_record_batch};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::error::ArrowError;
use arrow::record_batch::RecordBatch;
use arrow::row::{RowConverter, Rows, SortField};

use super::over_frames::{aggregate_frames, running_slots, Sorted, Value};
pub use super::over_frames::{OverAggregate, OverFunction, OverPreceding};
use crate::error::{Error, Result};
use crate::keygroup::KeyGroupOwnership;
use crate::operator::timestamps::{event_time_column, event_times_millis, keyed_event_times};
use crate::operator::{CheckpointedState, Collector, Operator, OperatorContext, OperatorFactory};
use crate::state::group_watermarks::KeyGroupWatermarks;
use crate::state::keyed::{
    column_index, describe_columns, key_columns, native_values, owned_key_groups, ValueKind,
};
use crate::state::keyed_slots::columns_at;
use crate::state::{DeferredState, OperatorState, StateBlob};

/// Builds [`OverRowsOperator`]s (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OverRowsFactory {
    /// The partition (key) columns.
    pub keys: Vec<String>,
    /// The event-time column (a timestamp or `Int64` ms).
    pub time_column: String,
    /// Columns that order rows of one event time, before their other columns.
    pub order_by: Vec<String>,
    /// Where the frame starts (it ends at the current row, or for `RANGE` at
    /// its last peer).
    pub preceding: OverPreceding,
    pub aggregates: Vec<OverAggregate>,
}

/// The largest `preceding` taken: the frame is walked per row.
pub const MAX_PRECEDING: usize = 10_000;

/// An input schema resolved against a factory.
#[derive(Debug, Clone)]
struct Binding {
    input: SchemaRef,
    key_idx: Vec<usize>,
    time_idx: usize,
    /// The columns rows are sorted by: keys, time, `order_by`, the rest.
    sort_idx: Vec<usize>,
    /// Per aggregate: the column read and its accumulator kind.
    values: Vec<(Option<usize>, ValueKind)>,
    output: SchemaRef,
}

impl OverRowsFactory {
    /// The output schema for `input`: its fields, then the aggregates.
    /// Errors name `operator`.
    pub fn output_schema(&self, operator: &str, input: &SchemaRef) -> Result<SchemaRef> {
        Ok(self.bind(operator, input)?.output)
    }

    fn bind(&self, operator: &str, input: &SchemaRef) -> Result<Binding> {
        if self.keys.is_empty() {
            return Err(Error::graph(
                operator,
                "an over window needs at least one partition (key) column",
            ));
        }
        match self.preceding {
            OverPreceding::Rows(n) if n > MAX_PRECEDING => {
                return Err(Error::graph(
                    operator,
                    format!(
                        "an over window of {n} preceding rows is more than the \
                         {MAX_PRECEDING} supported"
                    ),
                ));
            }
            OverPreceding::Range(ms) if ms < 0 => {
                return Err(Error::graph(
                    operator,
                    format!("an over window's RANGE of {ms} ms preceding is negative"),
                ));
            }
            _ => {}
        }
        if self.aggregates.is_empty() {
            return Err(Error::graph(operator, "an over window needs an aggregate"));
        }
        let (key_idx, _) = key_columns(operator, input, &self.keys, "partition ")?;
        let time_idx = event_time_column(operator, input, &self.time_column)?;
        let mut sort_idx = key_idx.clone();
        sort_idx.push(time_idx);
        for c in &self.order_by {
            sort_idx.push(column_index(operator, input, c)?);
        }
        for i in 0..input.fields().len() {
            if !sort_idx.contains(&i) {
                sort_idx.push(i);
            }
        }
        let sortable: Vec<SortField> = sort_idx
            .iter()
            .map(|&i| SortField::new(input.field(i).data_type().clone()))
            .collect();
        if !RowConverter::supports_fields(&sortable) {
            return Err(Error::schema(
                operator,
                "an over window orders rows of one event time by all their columns, and a \
                 column's type cannot be ordered",
            ));
        }
        let mut fields: Vec<Arc<Field>> = input.fields().iter().cloned().collect();
        let mut values = Vec::with_capacity(self.aggregates.len());
        for a in &self.aggregates {
            if fields.iter().any(|f| f.name() == &a.name) {
                return Err(Error::graph(
                    operator,
                    format!(
                        "the over window's aggregate '{}' has the name of another column; \
                         columns: {}",
                        a.name,
                        describe_columns(input)
                    ),
                ));
            }
            let (idx, kind) = self.value_column(operator, input, a)?;
            let (data_type, nullable) = match a.function {
                OverFunction::Count => (DataType::Int64, false),
                OverFunction::Avg => (DataType::Float64, true),
                _ => (kind.data_type(), true),
            };
            fields.push(Arc::new(Field::new(&a.name, data_type, nullable)));
            values.push((idx, kind));
        }
        Ok(Binding {
            input: input.clone(),
            key_idx,
            time_idx,
            sort_idx,
            values,
            output: Arc::new(Schema::new(fields)),
        })
    }

    /// Whether a restored partition history of `len` values fits this
    /// frame's layout (see the module docs' "State").
    fn history_fits(&self, len: usize) -> bool {
        let width = self.aggregates.len();
        match self.preceding {
            OverPreceding::Rows(n) => len.checked_rem(width) == Some(0) && len <= n * width,
            OverPreceding::AllRows | OverPreceding::AllRange => {
                let slots = self.aggregates.iter().map(|a| running_slots(a.function));
                len == slots.sum::<usize>()
            }
            OverPreceding::Range(_) => len.checked_rem(width + 1) == Some(0),
        }
    }

    fn value_column(
        &self,
        operator: &str,
        input: &Schema,
        a: &OverAggregate,
    ) -> Result<(Option<usize>, ValueKind)> {
        let Some(column) = &a.column else {
            if a.function == OverFunction::Count {
                return Ok((None, ValueKind::Int));
            }
            return Err(Error::graph(
                operator,
                format!("the over window's {}() needs a column", a.function.name()),
            ));
        };
        let idx = column_index(operator, input, column)?;
        let dt = input.field(idx).data_type();
        let kind = match ValueKind::of(dt) {
            Some(kind) => kind,
            // A count reads a column of any type.
            None if a.function == OverFunction::Count => ValueKind::Int,
            None => {
                return Err(Error::schema(
                    operator,
                    format!(
                        "the over window's {}() needs a numeric column, but column '{column}' has \
                     type {dt}",
                        a.function.name()
                    ),
                ));
            }
        };
        Ok((Some(idx), kind))
    }
}

impl OperatorFactory for OverRowsFactory {
    fn create(&self, ctx: &OperatorContext) -> Result<Box<dyn Operator>> {
        Ok(Box::new(OverRowsOperator::new(self, ctx)?))
    }
}

/// The state of one key group.
#[derive(Debug, Clone, Default)]
struct Group {
    /// Rows not yet processed (after the watermark when they came).
    pending: Vec<RecordBatch>,
    /// The smallest event time among `pending`.
    pending_min: i64,
    /// Per partition (row-format key): the values of its last rows, oldest
    /// first, one [`Value`] per aggregate each.
    history: HashMap<Box<[u8]>, VecDeque<Value>>,
}

impl Group {
    fn is_empty(&self) -> bool {
        self.pending.is_empty() && self.history.is_empty()
    }
}

/// Per-batch buffers, reused.
#[derive(Debug, Default)]
struct Scratch {
    times: Vec<i64>,
    hashes: Vec<u64>,
    rows: Vec<Vec<u32>>,
}

/// Event-time `ROWS ... PRECEDING` aggregation (see the module docs).
pub struct OverRowsOperator {
    factory: OverRowsFactory,
    own: KeyGroupOwnership,
    binding: Option<Binding>,
    groups: Vec<Arc<Group>>,
    watermark: i64,
    reached: KeyGroupWatermarks,
    late: Arc<AtomicU64>,
    scratch: Scratch,
}

impl OverRowsOperator {
    /// An operator for the subtask `ctx` describes.
    pub fn new(factory: &OverRowsFactory, ctx: &OperatorContext) -> Result<Self> {
        let own = KeyGroupOwnership::from_context(ctx)?;
        let n = own.key_groups.len();
        Ok(OverRowsOperator {
            factory: factory.clone(),
            own,
            binding: None,
            groups: (0..n).map(|_| Arc::new(Group::default())).collect(),
            watermark: i64::MIN,
            reached: KeyGroupWatermarks::new(n),
            late: Arc::new(AtomicU64::new(0)),
            scratch: Scratch::default(),
        })
    }

    /// How many rows wait for the watermark.
    pub fn pending_rows(&self) -> usize {
        self.groups
            .iter()
            .flat_map(|g| g.pending.iter())
            .map(RecordBatch::num_rows)
            .sum()
    }

    fn bind(&mut self, schema: &SchemaRef) -> Result<()> {
        if let Some(b) = &self.binding {
            if crate::state::keyed::same_input(&b.input, schema) {
                return Ok(());
            }
            return Err(Error::schema(
                &self.own.name,
                format!(
                    "the over window's input changed schema: it had columns {}, a batch has {}",
                    describe_columns(&b.input),
                    describe_columns(schema)
                ),
            ));
        }
        self.binding = Some(self.factory.bind(&self.own.name, schema)?);
        Ok(())
    }

    /// The rows of `group` at or before `watermark`, each with its frame's
    /// aggregates, in partition and event-time order; the later rows stay.
    fn fire(&mut self, local: usize, watermark: i64) -> Result<Option<RecordBatch>> {
        let name = self.own.name.clone();
        let b = self
            .binding
            .as_ref()
            .expect("invariant: pending rows bind first");
        let group = Arc::make_mut(&mut self.groups[local]);
        let all = concat_batches(&b.input, &group.pending).map_err(|e| Error::arrow(&name, &e))?;
        group.pending.clear();
        let times = &mut self.scratch.times;
        event_times_millis(
            &name,
            all.column(b.time_idx),
            &self.factory.time_column,
            times,
        )?;
        let ready = BooleanArray::from_iter(times.iter().map(|&t| Some(t <= watermark)));
        let later = arrow::compute::not(&ready).map_err(|e| Error::arrow(&name, &e))?;
        let rest = filter_record_batch(&all, &later).map_err(|e| Error::arrow(&name, &e))?;
        group.pending_min = times
            .iter()
            .filter(|&&t| t > watermark)
            .min()
            .copied()
            .unwrap_or(i64::MAX);
        if rest.num_rows() > 0 {
            group.pending.push(rest);
        }
        let ready = filter_record_batch(&all, &ready).map_err(|e| Error::arrow(&name, &e))?;
        if ready.num_rows() == 0 {
            return Ok(None);
        }
        // Sorted by partition, event time, order_by, then every column.
        let rows = row_format(&ready, &b.sort_idx).map_err(|e| Error::arrow(&name, &e))?;
        let mut order: Vec<u32> = (0..ready.num_rows() as u32).collect();
        order.sort_unstable_by(|&x, &y| rows.row(x as usize).cmp(&rows.row(y as usize)));
        let sorted = take_record_batch(&ready, &UInt32Array::from(order))
            .map_err(|e| Error::arrow(&name, &e))?;
        let keys = row_format(&sorted, &b.key_idx).map_err(|e| Error::arrow(&name, &e))?;
        let values = row_values(&name, &sorted, &b.values)?;
        let times = &mut self.scratch.times;
        event_times_millis(
            &name,
            sorted.column(b.time_idx),
            &self.factory.time_column,
            times,
        )?;
        let rows = Sorted {
            aggregates: &self.factory.aggregates,
            kinds: &b.values,
            values: &values,
            times,
        };
        let columns = aggregate_frames(self.factory.preceding, &rows, &keys, &mut group.history);
        let mut all_columns = sorted.columns().to_vec();
        all_columns.extend(columns);
        let out = RecordBatch::try_new(b.output.clone(), all_columns)
            .map_err(|e| Error::arrow(&name, &e))?;
        Ok(Some(out))
    }
}

/// The columns `idx` of `batch` in the row format, whose rows compare as
/// their values do, column by column.
fn row_format(batch: &RecordBatch, idx: &[usize]) -> std::result::Result<Rows, ArrowError> {
    let columns = columns_at(batch, idx);
    let fields = columns
        .iter()
        .map(|c| SortField::new(c.data_type().clone()))
        .collect();
    RowConverter::new(fields).and_then(|c| c.convert_columns(&columns))
}

/// Per aggregate, the values of `batch`'s rows (count of rows: all valid).
fn row_values(
    name: &str,
    batch: &RecordBatch,
    columns: &[(Option<usize>, ValueKind)],
) -> Result<Vec<Vec<Value>>> {
    let n = batch.num_rows();
    columns
        .iter()
        .map(|(idx, kind)| {
            let Some(idx) = idx else {
                return Ok(vec![
                    Value {
                        bits: 1,
                        valid: true
                    };
                    n
                ]);
            };
            let column = batch.column(*idx);
            if !column.data_type().is_numeric() {
                // count(col) of a non-numeric column: its nulls only.
                return Ok((0..n)
                    .map(|i| Value {
                        bits: 1,
                        valid: column.is_valid(i),
                    })
                    .collect());
            }
            Ok(match kind {
                ValueKind::Int => native_values::<i64>(name, column)?
                    .iter()
                    .map(|v| Value {
                        bits: v.unwrap_or(0) as u64,
                        valid: v.is_some(),
                    })
                    .collect(),
                ValueKind::Float => native_values::<f64>(name, column)?
                    .iter()
                    .map(|v| Value {
                        bits: v.unwrap_or(0.0).to_bits(),
                        valid: v.is_some(),
                    })
                    .collect(),
            })
        })
        .collect()
}

impl Operator for OverRowsOperator {
    fn late_records(&self) -> u64 {
        self.late.load(Ordering::Relaxed)
    }

    fn process_batch(
        &mut self,
        _input: usize,
        batch: RecordBatch,
        _out: &mut dyn Collector,
    ) -> Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        self.bind(batch.schema_ref())?;
        let name = self.own.name.clone();
        let b = self.binding.as_ref().expect("invariant: bound just above");
        let s = &mut self.scratch;
        // The key columns are read again, sorted, when the rows fire.
        keyed_event_times(
            &name,
            &batch,
            (b.time_idx, &self.factory.time_column),
            &b.key_idx,
            &mut s.times,
            &mut s.hashes,
        )?;
        s.rows.resize_with(self.groups.len(), Vec::new);
        let mut late = 0u64;
        for (i, (&h, &t)) in s.hashes.iter().zip(&s.times).enumerate() {
            let local = self.own.local_index(h)?;
            if t <= self.reached.at(local, self.watermark) {
                late += 1;
                continue;
            }
            s.rows[local].push(i as u32);
        }
        let all = late == 0 && s.rows.iter().filter(|r| !r.is_empty()).count() == 1;
        for (local, rows) in s.rows.iter_mut().enumerate() {
            if rows.is_empty() {
                continue;
            }
            let min = rows
                .iter()
                .map(|&i| s.times[i as usize])
                .min()
                .unwrap_or(i64::MAX);
            let part = if all {
                batch.clone()
            } else {
                let indices = UInt32Array::from_iter_values(rows.iter().copied());
                take_record_batch(&batch, &indices).map_err(|e| Error::arrow(&name, &e))?
            };
            rows.clear();
            let group = Arc::make_mut(&mut self.groups[local]);
            if group.pending.is_empty() {
                group.pending_min = i64::MAX;
            }
            group.pending_min = group.pending_min.min(min);
            group.pending.push(part);
        }
        if late > 0 {
            self.late.fetch_add(late, Ordering::Relaxed);
        }
        Ok(())
    }

    fn process_watermark(&mut self, watermark: i64, out: &mut dyn Collector) -> Result<()> {
        if watermark < self.watermark {
            return Ok(());
        }
        self.watermark = watermark;
        let mut batches = Vec::new();
        for local in 0..self.groups.len() {
            let g = &self.groups[local];
            if g.pending.is_empty() || g.pending_min > self.reached.at(local, watermark) {
                continue;
            }
            if let Some(batch) = self.fire(local, self.reached.at(local, watermark))? {
                batches.push(batch);
            }
        }
        if let Some(b) = &self.binding {
            if !batches.is_empty() {
                let batch = concat_batches(&b.output, &batches)
                    .map_err(|e| Error::arrow(&self.own.name, &e))?;
                out.emit(batch)?;
            }
        }
        out.emit_watermark(watermark)
    }

    fn state(&mut self) -> Option<&mut dyn CheckpointedState> {
        Some(self)
    }
}

/// The blob format's version.
const VERSION: u8 = 1;

/// A key group's state as a checkpoint writes it, serialized off the task.
struct GroupView {
    group: Arc<Group>,
    watermark: i64,
    schema: Option<SchemaRef>,
}

impl DeferredState for GroupView {
    fn serialize(&self) -> Result<Vec<u8>> {
        let mut out = vec![VERSION];
        out.extend_from_slice(&self.watermark.to_le_bytes());
        let mut ipc = Vec::new();
        if let Some(schema) = &self.schema {
            let err = |e: arrow::error::ArrowError| Error::checkpoint(None, e.to_string());
            let mut w = arrow::ipc::writer::StreamWriter::try_new(&mut ipc, schema).map_err(err)?;
            for batch in &self.group.pending {
                w.write(batch).map_err(err)?;
            }
            w.finish().map_err(err)?;
        }
        out.extend_from_slice(&(ipc.len() as u64).to_le_bytes());
        out.extend_from_slice(&ipc);
        out.extend_from_slice(&(self.group.history.len() as u64).to_le_bytes());
        let mut entries: Vec<_> = self.group.history.iter().collect();
        entries.sort_by(|a, b| a.0.cmp(b.0));
        for (key, ring) in entries {
            out.extend_from_slice(&(key.len() as u64).to_le_bytes());
            out.extend_from_slice(key);
            out.extend_from_slice(&(ring.len() as u64).to_le_bytes());
            for v in ring {
                out.extend_from_slice(&v.bits.to_le_bytes());
                out.push(u8::from(v.valid));
            }
        }
        Ok(out)
    }
}

/// Reads what [`GroupView::serialize`] wrote: the watermark, the pending
/// batches and the history.
fn decode(bytes: &[u8], kg: usize) -> Result<(i64, Group)> {
    let bad = |m: &str| {
        Error::checkpoint(
            None,
            format!("the over window state of key group {kg} is corrupt: {m}"),
        )
    };
    let mut r = Cursor::new(bytes);
    let mut byte = [0u8; 1];
    r.read_exact(&mut byte).map_err(|_| bad("empty"))?;
    if byte[0] != VERSION {
        return Err(bad(&format!(
            "format version {}, this build reads {VERSION}",
            byte[0]
        )));
    }
    let mut word = || -> Result<u64> {
        let mut w = [0u8; 8];
        r.read_exact(&mut w).map_err(|_| bad("truncated"))?;
        Ok(u64::from_le_bytes(w))
    };
    let watermark = word()? as i64;
    let ipc_len = word()? as usize;
    let start = 17usize;
    let ipc = bytes
        .get(start..start + ipc_len)
        .ok_or_else(|| bad("truncated pending rows"))?;
    let mut pending = Vec::new();
    if !ipc.is_empty() {
        let reader = arrow::ipc::reader::StreamReader::try_new(Cursor::new(ipc), None)
            .map_err(|e| bad(&e.to_string()))?;
        for batch in reader {
            pending.push(batch.map_err(|e| bad(&e.to_string()))?);
        }
    }
    let mut r = Cursor::new(&bytes[start + ipc_len..]);
    let mut next = |n: usize| -> Result<Vec<u8>> {
        let mut v = vec![0u8; n];
        r.read_exact(&mut v).map_err(|_| bad("truncated history"))?;
        Ok(v)
    };
    let as_u64 = |v: Vec<u8>| u64::from_le_bytes(v.try_into().unwrap_or([0; 8]));
    let partitions = as_u64(next(8)?) as usize;
    let mut history = HashMap::with_capacity(partitions.min(1 << 20));
    for _ in 0..partitions {
        let len = as_u64(next(8)?) as usize;
        let key = next(len)?.into_boxed_slice();
        let n = as_u64(next(8)?) as usize;
        let mut ring = VecDeque::with_capacity(n.min(1 << 20));
        for _ in 0..n {
            let bits = as_u64(next(8)?);
            let valid = next(1)?[0] != 0;
            ring.push_back(Value { bits, valid });
        }
        history.insert(key, ring);
    }
    Ok((
        watermark,
        Group {
            pending,
            pending_min: i64::MIN,
            history,
        },
    ))
}

impl CheckpointedState for OverRowsOperator {
    fn snapshot_state(&mut self, _checkpoint_id: u64) -> Result<OperatorState> {
        let start = self.own.key_groups.start;
        let schema = self.binding.as_ref().map(|b| b.input.clone());
        let mut keyed = Vec::new();
        for (local, group) in self.groups.iter().enumerate() {
            let has_state = !group.is_empty();
            if !self.reached.snapshots(local, self.watermark, has_state) {
                continue;
            }
            let view = GroupView {
                group: group.clone(),
                watermark: self.reached.at(local, self.watermark),
                schema: schema.clone(),
            };
            keyed.push(((start + local) as u32, StateBlob::Deferred(Arc::new(view))));
        }
        Ok(OperatorState {
            operator: None,
            keyed,
        })
    }

    fn restore_state(&mut self, state: OperatorState) -> Result<()> {
        for (kg, blob) in owned_key_groups(state, &self.own, "an over window")? {
            let bytes = blob.to_bytes()?;
            let (watermark, mut group) = decode(&bytes, kg)?;
            let misfit = group.history.values().map(VecDeque::len);
            if let Some(len) = misfit.into_iter().find(|&n| !self.factory.history_fits(n)) {
                return Err(Error::checkpoint(
                    None,
                    format!(
                        "the over window state of key group {kg} holds a partition history of \
                         {len} values, which does not fit the frame {:?}: it was written by \
                         another OVER frame",
                        self.factory.preceding
                    ),
                ));
            }
            let local = kg - self.own.key_groups.start;
            self.reached.restore(local, watermark);
            if let Some(first) = group.pending.first() {
                self.bind(first.schema_ref())?;
                let b = self.binding.as_ref().expect("invariant: bound just above");
                let mut min = i64::MAX;
                for batch in &group.pending {
                    let t = &mut self.scratch.times;
                    let name = &self.own.name;
                    event_times_millis(
                        name,
                        batch.column(b.time_idx),
                        &self.factory.time_column,
                        t,
                    )?;
                    min = t.iter().copied().min().unwrap_or(i64::MAX).min(min);
                }
                group.pending_min = min;
            }
            self.groups[local] = Arc::new(group);
        }
        self.watermark = self.reached.continue_from(self.watermark);
        Ok(())
    }
}

#[cfg(test)]
#[path = "over_rows_tests.rs"]
mod tests;
