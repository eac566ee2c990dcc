//! Criterion benches of the keyed running sum (`KeyedAggOperator` driven
//! directly, no runtime) and of key hashing (`keygroup::hash_keys`).
//!
//! `keyed_sum/process/1m`: 1M rows, int64 keys uniform in [0, 10,000), int64
//! values in [0, 1000), batches of 65,536, a fresh operator per iteration
//! owning all 128 key groups. `keyed_sum/snapshot/1m_keys`: the synchronous
//! (copy-on-write) part of a snapshot of an operator holding 1M keys.
//! `keygroup/hash_int64/65536`: hashing one batch of int64 keys.

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use arrow::array::{ArrayRef, Int64Array, RecordBatch};
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use eddyline_core::keygroup::hash_keys;
use eddyline_core::operator::keyed_agg::{KeyedAggFactory, KeyedAggOperator};
use eddyline_core::operator::{CheckpointedState, Collector, Operator, OperatorContext};
use eddyline_core::state::keyed::AggKind;
use eddyline_core::Result;

const ROWS: usize = 1_000_000;
const KEYS: u64 = 10_000;
const BATCH: usize = 65_536;
const MAX_PARALLELISM: usize = 128;

/// Drops what it receives, counting rows.
struct CountingCollector(usize);

impl Collector for CountingCollector {
    fn emit(&mut self, batch: RecordBatch) -> Result<()> {
        self.0 += batch.num_rows();
        Ok(())
    }
    fn emit_watermark(&mut self, _watermark: i64) -> Result<()> {
        Ok(())
    }
}

/// A deterministic xorshift generator (no external crate needed).
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn batches(rows: usize, keys: u64) -> Vec<RecordBatch> {
    let mut rng = XorShift(0x2545_F491_4F6C_DD1D);
    let mut out = Vec::new();
    let mut left = rows;
    while left > 0 {
        let n = left.min(BATCH);
        let k: Int64Array = (0..n).map(|_| (rng.next() % keys) as i64).collect();
        let v: Int64Array = (0..n).map(|_| (rng.next() % 1000) as i64).collect();
        let batch = RecordBatch::try_from_iter([
            ("k", Arc::new(k) as ArrayRef),
            ("v", Arc::new(v) as ArrayRef),
        ])
        .expect("invariant: two columns of equal length");
        out.push(batch);
        left -= n;
    }
    out
}

fn context() -> OperatorContext {
    OperatorContext {
        name: "sum".to_string(),
        uid: "sum".to_string(),
        subtask_index: 0,
        parallelism: 1,
        max_parallelism: MAX_PARALLELISM,
        key_groups: 0..MAX_PARALLELISM,
        attempt: 0,
    }
}

fn operator() -> KeyedAggOperator {
    let factory = KeyedAggFactory::new(vec!["k".to_string()], AggKind::Sum, Some("v".to_string()));
    KeyedAggOperator::new(&factory, &context()).expect("invariant: valid context")
}

fn bench_keyed_sum(c: &mut Criterion) {
    let input = batches(ROWS, KEYS);
    let mut group = c.benchmark_group("keyed_sum");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(3));
    group.throughput(Throughput::Elements(ROWS as u64));
    group.bench_function("process/1m", |b| {
        b.iter_batched(
            operator,
            |mut op| {
                let mut out = CountingCollector(0);
                for batch in &input {
                    op.process_batch(0, batch.clone(), &mut out)
                        .expect("process");
                }
                black_box(out.0)
            },
            BatchSize::LargeInput,
        )
    });

    // An operator holding 1M distinct keys.
    let mut big = operator();
    let mut out = CountingCollector(0);
    for batch in batches(1 << 20, 1 << 20)
        .iter()
        .chain(&batches(1 << 21, 1 << 20))
    {
        big.process_batch(0, batch.clone(), &mut out)
            .expect("process");
    }
    group.throughput(Throughput::Elements(1));
    group.bench_function("snapshot/1m_keys", |b| {
        b.iter(|| black_box(big.snapshot_state(1).expect("snapshot")))
    });
    group.finish();
}

fn bench_hash(c: &mut Criterion) {
    let input = batches(BATCH, KEYS);
    let keys = vec![input[0].column(0).clone()];
    let mut hashes = Vec::with_capacity(BATCH);
    let mut group = c.benchmark_group("keygroup");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(3));
    group.throughput(Throughput::Elements(BATCH as u64));
    group.bench_function("hash_int64/65536", |b| {
        b.iter(|| {
            hash_keys(&keys, &mut hashes).expect("hash");
            black_box(hashes.len())
        })
    });
    group.finish();
}

criterion_group!(benches, bench_keyed_sum, bench_hash);
criterion_main!(benches);
