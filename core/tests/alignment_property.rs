//! Barrier alignment protocol (flink-fault-tolerance-mechanism.txt, "Exactly
//! Once vs. At Least Once"): a simulated task reads random interleavings of
//! records, barriers and EndOfData from 2-5 channels, respecting
//! `BarrierAligner::is_blocked`, and the state at each snapshot is checked
//! against what was sent before that barrier on every channel.

use std::collections::{BTreeSet, VecDeque};
use std::time::{Duration, Instant};

use eddyline_core::barrier::{AlignerAction, AlignmentMode, BarrierAligner};
use eddyline_core::event::{Barrier, BarrierKind};
use proptest::prelude::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ev {
    /// Record (channel, sequence number).
    Record(usize, u32),
    Barrier(u64),
    End,
}

/// What one channel sends.
#[derive(Debug, Clone)]
struct ChannelPlan {
    /// Records before barrier 1, between barriers, and after the last one.
    gaps: Vec<u32>,
    /// Number of barriers sent (0..=k); fewer than k means the channel ends
    /// early (FLIP-147), which it then must do.
    barriers: usize,
    ends: bool,
}

fn channel_events(c: usize, plan: &ChannelPlan, k: usize) -> Vec<Ev> {
    let mut evs = Vec::new();
    let mut seq = 0;
    for (i, gap) in plan.gaps.iter().enumerate().take(plan.barriers + 1) {
        for _ in 0..*gap {
            evs.push(Ev::Record(c, seq));
            seq += 1;
        }
        if i < plan.barriers {
            evs.push(Ev::Barrier(i as u64 + 1));
        }
    }
    if plan.ends || plan.barriers < k {
        evs.push(Ev::End);
    }
    evs
}

/// Records of channel `c` before its barrier `id`, or all of them if it
/// ended before sending it.
fn expected_before(events: &[Ev], id: u64) -> BTreeSet<(usize, u32)> {
    let mut out = BTreeSet::new();
    for ev in events {
        match ev {
            Ev::Record(c, s) => {
                out.insert((*c, *s));
            }
            Ev::Barrier(b) if *b == id => break,
            _ => {}
        }
    }
    out
}

fn barrier(id: u64) -> Barrier {
    Barrier {
        id,
        kind: BarrierKind::Checkpoint,
        aligned: true,
        timestamp_ms: 0,
    }
}

#[derive(Debug)]
struct Outcome {
    /// (checkpoint id, state at the snapshot).
    snapshots: Vec<(u64, BTreeSet<(usize, u32)>)>,
    /// Every event left unread (a deadlock if not empty).
    leftover: usize,
    aborted: Vec<u64>,
}

/// Runs a task over `events` per channel, reading the channel the schedule
/// picks among the readable ones, cancelling at the given steps.
fn simulate(
    mode: AlignmentMode,
    events: &[Vec<Ev>],
    schedule: &[u8],
    cancels: &[(usize, u64)],
) -> Result<Outcome, TestCaseError> {
    let n = events.len();
    let mut queues: Vec<VecDeque<Ev>> =
        events.iter().map(|e| e.iter().copied().collect()).collect();
    let mut aligner = BarrierAligner::new(n, mode);
    let mut ended = vec![false; n];
    let mut state = BTreeSet::new();
    let mut out = Outcome {
        snapshots: Vec::new(),
        leftover: 0,
        aborted: Vec::new(),
    };
    let t0 = Instant::now();
    let mut step = 0usize;
    loop {
        let now = t0 + Duration::from_millis(step as u64);
        for (_, id) in cancels.iter().filter(|(at, _)| *at == step) {
            if let AlignerAction::Abort { aborted, unblock } = aligner.on_cancel(*id) {
                out.aborted.push(aborted);
                for c in unblock {
                    prop_assert!(!aligner.is_blocked(c));
                }
            }
        }
        if mode == AlignmentMode::AtLeastOnce {
            prop_assert!(
                aligner.blocked_channels().is_empty(),
                "at-least-once blocked"
            );
        }
        let readable: Vec<usize> = (0..n)
            .filter(|&c| !ended[c] && !aligner.is_blocked(c) && !queues[c].is_empty())
            .collect();
        if readable.is_empty() {
            break;
        }
        let pick = schedule
            .get(step % schedule.len().max(1))
            .copied()
            .unwrap_or(0);
        let c = readable[pick as usize % readable.len()];
        step += 1;
        let Some(ev) = queues[c].pop_front() else {
            break;
        };
        let action = match ev {
            Ev::Record(ch, s) => {
                state.insert((ch, s));
                None
            }
            Ev::Barrier(id) => Some(aligner.on_barrier(c, barrier(id), now)),
            Ev::End => {
                ended[c] = true;
                aligner.on_end_of_data(c, now)
            }
        };
        match action {
            None | Some(AlignerAction::Nothing) => {}
            Some(AlignerAction::Block(b)) => {
                prop_assert_eq!(mode, AlignmentMode::ExactlyOnce);
                prop_assert_eq!(b, c);
                prop_assert!(aligner.is_blocked(c));
            }
            Some(AlignerAction::Snapshot {
                barrier,
                unblock,
                alignment,
            }) => {
                prop_assert!(alignment <= now - t0);
                if mode == AlignmentMode::AtLeastOnce {
                    prop_assert!(unblock.is_empty());
                }
                prop_assert!(aligner.blocked_channels().is_empty());
                out.snapshots.push((barrier.id, state.clone()));
            }
            Some(other) => {
                prop_assert!(false, "unexpected action {:?}", other);
            }
        }
    }
    out.leftover = queues.iter().map(VecDeque::len).sum();
    Ok(out)
}

fn plans() -> impl Strategy<Value = (usize, Vec<ChannelPlan>)> {
    (2usize..=5, 1usize..=4).prop_flat_map(|(n, k)| {
        let plan = (
            prop::collection::vec(0u32..4, k + 1),
            prop_oneof![3 => Just(k), 1 => 0..=k],
            any::<bool>(),
        )
            .prop_map(|(gaps, barriers, ends)| ChannelPlan {
                gaps,
                barriers,
                ends,
            });
        (Just(k), prop::collection::vec(plan, n))
    })
}

/// Checkpoint ids that at least one channel sends a barrier for.
fn triggered(events: &[Vec<Ev>]) -> BTreeSet<u64> {
    events
        .iter()
        .flatten()
        .filter_map(|e| match e {
            Ev::Barrier(id) => Some(*id),
            _ => None,
        })
        .collect()
}

fn expected_state(events: &[Vec<Ev>], id: u64) -> BTreeSet<(usize, u32)> {
    events.iter().flat_map(|e| expected_before(e, id)).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn alignment_exactly_once_snapshots_exactly_the_records_before_the_barrier(
        (k, plans) in plans(),
        schedule in prop::collection::vec(any::<u8>(), 1..64),
    ) {
        let events: Vec<Vec<Ev>> =
            plans.iter().enumerate().map(|(c, p)| channel_events(c, p, k)).collect();
        let out = simulate(AlignmentMode::ExactlyOnce, &events, &schedule, &[])?;
        prop_assert_eq!(out.leftover, 0, "the task deadlocked");
        let ids: Vec<u64> = out.snapshots.iter().map(|(id, _)| *id).collect();
        let want: Vec<u64> = triggered(&events).into_iter().collect();
        prop_assert_eq!(ids, want, "every triggered checkpoint completes once, in order");
        for (id, state) in &out.snapshots {
            prop_assert_eq!(state, &expected_state(&events, *id), "checkpoint {}", id);
        }
    }

    #[test]
    fn alignment_exactly_once_stays_exact_across_cancellations(
        (k, plans) in plans(),
        schedule in prop::collection::vec(any::<u8>(), 1..64),
        cancels in prop::collection::vec((0usize..40, 1u64..=4), 0..3),
    ) {
        let events: Vec<Vec<Ev>> =
            plans.iter().enumerate().map(|(c, p)| channel_events(c, p, k)).collect();
        let out = simulate(AlignmentMode::ExactlyOnce, &events, &schedule, &cancels)?;
        prop_assert_eq!(out.leftover, 0, "the task deadlocked");
        let ids: Vec<u64> = out.snapshots.iter().map(|(id, _)| *id).collect();
        prop_assert!(ids.windows(2).all(|w| w[0] < w[1]), "ids {:?}", ids);
        for (id, state) in &out.snapshots {
            prop_assert!(!out.aborted.contains(id));
            prop_assert_eq!(state, &expected_state(&events, *id), "checkpoint {}", id);
        }
    }

    #[test]
    fn alignment_at_least_once_never_blocks_and_loses_nothing(
        (k, plans) in plans(),
        schedule in prop::collection::vec(any::<u8>(), 1..64),
    ) {
        let events: Vec<Vec<Ev>> =
            plans.iter().enumerate().map(|(c, p)| channel_events(c, p, k)).collect();
        let out = simulate(AlignmentMode::AtLeastOnce, &events, &schedule, &[])?;
        prop_assert_eq!(out.leftover, 0);
        let ids: Vec<u64> = out.snapshots.iter().map(|(id, _)| *id).collect();
        prop_assert!(ids.windows(2).all(|w| w[0] < w[1]), "ids {:?}", ids);
        let want = triggered(&events);
        prop_assert_eq!(ids.last(), want.last(), "the newest checkpoint completes");
        for (id, state) in &out.snapshots {
            prop_assert!(want.contains(id));
            let expected = expected_state(&events, *id);
            prop_assert!(expected.is_subset(state), "checkpoint {} misses records", id);
        }
    }
}
