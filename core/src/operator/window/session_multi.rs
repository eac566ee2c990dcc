//! Session windows of multi-aggregates:
//! `keyed.window(ed.Session("5m")).agg(F.count("*"), F.avg("lat"))`
//! (DESIGN.md "Aggregates"), on the accumulators of [`AggregateSlots`]; a
//! slot is one open session of one key.
//!
//! # Semantics
//!
//! Those of the native session windows ([`crate::operator::session`]): per
//! key, a row at `t` opens the session `[t, t + gap)`; sessions of one key
//! that overlap merge, so rows closer than `gap` form one session and rows
//! exactly `gap` apart start a new one. `window_start` is the first row's
//! time, `window_end` the last row's time + `gap`. A session fires when the
//! watermark reaches its last millisecond (`window_end - 1 <= w`), emitting
//! one row: the key columns, `window_start`, `window_end` (of the
//! event-time column's type), then every aggregate under its name; rows
//! ordered by `window_end`, then by when the session was first seen. A row
//! whose own session `[t, t + gap)` is over and that touches no open
//! session of its key is late (counted, dropped or sent to [`LATE_PORT`]),
//! by its own key group's watermark after a restore ([`KeyGroupWatermarks`]).
//!
//! # Merging
//!
//! When a row bridges sessions, their accumulators merge: the intermediate
//! state of each merged-away session (`Accumulator::state`) is merged into
//! the surviving one (`merge_batch`), the session with the earliest start.
//! A batch is resolved in two passes: the first walks its rows in arrival
//! order, forming and merging the sessions of every key and recording
//! which slot each merged-away slot went to; the second merges the states
//! of the sessions that existed before the batch into their survivors (in
//! order of their start) and then adds every row to its survivor with one
//! [`AggregateSlots::update`]. So the rows of a batch always come after the
//! state the sessions held before it, in arrival order; `first`, `last` and
//! `collect_list` of a merged session see the merged sessions' earlier rows
//! in order of the sessions' starts.
//!
//! # Serialization format (version 1)
//!
//! ```text
//! byte 0      format version, currently 1
//! bytes 1..   an Arrow IPC stream; schema metadata:
//!               "eddyline.session_aggs"            "<name>=<function>,..."
//!               "eddyline.session_aggs.gap"        the gap in ms (decimal)
//!               "eddyline.session_aggs.watermark"  the key group's watermark (decimal)
//!             columns: the key columns (nullable), window_start and
//!               window_end (Int64 ms), __eddyline_seq (UInt64), every
//!               aggregate's current value under its name, then the
//!               accumulators' states
//! ```
//!
//! Every owned key group is written once the operator has a watermark (its
//! watermark is state). A key group is owned by one subtask, so a restore at
//! another parallelism never meets two overlapping sessions of one key.
//! `read_state` shows keys, `window_start`, `window_end` and the values.
//!
//! The operator is a [`SlotWindowsOperator`] (the shared part of both
//! windowed multi-aggregates) over this factory's windows.
//!
//! [`LATE_PORT`]: crate::operator::LATE_PORT
//! [`KeyGroupWatermarks`]: crate::state::group_watermarks::KeyGroupWatermarks

use arrow::datatypes::{Schema, SchemaRef};
use rustc_hash::{FxHashMap, FxHashSet};

use super::open_sessions::{in_firing_order, SessionBounds, SessionGroup};
use super::slot_windows::{
    self, Assigned, EachWindow, Fired, SlotWindows, SlotWindowsOperator, WindowedAggs,
};
use crate::error::{Error, Result};
use crate::expr::{AggregateSlots, ExprResult};
use crate::operator::{Operator, OperatorContext, OperatorFactory};

/// The version byte that opens every serialized key-group blob.
pub const SESSION_AGGS_FORMAT_VERSION: u8 = 1;

/// Builds the operators of session window multi-aggregates.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionAggsFactory {
    pub aggs: WindowedAggs,
    pub gap_ms: i64,
}

impl SessionAggsFactory {
    /// The output schema for `input`: keys, `window_start`, `window_end`,
    /// then one field per aggregate. Errors name `operator`.
    pub fn output_schema(&self, operator: &str, input: &SchemaRef) -> Result<SchemaRef> {
        slot_windows::output_schema(self, operator, input)
    }
}

impl OperatorFactory for SessionAggsFactory {
    fn create(&self, ctx: &OperatorContext) -> Result<Box<dyn Operator>> {
        SlotWindowsOperator::create(self, ctx)
    }
}

/// One open session of one key.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Session {
    start: i64,
    /// The last row time + gap (exclusive).
    end: i64,
    /// Orders the fired rows (first seen first).
    seq: u64,
    slot: u32,
}

/// The open sessions of one key group.
pub(crate) type Group = SessionGroup<Session>;

impl SessionBounds for Session {
    fn end(&self) -> i64 {
        self.end
    }

    fn seq(&self) -> u64 {
        self.seq
    }
}

/// How one batch changed the sessions (see "Merging" in the module
/// documentation).
#[derive(Default)]
pub(crate) struct BatchMerges {
    /// Merged-away slot -> the slot it went to.
    redirect: FxHashMap<u32, u32>,
    /// Slots allocated in this batch (they hold no state yet).
    fresh: FxHashSet<u32>,
    /// Merged-away slots that held state: (start, seq, slot).
    stateful: Vec<(i64, u64, u32)>,
}

impl BatchMerges {
    fn resolve(&self, mut slot: u32) -> u32 {
        while let Some(&to) = self.redirect.get(&slot) {
            slot = to;
        }
        slot
    }
}

/// Adds a row at `t` of key `key` to `group` (at `watermark`): the slot it
/// goes to, or `None` when it is late. Sessions it bridges are merged into
/// the earliest, recorded in `merges`.
#[allow(clippy::too_many_arguments)]
fn add_row(
    group: &mut Group,
    key: &[u8],
    t: i64,
    gap: i64,
    watermark: i64,
    slots: &mut AggregateSlots,
    next_seq: &mut u64,
    merges: &mut BatchMerges,
) -> crate::expr::ExprResult<Option<u32>> {
    let end = t.saturating_add(gap);
    let touches = |s: &Session| s.start < end && t < s.end;
    let list = group.sessions.get_mut(key);
    let any = list.as_ref().is_some_and(|l| l.iter().any(touches));
    if !any && end - 1 <= watermark {
        return Ok(None);
    }
    let list = match list {
        Some(l) => l,
        None => group.sessions.entry(Box::from(key)).or_default(),
    };
    if !any {
        let slot = slots.allocate()?;
        merges.fresh.insert(slot);
        list.push(Session {
            start: t,
            end,
            seq: *next_seq,
            slot,
        });
        *next_seq += 1;
        group.min_end = group.min_end.min(end);
        return Ok(Some(slot));
    }
    // The survivor: the touched session with the earliest start (then seq).
    let mut survivor: Option<usize> = None;
    for (j, s) in list.iter().enumerate() {
        if touches(s) && survivor.is_none_or(|k| (s.start, s.seq) < (list[k].start, list[k].seq)) {
            survivor = Some(j);
        }
    }
    let keep = survivor.expect("invariant: some session is touched");
    let mut merged = list[keep];
    merged.start = merged.start.min(t);
    merged.end = merged.end.max(end);
    let survivor_slot = merged.slot;
    list.retain(|s| {
        if s.slot == survivor_slot || !touches(s) {
            return true;
        }
        merged.start = merged.start.min(s.start);
        merged.end = merged.end.max(s.end);
        merged.seq = merged.seq.min(s.seq);
        merges.redirect.insert(s.slot, survivor_slot);
        if !merges.fresh.contains(&s.slot) {
            merges.stateful.push((s.start, s.seq, s.slot));
        }
        false
    });
    let at = list
        .iter()
        .position(|s| s.slot == survivor_slot)
        .expect("invariant: the survivor stays");
    list[at] = merged;
    group.min_end = group.min_end.min(merged.end);
    Ok(Some(merged.slot))
}

impl SlotWindows for SessionAggsFactory {
    type Group = Group;
    type Batch = BatchMerges;
    const WHAT: &'static str = "session window agg()";
    const UNIT: &'static str = "session";
    const VERSION: u8 = SESSION_AGGS_FORMAT_VERSION;
    const META_AGGS: &'static str = "eddyline.session_aggs";
    const META_WINDOWS: &'static str = "eddyline.session_aggs.gap";
    const META_WATERMARK: &'static str = "eddyline.session_aggs.watermark";
    const WINDOW_COLUMNS: &'static [&'static str] = &["window_start", "window_end"];

    fn aggs(&self) -> &WindowedAggs {
        &self.aggs
    }

    fn validate(&self, operator: &str) -> Result<()> {
        if self.gap_ms <= 0 {
            return Err(Error::graph(
                operator,
                format!("a session gap must be positive, got {} ms", self.gap_ms),
            ));
        }
        Ok(())
    }

    fn describe(&self) -> String {
        self.gap_ms.to_string()
    }

    fn windows_text(described: &str) -> String {
        format!("sessions of gap {described} ms")
    }

    fn is_empty(group: &Group) -> bool {
        group.sessions.is_empty()
    }

    fn assign(
        &self,
        group: &mut Group,
        key: &[u8],
        row: u32,
        t: i64,
        watermark: i64,
        slots: &mut AggregateSlots,
        next_seq: &mut u64,
        merges: &mut BatchMerges,
        out: &mut Assigned,
    ) -> ExprResult<()> {
        match add_row(
            group,
            key,
            t,
            self.gap_ms,
            watermark,
            slots,
            next_seq,
            merges,
        )? {
            Some(slot) => {
                out.rows.push(row);
                out.slots.push(slot);
            }
            None => out.late[row as usize] = true,
        }
        Ok(())
    }

    /// Merges the states of the sessions that existed before the batch
    /// into their survivors, in order of their start (see "Merging" in the
    /// module documentation), and sends the batch's rows to the survivors.
    fn finish_batch(
        &self,
        slots: &mut AggregateSlots,
        mut merges: BatchMerges,
        out: &mut Assigned,
    ) -> ExprResult<()> {
        if merges.redirect.is_empty() {
            return Ok(());
        }
        merges.stateful.sort_unstable();
        for &(_, _, from) in &merges.stateful {
            slots.merge_slots(merges.resolve(from), from)?;
        }
        for slot in &mut out.slots {
            *slot = merges.resolve(*slot);
        }
        for (&from, _) in merges.redirect.iter() {
            if merges.fresh.contains(&from) {
                slots.release(from);
            }
        }
        Ok(())
    }

    fn fire(&self, groups: &mut [Group], watermark: i64) -> Vec<Fired> {
        let mut fired = Vec::new();
        for group in groups.iter_mut().filter(|g| g.any_over(watermark)) {
            group.take_over(watermark, &mut fired);
        }
        in_firing_order(fired)
            .into_iter()
            .map(|(key, s)| Fired {
                key,
                start: s.start,
                end: s.end,
                slot: s.slot,
            })
            .collect()
    }

    fn entries<'a>(group: &'a Group, each: &mut EachWindow<'a, '_>) {
        for (key, list) in &group.sessions {
            for s in list {
                each(&key[..], &[s.start, s.end], s.seq, s.slot);
            }
        }
    }

    fn restore(
        group: &mut Group,
        key: &[u8],
        window: &[i64],
        seq: u64,
        slot: u32,
    ) -> std::result::Result<(), String> {
        let (start, end) = (window[0], window[1]);
        if start >= end {
            return Err(format!("holds a session [{start}, {end})"));
        }
        let list = group.sessions.entry(Box::from(key)).or_default();
        if list.iter().any(|s| s.start < end && start < s.end) {
            return Err("holds two overlapping sessions of one key".to_string());
        }
        list.push(Session {
            start,
            end,
            seq,
            slot,
        });
        group.min_end = group.min_end.min(end);
        Ok(())
    }
}

/// Whether a decoded blob schema is a session multi-aggregate's.
pub(crate) fn is_state_schema(schema: &Schema) -> bool {
    slot_windows::is_state_schema::<SessionAggsFactory>(schema)
}

/// One key-group blob as `read_state` shows it: the keys, `window_start`,
/// `window_end` (ms) and every aggregate's current value.
pub(crate) fn state_table(bytes: &[u8], kg: u32) -> Result<Vec<arrow::array::RecordBatch>> {
    slot_windows::state_table::<SessionAggsFactory>(bytes, kg)
}

#[cfg(test)]
#[path = "session_multi_tests.rs"]
mod tests;
