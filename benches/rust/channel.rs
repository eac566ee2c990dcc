//! Criterion bench of the batch hand-off between two subtask threads: how
//! many `Event::Data` batches per second a bounded `crossbeam_channel`
//! (capacity 16) and the runtime's regular channel (`channel::bounded`: a
//! byte budget and an event limit over an unbounded queue, FLIP-183) move
//! from a producer thread to a consumer thread. Batches are shared by `Arc`,
//! so this measures the channel and the thread wake-ups, not data copies.

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use arrow::array::{ArrayRef, Int64Array, RecordBatch};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use eddyline_core::channel::{bounded, MAX_BUDGET_BYTES};
use eddyline_core::event::Event;

const BATCHES: usize = 10_000;
const CAPACITY: usize = 16;

fn bench_handoff(c: &mut Criterion) {
    let col: ArrayRef = Arc::new(Int64Array::from_iter_values(0..1024));
    let batch = RecordBatch::try_from_iter([("v", col)]).expect("invariant: one column");
    let mut group = c.benchmark_group("channel");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(3));
    group.throughput(Throughput::Elements(BATCHES as u64));
    group.bench_function("handoff/batches", |b| {
        b.iter(|| {
            let (tx, rx) = crossbeam_channel::bounded::<Event>(CAPACITY);
            std::thread::scope(|s| {
                let consumer = s.spawn(move || {
                    let mut rows = 0usize;
                    while let Ok(event) = rx.recv() {
                        rows += event.num_rows();
                    }
                    rows
                });
                for _ in 0..BATCHES {
                    tx.send(Event::Data(batch.clone())).expect("consumer alive");
                }
                drop(tx);
                black_box(consumer.join().expect("consumer thread"))
            })
        })
    });
    group.bench_function("handoff/budgeted", |b| {
        b.iter(|| {
            let (tx, rx) = bounded(CAPACITY, MAX_BUDGET_BYTES);
            std::thread::scope(|s| {
                let consumer = s.spawn(move || {
                    let mut rows = 0usize;
                    while let Ok(item) = rx.queue().recv() {
                        rows += rx.taken(item).0.num_rows();
                    }
                    rows
                });
                for _ in 0..BATCHES {
                    tx.send(Event::Data(batch.clone())).expect("consumer alive");
                }
                drop(tx);
                black_box(consumer.join().expect("consumer thread"))
            })
        })
    });
    group.finish();
}

criterion_group!(benches, bench_handoff);
criterion_main!(benches);
