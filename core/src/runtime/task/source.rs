//! The driver of a source task: polls the source reader split by split,
//! cuts batches to what the consumers measured (FLIP-183), keeps one
//! watermark per split (FLIP-27) and injects barriers between batches.

use super::*;
use crate::error::{Error, Result};
use crate::event::MAX_WATERMARK;
use crate::operator::Collector;
use crate::source::{SourcePoll, SourceReader};
use crossbeam_channel::TryRecvError;
use std::time::Duration;

/// FLIP-27: tells the first operator of a source task's chain the split
/// of the batch the source is about to emit (`None`: the source has nothing
/// now) and the source's open splits.
fn source_progress(
    chain: &mut [Chained],
    tail: &mut TaskOutput,
    split: Option<u64>,
    open: &[u64],
) -> Result<()> {
    at_chain_head(chain, tail, |op, out| {
        op.on_source_progress(split, open, out)
    })
}

/// The source at the head of a source task.
pub(crate) struct SourceHead {
    pub reader: Box<dyn SourceReader>,
    pub slot: OpSlot,
    pub context: OperatorContext,
    pub node: usize,
    /// The reader's batches may be cut to what the consumers measured
    /// (buffer debloating at the source); off in recompute mode, whose
    /// replay must see the batches of the original run.
    pub sized: bool,
    /// Bytes per row of the last batch (0 before the first).
    pub row_bytes: usize,
}

/// Buffer debloating at the source (FLIP-183, `channel.rs`): the most rows
/// a batch may hold so that it fits the smallest byte budget the consumers
/// of `output` measured ([`STARTUP_BATCH_ROWS`] while one has not measured
/// yet); `None` when the task has no local output channel (its batches
/// stay whole). On a hash edge a batch's rows spread over every consumer,
/// so its budget counts once per consumer.
fn batch_rows_hint(output: &TaskOutput, row_bytes: usize) -> Option<usize> {
    let mut rows: Option<usize> = None;
    for edge in &output.edges {
        let mut budget: Option<usize> = None;
        for s in &edge.senders {
            if let OutSender::Channel(tx) = s {
                let b = tx.measured_budget().unwrap_or(0);
                budget = Some(budget.map_or(b, |m| m.min(b)));
            }
        }
        let fit = match budget {
            None => continue,
            // A consumer has not measured yet (or the first batch has not
            // told the row size).
            Some(0) => STARTUP_BATCH_ROWS,
            Some(_) if row_bytes == 0 => STARTUP_BATCH_ROWS,
            Some(b) => {
                let spread = match edge.partitioner.kind() {
                    crate::partition::Partitioning::Hash { .. } => edge.senders.len().max(1),
                    _ => 1,
                };
                b.saturating_mul(spread) / row_bytes
            }
        };
        rows = Some(rows.map_or(fit, |r| r.min(fit)));
    }
    rows.map(|r| r.max(crate::channel::MIN_SLICE_ROWS))
}

impl Task {
    /// A control message to a running source: `Some` when it ends the
    /// input (an undrained stop-with-savepoint); a drain request sets
    /// `drain_now`; triggers that arrive while a recompute replay runs wait.
    fn source_control(&mut self, c: Control, drain_now: &mut bool) -> Result<Option<InputEnd>> {
        match c {
            Control::TriggerCheckpoint(b) if self.recompute.replaying() => {
                self.recompute.deferred.push(b)
            }
            Control::StopSource(Some(barrier)) => {
                self.snapshot(barrier, Duration::ZERO, false)?;
                return Ok(Some(InputEnd::Undrained));
            }
            Control::StopSource(None) => *drain_now = true,
            c => self.handle_control(c)?,
        }
        Ok(None)
    }

    pub(crate) fn run_source(&mut self) -> Result<InputEnd> {
        let mut drain_now = false;
        loop {
            match self.control.try_recv() {
                Ok(c) => {
                    if let Some(end) = self.source_control(c, &mut drain_now)? {
                        return Ok(end);
                    }
                }
                Err(TryRecvError::Empty) => {}
                Err(TryRecvError::Disconnected) => return Err(Error::Cancelled),
            }
            self.inject_replayed()?;
            let TaskKind::Source(src) = &mut self.kind else {
                return Ok(InputEnd::Drained);
            };
            if src.sized {
                if let Some(rows) = batch_rows_hint(&self.output, src.row_bytes) {
                    src.reader.limit_batch_rows(rows);
                }
            }
            let poll = if drain_now {
                SourcePoll::End
            } else {
                src.reader
                    .poll_next()
                    .map_err(|e| e.in_operator(&src.slot.name))?
            };
            match poll {
                SourcePoll::Batch(batch) => {
                    if batch.num_rows() > 0 {
                        src.row_bytes =
                            (crate::channel::batch_bytes(&batch) / batch.num_rows()).max(1);
                    }
                    // FLIP-27: the operator after the source learns the
                    // split of the batch (per-split watermarks).
                    source_progress(
                        &mut self.chain,
                        &mut self.output,
                        src.reader.last_split(),
                        src.reader.open_splits(),
                    )?;
                    let mut out = ChainOut {
                        slot: &mut src.slot,
                        rest: &mut self.chain,
                        tail: &mut self.output,
                    };
                    out.emit(batch)?;
                }
                SourcePoll::Idle => {
                    // Lets the operator after the source take time-based
                    // decisions (split idleness) while no batch comes.
                    source_progress(
                        &mut self.chain,
                        &mut self.output,
                        None,
                        src.reader.open_splits(),
                    )?;
                    let waiting = std::time::Instant::now();
                    let next = self
                        .control
                        .recv_timeout(std::time::Duration::from_millis(10));
                    self.output.timer.waited(waiting.elapsed(), false);
                    match next {
                        Ok(c) => {
                            if let Some(end) = self.source_control(c, &mut drain_now)? {
                                return Ok(end);
                            }
                        }
                        Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
                        Err(crossbeam_channel::RecvTimeoutError::Disconnected) => {
                            return Err(Error::Cancelled)
                        }
                    }
                }
                SourcePoll::End => {
                    self.recompute
                        .check_end(&src.reader.offset(), &src.slot.name)?;
                    let mut out = ChainOut {
                        slot: &mut src.slot,
                        rest: &mut self.chain,
                        tail: &mut self.output,
                    };
                    out.emit_watermark(MAX_WATERMARK)?;
                    // Checkpoints the subtask answered after it had finished
                    // saw its final watermark first (recompute replay).
                    for b in self.recompute.take_after_end() {
                        self.snapshot(b, Duration::ZERO, false)?;
                    }
                    return Ok(InputEnd::Drained);
                }
            }
        }
    }
}
