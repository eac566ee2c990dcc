//! A collector that records what an operator emits, the context an
//! operator is opened with, and what the operators' unit tests show and
//! split of their batches and state.

#![allow(clippy::unwrap_used)]

use std::ops::Range;
use std::sync::Arc;

use arrow::array::{ArrayRef, BooleanArray, Int64Array, StringArray};
use arrow::compute::filter_record_batch;
use arrow::datatypes::Schema;
use arrow::record_batch::RecordBatch;
use arrow::util::display::array_value_to_string;

use super::{Collector, Operator, OperatorContext};
use crate::error::Result;
use crate::event::MAX_WATERMARK;
use crate::expr::{Aggregate, Expr};
use crate::keygroup::{hash_keys, key_group};
use crate::operator::window::WindowedAggs;
use crate::state::{OperatorState, StateBlob};

/// Everything an operator emitted: batches, watermarks and side-port
/// batches (with their port).
#[derive(Default)]
pub(crate) struct Recorder {
    pub batches: Vec<RecordBatch>,
    pub watermarks: Vec<i64>,
    pub side: Vec<(u8, RecordBatch)>,
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
        self.side.push((port, batch));
        Ok(())
    }
}

/// The context of the only subtask of operator `name` (parallelism 1,
/// `max_parallelism` key groups), owning `key_groups`.
pub(crate) fn context(
    name: &str,
    key_groups: Range<usize>,
    max_parallelism: usize,
) -> OperatorContext {
    OperatorContext {
        name: name.to_string(),
        uid: name.to_string(),
        subtask_index: 0,
        parallelism: 1,
        max_parallelism,
        key_groups,
        attempt: 0,
    }
}

/// The keyed state `state` (a snapshot) as serialized blobs, split by key
/// group into one restorable state per range (a restore at another
/// parallelism).
pub(crate) fn split_keyed(state: &OperatorState, ranges: &[Range<usize>]) -> Vec<OperatorState> {
    let blobs: Vec<(u32, Vec<u8>)> = state
        .keyed
        .iter()
        .map(|(kg, b)| (*kg, b.to_bytes().unwrap().as_ref().clone()))
        .collect();
    ranges
        .iter()
        .map(|range| OperatorState {
            operator: None,
            keyed: blobs
                .iter()
                .filter(|(kg, _)| range.contains(&(*kg as usize)))
                .map(|(kg, b)| (*kg, StateBlob::Bytes(Arc::new(b.clone()))))
                .collect(),
        })
        .collect()
}

impl Recorder {
    /// The batches emitted to side port `port`, in order.
    pub fn on_port(&self, port: u8) -> Vec<RecordBatch> {
        self.side
            .iter()
            .filter(|(p, _)| *p == port)
            .map(|(_, b)| b.clone())
            .collect()
    }
}

/// The field names of `schema`, in order.
pub(crate) fn field_names(schema: &Schema) -> Vec<String> {
    schema.fields().iter().map(|f| f.name().clone()).collect()
}

/// Every row of `batches` as the display strings of its cells.
pub(crate) fn display_cells(batches: &[RecordBatch]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for b in batches {
        for r in 0..b.num_rows() {
            out.push(
                b.columns()
                    .iter()
                    .map(|c| array_value_to_string(c, r).unwrap())
                    .collect(),
            );
        }
    }
    out
}

/// Every row of `batches` as the display strings of its cells, joined by
/// spaces.
pub(crate) fn display_rows(batches: &[RecordBatch]) -> Vec<String> {
    display_cells(batches)
        .into_iter()
        .map(|cells| cells.join(" "))
        .collect()
}

/// Restores `state` into `op` and sends it the last watermark: the rows
/// it fires, displayed (as [`display_rows`]) and sorted.
pub(crate) fn fire_restored(op: &mut dyn Operator, state: OperatorState) -> Vec<String> {
    op.state().unwrap().restore_state(state).unwrap();
    let mut out = Recorder::default();
    op.process_watermark(MAX_WATERMARK, &mut out).unwrap();
    let mut rows = display_rows(&out.batches);
    rows.sort();
    rows
}

/// The rows of `batch` whose key (column `key`) is in the key groups
/// `range` of `max_parallelism`: what a subtask owning them reads.
pub(crate) fn rows_in_key_groups(
    batch: &RecordBatch,
    key: usize,
    range: &Range<usize>,
    max_parallelism: usize,
) -> RecordBatch {
    let mut hashes = Vec::new();
    hash_keys(&[batch.column(key).clone()], &mut hashes).unwrap();
    let mask: Vec<bool> = hashes
        .iter()
        .map(|h| range.contains(&key_group(*h, max_parallelism)))
        .collect();
    filter_record_batch(batch, &BooleanArray::from(mask)).unwrap()
}

/// `aggregates` ((output name, function, arguments)) per key `k` and window
/// over event time `t`, late rows to the late port, the input schema not
/// known: what the window multi-aggregates' tests compute.
pub(crate) fn windowed_aggs(aggregates: Vec<(&str, &str, Vec<Expr>)>) -> WindowedAggs {
    WindowedAggs {
        keys: vec!["k".to_string()],
        time_column: "t".to_string(),
        aggregates: aggregates
            .into_iter()
            .map(|(name, f, args)| (name.to_string(), Aggregate::new(f, args).unwrap()))
            .collect(),
        late_output: true,
        input: None,
    }
}

/// A batch of keys `k`, event times `t` (ms) and values `v`.
pub(crate) fn key_time_value_batch(k: Vec<&str>, t: Vec<i64>, v: Vec<Option<i64>>) -> RecordBatch {
    RecordBatch::try_from_iter(vec![
        ("k", Arc::new(StringArray::from(k)) as ArrayRef),
        ("t", Arc::new(Int64Array::from(t)) as ArrayRef),
        ("v", Arc::new(Int64Array::from(v)) as ArrayRef),
    ])
    .unwrap()
}
