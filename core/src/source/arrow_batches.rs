//! A source over in-memory Arrow batches (`from_arrow`, `from_collection`).
//!
//! Subtask i of p reads batches i, i+p, i+2p, ... ; its offset is the number
//! of its batches already emitted, so replay is exact.

use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;

use super::{decode_positions, encode_positions, SourceFactory, SourcePoll, SourceReader};
use crate::error::{Error, Result};
use crate::operator::OperatorContext;

/// Factory of [`ArrowBatchesReader`]s sharing one list of batches.
pub struct ArrowBatchesSource {
    batches: Arc<Vec<RecordBatch>>,
    schema: SchemaRef,
}

impl ArrowBatchesSource {
    /// A source over `batches`, all of which must have `schema`.
    pub fn new(batches: Vec<RecordBatch>, schema: SchemaRef) -> Result<Self> {
        for (i, b) in batches.iter().enumerate() {
            if b.schema().fields() != schema.fields() {
                return Err(Error::schema(
                    "",
                    format!(
                        "batch {i} of the source has schema {:?} but the source's schema is {:?}",
                        b.schema(),
                        schema
                    ),
                ));
            }
        }
        Ok(ArrowBatchesSource {
            batches: Arc::new(batches),
            schema,
        })
    }
}

impl SourceFactory for ArrowBatchesSource {
    fn create(&self, ctx: &OperatorContext, _batch_size: usize) -> Result<Box<dyn SourceReader>> {
        Ok(Box::new(ArrowBatchesReader {
            batches: self.batches.clone(),
            subtask: ctx.subtask_index,
            parallelism: ctx.parallelism.max(1),
            emitted: 0,
        }))
    }

    fn schema(&self) -> Option<SchemaRef> {
        Some(self.schema.clone())
    }
}

/// One subtask's reader.
pub struct ArrowBatchesReader {
    batches: Arc<Vec<RecordBatch>>,
    subtask: usize,
    parallelism: usize,
    emitted: u64,
}

impl SourceReader for ArrowBatchesReader {
    fn poll_next(&mut self) -> Result<SourcePoll> {
        let idx = self.subtask + self.emitted as usize * self.parallelism;
        match self.batches.get(idx) {
            Some(b) => {
                self.emitted += 1;
                Ok(SourcePoll::Batch(b.clone()))
            }
            None => Ok(SourcePoll::End),
        }
    }

    fn offset(&self) -> Vec<u8> {
        encode_positions(&[self.emitted])
    }

    fn seek(&mut self, offset: &[u8]) -> Result<()> {
        let pos = decode_positions(offset, 1)
            .ok_or_else(|| Error::checkpoint(None, "the in-memory source's offset is malformed"))?;
        let mine = self
            .batches
            .len()
            .saturating_sub(self.subtask)
            .div_ceil(self.parallelism);
        if pos[0] as usize > mine {
            return Err(Error::checkpoint(
                None,
                format!(
                    "the in-memory source of subtask {} has {mine} batches, shorter than its checkpointed offset {}",
                    self.subtask, pos[0]
                ),
            ));
        }
        self.emitted = pos[0];
        Ok(())
    }
}
