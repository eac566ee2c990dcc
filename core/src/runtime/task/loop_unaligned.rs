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

use std::time::Duration;

use super::loop_head::{FeedbackLog, LoopHead};
use super::Task;
use crate::error::Result;
use crate::event::Barrier;
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
    /// state on `q` (module docs).
    pub(super) fn on_feedback_overtake(&mut self, q: usize, barrier: Barrier) -> Result<()> {
        let Some(head) = self.loop_head.as_deref_mut() else {
            return Ok(());
        };
        // Channels are FIFO: an older barrier that has not come back on `q`
        // never will (its checkpoint was aborted in the body).
        head.pending
            .retain(|p| p.barrier.id >= barrier.id || p.returned[q]);
        let queue = head.feedback[q].queue.clone();
        let Some(p) = head
            .pending
            .iter_mut()
            .find(|p| p.barrier.id == barrier.id && !p.returned[q])
        else {
            return Ok(()); // aborted, or its marker was read in-band already
        };
        let FeedbackLog::Channel(log) = &mut p.log else {
            return Ok(()); // an aligned checkpoint's barrier comes in-band
        };
        // `None`: the marker was read in-band before the priority slot was
        // looked at; `barrier_returned` completed the queue's state then.
        if let Some(overtaken) = queue.overtaken(barrier.id)? {
            log[q].extend(overtaken);
            p.returned[q] = true;
        }
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
        let Some(head) = self.loop_head.as_deref_mut() else {
            return Ok(());
        };
        if let Some(p) = head.pending.iter_mut().find(|p| p.barrier.id == id) {
            p.inputs = Some(channels);
            p.alignment = alignment;
        }
        self.complete_loop_checkpoints()
    }
}
