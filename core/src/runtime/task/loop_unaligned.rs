//! Unaligned checkpoints at a loop head (DESIGN.md "Unaligned checkpoints",
//! "Loops"; FLIP-76 applied to the feedback channel of FLIP-15).
//!
//! The FLIP-16 log of an aligned loop checkpoint holds every feedback record
//! the head reads after its snapshot until barrier `n` came back around the
//! cycle, in-band, behind everything the body had queued. With unaligned
//! barriers the barrier overtakes every channel of the body and, at the
//! tail, the feedback queue itself ([`FeedbackQueue::push_overtaking`]). The
//! records the log would have collected are then known as soon as the head
//! takes the barrier from the queue's priority slot: the feedback it read
//! after its snapshot (kept as shared batches) followed by what is queued
//! before the barrier's marker ([`FeedbackQueue::overtaken`]: batches in
//! memory shared, spilled runs referred to, never read on the task thread).
//! That is the feedback channel's state of the checkpoint; it is serialized
//! by a checkpoint writer thread (`feedback_state.rs`) in the channel-state
//! format (`checkpoint/channel_state.rs`, one channel per feedback queue) as
//! the head's state, where the FLIP-16 log goes otherwise. The head's loop
//! input channels are captured like any task's (`unaligned.rs`); the
//! checkpoint is reported when both are complete. On restore the head emits
//! the feedback channel state into the body before anything else, as it does
//! a FLIP-16 log.
//!
//! [`FeedbackQueue::push_overtaking`]: crate::feedback::FeedbackQueue::push_overtaking
//! [`FeedbackQueue::overtaken`]: crate::feedback::FeedbackQueue::overtaken

use std::time::{Duration, Instant};

use super::loop_head::{FeedbackLog, LoopHead};
use super::Task;
use crate::error::Result;
use crate::event::{Barrier, BarrierKind};
use crate::feedback::Overtaken;
use crate::state::OperatorState;

impl LoopHead {
    /// A feedback queue whose priority slot holds an overtaking barrier.
    #[inline]
    pub(super) fn feedback_priority(&self) -> Option<(usize, Barrier)> {
        self.feedback.iter().enumerate().find_map(|(q, f)| {
            if f.ended {
                return None;
            }
            f.queue.take_priority().map(|b| (q, b))
        })
    }
}

impl Task {
    /// The unaligned barrier `barrier` overtook feedback queue `q`: what is
    /// queued before its marker completes the checkpoint's feedback channel
    /// state on `q` (module docs). An aligned barrier there is only an
    /// announcement (aligned timeout): its marker is queued on `q`.
    pub(super) fn on_feedback_overtake(&mut self, q: usize, barrier: Barrier) -> Result<()> {
        let Some(head) = self.kind.loop_head_mut() else {
            return Ok(());
        };
        if !barrier.aligned {
            // Channels are FIFO: an older barrier that has not come back on
            // `q` never will (its checkpoint was aborted in the body).
            head.pending
                .retain(|p| p.barrier.id >= barrier.id || p.returned[q]);
        }
        let queue = head.feedback[q].queue.clone();
        let Some(p) = head
            .pending
            .iter_mut()
            .find(|p| p.barrier.id == barrier.id && !p.returned[q])
        else {
            return Ok(()); // aborted, or its marker was read in-band already
        };
        let FeedbackLog::Channel(log) = &mut p.log else {
            // A FLIP-16 log: the marker comes in-band, unless the checkpoint
            // switches; an unaligned barrier means the body switched it
            // (its aligned timeout passed), so the head switches too.
            p.announced[q] = true;
            if barrier.aligned {
                return Ok(());
            }
            return self.switch_loop_checkpoint(barrier.id);
        };
        // `None`: the marker was read in-band before the priority slot was
        // looked at; `barrier_returned` completed the queue's state then.
        if let Some(overtaken) = queue.overtaken(barrier.id)? {
            log[q].extend(overtaken);
            p.returned[q] = true;
        }
        self.complete_loop_checkpoints()
    }

    /// Whether an aligned `barrier` may switch to unaligned on the aligned
    /// timeout (checkpoints only: savepoints stay aligned), so it is
    /// announced ahead of the queues.
    pub(super) fn may_time_out(&self, barrier: &Barrier) -> bool {
        self.aligned_timeout.is_some() && barrier.kind == BarrierKind::Checkpoint
    }

    /// When the oldest aligned loop checkpoint whose barrier has not come
    /// back around the cycle times out (its trigger plus the aligned
    /// timeout, as for a task's alignment in `unaligned.rs`).
    pub(super) fn loop_switch_deadline(&self) -> Option<Instant> {
        let timeout = self.aligned_timeout?;
        let head = self.kind.loop_head()?;
        let trigger_ms = head
            .pending
            .iter()
            .filter(|p| matches!(p.log, FeedbackLog::Flip16(_)) && self.may_time_out(&p.barrier))
            .map(|p| p.barrier.timestamp_ms)
            .min()?;
        let due_ms = trigger_ms + timeout.as_millis() as u64;
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        Some(Instant::now() + Duration::from_millis(due_ms.saturating_sub(now_ms)))
    }

    /// Switches every aligned loop checkpoint whose barrier's trip around
    /// the cycle outlasted the aligned timeout (`switch_loop_checkpoint`).
    pub(super) fn switch_timed_out_loop_checkpoints(&mut self) -> Result<()> {
        if self
            .loop_switch_deadline()
            .is_none_or(|d| Instant::now() < d)
        {
            return Ok(());
        }
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let timeout_ms = self
            .aligned_timeout
            .map_or(u64::MAX, |t| t.as_millis() as u64);
        let due: Vec<u64> = self
            .kind
            .loop_head()
            .map(|h| {
                h.pending
                    .iter()
                    .filter(|p| {
                        matches!(p.log, FeedbackLog::Flip16(_))
                            && self.may_time_out(&p.barrier)
                            && p.barrier.timestamp_ms.saturating_add(timeout_ms) <= now_ms
                    })
                    .map(|p| p.barrier.id)
                    .collect()
            })
            .unwrap_or_default();
        for id in due {
            self.switch_loop_checkpoint(id)?;
        }
        Ok(())
    }

    /// Aligned timeout at the loop head (DESIGN.md "Aligned timeout",
    /// "Loops"): the aligned loop checkpoint `id`, whose snapshot was taken
    /// and whose barrier went into the body in-band, becomes unaligned. What
    /// its FLIP-16 log collected so far (feedback read after the snapshot)
    /// is taken as the start of its feedback channel state, by reference
    /// (the log's spilled runs are sealed and referred to, not read); a
    /// feedback queue whose marker is already queued gives up what is
    /// queued before it (as an overtaking barrier would take it); the other
    /// queues are recorded, as in an unaligned checkpoint, until their
    /// barrier comes back (overtaking, announced or in-band). Together that
    /// is exactly what the FLIP-16 log would have held.
    pub(super) fn switch_loop_checkpoint(&mut self, id: u64) -> Result<()> {
        let Some(head) = self.kind.loop_head_mut() else {
            return Ok(());
        };
        let Some(p) = head.pending.iter_mut().find(|p| p.barrier.id == id) else {
            return Ok(());
        };
        let FeedbackLog::Flip16(log) = &p.log else {
            return Ok(()); // unaligned already
        };
        let mut queues: Vec<Vec<Overtaken>> = vec![Vec::new(); head.feedback.len()];
        // A marker behind everything logged seals the log's open spill
        // segment; what is before it is the log so far, by reference.
        log.push_overtaking(p.barrier)?;
        let _ = log.take_priority();
        let so_far = log.overtaken(id)?.unwrap_or_default();
        // The log queue lets go of its files; the references keep them on
        // disk until the checkpoint is written.
        log.close()?;
        // The log so far is in read order over the queues, so it goes first
        // (in queue 0's channel): each queue's records keep their order.
        if let Some(first) = queues.first_mut() {
            *first = so_far;
        }
        for (q, feedback) in head.feedback.iter().enumerate() {
            if p.returned[q] || !p.announced[q] {
                continue;
            }
            if let Some(overtaken) = feedback.queue.overtaken(id)? {
                queues[q].extend(overtaken);
                p.returned[q] = true;
            }
        }
        p.log = FeedbackLog::Channel(queues);
        p.barrier.aligned = false;
        self.complete_loop_checkpoints()
    }

    /// Every loop input channel delivered the unaligned barrier of
    /// checkpoint `id` (or ended): `channels` is their channel state.
    pub(super) fn loop_inputs_captured(
        &mut self,
        id: u64,
        channels: Option<OperatorState>,
        alignment: Duration,
    ) -> Result<()> {
        let Some(head) = self.kind.loop_head_mut() else {
            return Ok(());
        };
        if let Some(p) = head.pending.iter_mut().find(|p| p.barrier.id == id) {
            p.inputs = Some(channels);
            p.alignment = alignment;
        }
        self.complete_loop_checkpoints()
    }
}
