//! `from_sequence(start, end)`: an int64 column `value` with
//! `start <= value < end`, split into contiguous ranges per subtask. The
//! offset is the next value to emit.

use std::sync::Arc;

use arrow::array::{ArrayRef, Int64Array};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;

use super::{decode_positions, encode_positions, SourceFactory, SourcePoll, SourceReader};
use crate::error::{Error, Result};
use crate::operator::OperatorContext;

/// Factory of sequence readers.
pub struct SequenceSource {
    start: i64,
    end: i64,
    schema: SchemaRef,
}

impl SequenceSource {
    /// A sequence over `[start, end)`.
    pub fn new(start: i64, end: i64) -> Self {
        SequenceSource {
            start,
            end: end.max(start),
            schema: Arc::new(Schema::new(vec![Field::new(
                "value",
                DataType::Int64,
                false,
            )])),
        }
    }
}

impl SourceFactory for SequenceSource {
    fn create(&self, ctx: &OperatorContext, batch_size: usize) -> Result<Box<dyn SourceReader>> {
        let total = (self.end as i128 - self.start as i128) as u128;
        let p = ctx.parallelism.max(1) as u128;
        let i = ctx.subtask_index as u128;
        let lo = self.start as i128 + (total * i / p) as i128;
        let hi = self.start as i128 + (total * (i + 1) / p) as i128;
        Ok(Box::new(SequenceReader {
            next: lo as i64,
            end: hi as i64,
            split_start: lo as i64,
            batch_size: batch_size.max(1) as i64,
            schema: self.schema.clone(),
        }))
    }

    fn schema(&self) -> Option<SchemaRef> {
        Some(self.schema.clone())
    }
}

/// One subtask's share of the sequence.
pub struct SequenceReader {
    next: i64,
    end: i64,
    split_start: i64,
    batch_size: i64,
    schema: SchemaRef,
}

impl SourceReader for SequenceReader {
    fn poll_next(&mut self) -> Result<SourcePoll> {
        if self.next >= self.end {
            return Ok(SourcePoll::End);
        }
        let hi = self.next.saturating_add(self.batch_size).min(self.end);
        let values: ArrayRef = Arc::new(Int64Array::from_iter_values(self.next..hi));
        self.next = hi;
        Ok(SourcePoll::Batch(RecordBatch::try_new(
            self.schema.clone(),
            vec![values],
        )?))
    }

    fn offset(&self) -> Vec<u8> {
        encode_positions(&[self.next as u64])
    }

    fn seek(&mut self, offset: &[u8]) -> Result<()> {
        let pos = decode_positions(offset, 1)
            .ok_or_else(|| Error::checkpoint(None, "the sequence source's offset is malformed"))?;
        let pos = pos[0] as i64;
        if pos < self.split_start || pos > self.end {
            return Err(Error::checkpoint(
                None,
                format!(
                    "the sequence source's checkpointed offset {pos} lies outside its split [{}, {})",
                    self.split_start, self.end
                ),
            ));
        }
        self.next = pos;
        Ok(())
    }
}
