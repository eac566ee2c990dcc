//! The tumbling-window join (API.md "Joins": `left.window_join(right, ...,
//! window=ed.Tumbling(size))`, Flink's `join(...).window(...)`): rows of
//! equal keys in the same tumbling window pair up when the window fires
//! (the watermark reaches its last millisecond), one output row per pair
//! with the window's bounds; then the window's rows are dropped. A row whose
//! window is already over when it arrives is late.

use std::sync::Arc;

use super::output::OutputBuilder;
use super::rows::{window_start, Expiry, Group};

/// Pairs the rows of every window the watermark closed, then drops them.
pub(super) fn fire(
    groups: &mut [Arc<Group>],
    watermark: i64,
    size: i64,
    builder: &mut OutputBuilder,
) {
    builder.start_expiry();
    let expiry = Expiry::WindowEnd(size);
    for (local, g) in groups.iter_mut().enumerate() {
        if g.sides.iter().all(|s| s.min_expiry > watermark) {
            continue;
        }
        let [left, right] = &g.sides;
        for (key, lefts) in &left.rows {
            let Some(rights) = right.rows.get(key) else {
                continue;
            };
            for l in lefts {
                if expiry.at(l.ts).is_none_or(|e| e > watermark) {
                    continue;
                }
                let start = window_start(l.ts, size);
                for r in rights.iter().filter(|r| window_start(r.ts, size) == start) {
                    builder.push_window_pair(local as u32, l.batch, l.row, r.batch, r.row, start);
                }
            }
        }
        let group = Arc::make_mut(g);
        for side in &mut group.sides {
            side.expire(watermark, expiry, |_, _| {});
        }
    }
}
