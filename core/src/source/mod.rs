//! Sources: replayable readers whose position is their state
//! (flink-fault-tolerance-mechanism.txt: sources record their offsets on a
//! checkpoint and are rewound to them on recovery).

pub mod arrow_batches;
pub mod parquet;
pub mod sequence;

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;

use crate::error::Result;
use crate::operator::OperatorContext;
use crate::state::Redistribution;

/// What a source has to offer right now.
#[derive(Debug)]
pub enum SourcePoll {
    /// The next batch.
    Batch(RecordBatch),
    /// Nothing at the moment (unbounded source); ask again later.
    Idle,
    /// The source is exhausted.
    End,
}

/// One parallel instance of a source, reading its share of the splits.
pub trait SourceReader: Send {
    /// Called once before the first poll (after `seek` when restoring).
    fn open(&mut self, _ctx: &OperatorContext) -> Result<()> {
        Ok(())
    }
    /// Reads the next batch.
    fn poll_next(&mut self) -> Result<SourcePoll>;
    /// The current position: replaying from it yields exactly the records
    /// not yet returned.
    fn offset(&self) -> Vec<u8>;
    /// Moves to a position previously returned by `offset`.
    fn seek(&mut self, offset: &[u8]) -> Result<()>;

    /// FLIP-27 per-split event time (DESIGN.md "Event time per split"): the
    /// split of the batch `poll_next` returned last, by an id that names
    /// the split independently of the subtask reading it (the same id after
    /// a restore at another parallelism). `None`: the reader does not tell
    /// its splits apart (the default).
    fn last_split(&self) -> Option<u64> {
        None
    }

    /// The ids (as [`SourceReader::last_split`]) of the splits this reader
    /// has not read to their end. A reader with several splits reads them
    /// interleaved ([`next_split`]), so that every split makes progress and
    /// no split's event time runs far ahead of another's.
    fn open_splits(&self) -> &[u64] {
        &[]
    }

    /// Buffer debloating at the source (FLIP-183, see `channel.rs`): the
    /// batches `poll_next` returns from now on should hold at most `rows`
    /// rows (never more than the configured batch size). The source task
    /// calls it when its consumers measured that a whole batch is more work
    /// than a checkpoint barrier may wait behind, and again as that changes.
    /// It is never called in recompute mode, where replayed batches must be
    /// the ones of the original run. Readers that cannot cut their batches
    /// ignore it (the default); their batches are cut into slices by the
    /// channel, and a barrier waits for the whole batch.
    fn limit_batch_rows(&mut self, _rows: usize) {}

    /// The offset recorded in checkpoint `checkpoint_id` (default:
    /// [`SourceReader::offset`]). A reader that acts when a checkpoint
    /// completes (an external system told how far the job got) remembers
    /// here which position belongs to which checkpoint.
    fn checkpoint_offset(&self, _checkpoint_id: u64) -> Vec<u8> {
        self.offset()
    }

    /// Checkpoint `checkpoint_id` completed (and every one before it): what
    /// [`SourceReader::checkpoint_offset`] returned for it is durable. For
    /// side effects only (e.g. committing consumer offsets for
    /// monitoring); never needed for correctness.
    fn notify_checkpoint_complete(&mut self, _checkpoint_id: u64) -> Result<()> {
        Ok(())
    }
}

/// Builds one reader per parallel subtask of a source node.
pub trait SourceFactory: Send + Sync {
    /// The reader of subtask `ctx.subtask_index` out of `ctx.parallelism`.
    fn create(&self, ctx: &OperatorContext, batch_size: usize) -> Result<Box<dyn SourceReader>>;
    /// The schema of every batch, when known before running.
    fn schema(&self) -> Option<SchemaRef>;
    /// How the readers' offsets are dealt to the subtasks of a restore at
    /// another parallelism (FLIP-147: a partially finished source hands
    /// its remaining splits to whichever subtasks run now). Sources that
    /// answer [`Redistribution::EvenSplit`] report their offset as an entry
    /// list ([`crate::state::encode_entries`]), one entry per split not yet
    /// read to its end, each naming its split independently of the
    /// subtask, and their readers' `seek` takes such a list as the splits
    /// to read, replacing the ones `create` dealt them. Default: not at
    /// all (a `CheckpointError` naming the source).
    fn redistribution(&self) -> Redistribution {
        Redistribution::unsupported()
    }
}

// Offsets and state entries share the u64 position encoding (state.rs).
pub use crate::state::{decode_positions, encode_positions};

/// The position of the split a reader with several splits reads next,
/// given each open split's `(progress, id)` in the reader's order: the one
/// that has emitted the least (rows or batches of the part it reads now),
/// the smallest id on a tie. With equal batches that is a batch of each in
/// turn. The choice depends on nothing but what the offset records (no
/// rotation cursor beside it), so a reader seeked to an offset reads on in
/// the order the reader that wrote it did: a recompute recovery replays
/// exactly the batches of the original run (DESIGN.md "Recovery by
/// recomputation"), whichever checkpoint it rewinds to.
pub fn next_split(splits: impl Iterator<Item = (u64, u64)>) -> Option<usize> {
    splits
        .enumerate()
        .min_by_key(|&(_, (progress, id))| (progress, id))
        .map(|(pos, _)| pos)
}

/// Checks for every reader: a reader seeked to the offset it had after
/// `k` batches returns the same batches, in the same order, as it did
/// after them (recompute recovery relies on it).
#[cfg(test)]
pub(crate) fn assert_seek_replays_the_same_batches(
    make: &dyn Fn() -> Box<dyn SourceReader>,
    start: Option<&[u8]>,
) {
    let fresh = || {
        let mut r = make();
        if let Some(offset) = start {
            r.seek(offset).unwrap();
        }
        r
    };
    let mut original = fresh();
    let mut offsets = vec![original.offset()];
    let mut batches = Vec::new();
    while let SourcePoll::Batch(b) = original.poll_next().unwrap() {
        batches.push((original.last_split(), b));
        offsets.push(original.offset());
    }
    assert!(batches.len() > 2, "too few batches to check an order");
    for (k, offset) in offsets.iter().enumerate() {
        let mut replay = make();
        replay.seek(offset).unwrap();
        for (n, (split, batch)) in batches[k..].iter().enumerate() {
            let SourcePoll::Batch(got) = replay.poll_next().unwrap() else {
                panic!("the replay from batch {k} ended early");
            };
            assert_eq!(
                (replay.last_split(), &got),
                (*split, batch),
                "the replay from batch {k} differs at batch {}",
                k + n
            );
            assert_eq!(replay.offset(), offsets[k + n + 1]);
        }
        assert!(matches!(replay.poll_next().unwrap(), SourcePoll::End));
    }
}
