//! `from_sequence(start, end)`: an int64 column `value` with
//! `start <= value < end`, split into contiguous ranges per subtask. The
//! offset is an entry list (FLIP-147 redistribution): one entry
//! `(start, end, next)` per range not yet read to its end, so the ranges
//! left over can be dealt to the subtasks of another parallelism. Offsets
//! of older checkpoints (the next value of the subtask's range) still
//! restore at the same parallelism. A subtask given several ranges (after
//! such a restore) reads them interleaved, a batch of each in turn, and
//! names each by its start (FLIP-27 per-split event time, DESIGN.md "Event
//! time per split").

use std::sync::Arc;

use arrow::array::{ArrayRef, Int64Array};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;

use super::{
    decode_positions, encode_positions, next_split, SourceFactory, SourcePoll, SourceReader,
};
use crate::error::{Error, Result};
use crate::operator::OperatorContext;
use crate::state::{decode_entries, encode_entries, Redistribution};

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
        let own = Range {
            start: lo as i64,
            end: hi as i64,
            next: lo as i64,
        };
        let mut reader = SequenceReader {
            ranges: Vec::new(),
            open: Vec::new(),
            last: None,
            own,
            bounds: (self.start, self.end),
            batch_size: batch_size.max(1) as i64,
            limit: batch_size.max(1) as i64,
            schema: self.schema.clone(),
            name: ctx.name.clone(),
        };
        reader.set_ranges(vec![own]);
        Ok(Box::new(reader))
    }

    fn schema(&self) -> Option<SchemaRef> {
        Some(self.schema.clone())
    }

    /// Every unfinished range is an entry `(start, end, next)`.
    fn redistribution(&self) -> Redistribution {
        Redistribution::EvenSplit
    }
}

/// A split of the sequence: `[start, end)`, read up to `next`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Range {
    start: i64,
    end: i64,
    next: i64,
}

impl Range {
    /// The split id of the range (its start; ranges never overlap).
    fn id(&self) -> u64 {
        self.start as u64
    }
}

/// One subtask's share of the sequence: its ranges, read interleaved.
pub struct SequenceReader {
    /// The ranges not read to their end (a range leaves when its last
    /// batch is emitted).
    ranges: Vec<Range>,
    /// `open[i]` is the id of `ranges[i]`.
    open: Vec<u64>,
    /// The range of the last batch.
    last: Option<u64>,
    /// The subtask's own range of a fresh start (for older offsets).
    own: Range,
    /// The whole sequence `[start, end)`.
    bounds: (i64, i64),
    batch_size: i64,
    /// The most rows a batch holds now (`limit_batch_rows`).
    limit: i64,
    schema: SchemaRef,
    /// The source's name, for errors.
    name: String,
}

impl SequenceReader {
    fn malformed() -> Error {
        Error::checkpoint(None, "the sequence source's offset is malformed")
    }

    /// The legacy offset (before entry lists): the next value of the
    /// subtask's single range.
    fn seek_legacy(&mut self, offset: &[u8]) -> Result<()> {
        let pos = decode_positions(offset, 1).ok_or_else(Self::malformed)?[0] as i64;
        let mut r = self.own;
        if pos < r.start || pos > r.end {
            return Err(Error::checkpoint(
                None,
                format!(
                    "the sequence source's checkpointed offset {pos} lies outside its split [{}, {})",
                    r.start, r.end
                ),
            ));
        }
        r.next = pos;
        self.set_ranges(vec![r]);
        Ok(())
    }

    /// Reads exactly `ranges` from now on.
    fn set_ranges(&mut self, ranges: Vec<Range>) {
        self.ranges = ranges.into_iter().filter(|r| r.next < r.end).collect();
        self.open = self.ranges.iter().map(Range::id).collect();
    }
}

impl SourceReader for SequenceReader {
    fn poll_next(&mut self) -> Result<SourcePoll> {
        // The range that has emitted the fewest values reads next (a batch
        // of each in turn), chosen from the offset alone.
        while let Some(pos) = next_split(
            self.ranges
                .iter()
                .map(|r| (r.next.abs_diff(r.start), r.id())),
        ) {
            let r = &mut self.ranges[pos];
            if r.next >= r.end {
                self.ranges.remove(pos);
                self.open.remove(pos);
                continue;
            }
            let hi = r.next.saturating_add(self.limit).min(r.end);
            let values: ArrayRef = Arc::new(Int64Array::from_iter_values(r.next..hi));
            r.next = hi;
            self.last = Some(r.id());
            if hi >= r.end {
                self.ranges.remove(pos);
                self.open.remove(pos);
            }
            let batch = RecordBatch::try_new(self.schema.clone(), vec![values])
                .map_err(|e| Error::arrow(&self.name, &e))?;
            return Ok(SourcePoll::Batch(batch));
        }
        Ok(SourcePoll::End)
    }

    fn offset(&self) -> Vec<u8> {
        let entries: Vec<Vec<u8>> = self
            .ranges
            .iter()
            .filter(|r| r.next < r.end)
            .map(|r| encode_positions(&[r.start as u64, r.end as u64, r.next as u64]))
            .collect();
        encode_entries(&entries)
    }

    fn last_split(&self) -> Option<u64> {
        self.last
    }

    fn open_splits(&self) -> &[u64] {
        &self.open
    }

    fn limit_batch_rows(&mut self, rows: usize) {
        self.limit = (rows.max(1) as i64).min(self.batch_size);
    }

    fn seek(&mut self, offset: &[u8]) -> Result<()> {
        let Some(entries) = decode_entries(offset) else {
            return self.seek_legacy(offset);
        };
        let (lo, hi) = self.bounds;
        let mut ranges = Vec::with_capacity(entries.len());
        for e in entries {
            let f = decode_positions(&e, 3).ok_or_else(Self::malformed)?;
            let r = Range {
                start: f[0] as i64,
                end: f[1] as i64,
                next: f[2] as i64,
            };
            if r.start < lo || r.end > hi || r.next < r.start || r.next > r.end {
                return Err(Error::checkpoint(
                    None,
                    format!(
                        "the sequence source's checkpointed split [{}, {}) at offset {} does not \
                         fit the sequence [{lo}, {hi})",
                        r.start, r.end, r.next
                    ),
                ));
            }
            ranges.push(r);
        }
        self.set_ranges(ranges);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use arrow::array::AsArray;
    use arrow::datatypes::Int64Type;

    use super::*;

    fn ctx(subtask: usize, parallelism: usize) -> OperatorContext {
        OperatorContext {
            name: "seq".into(),
            uid: "seq".into(),
            subtask_index: subtask,
            parallelism,
            max_parallelism: 128,
            key_groups: 0..128,
            attempt: 0,
        }
    }

    fn drain(r: &mut dyn SourceReader) -> Vec<i64> {
        let mut out = Vec::new();
        while let SourcePoll::Batch(b) = r.poll_next().unwrap() {
            out.extend(b.column(0).as_primitive::<Int64Type>().values().iter());
        }
        out
    }

    #[test]
    fn test_a_row_limit_cuts_batches_and_the_offset_stays_exact() {
        let src = SequenceSource::new(0, 20);
        let mut r = src.create(&ctx(0, 1), 8).unwrap();
        r.limit_batch_rows(3);
        let SourcePoll::Batch(b) = r.poll_next().unwrap() else {
            panic!("a batch");
        };
        assert_eq!(b.num_rows(), 3);
        let offset = r.offset();
        r.limit_batch_rows(100); // never above the configured batch size
        let SourcePoll::Batch(b) = r.poll_next().unwrap() else {
            panic!("a batch");
        };
        assert_eq!(b.num_rows(), 8);
        let mut restored = src.create(&ctx(0, 1), 8).unwrap();
        restored.seek(&offset).unwrap();
        assert_eq!(drain(restored.as_mut()), (3..20).collect::<Vec<i64>>());
    }

    #[test]
    fn test_entries_name_their_range_and_any_subtask_continues_them() {
        let src = SequenceSource::new(0, 10);
        let mut r = src.create(&ctx(1, 2), 2).unwrap();
        assert!(matches!(r.poll_next().unwrap(), SourcePoll::Batch(_)));
        let offset = r.offset();
        assert_eq!(
            decode_entries(&offset).unwrap(),
            vec![encode_positions(&[5, 10, 7])]
        );
        let mut other = src.create(&ctx(0, 3), 2).unwrap();
        other.seek(&offset).unwrap();
        assert_eq!(drain(other.as_mut()), vec![7, 8, 9]);
        let mut nothing = src.create(&ctx(2, 3), 2).unwrap();
        nothing.seek(&encode_entries::<Vec<u8>>(&[])).unwrap();
        assert_eq!(drain(nothing.as_mut()), Vec::<i64>::new());
        let err = other
            .seek(&encode_entries(&[encode_positions(&[5, 12, 7])]))
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("does not fit the sequence [0, 10)"),
            "{err}"
        );
    }

    #[test]
    fn test_several_ranges_are_read_interleaved_and_named_by_their_start() {
        let src = SequenceSource::new(0, 10);
        let mut r = src.create(&ctx(0, 1), 2).unwrap();
        let split = |start: u64, end: u64, next: u64| encode_positions(&[start, end, next]);
        r.seek(&encode_entries(&[split(0, 5, 0), split(5, 10, 6)]))
            .unwrap();
        assert_eq!(r.open_splits(), &[0, 5]);
        let mut order = Vec::new();
        while let SourcePoll::Batch(b) = r.poll_next().unwrap() {
            let v = b.column(0).as_primitive::<Int64Type>().values().to_vec();
            order.push((r.last_split().unwrap(), v));
        }
        assert_eq!(
            order,
            vec![
                (0, vec![0, 1]),
                (5, vec![6, 7]),
                (0, vec![2, 3]),
                (5, vec![8, 9]),
                (0, vec![4]),
            ]
        );
        assert!(r.open_splits().is_empty());
    }

    #[test]
    fn test_offset_of_an_older_checkpoint_restores_at_the_same_parallelism() {
        let src = SequenceSource::new(0, 10);
        let mut r = src.create(&ctx(1, 2), 10).unwrap();
        r.seek(&encode_positions(&[8])).unwrap();
        assert_eq!(drain(r.as_mut()), vec![8, 9]);
        assert!(r.seek(&encode_positions(&[3])).is_err());
    }

    #[test]
    fn test_a_seek_reads_on_in_the_order_the_writer_of_the_offset_did() {
        let src = SequenceSource::new(0, 30);
        let split = |start: u64, end: u64, next: u64| encode_positions(&[start, end, next]);
        let start = encode_entries(&[split(0, 10, 0), split(10, 20, 13), split(20, 30, 20)]);
        crate::source::assert_seek_replays_the_same_batches(
            &|| src.create(&ctx(0, 1), 3).unwrap(),
            Some(&start),
        );
    }
}
