//! Unaligned checkpoints at a task with input channels (Flink's FLIP-76;
//! DESIGN.md "Unaligned checkpoints"; the capture itself is
//! [`crate::checkpoint::channel_state`]).
//!
//! A producer sends an unaligned barrier ahead of the data queued in each
//! output channel ([`crate::channel::EventSender::send_overtaking`]). The
//! consumer looks at its channels' priority slots before it reads their
//! queues; a barrier found there takes the data queued before its in-band
//! marker off the queue (kept as the channel's pending events, processed
//! next, never copied). On the *first* barrier of a checkpoint, whichever
//! channel delivers it (overtaking or in-band), the task snapshots its
//! operators at once, forwards the barrier ahead of its own output queues
//! and starts a [`ChannelCapture`]: the overtaken data of that channel, and
//! everything the other channels deliver until their barrier, is the
//! checkpoint's channel state. No channel is ever blocked. When every live
//! channel delivered the barrier (or ended), the task reports the operator
//! snapshot with the channel state; both are written off the task thread.
//!
//! Exactly-once is unchanged: the operators' state holds the effect of
//! exactly the records before the first barrier; the records after it that
//! belong to the checkpoint are in the channel state, which a restore puts
//! back in front of each channel, in order.

use std::collections::VecDeque;
use std::time::Instant;

use arrow::record_batch::RecordBatch;

use super::start_epoch;
use super::*;
use crate::checkpoint::channel_state::ChannelCapture;

/// The unaligned checkpoint a task is capturing.
pub(crate) struct Capturing {
    barrier: Barrier,
    states: Vec<NodeSnapshot>,
    capture: ChannelCapture,
    started: Instant,
}

/// A task's unaligned-checkpoint bookkeeping.
#[derive(Default)]
pub(crate) struct UnalignedState {
    current: Option<Capturing>,
    /// Highest id that completed here or was cancelled: its barriers (and
    /// older ones) are stale.
    settled: u64,
    /// Aligned timeout: the newest checkpoint barrier announced on some
    /// input channel and not snapshotted yet.
    announced: Option<Barrier>,
    /// Restored channel state not replayed yet, in events over all
    /// channels (`channel_replay.rs`): while any is left no new data is read.
    pub(crate) replaying: usize,
}

impl UnalignedState {
    /// The coordinator aborted `id`: a capture of it (or an older one) is
    /// given up.
    pub(crate) fn cancel(&mut self, id: u64) {
        self.settled = self.settled.max(id);
        if self.current.as_ref().is_some_and(|c| c.barrier.id <= id) {
            self.current = None;
        }
    }

    /// Checkpoint `id` was snapshotted aligned (or given up): its
    /// announcements no longer matter.
    pub(crate) fn settle(&mut self, id: u64) {
        self.settled = self.settled.max(id);
        if self.announced.is_some_and(|b| b.id <= id) {
            self.announced = None;
        }
    }

    /// Whether the channel state of checkpoint `id` is being captured.
    #[inline]
    pub(crate) fn capturing(&self, id: u64) -> bool {
        self.current.as_ref().is_some_and(|c| c.barrier.id == id)
    }

    /// `channel` delivered `batch` to the operators.
    #[inline]
    pub(crate) fn on_data(&mut self, channel: usize, batch: &RecordBatch) {
        if let Some(c) = self.current.as_mut() {
            c.capture.on_data(channel, batch);
        }
    }
}

impl Task {
    /// A channel whose priority slot holds an overtaking barrier.
    #[inline]
    pub(crate) fn poll_priority(&self) -> Option<(usize, Barrier)> {
        self.inputs.iter().enumerate().find_map(|(i, ch)| {
            if ch.ended {
                return None;
            }
            ch.rx.take_priority().map(|b| (i, b))
        })
    }

    /// Barrier `barrier` read in-band from channel `i`: an unaligned one
    /// (or one of the checkpoint being captured) is captured here, an
    /// aligned one goes to the aligner.
    pub(crate) fn on_barrier_event(&mut self, i: usize, barrier: Barrier) -> Result<()> {
        if !barrier.aligned || self.unaligned.capturing(barrier.id) {
            return self.on_unaligned_barrier(i, barrier, Vec::new());
        }
        let ch = &mut self.inputs[i];
        ch.last_barrier = ch.last_barrier.max(barrier.id);
        let action = self.aligner.on_barrier(i, barrier, Instant::now());
        self.apply(action)
    }

    /// The unaligned barrier `barrier` overtook the queue of channel `i`:
    /// the events queued before its marker become the channel's pending
    /// events, and the batches among them (after those already pending)
    /// are what it overtook.
    pub(crate) fn on_overtake(&mut self, i: usize, barrier: Barrier) -> Result<()> {
        if barrier.id <= self.inputs[i].last_barrier || self.inputs[i].ended {
            return Ok(()); // its marker was read in-band already
        }
        if barrier.aligned && !self.unaligned.capturing(barrier.id) {
            // An aligned barrier announced ahead of its queue (aligned
            // timeout): the alignment waits for it in-band unless it times
            // out (`switch_to_unaligned`), which then takes this queue.
            let ch = &mut self.inputs[i];
            ch.announced = ch.announced.max(barrier.id);
            let u = &mut self.unaligned;
            if barrier.id > u.settled && u.announced.is_none_or(|a| a.id < barrier.id) {
                u.announced = Some(barrier);
            }
            return Ok(());
        }
        let barrier = Barrier {
            aligned: false,
            ..barrier
        };
        let mut drained = VecDeque::new();
        if !self.inputs[i].rx.drain_to_marker(barrier.id, &mut drained) {
            return Err(Error::Cancelled);
        }
        let ch = &mut self.inputs[i];
        if let Some(c) = &ch.credit {
            c.consumed(); // the marker's credit (`RemoteSender::send_overtaking`)
        }
        ch.last_barrier = barrier.id;
        ch.pending
            .extend(drained.into_iter().map(|item| (item, true)));
        let overtaken: Vec<RecordBatch> = ch
            .pending
            .iter()
            .filter_map(|((e, _), _)| match e {
                Event::Data(b) => Some(b.clone()),
                _ => None,
            })
            .collect();
        self.on_unaligned_barrier(i, barrier, overtaken)
    }

    /// Unaligned barrier `barrier` arrived on channel `i` (in-band, or
    /// overtaking `overtaken`).
    pub(crate) fn on_unaligned_barrier(
        &mut self,
        i: usize,
        barrier: Barrier,
        overtaken: Vec<RecordBatch>,
    ) -> Result<()> {
        let ch = &mut self.inputs[i];
        ch.last_barrier = ch.last_barrier.max(barrier.id);
        if barrier.id <= self.unaligned.settled {
            return Ok(());
        }
        match self.unaligned.current.as_ref().map(|c| c.barrier.id) {
            Some(id) if id > barrier.id => return Ok(()),
            Some(id) if id == barrier.id => {}
            // An upstream task switched this checkpoint (its aligned
            // timeout): this task switches too, taking over an alignment of
            // it in progress (Flink does the same on an unaligned barrier).
            _ if self
                .aligner
                .pending_since()
                .is_some_and(|(b, _)| b.id <= barrier.id) =>
            {
                if self.take_over_as_unaligned(barrier)? {
                    return Ok(());
                }
            }
            _ => self.begin_unaligned(barrier)?,
        }
        let complete = match self.unaligned.current.as_mut() {
            Some(c) => c.capture.on_barrier(i, overtaken),
            None => false,
        };
        if complete {
            self.finish_unaligned()?;
        }
        Ok(())
    }

    /// When the alignment in progress times out (aligned timeout: Flink's
    /// `aligned-checkpoint-timeout`), if a checkpoint is aligning.
    ///
    /// As in Flink, the timeout counts from the checkpoint's trigger (the
    /// barrier's timestamp): a barrier that waits behind a full queue times
    /// out too, not only an alignment across channels.
    pub(crate) fn alignment_deadline(&self) -> Option<Instant> {
        let timeout = self.aligned_timeout?;
        let barrier = self.timeoutable_barrier()?;
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let due_ms = barrier.timestamp_ms + timeout.as_millis() as u64;
        Some(Instant::now() + std::time::Duration::from_millis(due_ms.saturating_sub(now_ms)))
    }

    /// The checkpoint barrier aligning or announced, not snapshotted yet.
    fn timeoutable_barrier(&self) -> Option<Barrier> {
        let aligning = self.aligner.pending_since().map(|(b, _)| b);
        let announced = self.unaligned.announced;
        let newest = match (aligning, announced) {
            (Some(a), Some(b)) => Some(if a.id >= b.id { a } else { b }),
            (a, b) => a.or(b),
        }?;
        (newest.kind == crate::event::BarrierKind::Checkpoint && newest.id > self.unaligned.settled)
            .then_some(newest)
    }

    /// Switches the alignment in progress to an unaligned checkpoint once
    /// it took longer than the aligned timeout: the task snapshots now and
    /// forwards the barrier as unaligned; channels whose barrier arrived
    /// are done (what is queued behind their barrier is the next epoch's),
    /// channels whose barrier was announced give up the data queued before
    /// it, and the others are recorded until their barrier arrives.
    pub(crate) fn switch_to_unaligned(&mut self) -> Result<()> {
        if self.alignment_deadline().is_none_or(|d| Instant::now() < d) {
            return Ok(());
        }
        let Some(barrier) = self.timeoutable_barrier() else {
            return Ok(());
        };
        self.take_over_as_unaligned(barrier).map(|_| ())
    }

    /// Begins the unaligned capture of `barrier`'s checkpoint in place of
    /// an alignment in progress (`switch_to_unaligned`); true if the capture
    /// is already complete (and reported).
    fn take_over_as_unaligned(&mut self, barrier: Barrier) -> Result<bool> {
        let mut arrived = vec![false; self.inputs.len()];
        if self
            .aligner
            .pending_since()
            .is_some_and(|(b, _)| b.id == barrier.id)
        {
            if let Some((_, a, unblock)) = self.aligner.give_up_for_unaligned() {
                arrived = a;
                for c in unblock {
                    self.inputs[c].blocked = false;
                }
            }
        } else if let AlignerAction::Abort { unblock, .. } = self.aligner.on_cancel(barrier.id) {
            // An older alignment is overtaken; later barriers of this
            // checkpoint are the task's business from now on.
            for c in unblock {
                self.inputs[c].blocked = false;
            }
        }
        self.unaligned.announced = None;
        let barrier = Barrier {
            aligned: false,
            ..barrier
        };
        self.begin_unaligned(barrier)?;
        let mut complete = false;
        if let Some(c) = self.unaligned.current.as_mut() {
            for (ch, _) in arrived.iter().enumerate().filter(|(_, a)| **a) {
                complete = c.capture.on_barrier(ch, std::iter::empty());
            }
        }
        if complete {
            self.finish_unaligned()?;
            return Ok(true);
        }
        let announced: Vec<usize> = (0..self.inputs.len())
            .filter(|&ch| !arrived[ch] && self.inputs[ch].announced >= barrier.id)
            .collect();
        for ch in announced {
            self.on_overtake(ch, barrier)?;
        }
        Ok(!self.unaligned.capturing(barrier.id))
    }

    /// Channel `i` ended while a capture was running.
    pub(crate) fn unaligned_channel_ended(&mut self, i: usize) -> Result<()> {
        let complete = match self.unaligned.current.as_mut() {
            Some(c) => c.capture.on_end(i),
            None => false,
        };
        if complete {
            self.finish_unaligned()?;
        }
        Ok(())
    }

    /// The first barrier of checkpoint `barrier.id`: snapshot the operators
    /// now and send the barrier ahead of the output queues. A capture of an
    /// older checkpoint still running is given up (the coordinator runs one
    /// checkpoint at a time, so that one was aborted).
    fn begin_unaligned(&mut self, barrier: Barrier) -> Result<()> {
        let ended: Vec<bool> = self.inputs.iter().map(|c| c.ended).collect();
        let capturing = |states| Capturing {
            barrier,
            states,
            capture: ChannelCapture::new(barrier.id, &ended),
            started: Instant::now(),
        };
        if self.kind.is_loop_head() {
            // A loop head's snapshot is its loop checkpoint's, which also
            // waits for the feedback channel state (`loop_unaligned.rs`).
            self.unaligned.current = Some(capturing(Vec::new()));
            return self.begin_loop_checkpoint(barrier, std::time::Duration::ZERO, true);
        }
        let states = self.chain_states(&barrier, false)?;
        start_epoch(&mut self.chain, &barrier)?;
        self.unaligned.current = Some(capturing(states));
        self.output.broadcast_overtaking(barrier)
    }

    fn finish_unaligned(&mut self) -> Result<()> {
        let Some(c) = self.unaligned.current.take() else {
            return Ok(());
        };
        self.unaligned.settled = self.unaligned.settled.max(c.barrier.id);
        let name = self.chain.first().map_or("", |c| &c.slot.name).to_string();
        if self.kind.is_loop_head() {
            let elapsed = c.started.elapsed();
            return self.loop_inputs_captured(c.barrier.id, c.capture.into_state(&name), elapsed);
        }
        self.report_snapshot(TaskReport::Snapshot {
            task: self.id,
            checkpoint: c.barrier.id,
            states: c.states,
            // From the first barrier to the last: how long the channel
            // state was being captured (nothing waited for it).
            alignment: c.started.elapsed(),
            finished: false,
            channels: c.capture.into_state(&name),
        })
    }
}
