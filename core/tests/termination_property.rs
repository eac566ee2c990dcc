//! Property test of the FLIP-15 termination protocol (`termination.rs`):
//! a simulated loop of 1-4 parallel heads, a body stage of 1-3 subtasks and
//! all-to-all feedback channels, driven by random schedules (random delivery
//! order over FIFO channels, slow channels, records that circulate up to k
//! times and sometimes fork, heads whose loop input ends late). The loop
//! never terminates while a record is in any channel or operator, and it
//! always terminates, within four rounds after the last record left.
#![allow(clippy::unwrap_used)]

use std::collections::VecDeque;

use eddyline_core::event::TerminationToken;
use eddyline_core::termination::{BodyTermination, HeadAction, LoopHeadTermination};
use proptest::prelude::*;

const LOOP: u32 = 7;
const MAX_STEPS: usize = 500_000;

#[derive(Debug, Clone)]
enum Msg {
    /// A record that must pass the head `ttl` more times before it leaves.
    Rec(u32),
    Tok(TerminationToken),
    End,
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Chan {
    Input(usize),
    ToBody(usize, usize),
    ToHead(usize, usize),
}

struct Sim {
    rng: Rng,
    input: Vec<VecDeque<Msg>>,
    to_body: Vec<Vec<VecDeque<Msg>>>,
    to_head: Vec<Vec<VecDeque<Msg>>>,
    weight: Vec<Vec<usize>>,
    heads: Vec<LoopHeadTermination>,
    bodies: Vec<BodyTermination>,
    body_done: Vec<bool>,
    /// Records in any channel (an operator handles a record atomically).
    alive: usize,
    left: usize,
    fork_one_in: usize,
    /// Highest round emitted by any head when the last record left.
    round_when_empty: Option<u64>,
}

impl Sim {
    fn records_in_channels(&self) -> usize {
        let count = |q: &VecDeque<Msg>| q.iter().filter(|m| matches!(m, Msg::Rec(_))).count();
        self.input.iter().map(count).sum::<usize>()
            + self.to_body.iter().flatten().map(count).sum::<usize>()
            + self.to_head.iter().flatten().map(count).sum::<usize>()
    }

    fn head_actions(&mut self, h: usize, actions: Vec<HeadAction>) {
        for action in actions {
            match action {
                HeadAction::Emit(t) => {
                    assert_eq!(t.loop_id, LOOP);
                    for q in &mut self.to_body[h] {
                        q.push_back(Msg::Tok(t));
                    }
                }
                HeadAction::Terminate => {
                    let inside = self.records_in_channels();
                    assert_eq!(inside, self.alive);
                    assert_eq!(
                        inside,
                        0,
                        "head {h} terminated at round {} with {inside} records in the loop",
                        self.heads[h].round()
                    );
                    for q in &mut self.to_body[h] {
                        q.push_back(Msg::End);
                    }
                }
            }
        }
    }

    fn head_record(&mut self, h: usize, ttl: u32) {
        self.heads[h]
            .on_record()
            .unwrap_or_else(|e| panic!("head {h}: {e}"));
        if ttl == 0 {
            self.alive -= 1;
            self.left += 1;
            if self.alive == 0 {
                self.round_when_empty = self.heads.iter().map(|h| h.round()).max();
            }
            return;
        }
        let copies = if ttl >= 2 && self.rng.below(self.fork_one_in) == 0 {
            2
        } else {
            1
        };
        self.alive += copies - 1;
        for _ in 0..copies {
            let b = self.rng.below(self.to_body[h].len());
            self.to_body[h][b].push_back(Msg::Rec(ttl - 1));
        }
    }

    fn deliver(&mut self, chan: Chan) {
        match chan {
            Chan::Input(h) => match self.input[h].pop_front() {
                Some(Msg::Rec(ttl)) => self.head_record(h, ttl),
                Some(Msg::End) => {
                    let actions = self.heads[h].on_input_ended(0).unwrap();
                    self.head_actions(h, actions);
                }
                other => panic!("unexpected input {other:?}"),
            },
            Chan::ToHead(b, h) => match self.to_head[b][h].pop_front() {
                Some(Msg::Rec(ttl)) => self.head_record(h, ttl),
                Some(Msg::Tok(t)) => {
                    let action = self.heads[h].on_feedback_token(b, t).unwrap();
                    self.head_actions(h, action.into_iter().collect());
                }
                Some(Msg::End) => assert!(self.heads[h].is_terminated()),
                None => unreachable!(),
            },
            Chan::ToBody(h, b) => match self.to_body[h][b].pop_front() {
                Some(Msg::Rec(ttl)) => {
                    self.bodies[b].on_record();
                    let target = self.rng.below(self.to_head[b].len());
                    self.to_head[b][target].push_back(Msg::Rec(ttl));
                }
                Some(Msg::Tok(t)) => {
                    if let Some(t) = self.bodies[b].on_token(h, t).unwrap() {
                        for q in &mut self.to_head[b] {
                            q.push_back(Msg::Tok(t));
                        }
                    }
                }
                Some(Msg::End) => {
                    for t in self.bodies[b].on_channel_ended(h).unwrap() {
                        for q in &mut self.to_head[b] {
                            q.push_back(Msg::Tok(t));
                        }
                    }
                    if self.bodies[b].all_ended() {
                        assert!(!self.body_done[b]);
                        self.body_done[b] = true;
                        for q in &mut self.to_head[b] {
                            q.push_back(Msg::End);
                        }
                    }
                }
                None => unreachable!(),
            },
        }
    }

    /// A random non-empty channel, slow channels chosen less often.
    fn pick(&mut self) -> Option<Chan> {
        let mut ready: Vec<(Chan, usize)> = Vec::new();
        for (h, q) in self.input.iter().enumerate() {
            if !q.is_empty() {
                ready.push((Chan::Input(h), 1));
            }
        }
        for (h, qs) in self.to_body.iter().enumerate() {
            for (b, q) in qs.iter().enumerate() {
                if !q.is_empty() {
                    ready.push((Chan::ToBody(h, b), 4));
                }
            }
        }
        for (b, qs) in self.to_head.iter().enumerate() {
            for (h, q) in qs.iter().enumerate() {
                if !q.is_empty() {
                    ready.push((Chan::ToHead(b, h), self.weight[b][h]));
                }
            }
        }
        let total: usize = ready.iter().map(|(_, w)| w).sum();
        if total == 0 {
            return None;
        }
        let mut x = self.rng.below(total);
        for (chan, w) in ready {
            if x < w {
                return Some(chan);
            }
            x -= w;
        }
        None
    }
}

#[derive(Debug, Clone)]
struct Case {
    heads: usize,
    bodies: usize,
    /// Per head: the ttl of each input record.
    inputs: Vec<Vec<u32>>,
    fork_one_in: usize,
    seed: u64,
}

fn case() -> impl Strategy<Value = Case> {
    (1usize..=4, 1usize..=3)
        .prop_flat_map(|(heads, bodies)| {
            (
                Just(heads),
                Just(bodies),
                prop::collection::vec(prop::collection::vec(0u32..8, 0..6), heads),
                2usize..10,
                any::<u64>(),
            )
        })
        .prop_map(|(heads, bodies, inputs, fork_one_in, seed)| Case {
            heads,
            bodies,
            inputs,
            fork_one_in,
            seed: seed | 1,
        })
}

fn run(case: &Case) {
    let mut rng = Rng(case.seed);
    let weight = (0..case.bodies)
        .map(|_| (0..case.heads).map(|_| 1 + rng.below(8)).collect())
        .collect();
    let mut sim = Sim {
        rng,
        input: case
            .inputs
            .iter()
            .map(|ttls| {
                let mut q: VecDeque<Msg> = ttls.iter().map(|t| Msg::Rec(*t)).collect();
                q.push_back(Msg::End);
                q
            })
            .collect(),
        to_body: vec![vec![VecDeque::new(); case.bodies]; case.heads],
        to_head: vec![vec![VecDeque::new(); case.heads]; case.bodies],
        weight,
        heads: (0..case.heads)
            .map(|_| LoopHeadTermination::new(LOOP, 1, case.bodies))
            .collect(),
        bodies: (0..case.bodies)
            .map(|_| BodyTermination::new(case.heads))
            .collect(),
        body_done: vec![false; case.bodies],
        alive: case.inputs.iter().map(Vec::len).sum(),
        left: 0,
        fork_one_in: case.fork_one_in,
        round_when_empty: None,
    };
    if sim.alive == 0 {
        sim.round_when_empty = Some(0);
    }
    let mut steps = 0;
    while let Some(chan) = sim.pick() {
        sim.deliver(chan);
        steps += 1;
        assert!(
            steps < MAX_STEPS,
            "the loop did not terminate within {MAX_STEPS} steps"
        );
    }
    assert_eq!(sim.alive, 0);
    let empty_at = sim.round_when_empty.expect("records left the loop");
    for (h, head) in sim.heads.iter().enumerate() {
        assert!(head.is_terminated(), "head {h} never terminated");
        assert!(
            head.round() <= empty_at + 4,
            "head {h} terminated at round {} but the loop was empty at round {empty_at}",
            head.round()
        );
    }
    assert!(sim.body_done.iter().all(|d| *d));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn test_termination_never_early_and_always_eventually(c in case()) {
        run(&c);
    }
}

#[test]
fn test_termination_idle_loop_ends_after_two_rounds() {
    for heads in 1..=4 {
        run(&Case {
            heads,
            bodies: 2,
            inputs: vec![Vec::new(); heads],
            fork_one_in: 2,
            seed: 99,
        });
    }
}

#[test]
fn test_termination_busy_loop_with_late_feedback() {
    for seed in 1..200u64 {
        run(&Case {
            heads: 4,
            bodies: 3,
            inputs: vec![vec![7, 7, 0, 3]; 4],
            fork_one_in: 3,
            seed: seed * 7919,
        });
    }
}
