//! Replaying restored channel state (FLIP-76; DESIGN.md "Unaligned
//! checkpoints", "Replay").
//!
//! On restore from an unaligned checkpoint each input channel gets the
//! batches it held in flight (at another parallelism: dealt out by
//! `checkpoint/channel_rescale.rs`) in front of its pending events. The
//! task processes all of them, round-robin over the channels and in order
//! within each, before it reads any new data from any channel: at another
//! parallelism a key's or a split's next records may come on another
//! channel than its replayed ones, and must not overtake them. Control
//! messages and overtaking barriers are still served meanwhile (a barrier
//! that overtakes the replay finds the rest of it pending, which is then
//! that checkpoint's channel state).

use arrow::record_batch::RecordBatch;

use super::*;

impl Task {
    /// Puts restored channel state in front of each input channel.
    pub(crate) fn restore_channels(&mut self, channels: Vec<Vec<RecordBatch>>) -> Result<()> {
        let name = self.chain.first().map_or("", |c| &c.slot.name).to_string();
        if channels.len() != self.inputs.len() {
            return Err(Error::checkpoint(
                None,
                format!(
                    "the unaligned checkpoint holds in-flight data of {} input channels of \
                     operator '{name}', but the job now has {}: the job's inputs changed since \
                     the checkpoint (restore it with the job that took it)",
                    channels.len(),
                    self.inputs.len()
                ),
            ));
        }
        for (ch, batches) in self.inputs.iter_mut().zip(channels) {
            let n = batches.len();
            // Restored before the task reads anything: nothing is pending.
            let before = std::mem::take(&mut ch.pending);
            ch.pending
                .extend(batches.into_iter().map(|b| ((Event::Data(b), 0), false)));
            ch.pending.extend(before);
            ch.restored += n;
            self.unaligned.replaying += n;
        }
        Ok(())
    }

    /// The next restored event, round-robin from `cursor`; `None` once
    /// everything restored was taken (an overtaking barrier may have moved
    /// it on as its own channel state: it stays pending, in order).
    pub(crate) fn poll_replay(&mut self, cursor: &mut usize) -> Option<(usize, Event)> {
        let n = self.inputs.len();
        for k in 0..n {
            let i = (*cursor + k) % n;
            let ch = &mut self.inputs[i];
            if ch.restored == 0 || ch.ended {
                continue;
            }
            let Some(((event, _), _)) = ch.pending.pop_front() else {
                self.unaligned.replaying -= ch.restored;
                ch.restored = 0;
                continue;
            };
            ch.restored -= 1;
            self.unaligned.replaying -= 1;
            *cursor = (i + 1) % n;
            // Restored events never crossed the channel: no credit to
            // return, nothing of the channel's space to give back.
            self.output.timer.waited(std::time::Duration::ZERO, false);
            return Some((i, event));
        }
        self.unaligned.replaying = 0;
        None
    }
}
