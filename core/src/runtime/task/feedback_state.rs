//! The feedback channel state of an unaligned loop checkpoint, written by a
//! checkpoint writer thread (DESIGN.md "Unaligned checkpoints", "Loops"; the
//! capture is `loop_unaligned.rs` and `feedback.rs`).

use std::sync::Arc;

use arrow::record_batch::RecordBatch;
use parking_lot::Mutex;

use crate::error::Result;
use crate::feedback::Overtaken;
use crate::state::DeferredState;

/// The feedback channel state of one unaligned loop checkpoint, per
/// feedback queue; written once, by a checkpoint writer thread.
pub(crate) struct FeedbackState {
    name: String,
    queues: Mutex<Option<Vec<Vec<Overtaken>>>>,
    bytes: Mutex<Option<Arc<Vec<u8>>>>,
}

impl FeedbackState {
    pub(crate) fn new(name: String, queues: Vec<Vec<Overtaken>>) -> Self {
        FeedbackState {
            name,
            queues: Mutex::new(Some(queues)),
            bytes: Mutex::new(None),
        }
    }
}

/// The batches `queues` hold, reading the spilled runs.
pub(crate) fn read_queues(name: &str, queues: &[Vec<Overtaken>]) -> Result<Vec<Vec<RecordBatch>>> {
    let mut out = Vec::with_capacity(queues.len());
    for pieces in queues {
        let mut batches = Vec::with_capacity(pieces.len());
        for piece in pieces {
            piece.read_into(name, &mut batches)?;
        }
        out.push(batches);
    }
    Ok(out)
}

impl DeferredState for FeedbackState {
    fn serialize(&self) -> Result<Vec<u8>> {
        let mut cached = self.bytes.lock();
        if let Some(b) = cached.as_ref() {
            return Ok(b.as_ref().clone());
        }
        let mut queues = self.queues.lock();
        let batches = read_queues(&self.name, queues.as_deref().unwrap_or(&[]))?;
        let out = crate::checkpoint::channel_state::encode(&self.name, &batches)?;
        // Written: the spill files this state referred to may go now.
        *queues = None;
        *cached = Some(Arc::new(out.clone()));
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    //! The feedback capture against a real [`FeedbackQueue`]: for random
    //! interleavings of pushes (in memory and spilled), pops by the head and
    //! an overtaking barrier, the records captured are exactly those the
    //! tail pushed before the barrier and the head had not read.

    use super::*;
    use crate::event::{Barrier, BarrierKind, Event};
    use crate::feedback::FeedbackQueue;
    use arrow::array::{ArrayRef, Int64Array};
    use proptest::prelude::*;

    fn batch(v: i64) -> RecordBatch {
        let a: ArrayRef = Arc::new(Int64Array::from(vec![v; 4]));
        RecordBatch::try_from_iter([("value", a)]).expect("a valid batch")
    }

    fn value(b: &RecordBatch) -> i64 {
        b.column(0)
            .as_any()
            .downcast_ref::<Int64Array>()
            .map_or(-1, |a| a.value(0))
    }

    fn barrier(id: u64) -> Barrier {
        Barrier {
            id,
            kind: BarrierKind::Checkpoint,
            aligned: false,
            timestamp_ms: 0,
        }
    }

    #[derive(Debug, Clone)]
    enum Op {
        Push,
        Pop,
    }

    fn ops() -> impl Strategy<Value = Vec<Op>> {
        prop::collection::vec(prop_oneof![Just(Op::Push), Just(Op::Pop)], 0..60)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn prop_overtaken_is_exactly_the_unread_prefix_before_the_barrier(
            before in ops(),
            after in ops(),
            memory_batches in 0usize..6,
        ) {
            let dir = tempfile::tempdir().expect("a temp dir");
            let limit = batch(0).get_array_memory_size() * memory_batches;
            let q = FeedbackQueue::new("loop 'p' head 0", dir.path(), limit);
            let (mut pushed, mut read) = (0i64, 0i64);
            for op in &before {
                match op {
                    Op::Push => {
                        q.push(Event::Data(batch(pushed))).expect("push");
                        pushed += 1;
                    }
                    Op::Pop => {
                        if let Some(Event::Data(b)) = q.try_pop().expect("pop") {
                            prop_assert_eq!(value(&b), read);
                            read += 1;
                        }
                    }
                }
            }
            q.push_overtaking(barrier(3)).expect("overtaking push");
            let before_marker = pushed;
            // The tail goes on pushing; nothing after the marker is captured.
            for op in &after {
                if let Op::Push = op {
                    q.push(Event::Data(batch(pushed))).expect("push");
                    pushed += 1;
                }
            }
            prop_assert_eq!(q.take_priority().map(|b| b.id), Some(3));
            prop_assert!(q.take_priority().is_none());
            let captured = q.overtaken(3).expect("overtaken").expect("the marker is queued");
            // Spilled runs are read as a checkpoint writer would, after the
            // head went on reading (and deleting) the queue.
            let mut rest = Vec::new();
            while let Some(ev) = q.try_pop().expect("pop") {
                rest.push(ev);
            }
            let got = read_queues("p", &[captured]).expect("readable");
            let values: Vec<i64> = got[0].iter().map(value).collect();
            let expected: Vec<i64> = (read..before_marker).collect();
            prop_assert_eq!(values, expected);
            // The head still reads everything in order, the marker in place.
            let marker_at = rest.iter().position(|e| matches!(e, Event::Barrier(b) if b.id == 3));
            prop_assert_eq!(marker_at, Some((before_marker - read) as usize));
            drop(got);
            q.close().expect("close");
            prop_assert_eq!(std::fs::read_dir(dir.path()).map_or(0, |d| d.count()), 0);
        }
    }

    #[test]
    fn test_feedback_state_serializes_spilled_runs_after_the_queue_moved_on() -> Result<()> {
        let dir = tempfile::tempdir().map_err(|e| crate::error::Error::runtime(e.to_string()))?;
        let q = FeedbackQueue::new("loop 'p' head 0", dir.path(), 0);
        for v in 0..5 {
            q.push(Event::Data(batch(v)))?;
        }
        assert!(matches!(q.try_pop()?, Some(Event::Data(_)))); // value 0 is read
        q.push_overtaking(barrier(9))?;
        q.push(Event::Data(batch(5)))?;
        let captured = q
            .overtaken(9)?
            .ok_or("no marker")
            .map_err(crate::error::Error::runtime)?;
        let state = FeedbackState::new("loop 'p' (feedback)".into(), vec![vec![], captured]);
        // The head reads everything (its spill files are then only kept by
        // the capture) before the writer thread serializes.
        while q.try_pop()?.is_some() {}
        let bytes = state.serialize()?;
        assert_eq!(state.serialize()?, bytes, "serialize is idempotent");
        let back = crate::checkpoint::channel_state::decode("p", &bytes)?;
        let values: Vec<Vec<i64>> = back.iter().map(|q| q.iter().map(value).collect()).collect();
        assert_eq!(values, vec![vec![], vec![1, 2, 3, 4]]);
        // Written: the capture let go of the spill files.
        q.close()?;
        assert_eq!(std::fs::read_dir(dir.path()).map_or(0, |d| d.count()), 0);
        Ok(())
    }

    #[test]
    fn test_a_flip16_log_switched_to_channel_state_keeps_its_spilled_runs() -> Result<()> {
        // Aligned timeout in a loop (`loop_unaligned.rs` `switch_loop_checkpoint`):
        // a marker behind everything logged turns the log (spilled: no memory)
        // into references; closing the log keeps the referred files on disk
        // until the state is written, and then they go.
        let dir = tempfile::tempdir().map_err(|e| crate::error::Error::runtime(e.to_string()))?;
        let log = FeedbackQueue::new("loop 'p' log 4", dir.path(), 0);
        for v in 0..4 {
            log.push(Event::Data(batch(v)))?;
        }
        log.push_overtaking(barrier(4))?;
        assert_eq!(log.take_priority().map(|b| b.id), Some(4));
        let so_far = log
            .overtaken(4)?
            .ok_or("no marker")
            .map_err(crate::error::Error::runtime)?;
        log.close()?;
        assert!(std::fs::read_dir(dir.path()).map_or(0, |d| d.count()) > 0);
        let state = FeedbackState::new("loop 'p' (feedback)".into(), vec![so_far, vec![]]);
        let back = crate::checkpoint::channel_state::decode("p", &state.serialize()?)?;
        let values: Vec<Vec<i64>> = back.iter().map(|q| q.iter().map(value).collect()).collect();
        assert_eq!(values, vec![vec![0, 1, 2, 3], vec![]]);
        drop(state);
        assert_eq!(std::fs::read_dir(dir.path()).map_or(0, |d| d.count()), 0);
        Ok(())
    }

    #[test]
    fn test_a_marker_read_in_band_is_not_overtaken() -> Result<()> {
        let dir = tempfile::tempdir().map_err(|e| crate::error::Error::runtime(e.to_string()))?;
        let q = FeedbackQueue::new("loop 'p' head 0", dir.path(), 0);
        q.push(Event::Data(batch(1)))?;
        q.push_overtaking(barrier(2))?;
        assert!(matches!(q.try_pop()?, Some(Event::Data(_))));
        assert!(matches!(q.try_pop()?, Some(Event::Barrier(b)) if b.id == 2));
        assert!(q.overtaken(2)?.is_none());
        Ok(())
    }
}
