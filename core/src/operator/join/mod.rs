//! Keyed streaming equi-joins of two inputs (DESIGN.md "Keyed state layer
//! and the operators on it"; API.md "Joins"): the unbounded join (optionally
//! bounded by an event-time `state_ttl`) and the interval join
//! (`left.ts + lower <= right.ts <= left.ts + upper`, Flink's
//! `IntervalJoinOperator`), inner and, for interval joins, left, right and
//! full outer.
//!
//! # Semantics
//!
//! Input 0 is the left side, input 1 the right; both are hash-partitioned by
//! their key columns (equal key types hash alike, so equal keys meet in one
//! subtask). A row arriving on one side is matched against the rows of the
//! other side held for its key, and every matching pair is emitted at once,
//! in the output batch of the input batch that completed it; then the row is
//! kept. Rows of one batch never match each other (they are of one side).
//! Keys compare as SQL does: a row with a null in a key column matches
//! nothing (an outer side emits it at once, padded with nulls).
//!
//! Time bounds the state (interval joins, and unbounded joins with a
//! `state_ttl`). A row is *expired* once the watermark `w` reaches its
//! expiry: `ts + upper` for a left row and `ts - lower` for a right row of
//! an interval join, `ts + ttl` for either side with a TTL. No row that can
//! still arrive (timestamp `> w`) could match an expired row, so dropping it
//! loses nothing. An outer side's expired row that never matched is emitted
//! then, once, with nulls for the other side's columns. A row whose
//! timestamp is `<= w` when it arrives is *late* (the watermark promised no
//! such row): it is counted ([`Operator::late_records`]) and dropped, as
//! Flink's interval join does. For every row that is not late the output is
//! exact, whatever the interleaving of the inputs and watermarks: with an
//! interval join it is exactly the pairs within the interval; with a TTL,
//! pairs at most `ttl` apart are always emitted and pairs further apart only
//! while the older row is still kept (`state_ttl` bounds the state, it is
//! not a join condition).
//!
//! # Output
//!
//! The join keys once (named and typed as the left's key columns; a left
//! row's keys, or the right row's when only the right side is present), the
//! left side's other columns, then the right's, a right column whose name is
//! already taken gets the suffix `_right`. The columns of a side that an
//! outer join may leave out are nullable. One output batch per input batch
//! (built with one `interleave` kernel per column from the input batch and
//! the kept batches); the watermark is forwarded after the rows it expired.
//!
//! # State
//!
//! Per key group ([`rows`]): per side, the input batches holding its kept
//! rows (shared `Arc`s, never copied on arrival), and a map from the
//! row-format key to the kept rows' positions, timestamps and whether they
//! matched. A key group compacts its kept rows into one batch once it
//! refers to many batches. Snapshots are copy-on-write views of the groups,
//! serialized off the task thread ([`snapshot`]) each with the watermark its
//! key group had reached; restoring at another parallelism takes the key
//! groups a subtask owns, continues from the smallest of their watermarks
//! and keeps each key group at its own (subtasks checkpointed by an
//! unaligned barrier may have reached different watermarks): none of its
//! windows is lost or fired twice, and its late rows stay late. Interval joins report a FLINK-4120 null-state watermark
//! (the oldest epoch whose rows, or the rows they matched, are still kept),
//! so they also work with `recovery="recompute"`.

mod output;
mod plan;
mod rows;
mod snapshot;
mod temporal;
mod window;

pub(crate) use snapshot::{is_state_blob, state_table};

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, RecordBatch};
use arrow::buffer::NullBuffer;
use arrow::row::{RowConverter, SortField};

use crate::error::{Error, Result};
use crate::event::MAX_WATERMARK;
use crate::keygroup::{hash_keys, KeyGroupOwnership};
use crate::operator::timestamps::event_times_millis;
use crate::operator::{
    CheckpointedState, Collector, Operator, OperatorContext, OperatorFactory, Recompute,
};
use crate::state::group_watermarks::KeyGroupWatermarks;
use crate::state::keyed::owned_key_groups;
use crate::state::{OperatorState, StateBlob};

use output::{OutputBuilder, Source};
use rows::{Expiry, Group, RowRef};

/// Which unmatched rows an outer join keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum JoinType {
    Inner,
    Left,
    Right,
    Outer,
}

impl JoinType {
    /// Whether unmatched rows of `side` (0 left, 1 right) are emitted.
    pub fn keeps(self, side: usize) -> bool {
        matches!(
            (self, side),
            (JoinType::Left | JoinType::Outer, 0) | (JoinType::Right | JoinType::Outer, 1)
        )
    }

    /// The API's name of the join type.
    pub fn name(self) -> &'static str {
        match self {
            JoinType::Inner => "inner",
            JoinType::Left => "left",
            JoinType::Right => "right",
            JoinType::Outer => "outer",
        }
    }
}

/// What bounds the rows a join keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum JoinBounds {
    /// Every pair of equal keys; rows kept forever, or until the watermark
    /// passes `ts + ttl_ms`.
    Unbounded { ttl_ms: Option<i64> },
    /// `left.ts + lower_ms <= right.ts <= left.ts + upper_ms`.
    Interval { lower_ms: i64, upper_ms: i64 },
    /// Event-time "as of": each left row with the newest right row (a
    /// version of its key) at or before its time, once the watermark passes
    /// the left row ([`temporal`]).
    Temporal,
    /// Rows of equal keys in the same window of `size_ms` (one starting every
    /// `slide_ms`; tumbling when equal), paired when the window fires
    /// ([`window`]).
    Window { size_ms: i64, slide_ms: i64 },
    /// Rows of equal keys in the same session (rows of both sides closer
    /// than `gap_ms` in event time), paired when the session fires.
    SessionWindow { gap_ms: i64 },
}

impl JoinBounds {
    /// When a row of `side` is dropped.
    fn expiry(self, side: usize) -> Expiry {
        match self {
            JoinBounds::Unbounded { ttl_ms: None } => Expiry::Never,
            JoinBounds::Unbounded { ttl_ms: Some(t) } => Expiry::After(t),
            JoinBounds::Interval { upper_ms, .. } if side == 0 => Expiry::After(upper_ms),
            JoinBounds::Interval { lower_ms, .. } => Expiry::After(lower_ms.saturating_neg()),
            // Left rows wait until the watermark reaches them; versions are
            // pruned, not expired.
            JoinBounds::Temporal if side == 0 => Expiry::After(0),
            JoinBounds::Temporal => Expiry::Never,
            JoinBounds::Window { size_ms, slide_ms } => Expiry::LastWindowEnd {
                size: size_ms,
                slide: slide_ms,
            },
            // The earliest a row's session can fire; its rows are dropped
            // when it does (window::fire_sessions), not by expiry.
            JoinBounds::SessionWindow { gap_ms } => Expiry::After(gap_ms - 1),
        }
    }

    /// Whether time plays a part (the inputs need event time).
    fn timed(self) -> bool {
        self.expiry(0) != Expiry::Never || self.expiry(1) != Expiry::Never
    }

    /// Whether a row of `side` at `ts` and one of the other side at `other`
    /// may pair.
    #[inline]
    fn pairs(self, side: usize, ts: i64, other: i64) -> bool {
        match self {
            JoinBounds::Unbounded { .. } => true,
            JoinBounds::Temporal | JoinBounds::Window { .. } | JoinBounds::SessionWindow { .. } => {
                false
            }
            JoinBounds::Interval { lower_ms, upper_ms } => {
                let (l, r) = if side == 0 { (ts, other) } else { (other, ts) };
                let (l, r) = (i128::from(l), i128::from(r));
                l + i128::from(lower_ms) <= r && r <= l + i128::from(upper_ms)
            }
        }
    }

    /// The form written into the state.
    fn describe(self) -> String {
        match self {
            JoinBounds::Unbounded { ttl_ms: None } => "unbounded".to_string(),
            JoinBounds::Unbounded { ttl_ms: Some(t) } => format!("unbounded ttl {t}"),
            JoinBounds::Interval { lower_ms, upper_ms } => {
                format!("interval {lower_ms} {upper_ms}")
            }
            JoinBounds::Temporal => "temporal".to_string(),
            JoinBounds::Window { size_ms, slide_ms } if size_ms == slide_ms => {
                format!("window {size_ms}")
            }
            JoinBounds::Window { size_ms, slide_ms } => format!("window {size_ms} {slide_ms}"),
            JoinBounds::SessionWindow { gap_ms } => format!("session {gap_ms}"),
        }
    }
}

pub use plan::{JoinFactory, JoinSpec};
use plan::{OutColumn, Plan, SideBinding};

impl OperatorFactory for JoinFactory {
    /// Interval joins rebuild their rows by replaying from the checkpoint
    /// before the oldest kept row (FLINK-4120).
    fn recomputable(&self) -> bool {
        matches!(self.bounds, JoinBounds::Interval { .. })
    }

    fn replayable_from_earlier(&self) -> bool {
        self.recomputable()
    }

    fn create(&self, ctx: &OperatorContext) -> Result<Box<dyn Operator>> {
        Ok(Box::new(JoinOperator::new(self, ctx)?))
    }
}

// ---------------------------------------------------------------------------
// The operator

/// Per-batch scratch buffers, reused across batches.
#[derive(Default)]
struct Scratch {
    hashes: Vec<u64>,
    times: Vec<i64>,
    builder: OutputBuilder,
}

/// A keyed join of two inputs; see the module documentation.
pub struct JoinOperator {
    how: JoinType,
    bounds: JoinBounds,
    plan: Arc<Plan>,
    own: KeyGroupOwnership,
    groups: Vec<Arc<Group>>,
    /// Row-format encoders of the key columns, one per side (same types,
    /// so same encoding).
    codecs: [RowConverter; 2],
    watermark: i64,
    /// Per local key group, the watermark its state had reached where it
    /// was checkpointed, when above `watermark`: a restore at another
    /// parallelism joins key groups of subtasks that had reached different
    /// watermarks (an unaligned barrier overtakes watermarks), and the
    /// subtask continues from the smallest of them. A key group is then at
    /// `reached.at(g, watermark)`: its rows at or below that are late, and
    /// its windows that fired before are not fired again.
    reached: KeyGroupWatermarks,
    /// Numbers the input batches (a kept batch is stored once per group).
    batch_seq: u64,
    late: Arc<AtomicU64>,
    scratch: Scratch,
    /// The last checkpoint whose barrier passed (FLINK-4120 epochs).
    epoch: u64,
    /// Per epoch that kept rows, oldest first: until when (watermark) its
    /// rows, or rows they matched, are kept.
    epochs: VecDeque<(u64, i64)>,
}

impl std::fmt::Debug for JoinOperator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JoinOperator")
            .field("how", &self.how)
            .field("bounds", &self.bounds)
            .field("key_groups", &self.own.key_groups)
            .field("watermark", &self.watermark)
            .finish_non_exhaustive()
    }
}

fn key_codec(operator: &str, binding: &SideBinding) -> Result<RowConverter> {
    let fields = binding
        .key_idx
        .iter()
        .map(|&i| SortField::new(binding.schema.field(i).data_type().clone()))
        .collect();
    RowConverter::new(fields).map_err(|e| Error::arrow(operator, &e))
}

impl JoinOperator {
    /// An operator for the subtask `ctx` describes.
    pub fn new(factory: &JoinFactory, ctx: &OperatorContext) -> Result<Self> {
        let own = KeyGroupOwnership::from_context(ctx)?;
        let plan = factory.plan.clone();
        let codecs = [
            key_codec(&ctx.name, &plan.sides[0])?,
            key_codec(&ctx.name, &plan.sides[1])?,
        ];
        let reached = KeyGroupWatermarks::new(own.key_groups.len());
        Ok(JoinOperator {
            how: factory.how,
            bounds: factory.bounds,
            groups: (0..own.key_groups.len())
                .map(|_| Arc::new(Group::default()))
                .collect(),
            plan,
            own,
            codecs,
            watermark: i64::MIN,
            reached,
            batch_seq: 0,
            late: Arc::new(AtomicU64::new(0)),
            scratch: Scratch::default(),
            epoch: 0,
            epochs: VecDeque::new(),
        })
    }

    /// How many late rows were dropped by this operator instance.
    pub fn late_records(&self) -> u64 {
        self.late.load(Ordering::Relaxed)
    }

    /// The current watermark (`i64::MIN` before the first).
    pub fn current_watermark(&self) -> i64 {
        self.watermark
    }

    /// How many rows of `side` are kept.
    pub fn kept_rows(&self, side: usize) -> usize {
        self.groups.iter().map(|g| g.sides[side].live).sum()
    }

    /// Checks a batch of `side` against the side's schema (types by position).
    fn check_schema(&self, side: usize, batch: &RecordBatch) -> Result<()> {
        let expected = &self.plan.sides[side].schema;
        let found = batch.schema_ref();
        if Arc::ptr_eq(expected, found)
            || (expected.fields().len() == found.fields().len()
                && expected
                    .fields()
                    .iter()
                    .zip(found.fields())
                    .all(|(a, b)| a.data_type() == b.data_type()))
        {
            return Ok(());
        }
        Err(Error::schema(
            &self.own.name,
            format!(
                "the {} input's batch has schema {found}, but the join was built for {expected}",
                if side == 0 { "left" } else { "right" }
            ),
        ))
    }

    /// Keeps `(epoch, until)` for the null-state watermark.
    fn note_epoch(&mut self, until: i64) {
        match self.epochs.back_mut() {
            Some((e, hi)) if *e == self.epoch => *hi = (*hi).max(until),
            _ => self.epochs.push_back((self.epoch, until)),
        }
    }

    /// Restores one key group's rows and the watermark it had reached.
    fn restore_blob(&mut self, kg: usize, blob: &StateBlob) -> Result<()> {
        let bytes = blob.to_bytes()?;
        let decoded = snapshot::decode_group(&bytes, kg, self.how, self.bounds)?;
        let local = kg - self.own.key_groups.start;
        self.reached.restore(local, decoded.watermark);
        for (side, batch) in decoded.sides.into_iter().enumerate() {
            let Some((batch, times, matched)) = batch else {
                continue;
            };
            self.check_schema(side, &batch)
                .map_err(|e| Error::checkpoint(None, format!("key group {kg}: {e}")))?;
            let binding = &self.plan.sides[side];
            let key_cols = binding.key_columns(&batch);
            crate::state::keyed::check_key_group(
                &self.own.name,
                "the join state",
                &key_cols,
                &mut self.scratch.hashes,
                kg,
                self.own.max_parallelism,
            )?;
            let keys = self.codecs[side]
                .convert_columns(&key_cols)
                .map_err(|e| Error::arrow(&self.own.name, &e))?;
            let keep = self.bounds.expiry(side);
            let group = Arc::make_mut(&mut self.groups[local]);
            let s = &mut group.sides[side];
            s.batches.push(batch);
            let b = (s.batches.len() - 1) as u32;
            for (row, key) in keys.iter().enumerate() {
                let r = RowRef {
                    batch: b,
                    row: row as u32,
                    ts: times[row],
                    matched: matched[row],
                };
                s.keep(key.as_ref(), r, keep);
            }
            if let Some(max) = s.max_expiry(keep) {
                // Restored rows date from before the restored checkpoint.
                self.epochs.clear();
                self.epochs.push_back((0, max));
            }
        }
        Ok(())
    }

    /// The watermark key group `local` is at (see `reached`).
    fn group_watermark(&self, local: usize) -> i64 {
        self.reached.at(local, self.watermark)
    }
}

/// A row of the probing side that matched no row (yet) and whose key holds a
/// null: emitted at once by an outer side.
fn null_key_rows(key_cols: &[ArrayRef]) -> Option<NullBuffer> {
    let mut combined: Option<NullBuffer> = None;
    for c in key_cols {
        if let Some(n) = c.logical_nulls().filter(|n| n.null_count() > 0) {
            combined = NullBuffer::union(combined.as_ref(), Some(&n));
        }
    }
    combined
}

impl JoinOperator {
    /// Matches and keeps the rows of one batch of `side`; returns the
    /// joined rows (or `None`).
    fn join_batch(&mut self, side: usize, batch: &RecordBatch) -> Result<Option<RecordBatch>> {
        let name = self.own.name.clone();
        let binding = &self.plan.sides[side];
        let key_cols = binding.key_columns(batch);
        hash_keys(&key_cols, &mut self.scratch.hashes).map_err(|e| Error::arrow(&name, &e))?;
        let keys = self.codecs[side]
            .convert_columns(&key_cols)
            .map_err(|e| Error::arrow(&name, &e))?;
        let timed = binding.time_idx.is_some();
        if let (Some(t), Some(col)) = (binding.time_idx, &binding.time_name) {
            event_times_millis(&name, batch.column(t), col, &mut self.scratch.times)?;
        }
        let nulls = null_key_rows(&key_cols);
        self.batch_seq += 1;
        let seq = self.batch_seq;
        let keep = self.bounds.expiry(side);
        let other_keep = self.bounds.expiry(1 - side);
        let windowed = matches!(
            self.bounds,
            JoinBounds::Window { .. } | JoinBounds::SessionWindow { .. }
        );
        let outer = self.how != JoinType::Inner;
        let keeps_unmatched = self.how.keeps(side);
        let builder = &mut self.scratch.builder;
        builder.start(side, batch);
        let mut late = 0u64;
        let mut kept_until = i64::MIN;
        let mut matched_until = i64::MIN;
        for (row, key) in keys.iter().enumerate() {
            if nulls.as_ref().is_some_and(|n| n.is_null(row)) {
                if keeps_unmatched {
                    builder.push_unmatched(side, Source::Input, row as u32);
                }
                continue;
            }
            let ts = if timed { self.scratch.times[row] } else { 0 };
            // A temporal join's versions are never late: one at or before
            // the watermark is still the newest for rows to come.
            let versions = side == 1 && self.bounds == JoinBounds::Temporal;
            // A window join's row is late once its window is over.
            let cutoff = if windowed {
                keep.at(ts).unwrap_or(ts)
            } else {
                ts
            };
            let local = self.own.local_index(self.scratch.hashes[row])?;
            let key = key.as_ref();
            let reached = self.reached.at(local, self.watermark);
            if timed && cutoff <= reached && !versions {
                // A session join's row whose own session is over still joins
                // an open session it touches.
                let open = match self.bounds {
                    JoinBounds::SessionWindow { gap_ms } => self.groups[local]
                        .sides
                        .iter()
                        .filter_map(|s| s.rows.get(key))
                        .flatten()
                        .any(|r| (r.ts - ts).abs() < gap_ms),
                    _ => false,
                };
                if !open {
                    late += 1;
                    continue;
                }
            }
            let group = Arc::make_mut(&mut self.groups[local]);
            let mut matched = false;
            let other = &mut group.sides[1 - side];
            if let Some(refs) = other.rows.get_mut(key) {
                for r in refs.iter_mut() {
                    if self.bounds.pairs(side, ts, r.ts) {
                        builder.push_pair(side, row as u32, local as u32, r.batch, r.row);
                        r.matched = true;
                        matched = true;
                        if outer {
                            if let Some(e) = other_keep.at(r.ts) {
                                matched_until = matched_until.max(e);
                            }
                        }
                    }
                }
            }
            let mine = &mut group.sides[side];
            if versions {
                mine.replace_version(key, ts);
            }
            let b = mine.batch_for(seq, batch);
            mine.keep(
                key,
                RowRef {
                    batch: b,
                    row: row as u32,
                    ts,
                    matched,
                },
                keep,
            );
            if let Some(until) = keep.at(ts) {
                kept_until = kept_until.max(until);
                if matched && outer {
                    matched_until = matched_until.max(until);
                }
            }
        }
        if late > 0 {
            self.late.fetch_add(late, Ordering::Relaxed);
        }
        if kept_until > i64::MIN {
            self.note_epoch(kept_until);
        }
        if matched_until > i64::MIN {
            // The rows matched may be of any epoch still held: keep them all
            // while the match matters (an outer row's matched flag).
            for (_, hi) in self.epochs.iter_mut() {
                *hi = (*hi).max(matched_until);
            }
        }
        for g in &mut self.groups {
            if g.sides[side].needs_compaction() {
                Arc::make_mut(g).sides[side]
                    .compact()
                    .map_err(|e| Error::arrow(&name, &e))?;
            }
        }
        let groups = &self.groups;
        self.scratch
            .builder
            .finish(&self.plan, groups)
            .map_err(|e| Error::arrow(&name, &e))
    }

    /// Drops the rows the watermark expired, emitting an outer side's
    /// unmatched ones.
    fn expire(&mut self, watermark: i64) -> Result<Option<RecordBatch>> {
        let builder = &mut self.scratch.builder;
        builder.start_expiry();
        for (local, g) in self.groups.iter_mut().enumerate() {
            if g.sides.iter().all(|s| s.min_expiry > watermark) {
                continue;
            }
            let group = Arc::make_mut(g);
            for side in 0..2 {
                let keep = self.bounds.expiry(side);
                let emit = self.how.keeps(side);
                group.sides[side].expire(watermark, keep, |_, r| {
                    if emit && !r.matched {
                        builder.push_unmatched(side, Source::Kept(local as u32, r.batch), r.row);
                    }
                });
            }
        }
        self.scratch
            .builder
            .finish(&self.plan, &self.groups)
            .map_err(|e| Error::arrow(&self.own.name, &e))
    }
}

impl Operator for JoinOperator {
    fn late_records(&self) -> u64 {
        JoinOperator::late_records(self)
    }

    fn process_batch(
        &mut self,
        input: usize,
        batch: RecordBatch,
        out: &mut dyn Collector,
    ) -> Result<()> {
        if input > 1 {
            return Err(Error::operator(
                &self.own.name,
                format!("a join has two inputs, got a batch on input {input}"),
            ));
        }
        if batch.num_rows() == 0 {
            return Ok(());
        }
        self.check_schema(input, &batch)?;
        if let Some(joined) = self.join_batch(input, &batch)? {
            out.emit(joined)?;
        }
        Ok(())
    }

    fn process_watermark(&mut self, watermark: i64, out: &mut dyn Collector) -> Result<()> {
        if watermark <= self.watermark {
            return Ok(());
        }
        let previous = self.watermark;
        self.watermark = watermark;
        if self.bounds == JoinBounds::Temporal {
            let keeps = self.how.keeps(0);
            let builder = &mut self.scratch.builder;
            temporal::fire(&mut self.groups, watermark, keeps, builder);
            let rows = builder
                .finish(&self.plan, &self.groups)
                .map_err(|e| Error::arrow(&self.own.name, &e))?;
            if let Some(rows) = rows {
                out.emit(rows)?;
            }
        } else if let JoinBounds::SessionWindow { gap_ms } = self.bounds {
            let builder = &mut self.scratch.builder;
            window::fire_sessions(&mut self.groups, watermark, gap_ms, builder);
            let rows = builder
                .finish(&self.plan, &self.groups)
                .map_err(|e| Error::arrow(&self.own.name, &e))?;
            if let Some(rows) = rows {
                out.emit(rows)?;
            }
        } else if let JoinBounds::Window { size_ms, slide_ms } = self.bounds {
            let builder = &mut self.scratch.builder;
            let span = (previous, watermark);
            let reached = &self.reached;
            window::fire(&mut self.groups, span, reached, size_ms, slide_ms, builder);
            let rows = builder
                .finish(&self.plan, &self.groups)
                .map_err(|e| Error::arrow(&self.own.name, &e))?;
            if let Some(rows) = rows {
                out.emit(rows)?;
            }
        } else if self.bounds.timed() {
            if let Some(rows) = self.expire(watermark)? {
                out.emit(rows)?;
            }
            if watermark == MAX_WATERMARK {
                self.epochs.clear();
            }
            while self.epochs.front().is_some_and(|(_, hi)| *hi <= watermark) {
                self.epochs.pop_front();
            }
        }
        out.emit_watermark(watermark)
    }

    fn state(&mut self) -> Option<&mut dyn CheckpointedState> {
        Some(self)
    }

    fn recompute(&mut self) -> Option<&mut dyn Recompute> {
        Some(self)
    }
}

impl CheckpointedState for JoinOperator {
    fn snapshot_state(&mut self, _checkpoint_id: u64) -> Result<OperatorState> {
        let meta = Arc::new(snapshot::SnapshotMeta {
            name: Arc::from(self.own.name.as_str()),
            how: self.how,
            bounds: self.bounds,
            schemas: [
                self.plan.sides[0].schema.clone(),
                self.plan.sides[1].schema.clone(),
            ],
            keys: [self.plan.key_names(0), self.plan.key_names(1)],
        });
        let start = self.own.key_groups.start;
        let keyed = self
            .groups
            .iter()
            .enumerate()
            .filter(|(local, g)| {
                self.reached
                    .snapshots(*local, self.watermark, !g.is_empty())
            })
            .map(|(local, g)| {
                let view = snapshot::GroupSnapshot {
                    meta: meta.clone(),
                    group: g.clone(),
                    watermark: self.group_watermark(local),
                };
                ((start + local) as u32, StateBlob::Deferred(Arc::new(view)))
            })
            .collect();
        Ok(OperatorState {
            operator: None,
            keyed,
        })
    }

    /// The subtask continues from the smallest watermark of the key groups it
    /// restores (each keeps its own as `reached`): never above what the
    /// subtask that wrote a key group had reached.
    fn restore_state(&mut self, state: OperatorState) -> Result<()> {
        let kind = &format!("a {} join", self.how.name());
        for (kg, blob) in owned_key_groups(state, &self.own, kind)? {
            self.restore_blob(kg, &blob)?;
        }
        self.watermark = self.reached.continue_from(self.watermark);
        Ok(())
    }
}

impl Recompute for JoinOperator {
    fn null_state_watermark(&self, checkpoint_id: u64) -> Result<Option<u64>> {
        if !matches!(self.bounds, JoinBounds::Interval { .. }) {
            return Ok(None);
        }
        Ok(Some(self.epochs.front().map_or(checkpoint_id, |(e, _)| *e)))
    }

    fn on_barrier(&mut self, checkpoint_id: u64) -> Result<()> {
        self.epoch = checkpoint_id;
        Ok(())
    }
}

#[cfg(test)]
mod tests;
