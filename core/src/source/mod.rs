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
    /// interleaved, a batch of each in turn, so that every split makes
    /// progress and no split's event time runs far ahead of another's.
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
