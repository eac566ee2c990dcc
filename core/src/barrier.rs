//! Barrier alignment for one task with several input channels.
//!
//! Implements the "Exactly Once vs. At Least Once" rules of the seed
//! `flink-fault-tolerance-mechanism.txt` (the barrier alignment bullet list),
//! plus FLIP-147's rule that a channel that delivered EndOfData counts as
//! having delivered every later barrier.
//!
//! [`BarrierAligner`] is a pure state machine: it does no I/O and never reads
//! a clock (the caller passes `now`). The task feeds it every barrier and
//! every EndOfData it reads and obeys the [`AlignerAction`] it gets back:
//!
//! * **Exactly-once.** When barrier `n` arrives on a channel, that channel is
//!   blocked ([`AlignerAction::Block`]): the task stops reading it and its
//!   records stay queued, so they cannot leak into the state of snapshot `n`.
//!   When barrier `n` has arrived on every live channel the task snapshots
//!   ([`AlignerAction::Snapshot`]) and resumes reading the channels listed in
//!   `unblock`. Only one alignment is in progress at a time.
//! * **At-least-once.** Nothing is ever blocked. The snapshot is taken when
//!   the *last* channel delivers barrier `n`. Several checkpoints may be in
//!   flight at once (a fast channel may deliver barrier `n + 1` before a slow
//!   one delivers `n`); when checkpoint `n` completes, older ones still
//!   pending are dropped silently, as Flink's `CheckpointBarrierTracker` does
//!   (the coordinator sees them subsumed by `n`).
//!
//! Ids only move forward. A barrier whose id is not newer than the last
//! checkpoint that completed, was aborted or was cancelled is stale and
//! ignored. In exactly-once mode a barrier with a *newer* id arriving while
//! an older alignment is pending aborts the older one, as Flink cancels the
//! older checkpoint: the action is [`AlignerAction::AbortAndStart`], which
//! unblocks the channels held for the old checkpoint and blocks the channel
//! that delivered the new barrier. A barrier repeated on a channel that
//! already delivered it for the pending checkpoint is ignored.
//!
//! Unaligned barriers (`Barrier::aligned == false`) never reach the aligner:
//! the task captures channel state instead (`runtime/task/unaligned.rs`,
//! FLIP-76). With an aligned-checkpoint timeout (Flink's
//! `aligned-checkpoint-timeout`) the task asks [`BarrierAligner::pending_since`]
//! how long the exactly-once alignment in progress has run and, past the
//! timeout, takes it over with [`BarrierAligner::give_up_for_unaligned`].

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::event::Barrier;

/// How a task with several inputs treats barriers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AlignmentMode {
    /// Block each channel from its barrier until all barriers arrived.
    ExactlyOnce,
    /// Never block; snapshot when the last barrier arrives.
    AtLeastOnce,
}

/// What the task must do after telling the aligner about an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AlignerAction {
    /// Keep reading as before.
    Nothing,
    /// Exactly-once: stop reading this channel until it is unblocked.
    Block(usize),
    /// Barrier `barrier.id` has arrived on every live channel: snapshot the
    /// operators, forward the barrier, then resume reading `unblock` (empty
    /// in at-least-once mode). `alignment` is the time from the first to the
    /// last barrier of this checkpoint.
    Snapshot {
        barrier: Barrier,
        unblock: Vec<usize>,
        alignment: Duration,
    },
    /// Exactly-once: a barrier of the newer checkpoint `started` arrived while
    /// checkpoint `aborted` was still aligning. `aborted` is given up (the
    /// task declines it); resume reading `unblock` and stop reading `block`,
    /// the channel that delivered the new barrier (`None` when the new
    /// checkpoint completed at once, which cannot happen with two or more
    /// live channels).
    AbortAndStart {
        aborted: u64,
        unblock: Vec<usize>,
        started: u64,
        block: Option<usize>,
    },
    /// The alignment of checkpoint `aborted` was cancelled
    /// ([`BarrierAligner::on_cancel`]): resume reading `unblock`.
    Abort { aborted: u64, unblock: Vec<usize> },
}

/// At most this many checkpoints are tracked at once in at-least-once mode;
/// beyond it the oldest is dropped (it can no longer complete).
const MAX_TRACKED: usize = 64;

/// One checkpoint whose barriers are arriving.
#[derive(Debug)]
struct Pending {
    barrier: Barrier,
    /// When its first barrier arrived.
    started: Instant,
    /// Per channel: its barrier arrived.
    arrived: Vec<bool>,
    /// Live channels whose barrier has not arrived yet.
    missing: usize,
}

/// The barrier-alignment state machine of one task (see the module docs).
#[derive(Debug)]
pub struct BarrierAligner {
    mode: AlignmentMode,
    ended: Vec<bool>,
    blocked: Vec<bool>,
    live: usize,
    /// Pending checkpoints by ascending id; at most one in exactly-once mode.
    pending: VecDeque<Pending>,
    /// Highest id that completed, was aborted or cancelled.
    settled: Option<u64>,
}

impl BarrierAligner {
    /// An aligner for a task reading `num_channels` channels.
    pub fn new(num_channels: usize, mode: AlignmentMode) -> Self {
        BarrierAligner {
            mode,
            ended: vec![false; num_channels],
            blocked: vec![false; num_channels],
            live: num_channels,
            pending: VecDeque::new(),
            settled: None,
        }
    }

    /// The alignment mode.
    pub fn mode(&self) -> AlignmentMode {
        self.mode
    }

    /// Number of channels (live or ended).
    pub fn num_channels(&self) -> usize {
        self.ended.len()
    }

    /// Number of channels that have not delivered EndOfData.
    pub fn num_live(&self) -> usize {
        self.live
    }

    /// Whether the task must not read `channel` now (always `false` in
    /// at-least-once mode and for unknown channels).
    pub fn is_blocked(&self, channel: usize) -> bool {
        self.blocked.get(channel).copied().unwrap_or(false)
    }

    /// Whether `channel` delivered EndOfData.
    pub fn is_ended(&self, channel: usize) -> bool {
        self.ended.get(channel).copied().unwrap_or(false)
    }

    /// The ids of the checkpoints whose barriers are arriving, oldest first.
    pub fn pending(&self) -> Vec<u64> {
        self.pending.iter().map(|p| p.barrier.id).collect()
    }

    /// Channels currently blocked, ascending.
    pub fn blocked_channels(&self) -> Vec<usize> {
        (0..self.blocked.len())
            .filter(|&c| self.blocked[c])
            .collect()
    }

    /// When the exactly-once alignment in progress began (its first barrier
    /// arrived), if one is in progress.
    pub fn pending_since(&self) -> Option<(Barrier, Instant)> {
        match self.mode {
            AlignmentMode::ExactlyOnce => self.pending.front().map(|p| (p.barrier, p.started)),
            AlignmentMode::AtLeastOnce => None,
        }
    }

    /// Hands the exactly-once alignment in progress over to an unaligned
    /// checkpoint (its alignment timed out): returns its barrier and which
    /// channels already delivered it, unblocks every channel, and ignores
    /// later barriers of that checkpoint (the task tracks them itself).
    pub fn give_up_for_unaligned(&mut self) -> Option<(Barrier, Vec<bool>, Vec<usize>)> {
        if self.mode != AlignmentMode::ExactlyOnce {
            return None;
        }
        let p = self.pending.pop_front()?;
        self.settled = Some(p.barrier.id);
        let unblock = self.unblock_all();
        Some((p.barrier, p.arrived, unblock))
    }

    /// Barrier `barrier` was read from `channel` at `now`.
    pub fn on_barrier(&mut self, channel: usize, barrier: Barrier, now: Instant) -> AlignerAction {
        debug_assert!(
            channel < self.ended.len(),
            "barrier on unknown channel {channel}"
        );
        if channel >= self.ended.len() || self.ended[channel] {
            // An ended channel already counts as having delivered it.
            return AlignerAction::Nothing;
        }
        if self.settled.is_some_and(|s| barrier.id <= s) {
            return AlignerAction::Nothing;
        }
        match self.mode {
            AlignmentMode::ExactlyOnce => self.exactly_once_barrier(channel, barrier, now),
            AlignmentMode::AtLeastOnce => self.at_least_once_barrier(channel, barrier, now),
        }
    }

    fn exactly_once_barrier(
        &mut self,
        channel: usize,
        barrier: Barrier,
        now: Instant,
    ) -> AlignerAction {
        let current = self.pending.front().map(|p| p.barrier.id);
        match current {
            Some(id) if barrier.id < id => AlignerAction::Nothing,
            Some(id) if barrier.id == id => self.arrive(0, channel, now),
            Some(old) => {
                // A newer checkpoint overtakes the pending one: abort it.
                self.pending.clear();
                self.settled = Some(old);
                let unblock = self.unblock_all();
                self.pending.push_back(self.new_pending(barrier, now));
                let block = match self.arrive(0, channel, now) {
                    AlignerAction::Block(c) => Some(c),
                    _ => None,
                };
                AlignerAction::AbortAndStart {
                    aborted: old,
                    unblock: unblock.into_iter().filter(|&c| Some(c) != block).collect(),
                    started: barrier.id,
                    block,
                }
            }
            None => {
                self.pending.push_back(self.new_pending(barrier, now));
                self.arrive(0, channel, now)
            }
        }
    }

    fn at_least_once_barrier(
        &mut self,
        channel: usize,
        barrier: Barrier,
        now: Instant,
    ) -> AlignerAction {
        if let Some(index) = self.pending.iter().position(|p| p.barrier.id == barrier.id) {
            return self.arrive(index, channel, now);
        }
        let newest = self.pending.back().map(|p| p.barrier.id);
        if newest.is_some_and(|n| barrier.id < n) {
            // Older than a pending one yet unknown: its barriers were skipped.
            return AlignerAction::Nothing;
        }
        if self.pending.len() == MAX_TRACKED {
            if let Some(dropped) = self.pending.pop_front() {
                self.settled = Some(dropped.barrier.id);
            }
        }
        self.pending.push_back(self.new_pending(barrier, now));
        self.arrive(self.pending.len() - 1, channel, now)
    }

    fn new_pending(&self, barrier: Barrier, now: Instant) -> Pending {
        Pending {
            barrier,
            started: now,
            arrived: vec![false; self.ended.len()],
            missing: self.live,
        }
    }

    /// Records the barrier of `pending[index]` on live `channel`.
    fn arrive(&mut self, index: usize, channel: usize, now: Instant) -> AlignerAction {
        let Some(p) = self.pending.get_mut(index) else {
            return AlignerAction::Nothing;
        };
        if p.arrived[channel] {
            return AlignerAction::Nothing;
        }
        p.arrived[channel] = true;
        p.missing -= 1;
        if p.missing == 0 {
            return self.complete(index, now);
        }
        match self.mode {
            AlignmentMode::ExactlyOnce => {
                self.blocked[channel] = true;
                AlignerAction::Block(channel)
            }
            AlignmentMode::AtLeastOnce => AlignerAction::Nothing,
        }
    }

    /// `pending[index]` has all its barriers: drop it and everything older.
    fn complete(&mut self, index: usize, now: Instant) -> AlignerAction {
        let mut done = None;
        for _ in 0..=index {
            done = self.pending.pop_front();
        }
        let Some(done) = done else {
            return AlignerAction::Nothing;
        };
        self.settled = Some(done.barrier.id);
        AlignerAction::Snapshot {
            barrier: done.barrier,
            unblock: self.unblock_all(),
            alignment: now.saturating_duration_since(done.started),
        }
    }

    fn unblock_all(&mut self) -> Vec<usize> {
        let unblock = self.blocked_channels();
        self.blocked.iter_mut().for_each(|b| *b = false);
        unblock
    }

    /// `channel` delivered EndOfData at `now`: it counts as having delivered
    /// every later barrier, so a pending checkpoint may complete now
    /// (FLIP-147). Returns the snapshot to take, if any.
    pub fn on_end_of_data(&mut self, channel: usize, now: Instant) -> Option<AlignerAction> {
        debug_assert!(
            channel < self.ended.len(),
            "EndOfData on unknown channel {channel}"
        );
        if channel >= self.ended.len() || self.ended[channel] {
            return None;
        }
        self.ended[channel] = true;
        self.blocked[channel] = false;
        self.live -= 1;
        for p in &mut self.pending {
            if !p.arrived[channel] {
                p.missing -= 1;
            }
        }
        let newest_done = self.pending.iter().rposition(|p| p.missing == 0)?;
        Some(self.complete(newest_done, now))
    }

    /// Cancels checkpoint `checkpoint_id` (the coordinator aborted it). A
    /// pending alignment with this id or an older one is given up and its
    /// channels unblocked; later barriers of `checkpoint_id` (or older) are
    /// ignored. Returns [`AlignerAction::Abort`] naming the newest alignment
    /// given up, or `Nothing` if none was pending.
    pub fn on_cancel(&mut self, checkpoint_id: u64) -> AlignerAction {
        self.settled = Some(self.settled.map_or(checkpoint_id, |s| s.max(checkpoint_id)));
        let mut aborted = None;
        while self
            .pending
            .front()
            .is_some_and(|p| p.barrier.id <= checkpoint_id)
        {
            aborted = self.pending.pop_front().map(|p| p.barrier.id);
        }
        match aborted {
            Some(aborted) => AlignerAction::Abort {
                aborted,
                unblock: self.unblock_all(),
            },
            None => AlignerAction::Nothing,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::BarrierKind;

    fn barrier(id: u64) -> Barrier {
        Barrier {
            id,
            kind: BarrierKind::Checkpoint,
            aligned: true,
            timestamp_ms: 0,
        }
    }

    fn at(t0: Instant, ms: u64) -> Instant {
        t0 + Duration::from_millis(ms)
    }

    #[test]
    fn test_exactly_once_blocks_until_all_barriers_arrived() {
        let t0 = Instant::now();
        let mut a = BarrierAligner::new(3, AlignmentMode::ExactlyOnce);
        assert_eq!(a.on_barrier(1, barrier(1), t0), AlignerAction::Block(1));
        assert!(a.is_blocked(1));
        assert_eq!(
            a.on_barrier(0, barrier(1), at(t0, 2)),
            AlignerAction::Block(0)
        );
        assert_eq!(a.blocked_channels(), vec![0, 1]);
        assert_eq!(
            a.on_barrier(2, barrier(1), at(t0, 5)),
            AlignerAction::Snapshot {
                barrier: barrier(1),
                unblock: vec![0, 1],
                alignment: Duration::from_millis(5),
            }
        );
        assert!(a.blocked_channels().is_empty());
        assert!(a.pending().is_empty());
    }

    #[test]
    fn test_single_channel_snapshots_at_once() {
        let t0 = Instant::now();
        let mut a = BarrierAligner::new(1, AlignmentMode::ExactlyOnce);
        assert_eq!(
            a.on_barrier(0, barrier(4), t0),
            AlignerAction::Snapshot {
                barrier: barrier(4),
                unblock: vec![],
                alignment: Duration::ZERO,
            }
        );
        assert!(!a.is_blocked(0));
    }

    #[test]
    fn test_at_least_once_never_blocks_and_snapshots_on_last_barrier() {
        let t0 = Instant::now();
        let mut a = BarrierAligner::new(2, AlignmentMode::AtLeastOnce);
        assert_eq!(a.on_barrier(0, barrier(1), t0), AlignerAction::Nothing);
        assert!(!a.is_blocked(0));
        // Channel 0 runs ahead: checkpoint 2 is tracked beside 1.
        assert_eq!(
            a.on_barrier(0, barrier(2), at(t0, 1)),
            AlignerAction::Nothing
        );
        assert_eq!(a.pending(), vec![1, 2]);
        assert_eq!(
            a.on_barrier(1, barrier(1), at(t0, 3)),
            AlignerAction::Snapshot {
                barrier: barrier(1),
                unblock: vec![],
                alignment: Duration::from_millis(3),
            }
        );
        assert!(matches!(
            a.on_barrier(1, barrier(2), at(t0, 4)),
            AlignerAction::Snapshot { barrier: b, .. } if b.id == 2
        ));
    }

    #[test]
    fn test_at_least_once_newer_completion_subsumes_older() {
        let t0 = Instant::now();
        let mut a = BarrierAligner::new(3, AlignmentMode::AtLeastOnce);
        a.on_barrier(0, barrier(1), t0);
        a.on_barrier(0, barrier(2), t0);
        a.on_barrier(1, barrier(2), t0);
        // Channel 2 ends: checkpoint 2 misses nothing more and completes;
        // 1 still misses channel 1 and is subsumed.
        let action = a.on_end_of_data(2, t0);
        assert!(matches!(action, Some(AlignerAction::Snapshot { barrier: b, .. }) if b.id == 2));
        assert!(a.pending().is_empty());
        // The late barrier 1 of channel 1 is stale now.
        assert_eq!(a.on_barrier(1, barrier(1), t0), AlignerAction::Nothing);
    }

    #[test]
    fn test_newer_barrier_aborts_pending_alignment() {
        let t0 = Instant::now();
        let mut a = BarrierAligner::new(3, AlignmentMode::ExactlyOnce);
        a.on_barrier(0, barrier(1), t0);
        a.on_barrier(1, barrier(1), t0);
        assert_eq!(
            a.on_barrier(2, barrier(2), t0),
            AlignerAction::AbortAndStart {
                aborted: 1,
                unblock: vec![0, 1],
                started: 2,
                block: Some(2),
            }
        );
        assert_eq!(a.blocked_channels(), vec![2]);
        // Barrier 1 arriving late on channel 2 is stale.
        assert_eq!(a.on_barrier(2, barrier(1), t0), AlignerAction::Nothing);
        assert_eq!(a.on_barrier(0, barrier(2), t0), AlignerAction::Block(0));
        assert!(matches!(
            a.on_barrier(1, barrier(2), t0),
            AlignerAction::Snapshot { barrier: b, unblock, .. } if b.id == 2 && unblock == vec![0, 2]
        ));
    }

    #[test]
    fn test_stale_and_repeated_barriers_are_ignored() {
        let t0 = Instant::now();
        let mut a = BarrierAligner::new(2, AlignmentMode::ExactlyOnce);
        a.on_barrier(0, barrier(3), t0);
        assert_eq!(a.on_barrier(0, barrier(3), t0), AlignerAction::Nothing);
        assert_eq!(a.on_barrier(1, barrier(2), t0), AlignerAction::Nothing);
        assert!(matches!(
            a.on_barrier(1, barrier(3), t0),
            AlignerAction::Snapshot { .. }
        ));
        assert_eq!(a.on_barrier(0, barrier(3), t0), AlignerAction::Nothing);
        assert_eq!(a.on_barrier(0, barrier(1), t0), AlignerAction::Nothing);
        assert!(a.pending().is_empty());
    }

    #[test]
    fn test_end_of_data_completes_pending_checkpoint() {
        let t0 = Instant::now();
        let mut a = BarrierAligner::new(3, AlignmentMode::ExactlyOnce);
        a.on_barrier(0, barrier(1), t0);
        assert_eq!(a.on_end_of_data(1, at(t0, 1)), None);
        assert_eq!(a.num_live(), 2);
        assert_eq!(
            a.on_end_of_data(2, at(t0, 7)),
            Some(AlignerAction::Snapshot {
                barrier: barrier(1),
                unblock: vec![0],
                alignment: Duration::from_millis(7),
            })
        );
        // Only channel 0 is live: the next barrier completes at once.
        assert!(matches!(
            a.on_barrier(0, barrier(2), t0),
            AlignerAction::Snapshot { .. }
        ));
        // Barriers on an ended channel change nothing.
        assert_eq!(a.on_barrier(1, barrier(3), t0), AlignerAction::Nothing);
        assert_eq!(a.on_end_of_data(1, t0), None);
    }

    #[test]
    fn test_timed_out_alignment_is_given_up_for_unaligned() {
        let t0 = Instant::now();
        let mut a = BarrierAligner::new(3, AlignmentMode::ExactlyOnce);
        assert_eq!(a.pending_since(), None);
        a.on_barrier(2, barrier(4), at(t0, 3));
        assert_eq!(a.pending_since(), Some((barrier(4), at(t0, 3))));
        let (b, arrived, unblock) = a.give_up_for_unaligned().expect("pending");
        assert_eq!(
            (b, arrived, unblock),
            (barrier(4), vec![false, false, true], vec![2])
        );
        assert!(a.blocked_channels().is_empty());
        assert_eq!(a.pending_since(), None);
        // The checkpoint's later barriers are the task's business now.
        assert_eq!(a.on_barrier(0, barrier(4), t0), AlignerAction::Nothing);
        assert_eq!(a.give_up_for_unaligned(), None);
    }

    #[test]
    fn test_cancel_unblocks_and_ignores_later_barriers() {
        let t0 = Instant::now();
        let mut a = BarrierAligner::new(2, AlignmentMode::ExactlyOnce);
        a.on_barrier(1, barrier(5), t0);
        assert_eq!(
            a.on_cancel(5),
            AlignerAction::Abort {
                aborted: 5,
                unblock: vec![1],
            }
        );
        assert!(!a.is_blocked(1));
        assert_eq!(a.on_barrier(0, barrier(5), t0), AlignerAction::Nothing);
        // Cancelling a checkpoint that never started ignores its barriers.
        assert_eq!(a.on_cancel(6), AlignerAction::Nothing);
        assert_eq!(a.on_barrier(0, barrier(6), t0), AlignerAction::Nothing);
        assert_eq!(a.on_barrier(0, barrier(7), t0), AlignerAction::Block(0));
        // A cancel of an older id leaves the newer alignment alone.
        assert_eq!(a.on_cancel(6), AlignerAction::Nothing);
        assert!(a.is_blocked(0));
    }
}
