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
//! # State
//!
//! The largest timestamp seen, as non-keyed operator state: byte 0 is the
//! format version ([`STATE_FORMAT_VERSION`]), bytes 1..9 the timestamp as a
//! little-endian `i64` (`i64::MIN` when nothing was seen). After a restore
//! the watermark does not regress, and the first batch re-emits the restored
//! watermark so that the operators downstream (which restart without a
//! watermark) learn it again.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use arrow::datatypes::{
    DataType, Int64Type, Schema, SchemaRef, TimeUnit, TimestampMicrosecondType,
    TimestampMillisecondType, TimestampNanosecondType, TimestampSecondType,
};

use crate::error::{Error, Result};
use crate::event::MAX_WATERMARK;
use crate::operator::{Collector, Operator, OperatorContext, OperatorFactory};
use crate::state::{OperatorState, StateBlob};

/// The version byte that opens the serialized state.
pub const STATE_FORMAT_VERSION: u8 = 1;

/// Checks that `name` is a usable event-time column of `schema` and returns
/// its index (shared with the window operator).
pub(crate) fn event_time_column(schema: &Schema, name: &str) -> Result<usize> {
    let idx = schema.index_of(name).map_err(|_| {
        Error::graph(
            "",
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
            "",
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
pub(crate) fn raw_event_times<'a>(column: &'a ArrayRef, column_name: &str) -> Result<&'a [i64]> {
    if column.null_count() > 0 {
        return Err(Error::schema(
            "",
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
                "",
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
    column: &ArrayRef,
    column_name: &str,
    out: &mut Vec<i64>,
) -> Result<()> {
    let raw = raw_event_times(column, column_name)?;
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

/// Builds [`AssignTimestampsOperator`]s reading event time from `column`
/// with watermarks lagging `max_out_of_orderness_ms` behind the largest
/// timestamp seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AssignTimestampsFactory {
    pub column: String,
    pub max_out_of_orderness_ms: i64,
}

impl AssignTimestampsFactory {
    /// A factory reading `column` with the given out-of-orderness bound.
    pub fn new(column: String, max_out_of_orderness_ms: i64) -> Self {
        AssignTimestampsFactory {
            column,
            max_out_of_orderness_ms,
        }
    }

    /// Validates the input schema at build time; the output schema is the
    /// input schema (batches pass through unchanged).
    pub fn output_schema(&self, input: &SchemaRef) -> Result<SchemaRef> {
        self.check_bound()?;
        event_time_column(input, &self.column)?;
        Ok(input.clone())
    }

    fn check_bound(&self) -> Result<()> {
        if self.max_out_of_orderness_ms < 0 {
            return Err(Error::graph(
                "",
                format!(
                    "max_out_of_orderness must not be negative, got {} ms",
                    self.max_out_of_orderness_ms
                ),
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
}

impl AssignTimestampsOperator {
    /// An operator for the subtask described by `ctx`.
    pub fn new(factory: &AssignTimestampsFactory, ctx: &OperatorContext) -> Result<Self> {
        factory
            .check_bound()
            .map_err(|e| e.in_operator(&ctx.name))?;
        Ok(AssignTimestampsOperator {
            name: ctx.name.clone(),
            column: factory.column.clone(),
            bound: factory.max_out_of_orderness_ms,
            binding: None,
            max_timestamp: i64::MIN,
            last_emitted: i64::MIN,
            epoch: 0,
            max_epoch: 0,
        })
    }

    /// The largest event time seen so far (ms), if any.
    pub fn max_timestamp(&self) -> Option<i64> {
        (self.max_timestamp != i64::MIN).then_some(self.max_timestamp)
    }

    /// The watermark the timestamps seen so far allow, if any.
    pub fn current_watermark(&self) -> Option<i64> {
        self.max_timestamp().map(|m| {
            m.saturating_sub(self.bound)
                .saturating_sub(1)
                .min(MAX_WATERMARK - 1)
        })
    }

    fn column_index(&mut self, schema: &SchemaRef) -> Result<usize> {
        if let Some((s, idx)) = &self.binding {
            if Arc::ptr_eq(s, schema) {
                return Ok(*idx);
            }
        }
        let idx = event_time_column(schema, &self.column).map_err(|e| e.in_operator(&self.name))?;
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
        let raw = raw_event_times(column, &self.column).map_err(|e| e.in_operator(&self.name))?;
        // The conversion to milliseconds is monotone, so the maximum of the
        // raw values converts to the maximum in milliseconds.
        let max_raw = raw.iter().copied().max().unwrap_or(i64::MIN);
        let max_ms = to_millis(max_raw, column.data_type());
        if max_ms > self.max_timestamp {
            self.max_timestamp = max_ms;
            self.max_epoch = self.epoch;
        }
        out.emit(batch)?;
        if let Some(w) = self.current_watermark() {
            if w > self.last_emitted {
                self.last_emitted = w;
                out.emit_watermark(w)?;
            }
        }
        Ok(())
    }

    fn null_state_watermark(&self, checkpoint_id: u64) -> Result<Option<u64>> {
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

    fn process_watermark(&mut self, watermark: i64, out: &mut dyn Collector) -> Result<()> {
        if watermark == MAX_WATERMARK && self.last_emitted != MAX_WATERMARK {
            self.last_emitted = MAX_WATERMARK;
            return out.emit_watermark(MAX_WATERMARK);
        }
        Ok(())
    }

    fn snapshot_state(&mut self, _checkpoint_id: u64) -> Result<OperatorState> {
        let mut bytes = Vec::with_capacity(9);
        bytes.push(STATE_FORMAT_VERSION);
        bytes.extend_from_slice(&self.max_timestamp.to_le_bytes());
        Ok(OperatorState {
            operator: Some(StateBlob::Bytes(Arc::new(bytes))),
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use arrow::array::{Int64Array, StringArray, TimestampMicrosecondArray};

    #[derive(Default)]
    struct Recorder {
        batches: Vec<RecordBatch>,
        watermarks: Vec<i64>,
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
    }

    fn ctx() -> OperatorContext {
        OperatorContext {
            name: "ts".to_string(),
            uid: "ts".to_string(),
            subtask_index: 0,
            parallelism: 1,
            max_parallelism: 128,
            key_groups: 0..128,
            attempt: 0,
        }
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
        event_times_millis(&col, "t", &mut out).unwrap();
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
            .output_schema(&b.schema())
            .unwrap_err();
        assert!(matches!(err, Error::Schema { .. }));
        assert!(err.to_string().contains("'s' has type Utf8"), "{err}");
        let err = AssignTimestampsFactory::new("x".into(), 0)
            .output_schema(&b.schema())
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
}
