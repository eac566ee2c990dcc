//! Event-time timestamp assignment with bounded-out-of-orderness watermarks
//! (DESIGN.md "Event time"; the watermark semantics are Flink's
//! `BoundedOutOfOrdernessWatermarks`: a watermark `w` promises that no more
//! records with a timestamp `<= w` will follow).
//!
//! # Semantics
//!
//! The event time of a record is read from one column: an Arrow `Timestamp`
//! column of any unit (converted to milliseconds since the epoch, rounding
//! towards negative infinity) or an `Int64` column of milliseconds since the
//! epoch. Any other type is a schema error at build time
//! ([`AssignTimestampsFactory::output_schema`]); a null event time is a
//! schema error when the batch arrives.
//!
//! Batches pass through unchanged (the same `RecordBatch`, no copy). After
//! each batch the operator emits the watermark
//! `max_timestamp_seen - max_out_of_orderness - 1`, but only when it
//! advanced past the last watermark it emitted. Watermarks from upstream are
//! ignored (this operator generates event time), except [`MAX_WATERMARK`],
//! which a bounded source sends when it ends and which is forwarded so the
//! windows downstream fire.
//!
//! # Per-split watermarks (FLIP-27, DESIGN.md "Event time per split")
//!
//! Chained after a source (right after it, or behind filters, projections
//! and the Python operators that emit each batch's rows at once and in order
//! (map, filter, flat_map, map_batches), which pass the source's progress
//! on: [`Collector::source_progress`]), the operator learns the split of
//! every batch and the source's open splits
//! ([`Operator::on_source_progress`]); every batch up to the next progress
//! is of that split (an operator in between may make several of one). It then keeps the largest timestamp
//! per split and emits the smallest of the splits' watermarks: records are
//! late only by their own split's order. An open split without records yet
//! holds the watermark back; a finished split no longer does. With an
//! `idle_timeout` (Flink's `withIdleness`), a split that delivered no batch
//! for that long no longer holds it back either, until it delivers again;
//! as the source task calls the operator while it has nothing to read, this
//! also happens while no split delivers. When every split is idle the
//! subtask is: it tells its consumers ([`Collector::emit_idle`]), whose
//! combined watermark then ignores its channels until it sends again. Placed elsewhere (not right after
//! a source), the operator sees one stream and keeps one largest timestamp;
//! an `idle_timeout` there is refused with a graph error when the first
//! batch arrives (nothing would ever call it while its input is quiet).
//!
//! # State
//!
//! An entry list ([`crate::state::encode_entries`]) of u64 words: one
//! subtask entry `(0, largest timestamp)` and one entry `(1, split id,
//! largest timestamp)` per open split (timestamps as two's complement,
//! `i64::MIN` when nothing was seen). After a restore the watermark does
//! not regress, and the first batch re-emits the restored watermark so that
//! the operators downstream (which restart without a watermark) learn it
//! again. At another parallelism every new subtask gets every entry
//! ([`Redistribution::Union`]): it starts from the smallest largest
//! timestamp of the old subtasks, so never above any of their watermarks,
//! and takes the per-split timestamps of the splits its source reads now (a
//! split that several old subtasks read, such as a file whose row groups
//! were dealt to several of them, from the smallest of their timestamps).
//! The single-timestamp state of older versions (byte 0 the format version
//! [`STATE_FORMAT_VERSION`], bytes 1..9 the timestamp) still restores.

use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use arrow::datatypes::{
    DataType, Int64Type, Schema, SchemaRef, TimeUnit, TimestampMicrosecondType,
    TimestampMillisecondType, TimestampNanosecondType, TimestampSecondType,
};

use crate::error::{Error, ForOperator, Result};
use crate::event::MAX_WATERMARK;
use crate::keygroup::hash_keys;
use crate::operator::{
    CheckpointedState, Collector, Operator, OperatorContext, OperatorFactory, Recompute,
};
use crate::state::keyed_slots::columns_at;
use crate::state::{decode_entries, encode_entries, OperatorState, Redistribution, StateBlob};
use crate::state::{decode_positions, encode_positions};

/// The version byte that opens the single-timestamp state of older
/// versions (still restored).
pub const STATE_FORMAT_VERSION: u8 = 1;

/// Entry kinds of the state's entry list.
const SUBTASK_ENTRY: u64 = 0;
const SPLIT_ENTRY: u64 = 1;

/// Checks that `name` is a usable event-time column of `schema` and returns
/// its index (shared with the window operator).
pub(crate) fn event_time_column(operator: &str, schema: &Schema, name: &str) -> Result<usize> {
    let idx = schema.index_of(name).map_err(|_| {
        Error::graph(
            operator,
            format!(
                "event-time column '{name}' does not exist; available columns: {}",
                schema
                    .fields()
                    .iter()
                    .map(|f| f.name().as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )
    })?;
    match schema.field(idx).data_type() {
        DataType::Int64 | DataType::Timestamp(_, _) => Ok(idx),
        other => Err(Error::schema(
            operator,
            format!(
                "event-time column '{name}' has type {other}, but event time needs a timestamp column or int64 milliseconds since the epoch"
            ),
        )),
    }
}

/// Milliseconds per unit, as (multiplier, divisor).
fn unit_scale(unit: TimeUnit) -> (i64, i64) {
    match unit {
        TimeUnit::Second => (1000, 1),
        TimeUnit::Millisecond => (1, 1),
        TimeUnit::Microsecond => (1, 1000),
        TimeUnit::Nanosecond => (1, 1_000_000),
    }
}

/// Converts one value of a column of type `data_type` (Int64 ms or a
/// timestamp) to milliseconds, rounding towards negative infinity.
#[inline]
pub(crate) fn to_millis(value: i64, data_type: &DataType) -> i64 {
    match data_type {
        DataType::Timestamp(unit, _) => {
            let (mul, div) = unit_scale(*unit);
            value.saturating_mul(mul).div_euclid(div)
        }
        _ => value,
    }
}

/// Converts milliseconds to a value of `data_type` (Int64 ms or a
/// timestamp); seconds round towards negative infinity.
#[inline]
pub(crate) fn from_millis(ms: i64, data_type: &DataType) -> i64 {
    match data_type {
        DataType::Timestamp(unit, _) => {
            let (div, mul) = unit_scale(*unit);
            ms.saturating_mul(mul).div_euclid(div)
        }
        _ => ms,
    }
}

/// The raw `i64` values of an event-time column (`Int64` or a timestamp of
/// any unit), refusing nulls. `column_name` names it in the error.
pub(crate) fn raw_event_times<'a>(
    operator: &str,
    column: &'a ArrayRef,
    column_name: &str,
) -> Result<&'a [i64]> {
    if column.null_count() > 0 {
        return Err(Error::schema(
            operator,
            format!(
                "event-time column '{column_name}' holds a null event time in {} of {} rows",
                column.null_count(),
                column.len()
            ),
        ));
    }
    let values: &[i64] = match column.data_type() {
        DataType::Int64 => column.as_primitive::<Int64Type>().values(),
        DataType::Timestamp(TimeUnit::Second, _) => {
            column.as_primitive::<TimestampSecondType>().values()
        }
        DataType::Timestamp(TimeUnit::Millisecond, _) => {
            column.as_primitive::<TimestampMillisecondType>().values()
        }
        DataType::Timestamp(TimeUnit::Microsecond, _) => {
            column.as_primitive::<TimestampMicrosecondType>().values()
        }
        DataType::Timestamp(TimeUnit::Nanosecond, _) => {
            column.as_primitive::<TimestampNanosecondType>().values()
        }
        other => {
            return Err(Error::schema(
                operator,
                format!(
                    "event-time column '{column_name}' has type {other}, but event time needs a timestamp column or int64 milliseconds since the epoch"
                ),
            ))
        }
    };
    Ok(values)
}

/// Converts an event-time column to milliseconds into `out` (cleared first).
pub(crate) fn event_times_millis(
    operator: &str,
    column: &ArrayRef,
    column_name: &str,
    out: &mut Vec<i64>,
) -> Result<()> {
    let raw = raw_event_times(operator, column, column_name)?;
    out.clear();
    match column.data_type() {
        DataType::Timestamp(unit, _) if *unit != TimeUnit::Millisecond => {
            let (mul, div) = unit_scale(*unit);
            out.extend(raw.iter().map(|v| v.saturating_mul(mul).div_euclid(div)));
        }
        _ => out.extend_from_slice(raw),
    }
    Ok(())
}

/// What a keyed event-time operator reads of each batch first: the event
/// times of its column `time_idx` (named `time_column`) into `times`, as
/// [`event_times_millis`], and the hashes of its key columns `key_idx` into
/// `hashes`; returns the key columns. Errors name `operator`.
pub(crate) fn keyed_event_times(
    operator: &str,
    batch: &RecordBatch,
    (time_idx, time_column): (usize, &str),
    key_idx: &[usize],
    times: &mut Vec<i64>,
    hashes: &mut Vec<u64>,
) -> Result<Vec<ArrayRef>> {
    event_times_millis(operator, batch.column(time_idx), time_column, times)?;
    let key_cols = columns_at(batch, key_idx);
    hash_keys(&key_cols, hashes).for_operator(operator)?;
    Ok(key_cols)
}

/// Builds [`AssignTimestampsOperator`]s reading event time from `column`
/// with watermarks lagging `max_out_of_orderness_ms` behind the largest
/// timestamp seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AssignTimestampsFactory {
    pub column: String,
    pub max_out_of_orderness_ms: i64,
    /// FLIP-27 `withIdleness`: a split without a batch for this long stops
    /// holding the watermark back. `None`: never.
    pub idle_timeout_ms: Option<i64>,
}

impl AssignTimestampsFactory {
    /// A factory reading `column` with the given out-of-orderness bound.
    pub fn new(column: String, max_out_of_orderness_ms: i64) -> Self {
        AssignTimestampsFactory {
            column,
            max_out_of_orderness_ms,
            idle_timeout_ms: None,
        }
    }

    /// The same with an idle timeout (see the module documentation).
    pub fn with_idle_timeout(mut self, idle_timeout_ms: Option<i64>) -> Self {
        self.idle_timeout_ms = idle_timeout_ms;
        self
    }

    /// Validates the input schema at build time; the output schema is the
    /// input schema (batches pass through unchanged).
    pub fn output_schema(&self, operator: &str, input: &SchemaRef) -> Result<SchemaRef> {
        self.check_bound(operator)?;
        event_time_column(operator, input, &self.column)?;
        Ok(input.clone())
    }

    fn check_bound(&self, operator: &str) -> Result<()> {
        if self.max_out_of_orderness_ms < 0 {
            return Err(Error::graph(
                operator,
                format!(
                    "max_out_of_orderness must not be negative, got {} ms",
                    self.max_out_of_orderness_ms
                ),
            ));
        }
        if let Some(ms) = self.idle_timeout_ms.filter(|ms| *ms <= 0) {
            return Err(Error::graph(
                operator,
                format!("idle_timeout must be positive, got {ms} ms"),
            ));
        }
        Ok(())
    }
}

impl OperatorFactory for AssignTimestampsFactory {
    /// Its state (the largest timestamp) is rebuilt by replaying from before
    /// the record that carried it (FLINK-4120).
    fn recomputable(&self) -> bool {
        true
    }

    fn replayable_from_earlier(&self) -> bool {
        true
    }

    fn create(&self, ctx: &OperatorContext) -> Result<Box<dyn Operator>> {
        Ok(Box::new(AssignTimestampsOperator::new(self, ctx)?))
    }

    /// Every new subtask gets every old entry (see the module documentation).
    fn redistribution(&self) -> Redistribution {
        Redistribution::Union
    }
}

/// The event-time progress of one split (FLIP-27).
#[derive(Debug, Clone, Copy)]
struct SplitClock {
    id: u64,
    /// Largest timestamp of the split (ms), `i64::MIN` before its first.
    max_timestamp: i64,
    /// The epoch in which `max_timestamp` was last raised (FLINK-4120).
    max_epoch: u64,
    /// When the split last delivered a batch (or opened).
    last_active: Instant,
}

/// Assigns event time and generates watermarks; see the module documentation.
#[derive(Debug)]
pub struct AssignTimestampsOperator {
    name: String,
    column: String,
    bound: i64,
    /// Index of the column in the last schema seen (cached by pointer).
    binding: Option<(SchemaRef, usize)>,
    /// Largest timestamp seen (ms), `i64::MIN` before the first record.
    max_timestamp: i64,
    /// Last watermark emitted, `i64::MIN` before the first.
    last_emitted: i64,
    /// The last checkpoint whose barrier passed (FLINK-4120 epochs).
    epoch: u64,
    /// The epoch in which `max_timestamp` was last raised: replaying from
    /// that checkpoint rebuilds it (the null-state watermark).
    max_epoch: u64,
    idle_timeout: Option<Duration>,
    /// A source told the operator its splits: watermarks are per split.
    per_split: bool,
    /// The source's open splits, in its order.
    splits: Vec<SplitClock>,
    /// The split of the batches arriving now: set by the source's progress
    /// before each of its batches and kept until the next, so every batch an
    /// operator in between makes of the source's batch (a Python `flat_map`
    /// may make several) counts for that split.
    current: Option<u64>,
    /// A split the source no longer lists whose last batch is arriving
    /// now: it counts for the watermark after its batches, then leaves with
    /// the next progress (and is not checkpointed: the source finished it).
    finishing: Option<u64>,
    /// Every split is idle and the consumers were told (FLIP-27): the
    /// subtask does not hold back their watermark until its next batch.
    idle_announced: bool,
    /// Restored per-split timestamps, taken by the splits when they open
    /// (dropped once the source named its splits).
    restored_splits: Vec<(u64, i64)>,
}

impl AssignTimestampsOperator {
    /// An operator for the subtask described by `ctx`.
    pub fn new(factory: &AssignTimestampsFactory, ctx: &OperatorContext) -> Result<Self> {
        factory.check_bound(&ctx.name)?;
        Ok(AssignTimestampsOperator {
            name: ctx.name.clone(),
            column: factory.column.clone(),
            bound: factory.max_out_of_orderness_ms,
            binding: None,
            max_timestamp: i64::MIN,
            last_emitted: i64::MIN,
            epoch: 0,
            max_epoch: 0,
            idle_timeout: factory
                .idle_timeout_ms
                .map(|ms| Duration::from_millis(ms.max(0) as u64)),
            per_split: false,
            splits: Vec::new(),
            current: None,
            finishing: None,
            idle_announced: false,
            restored_splits: Vec::new(),
        })
    }

    /// The watermark of a largest timestamp.
    fn watermark_of(&self, max_timestamp: i64) -> i64 {
        max_timestamp
            .saturating_sub(self.bound)
            .saturating_sub(1)
            .min(MAX_WATERMARK - 1)
    }

    fn is_idle(&self, split: &SplitClock, now: Instant) -> bool {
        self.idle_timeout
            .is_some_and(|t| now.saturating_duration_since(split.last_active) >= t)
    }

    /// The watermark to emit now: per split, the smallest watermark of the
    /// splits that are not idle (`None` while one of them has no record
    /// yet, or all are idle); otherwise that of the largest timestamp.
    fn watermark_now(&self, now: Instant) -> Option<i64> {
        if !self.per_split {
            return self.current_watermark();
        }
        let mut min: Option<i64> = None;
        for split in &self.splits {
            if self.is_idle(split, now) {
                continue;
            }
            if split.max_timestamp == i64::MIN {
                return None;
            }
            let w = self.watermark_of(split.max_timestamp);
            min = Some(min.map_or(w, |m| m.min(w)));
        }
        min
    }

    fn advance(&mut self, now: Instant, out: &mut dyn Collector) -> Result<()> {
        if let Some(w) = self.watermark_now(now) {
            if w > self.last_emitted {
                self.last_emitted = w;
                out.emit_watermark(w)?;
            }
        }
        // A subtask whose splits are all idle is idle itself: its
        // consumers stop waiting for it (until its next batch).
        if !self.idle_announced
            && self.per_split
            && !self.splits.is_empty()
            && self.splits.iter().all(|s| self.is_idle(s, now))
        {
            self.idle_announced = true;
            out.emit_idle()?;
        }
        Ok(())
    }

    /// Makes `splits` follow the source's open splits (allocates only when
    /// they changed: a split opened or finished).
    fn sync_splits(&mut self, open: &[u64], now: Instant) {
        if self.splits.len() == open.len()
            && self.splits.iter().zip(open).all(|(s, id)| s.id == *id)
        {
            return;
        }
        let mut next = Vec::with_capacity(open.len() + 1);
        for &id in open {
            next.push(self.clock_of(id, now));
        }
        self.splits = next;
        self.restored_splits.clear();
    }

    /// The clock of split `id`: its own, a restored one, or a fresh one.
    fn clock_of(&self, id: u64, now: Instant) -> SplitClock {
        match self.splits.iter().find(|s| s.id == id) {
            Some(s) => *s,
            None => SplitClock {
                id,
                max_timestamp: self
                    .restored_splits
                    .iter()
                    .find(|(r, _)| *r == id)
                    .map_or(i64::MIN, |(_, ts)| *ts),
                max_epoch: self.epoch,
                last_active: now,
            },
        }
    }

    /// The largest event time seen so far (ms), if any.
    pub fn max_timestamp(&self) -> Option<i64> {
        (self.max_timestamp != i64::MIN).then_some(self.max_timestamp)
    }

    /// The watermark the timestamps seen so far allow, if any.
    pub fn current_watermark(&self) -> Option<i64> {
        self.max_timestamp().map(|m| self.watermark_of(m))
    }

    fn column_index(&mut self, schema: &SchemaRef) -> Result<usize> {
        if let Some((s, idx)) = &self.binding {
            if Arc::ptr_eq(s, schema) {
                return Ok(*idx);
            }
        }
        let idx = event_time_column(&self.name, schema, &self.column)?;
        self.binding = Some((schema.clone(), idx));
        Ok(idx)
    }
}

impl Operator for AssignTimestampsOperator {
    fn process_batch(
        &mut self,
        _input: usize,
        batch: RecordBatch,
        out: &mut dyn Collector,
    ) -> Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        let idx = self.column_index(batch.schema_ref())?;
        let column = batch.column(idx);
        let raw = raw_event_times(&self.name, column, &self.column)?;
        // The conversion to milliseconds is monotone, so the maximum of the
        // raw values converts to the maximum in milliseconds.
        let max_raw = raw.iter().copied().max().unwrap_or(i64::MIN);
        let max_ms = to_millis(max_raw, column.data_type());
        if max_ms > self.max_timestamp {
            self.max_timestamp = max_ms;
            self.max_epoch = self.epoch;
        }
        if self.idle_timeout.is_some() && !self.per_split {
            return Err(Error::graph(
                self.name.clone(),
                "idle_timeout works only right after a source (assign_timestamps directly \
                 on env.from_...(), at the source's parallelism): elsewhere nothing tells \
                 the operator that its input is idle",
            ));
        }
        let now = Instant::now();
        self.idle_announced = false;
        if let Some(id) = self.current {
            let epoch = self.epoch;
            if let Some(split) = self.splits.iter_mut().find(|s| s.id == id) {
                if max_ms > split.max_timestamp {
                    split.max_timestamp = max_ms;
                    split.max_epoch = epoch;
                }
                split.last_active = now;
            }
        }
        out.emit(batch)?;
        self.advance(now, out)
    }

    fn on_source_progress(
        &mut self,
        split: Option<u64>,
        open: &[u64],
        out: &mut dyn Collector,
    ) -> Result<()> {
        if !self.per_split && split.is_none() && open.is_empty() {
            // The source does not name its splits.
            return Ok(());
        }
        self.per_split = true;
        let now = Instant::now();
        // The batch of a split the source already retired (its last one)
        // still counts for the watermark after it; a split retired before
        // leaves now (`sync_splits`: the source no longer lists it).
        let finishing = split
            .filter(|id| !open.contains(id))
            .map(|id| self.clock_of(id, now));
        self.sync_splits(open, now);
        self.finishing = finishing.map(|clock| clock.id);
        if let Some(clock) = finishing {
            self.splits.push(clock);
        }
        self.current = split;
        if split.is_none() && self.idle_timeout.is_some() {
            self.advance(now, out)?;
        }
        Ok(())
    }

    fn process_watermark(&mut self, watermark: i64, out: &mut dyn Collector) -> Result<()> {
        if watermark == MAX_WATERMARK && self.last_emitted != MAX_WATERMARK {
            self.last_emitted = MAX_WATERMARK;
            return out.emit_watermark(MAX_WATERMARK);
        }
        Ok(())
    }

    fn state(&mut self) -> Option<&mut dyn CheckpointedState> {
        Some(self)
    }

    fn recompute(&mut self) -> Option<&mut dyn Recompute> {
        Some(self)
    }
}

impl CheckpointedState for AssignTimestampsOperator {
    fn snapshot_state(&mut self, _checkpoint_id: u64) -> Result<OperatorState> {
        let word = |ts: i64| ts as u64;
        let mut entries = Vec::with_capacity(1 + self.splits.len() + self.restored_splits.len());
        entries.push(encode_positions(&[SUBTASK_ENTRY, word(self.max_timestamp)]));
        for s in self.splits.iter().filter(|s| Some(s.id) != self.finishing) {
            entries.push(encode_positions(&[
                SPLIT_ENTRY,
                s.id,
                word(s.max_timestamp),
            ]));
        }
        // Restored splits the source has not named yet (no batch so far).
        for (id, ts) in &self.restored_splits {
            entries.push(encode_positions(&[SPLIT_ENTRY, *id, word(*ts)]));
        }
        Ok(OperatorState {
            operator: Some(StateBlob::Bytes(Arc::new(encode_entries(&entries)))),
            keyed: Vec::new(),
        })
    }

    fn restore_state(&mut self, state: OperatorState) -> Result<()> {
        if !state.keyed.is_empty() {
            return Err(Error::checkpoint(
                None,
                format!(
                    "operator '{}' (assign_timestamps) was given keyed state, which it never writes",
                    self.name
                ),
            ));
        }
        let Some(blob) = state.operator else {
            return Ok(());
        };
        let bytes = blob.to_bytes()?;
        let bad = |msg: String| {
            Error::checkpoint(
                None,
                format!(
                    "the state of operator '{}' (assign_timestamps) {msg}",
                    self.name
                ),
            )
        };
        if let Some(entries) = decode_entries(&bytes) {
            // The smallest largest timestamp of the old subtasks (one
            // subtask entry each): never above any of their watermarks.
            let mut floor: Option<i64> = None;
            for e in entries {
                let words = decode_positions(&e, e.len() / 8)
                    .filter(|w| !w.is_empty())
                    .ok_or_else(|| bad(format!("holds a malformed entry of {} bytes", e.len())))?;
                match (words[0], words.len()) {
                    (SUBTASK_ENTRY, 2) => {
                        let ts = words[1] as i64;
                        floor = Some(floor.map_or(ts, |f| f.min(ts)));
                    }
                    (SPLIT_ENTRY, 3) => {
                        let (id, ts) = (words[1], words[2] as i64);
                        // A split in several entries: the row groups of
                        // one file read by several old subtasks (each from
                        // its own place in the file), or a subtask that
                        // carried a restored entry before reading it. The
                        // split's remaining rows are read from the earliest
                        // of those places on, so it restarts from the
                        // smallest timestamp: never above what any of them
                        // had emitted.
                        match self.restored_splits.iter_mut().find(|(r, _)| *r == id) {
                            Some(r) => r.1 = r.1.min(ts),
                            None => self.restored_splits.push((id, ts)),
                        }
                    }
                    (kind, n) => {
                        return Err(bad(format!(
                            "holds an entry of kind {kind} with {n} words, which this build does \
                             not read"
                        )))
                    }
                }
            }
            if let Some(f) = floor {
                self.max_timestamp = self.max_timestamp.max(f);
            }
            return Ok(());
        }
        match bytes.split_first() {
            Some((&STATE_FORMAT_VERSION, body)) => {
                let ts: [u8; 8] = body
                    .try_into()
                    .map_err(|_| bad(format!("has {} bytes instead of 9", bytes.len())))?;
                self.max_timestamp = self.max_timestamp.max(i64::from_le_bytes(ts));
                Ok(())
            }
            Some((&version, _)) => Err(bad(format!(
                "has format version {version}, but this build reads version {STATE_FORMAT_VERSION}"
            ))),
            None => Err(bad("is empty".to_string())),
        }
    }
}

impl Recompute for AssignTimestampsOperator {
    fn null_state_watermark(&self, checkpoint_id: u64) -> Result<Option<u64>> {
        if self.per_split {
            // Every split's largest timestamp must be rebuilt.
            return Ok(Some(
                self.splits
                    .iter()
                    .filter(|s| s.max_timestamp != i64::MIN)
                    .map(|s| s.max_epoch)
                    .min()
                    .unwrap_or(checkpoint_id),
            ));
        }
        Ok(Some(if self.max_timestamp == i64::MIN {
            checkpoint_id
        } else {
            self.max_epoch
        }))
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
    use arrow::array::{Int64Array, StringArray, TimestampMicrosecondArray};

    #[derive(Default)]
    struct Recorder {
        batches: Vec<RecordBatch>,
        watermarks: Vec<i64>,
        idles: usize,
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
        fn emit_idle(&mut self) -> Result<()> {
            self.idles += 1;
            Ok(())
        }
    }

    fn ctx() -> OperatorContext {
        crate::operator::testing::context("ts", 0..128, 128)
    }

    fn batch(ts: Vec<Option<i64>>) -> RecordBatch {
        RecordBatch::try_from_iter(vec![("t", Arc::new(Int64Array::from(ts)) as ArrayRef)]).unwrap()
    }

    #[test]
    fn test_watermark_lags_max_timestamp_and_only_advances() {
        let f = AssignTimestampsFactory::new("t".into(), 10);
        let mut op = AssignTimestampsOperator::new(&f, &ctx()).unwrap();
        let mut out = Recorder::default();
        op.process_batch(0, batch(vec![Some(100), Some(50)]), &mut out)
            .unwrap();
        op.process_batch(0, batch(vec![Some(95)]), &mut out)
            .unwrap();
        op.process_batch(0, batch(vec![Some(120)]), &mut out)
            .unwrap();
        assert_eq!(out.watermarks, vec![89, 109]);
        assert_eq!(out.batches.len(), 3);
        // Upstream watermarks are ignored except the final one.
        op.process_watermark(5000, &mut out).unwrap();
        op.process_watermark(MAX_WATERMARK, &mut out).unwrap();
        assert_eq!(out.watermarks, vec![89, 109, MAX_WATERMARK]);
    }

    #[test]
    fn test_batches_pass_through_without_copy() {
        let f = AssignTimestampsFactory::new("t".into(), 0);
        let mut op = AssignTimestampsOperator::new(&f, &ctx()).unwrap();
        let mut out = Recorder::default();
        let b = batch(vec![Some(1)]);
        op.process_batch(0, b.clone(), &mut out).unwrap();
        assert!(Arc::ptr_eq(b.column(0), out.batches[0].column(0)));
    }

    #[test]
    fn test_units_convert_to_millis() {
        for (unit, raw, ms) in [
            (TimeUnit::Second, 3, 3000),
            (TimeUnit::Millisecond, 3, 3),
            (TimeUnit::Microsecond, 3_999, 3),
            (TimeUnit::Microsecond, -1, -1),
            (TimeUnit::Nanosecond, 7_000_001, 7),
        ] {
            assert_eq!(to_millis(raw, &DataType::Timestamp(unit, None)), ms);
        }
        let col: ArrayRef = Arc::new(TimestampMicrosecondArray::from(vec![5_000, 7_500]));
        let mut out = Vec::new();
        event_times_millis("ts", &col, "t", &mut out).unwrap();
        assert_eq!(out, vec![5, 7]);
    }

    #[test]
    fn test_bad_column_type_and_null_event_time_are_schema_errors() {
        let b = RecordBatch::try_from_iter(vec![(
            "s",
            Arc::new(StringArray::from(vec!["x"])) as ArrayRef,
        )])
        .unwrap();
        let err = AssignTimestampsFactory::new("s".into(), 0)
            .output_schema("ts", &b.schema())
            .unwrap_err();
        assert!(matches!(err, Error::Schema { .. }));
        assert!(err.to_string().contains("'s' has type Utf8"), "{err}");
        let err = AssignTimestampsFactory::new("x".into(), 0)
            .output_schema("ts", &b.schema())
            .unwrap_err();
        assert!(matches!(err, Error::Graph { .. }));
        let f = AssignTimestampsFactory::new("t".into(), 0);
        let mut op = AssignTimestampsOperator::new(&f, &ctx()).unwrap();
        let err = op
            .process_batch(0, batch(vec![Some(1), None]), &mut Recorder::default())
            .unwrap_err();
        assert!(matches!(err, Error::Schema { .. }));
        assert!(err.to_string().contains("operator 'ts'"), "{err}");
        assert!(err.to_string().contains("null event time"), "{err}");
    }

    #[test]
    fn test_restore_keeps_watermark_from_regressing() {
        let f = AssignTimestampsFactory::new("t".into(), 5);
        let mut op = AssignTimestampsOperator::new(&f, &ctx()).unwrap();
        op.process_batch(0, batch(vec![Some(100)]), &mut Recorder::default())
            .unwrap();
        let snap = op.snapshot_state(1).unwrap();
        let mut fresh = AssignTimestampsOperator::new(&f, &ctx()).unwrap();
        fresh.restore_state(snap).unwrap();
        let mut out = Recorder::default();
        fresh
            .process_batch(0, batch(vec![Some(10)]), &mut out)
            .unwrap();
        // The restored watermark is re-emitted once, never a smaller one.
        assert_eq!(out.watermarks, vec![94]);
        let err = fresh
            .restore_state(OperatorState {
                operator: Some(StateBlob::Bytes(Arc::new(vec![9]))),
                keyed: vec![],
            })
            .unwrap_err();
        assert!(err.to_string().contains("format version 9"), "{err}");
    }

    fn progress(op: &mut AssignTimestampsOperator, split: Option<u64>, open: &[u64]) -> Vec<i64> {
        progress_out(op, split, open).watermarks
    }

    fn progress_out(
        op: &mut AssignTimestampsOperator,
        split: Option<u64>,
        open: &[u64],
    ) -> Recorder {
        let mut out = Recorder::default();
        op.on_source_progress(split, open, &mut out).unwrap();
        out
    }

    #[test]
    fn test_per_split_watermark_is_the_minimum_of_the_splits() {
        let f = AssignTimestampsFactory::new("t".into(), 0);
        let mut op = AssignTimestampsOperator::new(&f, &ctx()).unwrap();
        let mut out = Recorder::default();
        // Split 7 runs far ahead of split 3: only split 3 moves the watermark.
        progress(&mut op, Some(7), &[3, 7]);
        op.process_batch(0, batch(vec![Some(1000)]), &mut out)
            .unwrap();
        assert!(out.watermarks.is_empty(), "split 3 has no record yet");
        progress(&mut op, Some(3), &[3, 7]);
        op.process_batch(0, batch(vec![Some(10)]), &mut out)
            .unwrap();
        progress(&mut op, Some(7), &[3, 7]);
        op.process_batch(0, batch(vec![Some(2000)]), &mut out)
            .unwrap();
        progress(&mut op, Some(3), &[3, 7]);
        op.process_batch(0, batch(vec![Some(20)]), &mut out)
            .unwrap();
        assert_eq!(out.watermarks, vec![9, 19]);
        // The last batch of split 3 (the source no longer lists it) still
        // counts, then split 3 no longer holds the watermark back.
        progress(&mut op, Some(3), &[7]);
        op.process_batch(0, batch(vec![Some(30)]), &mut out)
            .unwrap();
        progress(&mut op, Some(7), &[7]);
        op.process_batch(0, batch(vec![Some(2001)]), &mut out)
            .unwrap();
        assert_eq!(out.watermarks, vec![9, 19, 29, 2000]);
    }

    #[test]
    fn test_every_batch_up_to_the_next_progress_counts_for_its_split() {
        // An operator in between (a Python flat_map) makes two batches of
        // one source batch: both are of the split the progress named.
        let f = AssignTimestampsFactory::new("t".into(), 0);
        let mut op = AssignTimestampsOperator::new(&f, &ctx()).unwrap();
        let mut out = Recorder::default();
        progress(&mut op, Some(3), &[3, 7]);
        op.process_batch(0, batch(vec![Some(10)]), &mut out)
            .unwrap();
        op.process_batch(0, batch(vec![Some(50)]), &mut out)
            .unwrap();
        progress(&mut op, Some(7), &[3, 7]);
        op.process_batch(0, batch(vec![Some(100)]), &mut out)
            .unwrap();
        assert_eq!(out.watermarks, vec![49], "split 3's clock is at 50");
        // The last source batch of split 3, made into two: both count, and
        // the finished split is not checkpointed.
        progress(&mut op, Some(3), &[7]);
        op.process_batch(0, batch(vec![Some(60)]), &mut out)
            .unwrap();
        op.process_batch(0, batch(vec![Some(70)]), &mut out)
            .unwrap();
        assert_eq!(out.watermarks, vec![49, 59, 69]);
        let state = op.snapshot_state(1).unwrap();
        let Some(StateBlob::Bytes(bytes)) = state.operator else {
            panic!("no operator state");
        };
        let splits: Vec<u64> = decode_entries(&bytes)
            .unwrap()
            .iter()
            .map(|e| decode_positions(e, e.len() / 8).unwrap())
            .filter(|w| w[0] == SPLIT_ENTRY)
            .map(|w| w[1])
            .collect();
        assert_eq!(splits, vec![7]);
        // Then it no longer holds the watermark back.
        progress(&mut op, Some(7), &[7]);
        op.process_batch(0, batch(vec![Some(200)]), &mut out)
            .unwrap();
        assert_eq!(out.watermarks, vec![49, 59, 69, 199]);
    }

    #[test]
    fn test_idle_split_stops_holding_the_watermark_back_until_it_delivers() {
        // Generous against a busy machine: the steps between two sleeps
        // must take less than the timeout.
        let f = AssignTimestampsFactory::new("t".into(), 0).with_idle_timeout(Some(200));
        let mut op = AssignTimestampsOperator::new(&f, &ctx()).unwrap();
        let mut out = Recorder::default();
        progress(&mut op, Some(1), &[1, 2]);
        op.process_batch(0, batch(vec![Some(100)]), &mut out)
            .unwrap();
        assert!(
            progress(&mut op, None, &[1, 2]).is_empty(),
            "split 2 not idle yet"
        );
        std::thread::sleep(Duration::from_millis(250));
        // Split 2 never delivered and split 1 went quiet too: the subtask
        // is idle and says so, once.
        let idle = progress_out(&mut op, None, &[1, 2]);
        assert!(idle.watermarks.is_empty());
        assert_eq!(idle.idles, 1);
        assert_eq!(progress_out(&mut op, None, &[1, 2]).idles, 0);
        progress(&mut op, Some(1), &[1, 2]);
        op.process_batch(0, batch(vec![Some(200)]), &mut out)
            .unwrap();
        // Split 1 is active again, split 2 is still idle.
        assert_eq!(out.watermarks, vec![199]);
        // Split 2 delivers: it counts again (its records below the
        // watermark are late; the watermark never regresses).
        progress(&mut op, Some(2), &[1, 2]);
        op.process_batch(0, batch(vec![Some(150)]), &mut out)
            .unwrap();
        progress(&mut op, Some(1), &[1, 2]);
        op.process_batch(0, batch(vec![Some(300)]), &mut out)
            .unwrap();
        assert_eq!(out.watermarks, vec![199]);
        // Split 1 goes quiet for the timeout: split 2 alone moves it.
        progress(&mut op, Some(2), &[1, 2]);
        op.process_batch(0, batch(vec![Some(260)]), &mut out)
            .unwrap();
        assert_eq!(out.watermarks, vec![199, 259]);
        std::thread::sleep(Duration::from_millis(250));
        progress(&mut op, Some(2), &[1, 2]);
        op.process_batch(0, batch(vec![Some(280)]), &mut out)
            .unwrap();
        assert_eq!(out.watermarks, vec![199, 259, 279]);
    }

    #[test]
    fn test_idle_timeout_away_from_a_source_is_refused() {
        let f = AssignTimestampsFactory::new("t".into(), 0).with_idle_timeout(Some(30));
        let mut op = AssignTimestampsOperator::new(&f, &ctx()).unwrap();
        let err = op
            .process_batch(0, batch(vec![Some(1)]), &mut Recorder::default())
            .unwrap_err();
        assert!(matches!(err, Error::Graph { .. }), "{err}");
        assert!(err.to_string().contains("operator 'ts'"), "{err}");
        assert!(err.to_string().contains("right after a source"), "{err}");
        let err = AssignTimestampsFactory::new("t".into(), 0)
            .with_idle_timeout(Some(0))
            .output_schema("ts", &batch(vec![Some(1)]).schema())
            .unwrap_err();
        assert!(
            err.to_string().contains("idle_timeout must be positive"),
            "{err}"
        );
    }

    #[test]
    fn test_a_split_several_old_subtasks_read_restarts_from_the_smallest_timestamp() {
        // The row groups of file 3 were dealt to two subtasks: one read its
        // first group up to 100, the other its second group up to 900. The
        // subtask that now reads what is left of both starts with the first
        // group's rest, so the file's watermark restarts from 100.
        let f = AssignTimestampsFactory::new("t".into(), 0);
        let mut old = Vec::new();
        for ts in [100, 900] {
            let mut op = AssignTimestampsOperator::new(&f, &ctx()).unwrap();
            progress(&mut op, Some(3), &[3]);
            op.process_batch(0, batch(vec![Some(ts)]), &mut Recorder::default())
                .unwrap();
            old.push(
                op.snapshot_state(1)
                    .unwrap()
                    .operator
                    .unwrap()
                    .to_bytes()
                    .unwrap(),
            );
        }
        for order in [[0, 1], [1, 0]] {
            let views: Vec<Option<&[u8]>> =
                order.iter().map(|&i| Some(old[i].as_slice())).collect();
            let all = encode_entries(&crate::state::union_entries(&views).unwrap());
            let mut op = AssignTimestampsOperator::new(&f, &ctx()).unwrap();
            op.restore_state(OperatorState {
                operator: Some(StateBlob::Bytes(Arc::new(all))),
                keyed: vec![],
            })
            .unwrap();
            let mut out = Recorder::default();
            progress(&mut op, Some(3), &[3]);
            op.process_batch(0, batch(vec![Some(101)]), &mut out)
                .unwrap();
            assert_eq!(out.watermarks, vec![100], "entries in order {order:?}");
        }
    }

    #[test]
    fn test_union_restore_starts_from_the_smallest_old_watermark_and_keeps_splits() {
        let f = AssignTimestampsFactory::new("t".into(), 0);
        let mut old = Vec::new();
        for (split, ts) in [(0u64, 500), (1, 100)] {
            let mut op = AssignTimestampsOperator::new(&f, &ctx()).unwrap();
            progress(&mut op, Some(split), &[split]);
            op.process_batch(0, batch(vec![Some(ts)]), &mut Recorder::default())
                .unwrap();
            let st = op.snapshot_state(1).unwrap();
            old.push(st.operator.unwrap().to_bytes().unwrap());
        }
        let views: Vec<Option<&[u8]>> = old.iter().map(|b| Some(b.as_slice())).collect();
        let all = encode_entries(&crate::state::union_entries(&views).unwrap());
        let restore = |op: &mut AssignTimestampsOperator| {
            op.restore_state(OperatorState {
                operator: Some(StateBlob::Bytes(Arc::new(all.clone()))),
                keyed: vec![],
            })
            .unwrap()
        };
        // Not after a source: the smallest of the old largest timestamps.
        let mut plain = AssignTimestampsOperator::new(&f, &ctx()).unwrap();
        restore(&mut plain);
        assert_eq!(plain.max_timestamp(), Some(100));
        // After a source reading both splits: each split's own timestamp.
        let mut op = AssignTimestampsOperator::new(&f, &ctx()).unwrap();
        restore(&mut op);
        let mut out = Recorder::default();
        progress(&mut op, Some(0), &[0, 1]);
        op.process_batch(0, batch(vec![Some(10)]), &mut out)
            .unwrap();
        assert_eq!(out.watermarks, vec![99]);
        // A snapshot before the source named its splits keeps them.
        let mut early = AssignTimestampsOperator::new(&f, &ctx()).unwrap();
        restore(&mut early);
        let again = early.snapshot_state(2).unwrap();
        let mut later = AssignTimestampsOperator::new(&f, &ctx()).unwrap();
        later.restore_state(again).unwrap();
        let mut out = Recorder::default();
        progress(&mut later, Some(1), &[0, 1]);
        later
            .process_batch(0, batch(vec![Some(10)]), &mut out)
            .unwrap();
        assert_eq!(out.watermarks, vec![99]);
    }
}
