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

/// Pairs the rows of every window that fires as the watermark moves over
/// `span` (previous, current), then drops the rows whose last window fired.
pub(super) fn fire(
    groups: &mut [Arc<Group>],
    span: (i64, i64),
    size: i64,
    slide: i64,
    builder: &mut OutputBuilder,
) {
    builder.start_expiry();
    let (previous, watermark) = span;
    // Window `s` fires now when previous < s + size - 1 <= watermark.
    let fires = |s: i64| {
        let last = i128::from(s) + i128::from(size) - 1;
        i128::from(previous) < last && last <= i128::from(watermark)
    };
    let expiry = Expiry::LastWindowEnd { size, slide };
    for (local, g) in groups.iter_mut().enumerate() {
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
                            builder.push_window_pair(
                                local as u32,
                                l.batch,
                                l.row,
                                r.batch,
                                r.row,
                                s,
                            );
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
