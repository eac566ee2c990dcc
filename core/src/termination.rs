//! The FLIP-15 TerminationAttempt protocol as pure state machines.
//!
//! Implements section "III - The Job Termination Protocol" of the seed
//! `FLIP-15-scoped-loops-and-termination.txt` (the numbered protocol steps and
//! "Tricky Part: ... alignment"), with the token of `event.rs`
//! ([`TerminationToken`]: loop id, round, BUSY/IDLE). No I/O, no clock: the
//! task feeds events in and sends what it is told to send. There is no
//! timer anywhere; a loop ends when the protocol proves it empty.
//!
//! # Roles
//!
//! * [`LoopHeadTermination`], one per loop head subtask. Once every regular
//!   input channel of the head delivered EndOfData it starts round 1: it
//!   [`HeadAction::Emit`]s a token, which the task broadcasts on every channel
//!   into the loop body. The token travels the body and comes back on the
//!   feedback channels; the head aligns it across them (like a barrier). On
//!   the return of round `r` it either starts round `r + 1` or, when rounds
//!   `r - 1` and `r` both came back IDLE and the head saw no record since it
//!   emitted round `r`, answers [`HeadAction::Terminate`]: the task sends
//!   EndOfData out of the loop and into the body and stops reading feedback.
//! * [`BodyTermination`], one per body operator subtask with token inputs.
//!   It aligns tokens across its input channels: round `r` of loop `l` is
//!   forwarded once it arrived on every live channel (a channel that
//!   delivered EndOfData counts as having delivered every later token). The
//!   forwarded activity is BUSY if any arriving token was BUSY or the
//!   operator received a record since it last forwarded a token of `l`.
//!   Tokens are never blocked on: later rounds may arrive on a channel while
//!   an earlier one is still aligning; each round is aligned separately.
//!
//! The activity a head puts into round `r` is BUSY iff it received a record
//! (on any input) since it emitted round `r - 1` (since it was created, for
//! round 1): its *window* of round `r`.
//!
//! # Invariant (why it is safe)
//!
//! Channels are FIFO and tokens are broadcast on every channel, so a record a
//! process sends before it forwards round `r` reaches the receiver before the
//! receiver forwards round `r` (before it *emits* round `r + 1` when the
//! receiver is a head and the channel is a feedback channel: a head emits
//! `r + 1` only after `r` came back). Every cycle of a loop passes a head
//! (the body is a DAG). Suppose head `h` sees rounds `r` and `r + 1` return
//! IDLE, so the windows of rounds `r` and `r + 1` of every head whose tokens
//! reach `h` were empty, and a record `x` were still in the loop. Follow
//! `x`'s ancestry back to the last time an ancestor entered a head `g`: not
//! inside `g`'s windows `r`, `r + 1` (IDLE); not before `g` emitted round
//! `r - 1` (then, by FIFO, `x` would have been received at the latest when
//! round `r - 1` passed its channel, and its descendants would have reached a
//! head before round `r + 1` came back, i.e. inside a window); so after `g`
//! emitted `r + 1`, which by the same FIFO argument needs an ancestor that
//! entered a head after that head emitted `r + 1`, and so on back to the loop
//! input, which every head received before it emitted round 1: a
//! contradiction. So when `h` terminates, no record that can reach `h` exists
//! anywhere in the loop, and none can appear (all inputs ended).
//!
//! The argument needs the heads whose records can reach `h` to send their
//! tokens to `h` within one round: "head `g` reaches head `h` through the
//! body" must be transitive. This holds when some edge of the loop is
//! all-to-all (hash, rebalance, broadcast: every head reaches every head) and
//! when the loop is made of independent forward rings; the graph builder
//! must refuse loops where it does not hold. Body operators add their own
//! activity only to be conservative. Liveness: once the last record left
//! the loop, at most four more rounds complete before every head terminates.
//!
//! # Nested loops (the seed's staging: outer scopes decide first)
//!
//! Tokens carry their loop id. The head of an inner loop is, for an outer
//! loop, a body operator with a cycle of its own, and treats outer tokens as
//! barriers of the outer scope: an outer token arriving on the inner head's
//! regular inputs is aligned across them ([`LoopHeadTermination::on_input_token`])
//! and forwarded into the inner body with the inner head's own window
//! activity; it also travels the inner feedback path and comes back
//! ([`LoopHeadTermination::on_feedback_token`] with the outer loop id), and
//! the inner head forwards outer round `r + 1` only after outer round `r` came
//! back that way. That is exactly what a loop head does with its own rounds,
//! so the invariant above covers records circulating in inner loops: the
//! inner head is one of the heads of the outer decision. Where a stream
//! leaves a scope, the tokens of that scope's loop are dropped (outer tokens
//! pass). Inner loops can only end after the outer one: their inputs end
//! when the outer loop's EndOfData reaches them; then they run their own
//! rounds, and their EndOfData flows on. So outer scopes decide first, inner
//! scopes are decided inside, and the job ends in scope order.

use std::collections::{BTreeMap, HashMap};

use crate::error::{Error, Result};
use crate::event::{Activity, TerminationToken};

/// Consecutive IDLE rounds a head needs before it terminates (see the
/// module docs for why one is not enough across parallel heads).
pub const CONFIRM_ROUNDS: u32 = 2;

fn merge(a: Activity, b: Activity) -> Activity {
    if a == Activity::Busy || b == Activity::Busy {
        Activity::Busy
    } else {
        Activity::Idle
    }
}

fn busy_if(cond: bool) -> Activity {
    if cond {
        Activity::Busy
    } else {
        Activity::Idle
    }
}

/// Aligns tokens across channels, per (loop, round).
#[derive(Debug, Clone)]
struct TokenAligner {
    what: &'static str,
    live: Vec<bool>,
    pending: BTreeMap<(u32, u64), Pending>,
    completed: HashMap<u32, u64>,
}

#[derive(Debug, Clone)]
struct Pending {
    arrived: Vec<bool>,
    activity: Activity,
}

impl TokenAligner {
    fn new(what: &'static str, channels: usize) -> Self {
        TokenAligner {
            what,
            live: vec![true; channels],
            pending: BTreeMap::new(),
            completed: HashMap::new(),
        }
    }

    fn all_ended(&self) -> bool {
        !self.live.iter().any(|l| *l)
    }

    fn is_complete(&self, p: &Pending) -> bool {
        self.live
            .iter()
            .zip(&p.arrived)
            .all(|(live, arrived)| !live || *arrived)
    }

    fn on_token(
        &mut self,
        channel: usize,
        token: TerminationToken,
    ) -> Result<Option<TerminationToken>> {
        let n = self.live.len();
        if channel >= n || !self.live[channel] {
            return Err(Error::runtime(format!(
                "a termination token of loop {} round {} arrived on {} channel {channel}, \
                     which does not exist or already ended",
                token.loop_id, token.round, self.what
            )));
        }
        if self
            .completed
            .get(&token.loop_id)
            .is_some_and(|c| token.round <= *c)
        {
            return Err(Error::runtime(format!(
                "termination round {} of loop {} arrived on {} channel {channel} after that \
                     round was complete",
                token.round, token.loop_id, self.what
            )));
        }
        let key = (token.loop_id, token.round);
        let pending = self.pending.entry(key).or_insert_with(|| Pending {
            arrived: vec![false; n],
            activity: Activity::Idle,
        });
        if pending.arrived[channel] {
            return Err(Error::runtime(format!(
                "termination round {} of loop {} arrived twice on {} channel {channel}",
                token.round, token.loop_id, self.what
            )));
        }
        pending.arrived[channel] = true;
        pending.activity = merge(pending.activity, token.activity);
        let done = self.pending.get(&key).is_some_and(|p| self.is_complete(p));
        Ok(if done { self.complete(key) } else { None })
    }

    fn complete(&mut self, key: (u32, u64)) -> Option<TerminationToken> {
        let pending = self.pending.remove(&key)?;
        self.completed.insert(key.0, key.1);
        Some(TerminationToken {
            loop_id: key.0,
            round: key.1,
            activity: pending.activity,
        })
    }

    fn on_channel_ended(&mut self, channel: usize) -> Result<Vec<TerminationToken>> {
        match self.live.get_mut(channel) {
            Some(live) => *live = false,
            None => {
                return Err(Error::runtime(format!(
                    "{} channel {channel} does not exist",
                    self.what
                )))
            }
        }
        let done: Vec<(u32, u64)> = self
            .pending
            .iter()
            .filter(|(_, p)| self.is_complete(p))
            .map(|(k, _)| *k)
            .collect();
        Ok(done.into_iter().filter_map(|k| self.complete(k)).collect())
    }
}

/// Token alignment and activity of a body operator subtask (any loop depth).
#[derive(Debug, Clone)]
pub struct BodyTermination {
    aligner: TokenAligner,
    records: u64,
    forwarded_at: HashMap<u32, u64>,
}

impl BodyTermination {
    /// For a subtask reading `input_channels` channels that carry tokens.
    pub fn new(input_channels: usize) -> Self {
        BodyTermination {
            aligner: TokenAligner::new("input", input_channels),
            records: 0,
            forwarded_at: HashMap::new(),
        }
    }

    /// The subtask received a non-empty batch (on any channel).
    pub fn on_record(&mut self) {
        self.records += 1;
    }

    /// A token arrived on `channel`; returns the merged token to broadcast
    /// on every output channel once the round is aligned.
    pub fn on_token(
        &mut self,
        channel: usize,
        token: TerminationToken,
    ) -> Result<Option<TerminationToken>> {
        Ok(self
            .aligner
            .on_token(channel, token)?
            .map(|t| self.stamp(t)))
    }

    /// `channel` delivered EndOfData; returns the rounds this completes, to
    /// broadcast in order.
    pub fn on_channel_ended(&mut self, channel: usize) -> Result<Vec<TerminationToken>> {
        let done = self.aligner.on_channel_ended(channel)?;
        Ok(done.into_iter().map(|t| self.stamp(t)).collect())
    }

    /// Whether every input channel ended.
    pub fn all_ended(&self) -> bool {
        self.aligner.all_ended()
    }

    fn stamp(&mut self, mut token: TerminationToken) -> TerminationToken {
        let last = self.forwarded_at.insert(token.loop_id, self.records);
        let seen = self.records > last.unwrap_or(0);
        token.activity = merge(token.activity, busy_if(seen));
        token
    }
}

/// What a loop head must do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeadAction {
    /// Broadcast this token on every channel into the loop body.
    Emit(TerminationToken),
    /// The loop is empty: send EndOfData out of the loop and into the body.
    Terminate,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HeadState {
    /// Regular inputs still open (or round 1 not started yet).
    Running,
    /// Round `round` is travelling the loop; it was emitted when the head
    /// had seen `emitted_at` records.
    Attempting {
        round: u64,
        emitted_at: u64,
    },
    Terminated,
}

/// Outer-loop tokens passing an inner loop head.
#[derive(Debug, Clone, Default)]
struct OuterRelay {
    /// Last outer round forwarded into the body, and the record count then.
    forwarded: Option<(u64, u64)>,
    /// Last outer round that came back on the feedback channels.
    returned: Option<u64>,
    /// An aligned outer round waiting for the previous one to come back.
    held: Option<TerminationToken>,
}

/// The termination protocol at one loop head subtask.
#[derive(Debug, Clone)]
pub struct LoopHeadTermination {
    loop_id: u32,
    inputs: TokenAligner,
    feedback: TokenAligner,
    records: u64,
    state: HeadState,
    idle_streak: u32,
    outer: HashMap<u32, OuterRelay>,
}

impl LoopHeadTermination {
    /// The head of loop `loop_id` with `input_channels` regular input
    /// channels and `feedback_channels` feedback channels (one per loop tail
    /// subtask writing to this head). With no input channels call
    /// [`start`](Self::start) right away.
    pub fn new(loop_id: u32, input_channels: usize, feedback_channels: usize) -> Self {
        LoopHeadTermination {
            loop_id,
            inputs: TokenAligner::new("loop input", input_channels),
            feedback: TokenAligner::new("feedback", feedback_channels),
            records: 0,
            state: HeadState::Running,
            idle_streak: 0,
            outer: HashMap::new(),
        }
    }

    /// The loop this head belongs to.
    pub fn loop_id(&self) -> u32 {
        self.loop_id
    }

    /// The head received a non-empty batch (loop input or feedback). A record
    /// after termination is an error: the protocol was violated.
    pub fn on_record(&mut self) -> Result<()> {
        if self.state == HeadState::Terminated {
            return Err(self.error("a record reached the loop head after the loop terminated"));
        }
        self.records += 1;
        Ok(())
    }

    /// Starts round 1 if every regular input ended and no round was started.
    pub fn start(&mut self) -> Option<HeadAction> {
        if self.state != HeadState::Running || !self.inputs.all_ended() {
            return None;
        }
        Some(self.emit(1))
    }

    /// Regular input `channel` delivered EndOfData. Returns outer tokens this
    /// aligns and, once all inputs ended, the first token of this loop.
    pub fn on_input_ended(&mut self, channel: usize) -> Result<Vec<HeadAction>> {
        let aligned = self
            .inputs
            .on_channel_ended(channel)
            .map_err(|e| e.in_operator(&self.name()))?;
        let mut actions = Vec::new();
        for token in aligned {
            actions.extend(self.outer_aligned(token)?);
        }
        actions.extend(self.start());
        Ok(actions)
    }

    /// A token arrived on regular input `channel`: it belongs to an outer
    /// loop and is forwarded into the body once aligned across the inputs
    /// and once its previous round came back on the feedback channels.
    pub fn on_input_token(
        &mut self,
        channel: usize,
        token: TerminationToken,
    ) -> Result<Option<HeadAction>> {
        if token.loop_id == self.loop_id {
            return Err(self.error(&format!(
                "a termination token of its own loop (round {}) arrived on a regular input \
                 channel {channel}; it must only come back on the feedback channels",
                token.round
            )));
        }
        match self
            .inputs
            .on_token(channel, token)
            .map_err(|e| e.in_operator(&self.name()))?
        {
            Some(aligned) => self.outer_aligned(aligned),
            None => Ok(None),
        }
    }

    /// A token arrived on feedback `channel`: a round of this loop coming
    /// back (decides: next round or terminate), or an outer round that
    /// travelled the loop (may release the next outer round).
    pub fn on_feedback_token(
        &mut self,
        channel: usize,
        token: TerminationToken,
    ) -> Result<Option<HeadAction>> {
        let Some(back) = self
            .feedback
            .on_token(channel, token)
            .map_err(|e| e.in_operator(&self.name()))?
        else {
            return Ok(None);
        };
        if back.loop_id != self.loop_id {
            return self.outer_returned(back);
        }
        let HeadState::Attempting { round, emitted_at } = self.state else {
            return Err(self.error(&format!(
                "termination round {} came back while no round was travelling the loop",
                back.round
            )));
        };
        if back.round != round {
            return Err(self.error(&format!(
                "termination round {} came back while round {round} was travelling the loop",
                back.round
            )));
        }
        let idle = back.activity == Activity::Idle && self.records == emitted_at;
        self.idle_streak = if idle { self.idle_streak + 1 } else { 0 };
        if self.idle_streak >= CONFIRM_ROUNDS {
            self.state = HeadState::Terminated;
            return Ok(Some(HeadAction::Terminate));
        }
        Ok(Some(self.emit(round + 1)))
    }

    /// Whether the loop terminated at this head.
    pub fn is_terminated(&self) -> bool {
        self.state == HeadState::Terminated
    }

    /// Whether every regular input channel ended.
    pub fn inputs_ended(&self) -> bool {
        self.inputs.all_ended()
    }

    /// The round last emitted (0 before round 1).
    pub fn round(&self) -> u64 {
        match self.state {
            HeadState::Attempting { round, .. } => round,
            _ => self
                .feedback
                .completed
                .get(&self.loop_id)
                .copied()
                .unwrap_or(0),
        }
    }

    fn emit(&mut self, round: u64) -> HeadAction {
        let last = match self.state {
            HeadState::Attempting { emitted_at, .. } => emitted_at,
            _ => 0,
        };
        let activity = busy_if(self.records > last);
        self.state = HeadState::Attempting {
            round,
            emitted_at: self.records,
        };
        HeadAction::Emit(TerminationToken {
            loop_id: self.loop_id,
            round,
            activity,
        })
    }

    fn outer_aligned(&mut self, token: TerminationToken) -> Result<Option<HeadAction>> {
        let relay = self.outer.entry(token.loop_id).or_default();
        let can_forward = match relay.forwarded {
            None => true,
            Some((round, _)) => relay.returned == Some(round),
        };
        if can_forward {
            return Ok(Some(self.forward_outer(token)));
        }
        if relay.held.is_some() {
            return Err(self.error(&format!(
                "outer loop {} round {} was aligned while an earlier outer round was still held",
                token.loop_id, token.round
            )));
        }
        relay.held = Some(token);
        Ok(None)
    }

    fn outer_returned(&mut self, back: TerminationToken) -> Result<Option<HeadAction>> {
        let relay = self.outer.entry(back.loop_id).or_default();
        if relay.forwarded.map(|(round, _)| round) != Some(back.round) {
            return Err(self.error(&format!(
                "outer loop {} round {} came back on the feedback channels but was not the \
                 round last forwarded",
                back.loop_id, back.round
            )));
        }
        relay.returned = Some(back.round);
        match relay.held.take() {
            Some(held) => Ok(Some(self.forward_outer(held))),
            None => Ok(None),
        }
    }

    fn forward_outer(&mut self, mut token: TerminationToken) -> HeadAction {
        let records = self.records;
        let relay = self.outer.entry(token.loop_id).or_default();
        let last = relay.forwarded.map_or(0, |(_, at)| at);
        token.activity = merge(token.activity, busy_if(records > last));
        relay.forwarded = Some((token.round, records));
        HeadAction::Emit(token)
    }

    fn name(&self) -> String {
        format!("loop {} head", self.loop_id)
    }

    fn error(&self, message: &str) -> Error {
        Error::operator(self.name(), message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type TestResult = std::result::Result<(), Box<dyn std::error::Error>>;

    fn tok(loop_id: u32, round: u64, activity: Activity) -> TerminationToken {
        TerminationToken {
            loop_id,
            round,
            activity,
        }
    }

    fn emitted(action: Option<HeadAction>) -> TerminationToken {
        match action {
            Some(HeadAction::Emit(t)) => t,
            other => panic!("expected a token, got {other:?}"),
        }
    }

    #[test]
    fn test_idle_single_head_terminates_after_two_idle_rounds() -> TestResult {
        let mut head = LoopHeadTermination::new(1, 1, 1);
        assert_eq!(head.start(), None, "input still open");
        let actions = head.on_input_ended(0)?;
        assert_eq!(actions, vec![HeadAction::Emit(tok(1, 1, Activity::Idle))]);
        let t2 = emitted(head.on_feedback_token(0, tok(1, 1, Activity::Idle))?);
        assert_eq!(t2, tok(1, 2, Activity::Idle));
        assert_eq!(
            head.on_feedback_token(0, tok(1, 2, Activity::Idle))?,
            Some(HeadAction::Terminate)
        );
        assert!(head.is_terminated());
        assert!(head.on_record().is_err());
        Ok(())
    }

    #[test]
    fn test_busy_round_or_late_feedback_restarts_the_count() -> TestResult {
        let mut head = LoopHeadTermination::new(1, 1, 2);
        head.on_record()?;
        let t1 = emitted(head.on_input_ended(0)?.pop());
        assert_eq!(t1.activity, Activity::Busy);
        assert_eq!(head.on_feedback_token(0, tok(1, 1, Activity::Idle))?, None);
        let t2 = emitted(head.on_feedback_token(1, tok(1, 1, Activity::Idle))?);
        assert_eq!(t2.round, 2);
        // A record comes back during round 2: not idle.
        head.on_record()?;
        head.on_feedback_token(0, tok(1, 2, Activity::Idle))?;
        let t3 = emitted(head.on_feedback_token(1, tok(1, 2, Activity::Idle))?);
        assert_eq!(t3, tok(1, 3, Activity::Busy));
        head.on_feedback_token(0, tok(1, 3, Activity::Idle))?;
        let t4 = emitted(head.on_feedback_token(1, tok(1, 3, Activity::Busy))?);
        assert_eq!(t4, tok(1, 4, Activity::Idle));
        head.on_feedback_token(0, tok(1, 4, Activity::Idle))?;
        emitted(head.on_feedback_token(1, tok(1, 4, Activity::Idle))?);
        head.on_feedback_token(0, tok(1, 5, Activity::Idle))?;
        assert_eq!(
            head.on_feedback_token(1, tok(1, 5, Activity::Idle))?,
            Some(HeadAction::Terminate)
        );
        Ok(())
    }

    #[test]
    fn test_body_aligns_rounds_and_adds_its_activity() -> TestResult {
        let mut body = BodyTermination::new(2);
        assert_eq!(body.on_token(0, tok(1, 1, Activity::Idle))?, None);
        // Round 2 on channel 0 overtakes round 1 on channel 1.
        assert_eq!(body.on_token(0, tok(1, 2, Activity::Idle))?, None);
        body.on_record();
        assert_eq!(
            body.on_token(1, tok(1, 1, Activity::Idle))?,
            Some(tok(1, 1, Activity::Busy))
        );
        assert_eq!(
            body.on_token(1, tok(1, 2, Activity::Idle))?,
            Some(tok(1, 2, Activity::Idle))
        );
        assert!(
            body.on_token(1, tok(1, 2, Activity::Idle)).is_err(),
            "stale round"
        );
        assert_eq!(body.on_token(0, tok(1, 3, Activity::Busy))?, None);
        assert_eq!(body.on_channel_ended(1)?, vec![tok(1, 3, Activity::Busy)]);
        assert!(
            body.on_token(1, tok(1, 4, Activity::Idle)).is_err(),
            "ended channel"
        );
        Ok(())
    }

    #[test]
    fn test_inner_head_relays_outer_rounds_after_they_came_back() -> TestResult {
        // Inner loop 2 inside outer loop 1; two regular inputs, one feedback.
        let mut inner = LoopHeadTermination::new(2, 2, 1);
        assert!(inner.on_input_token(0, tok(2, 1, Activity::Idle)).is_err());
        assert_eq!(inner.on_input_token(0, tok(1, 1, Activity::Idle))?, None);
        inner.on_record()?;
        let r1 = emitted(inner.on_input_token(1, tok(1, 1, Activity::Idle))?);
        assert_eq!(r1, tok(1, 1, Activity::Busy));
        // Outer round 2 is aligned before round 1 came back: held.
        inner.on_input_token(0, tok(1, 2, Activity::Idle))?;
        assert_eq!(inner.on_input_token(1, tok(1, 2, Activity::Idle))?, None);
        let r2 = emitted(inner.on_feedback_token(0, tok(1, 1, Activity::Busy))?);
        assert_eq!(r2, tok(1, 2, Activity::Idle));
        assert!(!inner.inputs_ended());
        // The outer loop ends: EndOfData on both inputs starts the inner rounds.
        assert!(inner.on_input_ended(0)?.is_empty());
        let actions = inner.on_input_ended(1)?;
        assert_eq!(actions, vec![HeadAction::Emit(tok(2, 1, Activity::Busy))]);
        assert_eq!(inner.round(), 1);
        Ok(())
    }
}
