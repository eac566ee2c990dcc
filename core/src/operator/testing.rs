//! A collector that records what an operator emits, and the context an
//! operator is opened with, for the operators' unit tests.

#![allow(clippy::unwrap_used)]

use std::ops::Range;
use std::sync::Arc;

use arrow::record_batch::RecordBatch;

use super::{Collector, OperatorContext};
use crate::error::Result;
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
