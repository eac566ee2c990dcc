//! A source over in-memory Arrow batches (`from_arrow`, `from_collection`).
//!
//! Subtask i of p reads batches i, i+p, i+2p, ... ; its offset is an entry
//! list (FLIP-147 redistribution) with one entry `(first, step, emitted)`
//! per stride of batches not yet emitted to its end, so replay is exact and
//! the strides left over can be dealt to the subtasks of another
//! parallelism. Offsets of older checkpoints (the number of batches the
//! subtask emitted) still restore at the same parallelism. A subtask given
//! several strides reads them interleaved, a batch of each in turn, each
//! named by its first batch (DESIGN.md "Event time per split").

use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;

use super::{
    decode_positions, encode_positions, next_split, SourceFactory, SourcePoll, SourceReader,
};
use crate::error::{Error, Result};
use crate::operator::OperatorContext;
use crate::state::{decode_entries, encode_entries, Redistribution};

/// Factory of [`ArrowBatchesReader`]s sharing one list of batches.
pub struct ArrowBatchesSource {
    batches: Arc<Vec<RecordBatch>>,
    schema: SchemaRef,
}

impl ArrowBatchesSource {
    /// A source over `batches`, all of which must have `schema`.
    pub fn new(operator: &str, batches: Vec<RecordBatch>, schema: SchemaRef) -> Result<Self> {
        for (i, b) in batches.iter().enumerate() {
            if b.schema().fields() != schema.fields() {
                return Err(Error::schema(
                    operator,
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
        let mut reader = ArrowBatchesReader {
            batches: self.batches.clone(),
            strides: Vec::new(),
            open: Vec::new(),
            last: None,
            own: Stride {
                first: ctx.subtask_index as u64,
                step: ctx.parallelism.max(1) as u64,
                emitted: 0,
            },
        };
        reader.set_strides(vec![reader.own]);
        Ok(Box::new(reader))
    }

    fn schema(&self) -> Option<SchemaRef> {
        Some(self.schema.clone())
    }

    /// Every unfinished stride is an entry `(first, step, emitted)`.
    fn redistribution(&self) -> Redistribution {
        Redistribution::EvenSplit
    }
}

/// A split of the batches: `first, first + step, ...`, of which the first
/// `emitted` were emitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stride {
    first: u64,
    step: u64,
    emitted: u64,
}

impl Stride {
    /// The index of the next batch to emit.
    fn next(&self) -> u64 {
        self.first
            .saturating_add(self.emitted.saturating_mul(self.step))
    }

    /// How many batches of `len` the stride holds.
    fn len(&self, len: usize) -> u64 {
        (len as u64).saturating_sub(self.first).div_ceil(self.step)
    }
}

/// One subtask's reader.
pub struct ArrowBatchesReader {
    batches: Arc<Vec<RecordBatch>>,
    /// The strides not emitted to their end.
    strides: Vec<Stride>,
    /// `open[i]` is the split id (`first`) of `strides[i]`.
    open: Vec<u64>,
    /// The stride of the last batch.
    last: Option<u64>,
    /// The subtask's own stride of a fresh start (for older offsets).
    own: Stride,
}

impl ArrowBatchesReader {
    fn malformed() -> Error {
        Error::checkpoint(None, "the in-memory source's offset is malformed")
    }

    fn check(&self, s: &Stride) -> Result<()> {
        let have = s.len(self.batches.len());
        if s.emitted > have {
            return Err(Error::checkpoint(
                None,
                format!(
                    "the in-memory source's split of every {} batches from batch {} has {have} \
                     batches, fewer than its checkpointed offset {}",
                    s.step, s.first, s.emitted
                ),
            ));
        }
        Ok(())
    }

    /// Reads exactly `strides` from now on.
    fn set_strides(&mut self, strides: Vec<Stride>) {
        let len = self.batches.len();
        self.strides = strides
            .into_iter()
            .filter(|s| s.emitted < s.len(len))
            .collect();
        self.open = self.strides.iter().map(|s| s.first).collect();
    }
}

impl SourceReader for ArrowBatchesReader {
    fn poll_next(&mut self) -> Result<SourcePoll> {
        let len = self.batches.len();
        // The stride that has emitted the fewest batches reads next (a
        // batch of each in turn), chosen from the offset alone.
        while let Some(pos) = next_split(self.strides.iter().map(|s| (s.emitted, s.first))) {
            let s = &mut self.strides[pos];
            let batch = usize::try_from(s.next())
                .ok()
                .and_then(|i| self.batches.get(i));
            let Some(b) = batch else {
                self.strides.remove(pos);
                self.open.remove(pos);
                continue;
            };
            s.emitted += 1;
            self.last = Some(s.first);
            if s.emitted >= s.len(len) {
                self.strides.remove(pos);
                self.open.remove(pos);
            }
            return Ok(SourcePoll::Batch(b.clone()));
        }
        Ok(SourcePoll::End)
    }

    fn offset(&self) -> Vec<u8> {
        let len = self.batches.len();
        let entries: Vec<Vec<u8>> = self
            .strides
            .iter()
            .filter(|s| s.emitted < s.len(len))
            .map(|s| encode_positions(&[s.first, s.step, s.emitted]))
            .collect();
        encode_entries(&entries)
    }

    fn last_split(&self) -> Option<u64> {
        self.last
    }

    fn open_splits(&self) -> &[u64] {
        &self.open
    }

    fn seek(&mut self, offset: &[u8]) -> Result<()> {
        let Some(entries) = decode_entries(offset) else {
            // An offset of an older checkpoint: batches emitted of the
            // subtask's own stride.
            let pos = decode_positions(offset, 1).ok_or_else(Self::malformed)?;
            let mut s = self.own;
            s.emitted = pos[0];
            self.check(&s)?;
            self.set_strides(vec![s]);
            return Ok(());
        };
        let mut strides = Vec::with_capacity(entries.len());
        for e in entries {
            let f = decode_positions(&e, 3).ok_or_else(Self::malformed)?;
            if f[1] == 0 {
                return Err(Self::malformed());
            }
            let s = Stride {
                first: f[0],
                step: f[1],
                emitted: f[2],
            };
            self.check(&s)?;
            strides.push(s);
        }
        self.set_strides(strides);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{AsArray, Int64Array};
    use arrow::datatypes::{DataType, Field, Int64Type, Schema};

    use super::*;
    use crate::state::even_split;

    fn source(n: i64) -> ArrowBatchesSource {
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]));
        let batches = (0..n)
            .map(|i| {
                RecordBatch::try_new(schema.clone(), vec![Arc::new(Int64Array::from(vec![i]))])
                    .unwrap()
            })
            .collect();
        ArrowBatchesSource::new("arrow", batches, schema).unwrap()
    }

    fn ctx(subtask: usize, parallelism: usize) -> OperatorContext {
        OperatorContext {
            name: "src".into(),
            uid: "src".into(),
            subtask_index: subtask,
            parallelism,
            max_parallelism: 128,
            key_groups: 0..128,
            attempt: 0,
        }
    }

    fn drain(r: &mut dyn SourceReader, limit: usize) -> Vec<i64> {
        let mut out = Vec::new();
        while out.len() < limit {
            match r.poll_next().unwrap() {
                SourcePoll::Batch(b) => out.push(b.column(0).as_primitive::<Int64Type>().value(0)),
                _ => break,
            }
        }
        out
    }

    #[test]
    fn test_strides_left_over_move_to_another_parallelism_exactly() {
        let src = source(11);
        let mut read = Vec::new();
        let mut offsets = Vec::new();
        for (s, limit) in [(0, usize::MAX), (1, 2)] {
            let mut r = src.create(&ctx(s, 2), 1).unwrap();
            read.extend(drain(r.as_mut(), limit));
            offsets.push(r.offset());
        }
        assert_eq!(decode_entries(&offsets[0]).unwrap().len(), 0, "finished");
        for p in [1, 3] {
            let views: Vec<Option<&[u8]>> = offsets.iter().map(|o| Some(o.as_slice())).collect();
            let mut all = read.clone();
            for (s, share) in even_split(&views, p).unwrap().into_iter().enumerate() {
                let mut r = src.create(&ctx(s, p), 1).unwrap();
                r.seek(&encode_entries(&share)).unwrap();
                all.extend(drain(r.as_mut(), usize::MAX));
            }
            all.sort_unstable();
            assert_eq!(all, (0..11).collect::<Vec<_>>(), "p={p}");
        }
    }

    #[test]
    fn test_offset_of_an_older_checkpoint_restores_at_the_same_parallelism() {
        let src = source(11);
        let mut r = src.create(&ctx(1, 2), 1).unwrap();
        r.seek(&encode_positions(&[3])).unwrap();
        assert_eq!(drain(r.as_mut(), usize::MAX), vec![7, 9]);
        let mut r = src.create(&ctx(1, 2), 1).unwrap();
        let err = r.seek(&encode_positions(&[6])).unwrap_err();
        assert!(
            err.to_string()
                .contains("fewer than its checkpointed offset 6"),
            "{err}"
        );
    }

    #[test]
    fn test_a_seek_reads_on_in_the_order_the_writer_of_the_offset_did() {
        let src = source(20);
        let stride =
            |first: u64, step: u64, emitted: u64| encode_positions(&[first, step, emitted]);
        let start =
            crate::state::encode_entries(&[stride(0, 3, 1), stride(1, 3, 0), stride(2, 3, 2)]);
        crate::source::assert_seek_replays_the_same_batches(
            &|| src.create(&ctx(0, 1), 1).unwrap(),
            Some(&start),
        );
    }
}
