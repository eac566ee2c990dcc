//! The event-time temporal ("as of") join (API.md "Joins":
//! `left.temporal_join(versions, ...)`; Flink's event-time temporal table
//! join): the right side is an upsert stream of versions per key (a row
//! with the time of a kept version replaces it), the left side's rows wait
//! until the watermark reaches their time; then each is joined with the
//! newest version of its key at or before its time (`how="left"` emits it
//! with nulls when there is none). No version at or before a waiting row's
//! time can still arrive once the watermark has passed it, so the answer is
//! final. After that, per key, only the versions newer than the watermark
//! and the newest one at or before it are kept.

use std::sync::Arc;

use super::output::{OutputBuilder, Source};
use super::rows::{Expiry, Group};

/// Joins the waiting left rows the watermark reached, then prunes versions.
pub(super) fn fire(
    groups: &mut [Arc<Group>],
    watermark: i64,
    keeps_unmatched: bool,
    builder: &mut OutputBuilder,
) {
    builder.start_expiry();
    for (local, g) in groups.iter_mut().enumerate() {
        let due = g.sides[0].min_expiry <= watermark;
        let stale = g.sides[1].live > g.sides[1].rows.len();
        if !due && !stale {
            continue;
        }
        let group = Arc::make_mut(g);
        let [left, versions] = &mut group.sides;
        let local = local as u32;
        left.expire(watermark, Expiry::After(0), |key, l| {
            match versions.version_at(key, l.ts) {
                Some(v) => builder.push_kept_pair(local, l.batch, l.row, v.batch, v.row),
                None if keeps_unmatched => {
                    builder.push_unmatched(0, Source::Kept(local, l.batch), l.row)
                }
                None => {}
            }
        });
        versions.prune_versions(watermark);
    }
}
