//! The rows a join keeps, per key group and side (see the parent module's
//! "State"): the input batches that hold them, shared and never copied on
//! arrival, and per row-format key the kept rows' positions, timestamps and
//! whether they matched.

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

/// The rows of one side in one key group.
#[derive(Debug, Clone)]
pub(super) struct Side {
    /// The batches the kept rows are in.
    pub batches: Vec<RecordBatch>,
    /// The input batch `batches.last()` is (see [`Side::batch_for`]).
    last_seq: u64,
    pub rows: FxHashMap<Box<[u8]>, Vec<RowRef>>,
    /// How many rows are kept.
    pub live: usize,
    /// The smallest expiry of a kept row (`i64::MAX`: none expires).
    pub min_expiry: i64,
}

impl Default for Side {
    fn default() -> Self {
        Side {
            batches: Vec::new(),
            last_seq: 0,
            rows: FxHashMap::default(),
            live: 0,
            min_expiry: i64::MAX,
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

    /// Keeps `r` under `key`, to expire as `expiry` says.
    pub fn keep(&mut self, key: &[u8], r: RowRef, expiry: Expiry) {
        match self.rows.get_mut(key) {
            Some(refs) => refs.push(r),
            None => {
                self.rows.insert(Box::from(key), vec![r]);
            }
        }
        self.live += 1;
        if let Some(e) = expiry.at(r.ts) {
            self.min_expiry = self.min_expiry.min(e);
        }
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
    /// `dropped` with each (before the batches may be released).
    pub fn expire(
        &mut self,
        watermark: i64,
        expiry: Expiry,
        mut dropped: impl FnMut(&[u8], &RowRef),
    ) {
        if expiry == Expiry::Never || self.min_expiry > watermark {
            return;
        }
        let mut min = i64::MAX;
        let mut live = 0usize;
        self.rows.retain(|key, refs| {
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
        self.live = live;
        self.min_expiry = min;
        if live == 0 {
            // Dropping the batches now would invalidate the positions the
            // caller just collected; the next compaction or arrival clears them.
            self.rows.shrink_to(16);
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
