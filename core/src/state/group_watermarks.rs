//! The watermark each key group of a keyed event-time operator (joins,
//! windows, session windows) is at after a restore (DESIGN.md "Keyed state
//! layer and the operators on it").
//!
//! A key group's checkpointed state carries the watermark its subtask had
//! reached. Subtasks checkpointed by an unaligned barrier may have reached
//! different watermarks (the barrier overtakes them), so a restore at
//! another parallelism can join key groups restored at different
//! watermarks. The subtask continues from the smallest of them (never above
//! what the subtask that wrote a key group had reached), and each restored
//! key group stays at its own until the operator's watermark passes it: a
//! record is late, or on time, by its own key group's watermark, exactly as
//! it would have been without the restore.

/// Per local key group, the watermark its state had been restored at
/// (`i64::MIN` for a key group restored without one or not restored).
#[derive(Debug, Clone, Default)]
pub struct KeyGroupWatermarks {
    reached: Vec<i64>,
    /// The smallest watermark of the key groups restored since the last
    /// [`KeyGroupWatermarks::continue_from`].
    lowest_restored: Option<i64>,
}

impl KeyGroupWatermarks {
    /// `key_groups` local key groups, none restored.
    pub fn new(key_groups: usize) -> Self {
        KeyGroupWatermarks {
            reached: vec![i64::MIN; key_groups],
            lowest_restored: None,
        }
    }

    /// Local key group `local` was restored from state written at `watermark`.
    pub fn restore(&mut self, local: usize, watermark: i64) {
        self.reached[local] = watermark;
        self.lowest_restored = Some(self.lowest_restored.map_or(watermark, |l| l.min(watermark)));
    }

    /// Where the operator's watermark continues from once its key groups are
    /// restored: the smallest of theirs when above `operator`.
    pub fn continue_from(&mut self, operator: i64) -> i64 {
        match self.lowest_restored.take() {
            Some(lowest) => operator.max(lowest),
            None => operator,
        }
    }

    /// The watermark local key group `local` is at while the operator's is
    /// `operator`.
    #[inline]
    pub fn at(&self, local: usize, operator: i64) -> i64 {
        operator.max(self.reached.get(local).copied().unwrap_or(i64::MIN))
    }

    /// Whether local key group `local` goes into a snapshot: every key group
    /// once the operator has a watermark, else those with state (`has_state`)
    /// or a watermark of their own to keep.
    #[inline]
    pub fn snapshots(&self, local: usize, operator: i64, has_state: bool) -> bool {
        operator > i64::MIN || has_state || self.at(local, operator) > i64::MIN
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fresh_operator_keeps_its_watermark_everywhere() {
        let mut w = KeyGroupWatermarks::new(3);
        assert_eq!(w.continue_from(i64::MIN), i64::MIN);
        assert_eq!(w.continue_from(7), 7);
        assert_eq!(w.at(0, 7), 7);
        assert_eq!(w.at(2, i64::MIN), i64::MIN);
    }

    #[test]
    fn the_subtask_continues_from_the_smallest_restored_watermark() {
        let mut w = KeyGroupWatermarks::new(3);
        w.restore(0, 50);
        w.restore(2, 20);
        w.restore(1, 30);
        assert_eq!(w.continue_from(i64::MIN), 20);
        // Asked again without a new restore: nothing more to continue from.
        assert_eq!(w.continue_from(10), 10);
    }

    #[test]
    fn a_restored_key_group_stays_at_its_own_watermark_until_passed() {
        let mut w = KeyGroupWatermarks::new(3);
        w.restore(0, 50);
        w.restore(1, 20);
        let op = w.continue_from(i64::MIN);
        assert_eq!(op, 20);
        assert_eq!(w.at(0, op), 50);
        assert_eq!(w.at(1, op), 20);
        // Not restored: at the operator's.
        assert_eq!(w.at(2, op), 20);
        assert_eq!(w.at(0, 60), 60);
        // Out of range (a join fires over its groups by index): the operator's.
        assert_eq!(w.at(9, 5), 5);
    }

    #[test]
    fn snapshots_keep_key_groups_with_state_or_their_own_watermark() {
        let mut w = KeyGroupWatermarks::new(3);
        w.restore(1, 40);
        assert!(!w.snapshots(0, i64::MIN, false));
        assert!(w.snapshots(0, i64::MIN, true));
        assert!(w.snapshots(1, i64::MIN, false));
        assert!(w.snapshots(2, 0, false));
    }

    #[test]
    fn a_key_group_restored_without_a_watermark_holds_nothing_back() {
        let mut w = KeyGroupWatermarks::new(2);
        w.restore(0, i64::MIN);
        w.restore(1, 30);
        assert_eq!(w.continue_from(i64::MIN), i64::MIN);
        assert_eq!(w.at(1, i64::MIN), 30);
    }
}
