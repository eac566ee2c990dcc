//! Properties of the loop feedback queue (`FeedbackQueue`, FLIP-15 section
//! "II - Cyclic Flow Control"): with a tiny memory limit and several
//! producer threads every event comes out exactly once and in per-producer
//! order, memory stays bounded, spill files are written when needed and none
//! survive draining or drop; a 64 MiB cell survives a round trip via disk.
#![allow(clippy::unwrap_used)]

use std::collections::VecDeque;
use std::path::Path;
use std::sync::Arc;
use std::thread;

use arrow::array::{
    Array, ArrayRef, BinaryArray, Int32Array, Int64Array, StringArray, UInt64Array,
};
use arrow::record_batch::RecordBatch;
use eddyline_core::event::{Activity, Barrier, BarrierKind, Event, TerminationToken};
use eddyline_core::feedback::FeedbackQueue;
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    /// A batch of `rows` rows; `text` picks the second of two schemas.
    Batch { rows: usize, text: bool },
    /// A control event of kind 0 (watermark), 1 (barrier) or 2 (token).
    Control(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (1usize..300, any::<bool>()).prop_map(|(rows, text)| Op::Batch { rows, text }),
        1 => (0u8..3).prop_map(Op::Control),
    ]
}

/// The event for `op`, identifying (producer, seq).
fn make_event(producer: u32, seq: u64, op: &Op) -> Event {
    match op {
        Op::Batch { rows, text } => {
            let p: ArrayRef = Arc::new(Int32Array::from(vec![producer as i32; *rows]));
            let s: ArrayRef = Arc::new(UInt64Array::from(vec![seq; *rows]));
            let payload: ArrayRef = if *text {
                Arc::new(StringArray::from_iter_values(
                    (0..*rows).map(|i| format!("row-{i}")),
                ))
            } else {
                Arc::new(Int64Array::from_iter_values(0..*rows as i64))
            };
            Event::Data(
                RecordBatch::try_from_iter([("producer", p), ("seq", s), ("payload", payload)])
                    .unwrap(),
            )
        }
        Op::Control(0) => Event::Watermark(((producer as i64) << 32) | seq as i64),
        Op::Control(1) => Event::Barrier(Barrier {
            id: ((producer as u64) << 32) | seq,
            kind: BarrierKind::Checkpoint,
            aligned: true,
            timestamp_ms: 0,
        }),
        Op::Control(_) => Event::Termination(TerminationToken {
            loop_id: producer,
            round: seq,
            activity: Activity::Idle,
        }),
    }
}

/// (producer, seq) of an event made by `make_event`, checking the batch.
fn identify(event: &Event) -> (u32, u64) {
    match event {
        Event::Data(b) => {
            let p = b.column(0).as_any().downcast_ref::<Int32Array>().unwrap();
            let s = b.column(1).as_any().downcast_ref::<UInt64Array>().unwrap();
            assert!(p.values().iter().all(|v| *v == p.value(0)));
            assert!(s.values().iter().all(|v| *v == s.value(0)));
            (p.value(0) as u32, s.value(0))
        }
        Event::Watermark(w) => ((*w >> 32) as u32, (*w & 0xffff_ffff) as u64),
        Event::Barrier(b) => ((b.id >> 32) as u32, b.id & 0xffff_ffff),
        Event::Termination(t) => (t.loop_id, t.round),
        other => panic!("unexpected event {other:?}"),
    }
}

fn event_size(event: &Event) -> usize {
    match event {
        Event::Data(b) => b.get_array_memory_size(),
        _ => 0,
    }
}

fn files_in(dir: &Path) -> usize {
    std::fs::read_dir(dir).map_or(0, |d| d.count())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(40))]

    /// Several producers, one consumer running concurrently: every event
    /// exactly once, per-producer FIFO, bounded memory, no files left.
    #[test]
    fn test_feedback_queue_concurrent_producers_keep_per_producer_order(
        producers in prop::collection::vec(prop::collection::vec(op(), 0..40), 1..5),
        limit in 0usize..16_384,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let spill = dir.path().join("spill");
        let q = Arc::new(FeedbackQueue::new("loop 'prop' head 0", &spill, limit));
        let events: Vec<Vec<Event>> = producers
            .iter()
            .enumerate()
            .map(|(p, ops)| {
                ops.iter()
                    .enumerate()
                    .map(|(s, o)| make_event(p as u32, s as u64, o))
                    .collect()
            })
            .collect();
        let max_batch = events.iter().flatten().map(event_size).max().unwrap_or(0);
        let must_spill = events.iter().flatten().any(|e| event_size(e) > limit);
        let expected: usize = events.iter().map(Vec::len).sum();

        let consumer = {
            let q = Arc::clone(&q);
            thread::spawn(move || {
                let mut got: Vec<(u32, u64)> = Vec::with_capacity(expected);
                while got.len() < expected {
                    q.ready().recv().unwrap();
                    while let Some(event) = q.try_pop().unwrap() {
                        assert!(q.memory_bytes() <= limit + max_batch);
                        got.push(identify(&event));
                    }
                }
                assert!(q.try_pop().unwrap().is_none());
                got
            })
        };
        let handles: Vec<_> = events
            .into_iter()
            .map(|evs| {
                let q = Arc::clone(&q);
                thread::spawn(move || {
                    for e in evs {
                        q.push(e).unwrap();
                        assert!(q.memory_bytes() <= limit);
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        let got = consumer.join().unwrap();

        prop_assert_eq!(got.len(), expected);
        for (p, ops) in producers.iter().enumerate() {
            let seqs: Vec<u64> = got.iter().filter(|(gp, _)| *gp as usize == p).map(|(_, s)| *s).collect();
            prop_assert_eq!(seqs, (0..ops.len() as u64).collect::<Vec<_>>());
        }
        prop_assert_eq!(q.len_events(), 0);
        prop_assert_eq!(q.memory_bytes(), 0);
        if must_spill {
            prop_assert!(q.spill_files_written() > 0);
            prop_assert!(q.spilled_bytes_total() > 0);
        }
        prop_assert_eq!(files_in(&spill), 0, "spill files left after draining");
        prop_assert!(!q.is_above_threshold());
    }

    /// One producer interleaved with pops: globally FIFO, spills whenever
    /// the queued batches exceed the limit, and drop removes leftover files.
    #[test]
    fn test_feedback_queue_single_producer_is_fifo_and_drop_cleans_up(
        steps in prop::collection::vec(prop_oneof![3 => op().prop_map(Some), 2 => Just(None)], 0..120),
        limit in 0usize..16_384,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let q = FeedbackQueue::new("loop 'prop' head 1", dir.path(), limit);
        let mut model: VecDeque<(u64, usize)> = VecDeque::new();
        let mut seq = 0u64;
        for step in &steps {
            match step {
                Some(o) => {
                    let e = make_event(0, seq, o);
                    let size = event_size(&e);
                    q.push(e).unwrap();
                    model.push_back((seq, size));
                    seq += 1;
                    prop_assert!(q.memory_bytes() <= limit);
                    let queued: usize = model.iter().map(|(_, s)| s).sum();
                    if queued > limit {
                        prop_assert!(q.spill_files_written() > 0, "over the limit but nothing spilled");
                        prop_assert!(q.is_above_threshold());
                    }
                }
                None => {
                    let got = q.try_pop().unwrap().map(|e| identify(&e).1);
                    prop_assert_eq!(got, model.pop_front().map(|(s, _)| s));
                }
            }
            prop_assert_eq!(q.len_events(), model.len());
        }
        drop(q);
        prop_assert_eq!(files_in(dir.path()), 0, "spill files left after drop");
    }
}

#[test]
fn test_feedback_queue_spills_when_over_limit_and_deletes_files_when_drained() {
    let dir = tempfile::tempdir().unwrap();
    let q = FeedbackQueue::new("loop 'spill' head 0", dir.path(), 64 * 1024);
    for i in 0..200u64 {
        q.push(make_event(
            0,
            i,
            &Op::Batch {
                rows: 256,
                text: i % 50 == 49,
            },
        ))
        .unwrap();
        if i % 10 == 0 {
            q.push(make_event(0, 1000 + i, &Op::Control(2))).unwrap();
        }
    }
    assert!(q.spill_files_written() >= 1);
    assert!(files_in(dir.path()) >= 1);
    assert!(q.is_above_threshold());
    assert!(q.memory_bytes() <= 64 * 1024);
    let mut batches = 0u64;
    while let Some(e) = q.try_pop().unwrap() {
        if let Event::Data(_) = e {
            assert_eq!(identify(&e).1, batches);
            batches += 1;
        }
    }
    assert_eq!(batches, 200);
    assert_eq!(files_in(dir.path()), 0);
    assert!(!q.is_above_threshold());
}

#[test]
fn test_feedback_queue_64_mib_cell_passes_through_spill_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let q = FeedbackQueue::new("loop 'big' head 0", dir.path(), 1 << 20);
    let value: Vec<u8> = (0..64usize << 20).map(|i| (i % 251) as u8).collect();
    let cell: ArrayRef = Arc::new(BinaryArray::from_iter_values([value.as_slice()]));
    let batch = RecordBatch::try_from_iter([("blob", cell)]).unwrap();
    q.push(Event::Watermark(1)).unwrap();
    q.push(Event::Data(batch.clone())).unwrap();
    q.push(Event::Watermark(2)).unwrap();
    assert!(q.memory_bytes() <= 1 << 20);
    assert_eq!(q.spill_files_written(), 1);
    assert!(q.spilled_bytes_total() >= 64 << 20);
    assert!(matches!(q.try_pop().unwrap(), Some(Event::Watermark(1))));
    match q.try_pop().unwrap() {
        Some(Event::Data(got)) => {
            assert_eq!(got, batch);
            let blob = got
                .column(0)
                .as_any()
                .downcast_ref::<BinaryArray>()
                .unwrap();
            assert_eq!(blob.value(0).len(), 64 << 20);
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(matches!(q.try_pop().unwrap(), Some(Event::Watermark(2))));
    assert!(q.try_pop().unwrap().is_none());
    assert_eq!(files_in(dir.path()), 0);
}
