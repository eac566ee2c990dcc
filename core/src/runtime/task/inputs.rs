//! The driver of a task that reads input channels: takes events from its
//! channels in turn (control messages first), aligns barriers (ABS), combines
//! the inputs' watermarks and ends the chain when every input ended.

use super::*;
use crate::channel::Item;
use crate::error::{Error, Result};
use crate::event::{Event, MAX_WATERMARK};
use crossbeam_channel::{Receiver, Select, TryRecvError};
use std::time::Instant;

impl Task {
    fn next_step(&mut self, cursor: &mut usize) -> Result<Step> {
        if let Some(c) = self.poll_control()? {
            return Ok(Step::Control(c));
        }
        if let Some((i, b)) = self.poll_priority() {
            return Ok(Step::Overtake(i, b));
        }
        if let Some((i, ev)) = self.poll_inputs(cursor)? {
            return Ok(Step::Event(i, ev));
        }
        loop {
            let timer = self.timer_delay().map(|d| Instant::now() + d);
            let deadline = match (timer, self.alignment_deadline()) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            if let Some(step) = self.wait_step(&[], deadline)? {
                return Ok(step);
            }
        }
    }

    /// How long until the chain head's next processing-time timer, if any.
    fn timer_delay(&mut self) -> Option<std::time::Duration> {
        let ms = self
            .chain
            .first_mut()?
            .op
            .timers()?
            .processing_timer_delay()?;
        Some(std::time::Duration::from_millis(ms.max(0) as u64))
    }

    /// Lets the chain head fire its due processing-time timers.
    fn fire_processing_timers(&mut self) -> Result<()> {
        at_chain_head(&mut self.chain, &mut self.output, |op, out| {
            match op.timers() {
                Some(timers) => timers.on_processing_time(out),
                None => Ok(()),
            }
        })
    }

    /// A control message, if one is waiting.
    pub(crate) fn poll_control(&self) -> Result<Option<Control>> {
        match self.control.try_recv() {
            Ok(c) => Ok(Some(c)),
            Err(TryRecvError::Empty) => Ok(None),
            Err(TryRecvError::Disconnected) => Err(Error::Cancelled),
        }
    }

    /// The next event of the live, unblocked input channels, round-robin
    /// from `cursor`, without waiting.
    pub(crate) fn poll_inputs(&mut self, cursor: &mut usize) -> Result<Option<(usize, Event)>> {
        if self.unaligned.replaying > 0 {
            if let Some(step) = self.poll_replay(cursor) {
                return Ok(Some(step));
            }
        }
        let n = self.inputs.len();
        for k in 0..n {
            let i = (*cursor + k) % n;
            let ch = &self.inputs[i];
            if ch.ended || ch.blocked {
                continue;
            }
            if let Some((item, gated)) = self.inputs[i].pending.pop_front() {
                *cursor = (i + 1) % n;
                let item = if gated {
                    self.inputs[i].rx.taken(item)
                } else {
                    item
                };
                return Ok(Some((i, self.took(i, item))));
            }
            let ch = &self.inputs[i];
            match ch.rx.try_recv() {
                Ok(item) => {
                    *cursor = (i + 1) % n;
                    return Ok(Some((i, self.took(i, item))));
                }
                Err(TryRecvError::Empty) => {}
                Err(TryRecvError::Disconnected) => return Err(Error::Cancelled),
            }
        }
        Ok(None)
    }

    /// Bookkeeping of an event taken off input channel `i`: remote credits,
    /// and the throughput that sets the channels' budgets (FLIP-183).
    #[inline]
    pub(crate) fn took(&self, i: usize, (event, bytes): Item) -> Event {
        if let Some(c) = &self.inputs[i].credit {
            c.consumed();
        }
        // A task that never waits (its input is always there) still
        // charges its busy time per batch.
        self.output.timer.waited(std::time::Duration::ZERO, false);
        let mut flow = self.flow.borrow_mut();
        if let Some(rate) = flow.on_taken(bytes, Instant::now()) {
            let live = self.inputs.iter().filter(|c| !c.ended).count();
            let budget = flow.budget(rate, live);
            for ch in &self.inputs {
                if let Some(g) = ch.rx.gate() {
                    g.set_budget(budget);
                }
            }
        }
        event
    }

    /// Blocks until the control channel, a live unblocked input channel or
    /// one of `wakers` (wake-up tokens, e.g. of feedback queues) is ready,
    /// or `deadline` (a processing-time timer: [`Step::Timer`]) passed.
    /// `None` when a waker fired (its token is consumed): look again.
    pub(crate) fn wait_step(
        &self,
        wakers: &[&Receiver<()>],
        deadline: Option<Instant>,
    ) -> Result<Option<Step>> {
        let mut sel = Select::new();
        let mut index = Vec::with_capacity(self.inputs.len());
        for (i, ch) in self.inputs.iter().enumerate() {
            if !ch.ended && !ch.blocked {
                sel.recv(ch.rx.queue());
                index.push(i);
            }
        }
        let control_op = sel.recv(&self.control);
        for w in wakers {
            sel.recv(w);
        }
        let waiting = Instant::now();
        let op = match deadline {
            None => sel.select(),
            Some(d) => match sel.select_deadline(d) {
                Ok(op) => op,
                Err(_) => {
                    self.output.timer.waited(waiting.elapsed(), false);
                    return Ok(Some(Step::Timer));
                }
            },
        };
        let waited = waiting.elapsed();
        self.flow.borrow_mut().on_idle(waited);
        self.output.timer.waited(waited, false);
        let k = op.index();
        if k == control_op {
            return match op.recv(&self.control) {
                Ok(c) => Ok(Some(Step::Control(c))),
                Err(_) => Err(Error::Cancelled),
            };
        }
        if k > control_op {
            // A wake-up token: its value carries nothing, and a waker whose
            // sender is gone only means no more wake-ups; the caller polls again.
            let _ = op.recv(wakers[k - control_op - 1]);
            return Ok(None);
        }
        let i = index[k];
        match op.recv(self.inputs[i].rx.queue()) {
            Ok(item) => {
                let item = self.inputs[i].rx.taken(item);
                Ok(Some(Step::Event(i, self.took(i, item))))
            }
            Err(_) => Err(Error::Cancelled),
        }
    }

    pub(crate) fn run_inputs(&mut self) -> Result<InputEnd> {
        let mut end = InputEnd::Drained;
        let mut live = self.inputs.iter().filter(|c| !c.ended).count();
        let mut live_per_input = vec![0usize; self.num_logical_inputs];
        for ch in &self.inputs {
            live_per_input[ch.input] += 1;
        }
        let mut combined_wm = i64::MIN;
        let mut cursor = 0;
        while live > 0 {
            if self.timer_delay().is_some_and(|d| d.is_zero()) {
                self.fire_processing_timers()?;
            }
            self.switch_to_unaligned()?;
            match self.next_step(&mut cursor)? {
                Step::Control(c) => self.handle_control(c)?,
                Step::Timer => self.fire_processing_timers()?,
                Step::Overtake(i, barrier) => self.on_overtake(i, barrier)?,
                Step::Event(i, Event::Data(batch)) => {
                    self.inputs[i].idle = false;
                    self.unaligned.on_data(i, &batch);
                    let input = self.inputs[i].input;
                    if let Some(t) = self.kind.body_term_mut() {
                        t.on_record();
                    }
                    push_batch(&mut self.chain, &mut self.output, input, batch)?;
                }
                Step::Event(i, Event::Watermark(wm)) => {
                    let ch = &mut self.inputs[i];
                    ch.watermark = ch.watermark.max(wm);
                    ch.idle = false;
                    self.advance_watermark(&mut combined_wm)?;
                }
                Step::Event(i, Event::Idle) => {
                    self.inputs[i].idle = true;
                    self.advance_watermark(&mut combined_wm)?;
                    // Every live input idle: so is this task's output.
                    if self.inputs.iter().all(|c| c.ended || c.idle) {
                        self.output.broadcast(Event::Idle)?;
                    }
                }
                Step::Event(i, Event::EndOfData { drain }) => {
                    if !drain {
                        end = InputEnd::Undrained;
                    }
                    let input = self.inputs[i].input;
                    self.inputs[i].ended = true;
                    self.inputs[i].watermark = MAX_WATERMARK;
                    live -= 1;
                    live_per_input[input] -= 1;
                    if let Some(action) = self.aligner.on_end_of_data(i, Instant::now()) {
                        self.apply(action)?;
                    }
                    self.unaligned_channel_ended(i)?;
                    if let Some(t) = self.kind.body_term_mut() {
                        let name = &self.chain[0].slot.name;
                        for token in t.on_channel_ended(i).map_err(|e| e.in_operator(name))? {
                            self.output.broadcast(Event::Termination(token))?;
                        }
                    }
                    if end == InputEnd::Drained {
                        self.advance_watermark(&mut combined_wm)?;
                        if live_per_input[input] == 0 {
                            self.end_head_input(input)?;
                        }
                    }
                }
                Step::Event(i, Event::Barrier(barrier)) => self.on_barrier_event(i, barrier)?,
                Step::Event(_, Event::EndOfPartition) => {}
                Step::Event(i, Event::Termination(token)) => {
                    if !self.scope.contains(&token.loop_id) {
                        continue; // the token left its loop
                    }
                    if let Some(t) = self.kind.body_term_mut() {
                        let name = &self.chain[0].slot.name;
                        if let Some(token) =
                            t.on_token(i, token).map_err(|e| e.in_operator(name))?
                        {
                            self.output.broadcast(Event::Termination(token))?;
                        }
                    }
                }
            }
        }
        Ok(end)
    }

    pub(crate) fn advance_watermark(&mut self, combined: &mut i64) -> Result<()> {
        // Idle channels do not count (FLIP-27), unless nothing else is
        // live: the watermark then waits (an ended channel's MAX_WATERMARK
        // must not overtake an idle one that may send again).
        let live = |c: &&InputChannel| !c.ended;
        let min = if self.inputs.iter().filter(live).any(|c| !c.idle) {
            self.inputs
                .iter()
                .filter(|c| !c.idle)
                .map(|c| c.watermark)
                .min()
                .unwrap_or(MAX_WATERMARK)
        } else if self.inputs.iter().any(|c| c.idle && !c.ended) {
            return Ok(());
        } else {
            self.inputs
                .iter()
                .map(|c| c.watermark)
                .min()
                .unwrap_or(MAX_WATERMARK)
        };
        if min > *combined {
            *combined = min;
            push_watermark(&mut self.chain, &mut self.output, min)?;
        }
        Ok(())
    }

    pub(crate) fn end_head_input(&mut self, input: usize) -> Result<()> {
        let Some((head, rest)) = self.chain.split_first_mut() else {
            return Ok(());
        };
        let Chained { op, slot, .. } = head;
        let name = slot.name.clone();
        let mut out = ChainOut {
            slot,
            rest,
            tail: &mut self.output,
        };
        op.end_input(input, &mut out)
            .map_err(|e| e.in_operator(&name))
    }
}
