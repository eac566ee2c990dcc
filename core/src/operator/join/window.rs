//! The window join (API.md "Joins": `left.window_join(right, ...,
//! window=ed.Tumbling(size) | ed.Sliding(size, slide))`, Flink's
//! `join(...).window(...)`): rows of equal keys in the same window pair up
//! when the window fires (the watermark reaches its last millisecond), one
//! output row per pair and shared window, with the window's bounds; a row is
//! dropped once its last window fired. A row whose windows are all over when
//! it arrives is late.

use std::sync::Arc;

use super::output::OutputBuilder;
use super::rows::{window_start, Expiry, Group};
use crate::state::group_watermarks::KeyGroupWatermarks;

/// Pairs the rows of every window that fires as the watermark moves over
/// `span` (previous, current), then drops the rows whose last window fired.
/// A key group restored at a watermark above `previous` (`reached`, see the
/// join's `reached`) fires only the windows after the one it had reached.
pub(super) fn fire(
    groups: &mut [Arc<Group>],
    span: (i64, i64),
    reached: &KeyGroupWatermarks,
    size: i64,
    slide: i64,
    builder: &mut OutputBuilder,
) {
    builder.start_expiry();
    let (operator_previous, watermark) = span;
    let expiry = Expiry::LastWindowEnd { size, slide };
    for (local, g) in groups.iter_mut().enumerate() {
        let previous = reached.at(local, operator_previous);
        // Window `s` fires now when previous < s + size - 1 <= watermark.
        let fires = |s: i64| {
            let last = i128::from(s) + i128::from(size) - 1;
            i128::from(previous) < last && last <= i128::from(watermark)
        };
        if g.sides.iter().any(|s| s.live == 0) && g.sides.iter().all(|s| s.min_expiry > watermark) {
            continue;
        }
        let [left, right] = &g.sides;
        for (key, lefts) in &left.rows {
            let Some(rights) = right.rows.get(key) else {
                continue;
            };
            for l in lefts {
                // The windows of l, latest first: starts in (l.ts - size, l.ts].
                let mut s = window_start(l.ts, slide);
                while i128::from(s) > i128::from(l.ts) - i128::from(size) {
                    if fires(s) {
                        for r in rights.iter().filter(|r| s <= r.ts && r.ts - s < size) {
                            let pair = ((l.batch, l.row), (r.batch, r.row));
                            builder.push_window_pair(local as u32, pair.0, pair.1, (s, s + size));
                        }
                    }
                    s = s.saturating_sub(slide);
                }
            }
        }
        let group = Arc::make_mut(g);
        for side in &mut group.sides {
            side.expire(watermark, expiry, |_, _| {});
        }
    }
}

/// A session window join (`window=ed.Session(gap)`): per key, the rows of both
/// sides form sessions together (rows closer than `gap`; a row bridging two
/// merges them). A session `[first, last + gap)` can no longer grow once the
/// watermark reaches `last + gap - 1` (a row still to come is later than
/// that); it then fires: every left row of it with every right row, and its
/// rows are dropped.
pub(super) fn fire_sessions(
    groups: &mut [Arc<Group>],
    watermark: i64,
    gap: i64,
    builder: &mut OutputBuilder,
) {
    builder.start_expiry();
    // (time, side, index in the key's list) of one key's rows, reused.
    let mut rows: Vec<(i64, usize, usize)> = Vec::new();
    let mut due: Vec<(usize, usize)> = Vec::new();
    for (local, g) in groups.iter_mut().enumerate() {
        if g.sides.iter().all(|s| s.min_expiry > watermark) {
            continue;
        }
        let group = Arc::make_mut(g);
        let keys: Vec<Arc<[u8]>> = group.sides[0]
            .rows
            .keys()
            .chain(group.sides[1].rows.keys())
            .cloned()
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        for key in keys {
            rows.clear();
            for side in 0..2 {
                if let Some(refs) = group.sides[side].rows.get(&key) {
                    rows.extend(refs.iter().enumerate().map(|(i, r)| (r.ts, side, i)));
                }
            }
            rows.sort_unstable();
            due.clear();
            let mut start = 0;
            while start < rows.len() {
                let mut end = start + 1;
                while end < rows.len() && rows[end].0 - rows[end - 1].0 < gap {
                    end += 1;
                }
                let (first, last) = (rows[start].0, rows[end - 1].0);
                if i128::from(last) + i128::from(gap) - 1 <= i128::from(watermark) {
                    let session = &rows[start..end];
                    let window = (first, last.saturating_add(gap));
                    for l in session.iter().filter(|r| r.1 == 0) {
                        let lr = group.sides[0].rows[&key][l.2];
                        for r in session.iter().filter(|r| r.1 == 1) {
                            let rr = group.sides[1].rows[&key][r.2];
                            let pair = ((lr.batch, lr.row), (rr.batch, rr.row));
                            builder.push_window_pair(local as u32, pair.0, pair.1, window);
                        }
                    }
                    due.extend(session.iter().map(|r| (r.1, r.2)));
                }
                start = end;
            }
            for side in 0..2 {
                let mut drop: Vec<usize> =
                    due.iter().filter(|d| d.0 == side).map(|d| d.1).collect();
                if drop.is_empty() {
                    continue;
                }
                drop.sort_unstable();
                let s = &mut group.sides[side];
                if let Some(refs) = s.rows.get_mut(&key) {
                    let mut i = 0;
                    refs.retain(|_| {
                        let keep = drop.binary_search(&i).is_err();
                        i += 1;
                        keep
                    });
                    s.live -= drop.len();
                    if refs.is_empty() {
                        s.rows.remove(&key);
                    }
                }
            }
        }
        for side in &mut group.sides {
            side.reindex(Expiry::After(gap - 1));
        }
    }
}
