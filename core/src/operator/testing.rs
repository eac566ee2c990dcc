//! A collector that records what an operator emits, for the operators'
//! unit tests.

#![allow(clippy::unwrap_used)]

use arrow::record_batch::RecordBatch;

use super::Collector;
use crate::error::Result;

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
