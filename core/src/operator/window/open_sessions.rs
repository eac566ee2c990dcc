//! The open sessions of one key group, as both session window operators
//! keep them: the native aggregates of [`crate::operator::session`] and the
//! multi-aggregates of [`super::session_multi`] (DESIGN.md "Aggregates").
//! Per key, its open sessions; and the smallest end among all of them, so a
//! watermark that closes none costs one comparison per key group.

use rustc_hash::FxHashMap;

use crate::event::MAX_WATERMARK;

/// A session's place in time.
pub(crate) trait SessionBounds: Copy {
    /// The last row's time + gap (exclusive).
    fn end(&self) -> i64;
    /// Orders the sessions of one end as they fire (first seen first).
    fn seq(&self) -> u64;
}

/// The open sessions of one key group.
#[derive(Debug, Clone)]
pub(crate) struct SessionGroup<S> {
    pub sessions: FxHashMap<Box<[u8]>, Vec<S>>,
    /// The smallest end of an open session (`i64::MAX`: none).
    pub min_end: i64,
}

impl<S> Default for SessionGroup<S> {
    fn default() -> Self {
        SessionGroup {
            sessions: FxHashMap::default(),
            min_end: i64::MAX,
        }
    }
}

/// Whether a session ending at `end` (exclusive) is over at `watermark`:
/// the watermark reached its last millisecond, or the input ended
/// ([`MAX_WATERMARK`]).
fn is_over(end: i64, watermark: i64) -> bool {
    watermark == MAX_WATERMARK || end - 1 <= watermark
}

impl<S: SessionBounds> SessionGroup<S> {
    /// Whether a session of the group is over at `watermark`.
    pub fn any_over(&self, watermark: i64) -> bool {
        self.min_end != i64::MAX && is_over(self.min_end, watermark)
    }

    /// Moves the sessions that are over at `watermark` to `out`, as (key,
    /// session).
    pub fn take_over(&mut self, watermark: i64, out: &mut Vec<(Box<[u8]>, S)>) {
        let mut min_end = i64::MAX;
        self.sessions.retain(|key, list| {
            list.retain(|s| {
                if is_over(s.end(), watermark) {
                    out.push((key.clone(), *s));
                    false
                } else {
                    min_end = min_end.min(s.end());
                    true
                }
            });
            !list.is_empty()
        });
        self.min_end = min_end;
    }
}

/// `fired` in the order the sessions are emitted: by end, then sequence.
pub(crate) fn in_firing_order<S: SessionBounds>(
    mut fired: Vec<(Box<[u8]>, S)>,
) -> Vec<(Box<[u8]>, S)> {
    fired.sort_unstable_by_key(|(_, s)| (s.end(), s.seq()));
    fired
}
