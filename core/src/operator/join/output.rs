//! Builds a join's output batch: the joined (or null-padded) rows collected
//! while a batch or a watermark is processed, gathered with one `interleave`
//! kernel per output column from the input batch and the kept batches.

use std::sync::Arc;

use arrow::array::{new_null_array, Array, ArrayRef, RecordBatch};
use arrow::compute::interleave;
use arrow::datatypes::Schema;
use rustc_hash::FxHashMap;

use super::rows::Group;
use super::{OutColumn, Plan};

use arrow::error::ArrowError;

type ArrowResult<T> = std::result::Result<T, ArrowError>;

/// Stands for the one-row all-null batch of a side (the side is absent).
const ABSENT: usize = usize::MAX;

/// Where a row of one side is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Source {
    /// The input batch being processed.
    Input,
    /// Kept batch `.1` of key group `.0` (local index).
    Kept(u32, u32),
}

/// The output rows of one call, per side: (source index, row).
#[derive(Default)]
pub(super) struct OutputBuilder {
    input: Option<RecordBatch>,
    sources: [Vec<Source>; 2],
    index_of: [FxHashMap<Source, usize>; 2],
    rows: [Vec<(usize, usize)>; 2],
    /// A one-row all-null batch per side, made once.
    nulls: [Option<RecordBatch>; 2],
    keys: Vec<(usize, usize)>,
    /// A window join's window (start, end) per output row.
    windows: Vec<(i64, i64)>,
}

impl OutputBuilder {
    fn clear(&mut self) {
        for side in 0..2 {
            self.sources[side].clear();
            self.index_of[side].clear();
            self.rows[side].clear();
        }
        self.windows.clear();
        self.input = None;
    }

    /// Starts collecting the output of `batch` arriving on `_side`.
    pub fn start(&mut self, _side: usize, batch: &RecordBatch) {
        self.clear();
        self.input = Some(batch.clone());
    }

    /// Starts collecting the rows a watermark expires.
    pub fn start_expiry(&mut self) {
        self.clear();
    }

    fn source(&mut self, side: usize, source: Source) -> usize {
        let sources = &mut self.sources[side];
        *self.index_of[side].entry(source).or_insert_with(|| {
            sources.push(source);
            sources.len() - 1
        })
    }

    /// Row `row` of the input (a batch of `side`) joined with row `krow` of
    /// kept batch `batch` of group `group` of the other side.
    #[inline]
    pub fn push_pair(&mut self, side: usize, row: u32, group: u32, batch: u32, krow: u32) {
        let mine = self.source(side, Source::Input);
        let theirs = self.source(1 - side, Source::Kept(group, batch));
        self.rows[side].push((mine, row as usize));
        self.rows[1 - side].push((theirs, krow as usize));
    }

    /// Kept row `lrow` of left batch `lbatch` joined with kept row `rrow` of
    /// right batch `rbatch`, both of group `group`.
    #[inline]
    pub fn push_kept_pair(&mut self, group: u32, lbatch: u32, lrow: u32, rbatch: u32, rrow: u32) {
        let l = self.source(0, Source::Kept(group, lbatch));
        let r = self.source(1, Source::Kept(group, rbatch));
        self.rows[0].push((l, lrow as usize));
        self.rows[1].push((r, rrow as usize));
    }

    /// [`Self::push_kept_pair`] of a window join, in the window `[start, end)`.
    #[inline]
    pub fn push_window_pair(
        &mut self,
        group: u32,
        left: (u32, u32),
        right: (u32, u32),
        window: (i64, i64),
    ) {
        self.push_kept_pair(group, left.0, left.1, right.0, right.1);
        self.windows.push(window);
    }

    /// Row `row` of `side` at `source`, with nulls for the other side.
    #[inline]
    pub fn push_unmatched(&mut self, side: usize, source: Source, row: u32) {
        let mine = self.source(side, source);
        self.rows[side].push((mine, row as usize));
        self.rows[1 - side].push((ABSENT, 0));
    }

    /// The batches of `side`'s sources, the null batch last.
    fn batches(
        &mut self,
        plan: &Plan,
        groups: &[Arc<Group>],
        side: usize,
    ) -> ArrowResult<Vec<RecordBatch>> {
        let mut out = Vec::with_capacity(self.sources[side].len() + 1);
        for s in &self.sources[side] {
            out.push(match *s {
                Source::Input => self
                    .input
                    .clone()
                    .expect("invariant: Input sources are only pushed after start()"),
                Source::Kept(g, b) => groups[g as usize].sides[side].batches[b as usize].clone(),
            });
        }
        if self.nulls[side].is_none() {
            let schema = &plan.sides[side].schema;
            let fields: Vec<_> = schema
                .fields()
                .iter()
                .map(|f| f.as_ref().clone().with_nullable(true))
                .collect();
            let columns = schema
                .fields()
                .iter()
                .map(|f| new_null_array(f.data_type(), 1))
                .collect();
            self.nulls[side] = Some(RecordBatch::try_new(
                Arc::new(Schema::new(fields)),
                columns,
            )?);
        }
        out.push(
            self.nulls[side]
                .clone()
                .expect("invariant: made just above"),
        );
        Ok(out)
    }

    /// The collected rows as one batch of the output schema (`None` when
    /// there are none).
    pub fn finish(
        &mut self,
        plan: &Plan,
        groups: &[Arc<Group>],
    ) -> ArrowResult<Option<RecordBatch>> {
        let n = self.rows[0].len();
        if n == 0 {
            self.input = None;
            return Ok(None);
        }
        let batches = [
            self.batches(plan, groups, 0)?,
            self.batches(plan, groups, 1)?,
        ];
        for (side, sources) in batches.iter().enumerate() {
            let null_at = sources.len() - 1;
            for r in &mut self.rows[side] {
                if r.0 == ABSENT {
                    r.0 = null_at;
                }
            }
        }
        let left_absent = batches[0].len() - 1;
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(plan.columns.len());
        let mut arrays: Vec<&dyn Array> = Vec::new();
        for col in &plan.columns {
            arrays.clear();
            match *col {
                OutColumn::Key(i) => {
                    let (l, r) = (plan.sides[0].key_idx[i], plan.sides[1].key_idx[i]);
                    arrays.extend(batches[0].iter().map(|b| b.column(l).as_ref()));
                    arrays.extend(batches[1].iter().map(|b| b.column(r).as_ref()));
                    let offset = batches[0].len();
                    self.keys.clear();
                    self.keys
                        .extend(self.rows[0].iter().zip(&self.rows[1]).map(|(lr, rr)| {
                            if lr.0 == left_absent {
                                (offset + rr.0, rr.1)
                            } else {
                                *lr
                            }
                        }));
                    columns.push(interleave(&arrays, &self.keys)?);
                }
                OutColumn::WindowStart | OutColumn::WindowEnd => {
                    let (_, dt) = plan.window.as_ref().ok_or_else(|| {
                        ArrowError::InvalidArgumentError("a window column of a plain join".into())
                    })?;
                    let end = matches!(col, OutColumn::WindowEnd);
                    let ms = self.windows.iter().map(|w| if end { w.1 } else { w.0 });
                    let array = crate::operator::window::time_array("join", ms, dt)
                        .map_err(|e| ArrowError::ComputeError(e.to_string()))?;
                    columns.push(array);
                }
                OutColumn::Side(side, c) => {
                    arrays.extend(batches[side].iter().map(|b| b.column(c).as_ref()));
                    columns.push(interleave(&arrays, &self.rows[side])?);
                }
            }
        }
        self.input = None;
        Ok(Some(RecordBatch::try_new(plan.output.clone(), columns)?))
    }
}
