//! The rows a join keeps, per key group and side (see the parent module's
//! "State"): the input batches that hold them, shared and never copied on
//! arrival, and per row-format key the kept rows' positions, timestamps and
//! whether they matched, and an index of when each key's rows expire next,
//! so that expiry costs what it drops, not what is kept.

use std::cmp::Reverse;
use std::collections::hash_map::Entry;
use std::collections::BinaryHeap;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, RecordBatch};
use arrow::compute::interleave;
use rustc_hash::FxHashMap;

type ArrowResult<T> = std::result::Result<T, arrow::error::ArrowError>;

/// A group compacts its kept rows into one batch once it refers to this
/// many batches.
const COMPACT_AT: usize = 64;

/// When a kept row expires (the watermark at which it is dropped).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Expiry {
    /// Kept forever.
    Never,
    /// At its time + this many ms.
    After(i64),
    /// At the last millisecond of the last window of `size` ms (starting
    /// every `slide` ms) that holds it.
    LastWindowEnd { size: i64, slide: i64 },
}

impl Expiry {
    /// The expiry of a row at `ts`, if it expires.
    #[inline]
    pub fn at(self, ts: i64) -> Option<i64> {
        match self {
            Expiry::Never => None,
            Expiry::After(k) => Some(ts.saturating_add(k)),
            Expiry::LastWindowEnd { size, slide } => {
                Some(window_start(ts, slide).saturating_add(size - 1))
            }
        }
    }
}

/// The start of the last window starting every `slide` ms that holds `ts`.
#[inline]
pub(super) fn window_start(ts: i64, slide: i64) -> i64 {
    ts - ts.rem_euclid(slide)
}

/// One kept row: where it is, its event time (0 when time plays no part)
/// and whether it matched a row of the other side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct RowRef {
    pub batch: u32,
    pub row: u32,
    pub ts: i64,
    pub matched: bool,
}

/// The kept rows of one key, in the order kept, and when the earliest of
/// them expires.
#[derive(Debug, Clone)]
pub(super) struct Kept {
    refs: Vec<RowRef>,
    /// The smallest expiry of `refs` (`i64::MAX`: none expires), the value
    /// of this key's live entry in [`Side`]'s `due`; a lower bound once rows
    /// are dropped other than by [`Side::expire`].
    due: i64,
}

impl std::ops::Deref for Kept {
    type Target = Vec<RowRef>;

    fn deref(&self) -> &Vec<RowRef> {
        &self.refs
    }
}

impl std::ops::DerefMut for Kept {
    fn deref_mut(&mut self) -> &mut Vec<RowRef> {
        &mut self.refs
    }
}

impl<'a> IntoIterator for &'a Kept {
    type Item = &'a RowRef;
    type IntoIter = std::slice::Iter<'a, RowRef>;

    fn into_iter(self) -> Self::IntoIter {
        self.refs.iter()
    }
}

/// The rows of one side in one key group.
#[derive(Debug, Clone)]
pub(super) struct Side {
    /// The batches the kept rows are in.
    pub batches: Vec<RecordBatch>,
    /// The input batch `batches.last()` is (see [`Side::batch_for`]).
    last_seq: u64,
    /// Per row-format key (shared with `due`, one allocation per key).
    pub rows: FxHashMap<Arc<[u8]>, Kept>,
    /// How many rows are kept.
    pub live: usize,
    /// The smallest expiry of a kept row (`i64::MAX`: none expires).
    pub min_expiry: i64,
    /// (expiry, key), earliest first: when a side's rows expire, every kept
    /// key has an entry equal to its [`Kept`]'s `due`; an entry that differs
    /// (the key's `due` fell or the key went) is stale and skipped. Derived
    /// from the kept rows (rebuilt by [`Side::keep`] on restore).
    due: BinaryHeap<Reverse<(i64, Arc<[u8]>)>>,
}

impl Default for Side {
    fn default() -> Self {
        Side {
            batches: Vec::new(),
            last_seq: 0,
            rows: FxHashMap::default(),
            live: 0,
            min_expiry: i64::MAX,
            due: BinaryHeap::new(),
        }
    }
}

/// The state of one key group.
#[derive(Debug, Clone, Default)]
pub(super) struct Group {
    pub sides: [Side; 2],
}

impl Group {
    pub fn is_empty(&self) -> bool {
        self.sides.iter().all(|s| s.live == 0)
    }
}

impl Side {
    /// The index of input batch number `seq` among the kept batches, kept
    /// (a cheap `Arc` clone) the first time one of its rows is.
    pub fn batch_for(&mut self, seq: u64, batch: &RecordBatch) -> u32 {
        if self.last_seq != seq || self.batches.is_empty() {
            self.batches.push(batch.clone());
            self.last_seq = seq;
        }
        (self.batches.len() - 1) as u32
    }

    /// Keeps `r` under `key`, to expire as `expiry` says: one map lookup;
    /// an index entry only for a new key or when the key's earliest expiry
    /// falls (a row older than its others), not per row.
    pub fn keep(&mut self, key: &[u8], r: RowRef, expiry: Expiry) {
        self.live += 1;
        let e = expiry.at(r.ts);
        if let Some(e) = e {
            self.min_expiry = self.min_expiry.min(e);
        }
        if let Some(kept) = self.rows.get_mut(key) {
            kept.refs.push(r);
            let Some(e) = e.filter(|e| *e < kept.due) else {
                return;
            };
            kept.due = e;
            // Rare (a row due before the key's others): a second lookup for
            // the shared key.
            if let Some((key, _)) = self.rows.get_key_value(key) {
                self.due.push(Reverse((e, Arc::clone(key))));
            }
            return;
        }
        let key: Arc<[u8]> = Arc::from(key);
        if let Some(e) = e {
            self.due.push(Reverse((e, Arc::clone(&key))));
        }
        let due = e.unwrap_or(i64::MAX);
        self.rows.insert(key, Kept { refs: vec![r], due });
    }

    /// Rebuilds the expiry index and `min_expiry` from the kept rows (after
    /// rows were dropped other than by [`Side::expire`]).
    pub fn reindex(&mut self, expiry: Expiry) {
        let mut entries = std::mem::take(&mut self.due).into_vec();
        entries.clear();
        self.min_expiry = i64::MAX;
        for (key, kept) in &mut self.rows {
            kept.due = i64::MAX;
            if let Some(e) = kept.refs.iter().filter_map(|r| expiry.at(r.ts)).min() {
                kept.due = e;
                self.min_expiry = self.min_expiry.min(e);
                entries.push(Reverse((e, Arc::clone(key))));
            }
        }
        self.due = BinaryHeap::from(entries);
    }

    /// The largest expiry of a kept row, if rows expire.
    pub fn max_expiry(&self, expiry: Expiry) -> Option<i64> {
        self.rows
            .values()
            .flatten()
            .filter_map(|r| expiry.at(r.ts))
            .max()
    }

    /// Drops the rows whose expiry the watermark reached, calling
    /// `dropped` with each (before the batches may be released): key by key
    /// in the order their earliest rows expire (ties by key), a key's rows
    /// in the order they were kept. Only the keys with a row due are
    /// visited, one map lookup each.
    pub fn expire(
        &mut self,
        watermark: i64,
        expiry: Expiry,
        mut dropped: impl FnMut(&[u8], &RowRef),
    ) {
        if expiry == Expiry::Never || self.min_expiry > watermark {
            return;
        }
        while let Some(Reverse((e, _))) = self.due.peek() {
            if *e > watermark {
                break;
            }
            let Some(Reverse((e, key))) = self.due.pop() else {
                break;
            };
            let Entry::Occupied(mut entry) = self.rows.entry(key) else {
                continue; // stale: the key went
            };
            let key = Arc::clone(entry.key());
            let kept = entry.get_mut();
            if kept.due != e {
                continue; // stale: the key's earliest expiry fell since
            }
            let mut min = i64::MAX;
            let before = kept.refs.len();
            kept.refs.retain(|r| {
                let e = expiry.at(r.ts).unwrap_or(i64::MAX);
                if e <= watermark {
                    dropped(&key, r);
                    false
                } else {
                    min = min.min(e);
                    true
                }
            });
            self.live -= before - kept.refs.len();
            if kept.refs.is_empty() {
                entry.remove();
            } else {
                kept.due = min;
                self.due.push(Reverse((min, key)));
            }
        }
        while let Some(Reverse((e, key))) = self.due.peek() {
            if self.rows.get(&**key).is_some_and(|k| k.due == *e) {
                break;
            }
            self.due.pop();
        }
        self.min_expiry = self.due.peek().map_or(i64::MAX, |Reverse((e, _))| *e);
        if self.live == 0 {
            // Dropping the batches now would invalidate the positions the
            // caller just collected; the next compaction or arrival clears them.
            self.rows.shrink_to(16);
            self.due.shrink_to(16);
        }
    }

    /// Whether the side refers to so many batches that it should compact.
    pub fn needs_compaction(&self) -> bool {
        self.batches.len() >= COMPACT_AT || (self.live == 0 && !self.batches.is_empty())
    }

    /// Copies the kept rows into one batch (one `interleave` per column) and
    /// releases the batches they were in.
    pub fn compact(&mut self) -> ArrowResult<()> {
        if self.live == 0 {
            self.batches.clear();
            self.rows.clear();
            self.due.clear();
            self.last_seq = 0;
            return Ok(());
        }
        let mut indices: Vec<(usize, usize)> = Vec::with_capacity(self.live);
        for refs in self.rows.values_mut() {
            for r in refs.iter_mut() {
                indices.push((r.batch as usize, r.row as usize));
                r.batch = 0;
                r.row = (indices.len() - 1) as u32;
            }
        }
        let batch = gather(&self.batches, &indices)?;
        self.batches.clear();
        self.batches.push(batch);
        // The next input batch is a new one.
        self.last_seq = 0;
        Ok(())
    }
}

/// The rows `indices` ((batch, row) pairs) of `batches` as one batch.
pub(super) fn gather(
    batches: &[RecordBatch],
    indices: &[(usize, usize)],
) -> ArrowResult<RecordBatch> {
    let schema = batches[0].schema();
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(schema.fields().len());
    let mut arrays: Vec<&dyn Array> = Vec::with_capacity(batches.len());
    for c in 0..schema.fields().len() {
        arrays.clear();
        arrays.extend(batches.iter().map(|b| b.column(c).as_ref()));
        columns.push(interleave(&arrays, indices)?);
    }
    RecordBatch::try_new(schema, columns)
}

impl Side {
    /// Keeps, per key, the rows newer than `watermark` and the newest one at
    /// or before it (a temporal join's versions: older ones can no longer
    /// be the newest version at or before a row still to come).
    pub fn prune_versions(&mut self, watermark: i64) {
        if self.live == self.rows.len() {
            return; // one version per key
        }
        let mut live = 0;
        for refs in self.rows.values_mut() {
            let newest_due = refs
                .iter()
                .filter(|r| r.ts <= watermark)
                .map(|r| r.ts)
                .max();
            if let Some(due) = newest_due {
                refs.retain(|r| r.ts >= due);
            }
            live += refs.len();
        }
        self.live = live;
    }

    /// Forgets the version of `key` at `ts`, if any (an upsert replaces it).
    pub fn replace_version(&mut self, key: &[u8], ts: i64) {
        if let Some(refs) = self.rows.get_mut(key) {
            let before = refs.len();
            refs.retain(|r| r.ts != ts);
            self.live -= before - refs.len();
        }
    }

    /// The newest row of `key` at or before `ts`.
    pub fn version_at(&self, key: &[u8], ts: i64) -> Option<&RowRef> {
        self.rows
            .get(key)?
            .iter()
            .filter(|r| r.ts <= ts)
            .max_by_key(|r| r.ts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The expiry as it was before the index: a scan of every kept row,
    /// kept as the reference the index must agree with.
    fn expire_by_scan(
        side: &mut Side,
        watermark: i64,
        expiry: Expiry,
        mut dropped: impl FnMut(&[u8], &RowRef),
    ) {
        if expiry == Expiry::Never || side.min_expiry > watermark {
            return;
        }
        let mut min = i64::MAX;
        let mut live = 0usize;
        side.rows.retain(|key, refs| {
            refs.retain(|r| {
                let e = expiry.at(r.ts).unwrap_or(i64::MAX);
                if e <= watermark {
                    dropped(key, r);
                    false
                } else {
                    min = min.min(e);
                    true
                }
            });
            live += refs.len();
            !refs.is_empty()
        });
        side.live = live;
        side.min_expiry = min;
    }

    /// The kept rows, sorted, per key.
    fn kept(side: &Side) -> Vec<(Vec<u8>, Vec<RowRef>)> {
        let mut out: Vec<_> = side
            .rows
            .iter()
            .map(|(k, refs)| (k.to_vec(), refs.to_vec()))
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// A side rebuilt from `side`'s kept rows as a restore does (one
    /// `keep` per row, the index derived again).
    fn restored(side: &Side, expiry: Expiry) -> Side {
        let mut out = Side::default();
        for (key, refs) in kept(side) {
            for r in refs {
                out.keep(&key, r, expiry);
            }
        }
        out
    }

    fn expiries() -> impl Strategy<Value = Expiry> {
        prop_oneof![
            (0i64..20).prop_map(Expiry::After),
            (1i64..8, 1i64..8).prop_map(|(a, b)| Expiry::LastWindowEnd {
                size: a.max(b),
                slide: a.min(b),
            }),
        ]
    }

    /// Steps: rows (key, time offset from the watermark) kept, then the
    /// watermark advanced by a step (0: none).
    fn steps() -> impl Strategy<Value = Vec<(Vec<(u8, i64)>, i64)>> {
        prop::collection::vec(
            (prop::collection::vec((0u8..6, -5i64..30), 0..12), 0i64..12),
            1..30,
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        /// The indexed expiry drops exactly the rows the full scan drops,
        /// each key's in the order kept, and agrees on `live`,
        /// `min_expiry` and the rows kept, also across a restore.
        #[test]
        fn indexed_expiry_drops_what_a_scan_drops(
            expiry in expiries(),
            steps in steps(),
            restore_at in 0usize..30,
        ) {
            let (mut indexed, mut scanned) = (Side::default(), Side::default());
            let mut watermark = -10;
            let mut n = 0u32;
            for (i, (rows, advance)) in steps.into_iter().enumerate() {
                for (key, offset) in rows {
                    let r = RowRef { batch: 0, row: n, ts: watermark + offset, matched: n.is_multiple_of(3) };
                    n += 1;
                    indexed.keep(&[key], r, expiry);
                    scanned.keep(&[key], r, expiry);
                }
                if i == restore_at {
                    indexed = restored(&indexed, expiry);
                }
                watermark += advance;
                let (mut a, mut b) = (Vec::new(), Vec::new());
                indexed.expire(watermark, expiry, |k, r| a.push((k.to_vec(), *r)));
                expire_by_scan(&mut scanned, watermark, expiry, |k, r| b.push((k.to_vec(), *r)));
                // Per key, the order kept (rows numbered on arrival).
                for drops in [&a, &b] {
                    for w in drops.windows(2) {
                        if w[0].0 == w[1].0 {
                            prop_assert!(w[0].1.row < w[1].1.row);
                        }
                    }
                }
                a.sort_by_key(|d| d.1.row);
                b.sort_by_key(|d| d.1.row);
                prop_assert_eq!(a, b);
                prop_assert_eq!(indexed.live, scanned.live);
                prop_assert_eq!(indexed.min_expiry, scanned.min_expiry);
                prop_assert_eq!(kept(&indexed), kept(&scanned));
            }
        }
    }

    /// A row whose expiry saturates at the largest watermark still drops
    /// when the input ends (the watermark reaches it), as the scan drops it.
    #[test]
    fn rows_due_at_the_last_watermark_drop_at_it() {
        let expiry = Expiry::After(10);
        let (mut indexed, mut scanned) = (Side::default(), Side::default());
        for (row, ts) in [(0u32, i64::MAX - 3), (1, 5), (2, i64::MAX - 1)] {
            let r = RowRef {
                batch: 0,
                row,
                ts,
                matched: false,
            };
            indexed.keep(b"k", r, expiry);
            scanned.keep(b"k", r, expiry);
        }
        let (mut a, mut b) = (Vec::new(), Vec::new());
        indexed.expire(20, expiry, |_, r| a.push(r.row));
        expire_by_scan(&mut scanned, 20, expiry, |_, r| b.push(r.row));
        assert_eq!((a.clone(), indexed.min_expiry), (vec![1], i64::MAX));
        assert_eq!((b.clone(), scanned.min_expiry), (vec![1], i64::MAX));
        indexed.expire(i64::MAX, expiry, |_, r| a.push(r.row));
        expire_by_scan(&mut scanned, i64::MAX, expiry, |_, r| b.push(r.row));
        assert_eq!(a, vec![1, 0, 2]);
        assert_eq!(a, b);
        assert_eq!((indexed.live, scanned.live), (0, 0));
    }

    /// A key's rows expire a key at a time: the index visits only the keys
    /// with a row due, earliest first.
    #[test]
    fn expiry_visits_keys_earliest_first() {
        let mut side = Side::default();
        let expiry = Expiry::After(10);
        for (row, (key, ts)) in [(1u8, 5), (2, 1), (1, 0), (3, 50), (2, 3)]
            .into_iter()
            .enumerate()
        {
            let r = RowRef {
                batch: 0,
                row: row as u32,
                ts,
                matched: false,
            };
            side.keep(&[key], r, expiry);
        }
        assert_eq!(side.min_expiry, 10);
        let mut dropped = Vec::new();
        side.expire(13, expiry, |k, r| dropped.push((k[0], r.ts)));
        // Key 1 (earliest 10) before key 2 (earliest 11), each in order kept.
        assert_eq!(dropped, vec![(1, 0), (2, 1), (2, 3)]);
        assert_eq!((side.live, side.min_expiry), (2, 15));
        dropped.clear();
        side.expire(59, expiry, |k, r| dropped.push((k[0], r.ts)));
        assert_eq!(dropped, vec![(1, 5)]);
        assert_eq!((side.live, side.min_expiry), (1, 60));
    }
}
