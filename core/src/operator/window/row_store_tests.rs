//! The row-format keys' window state (`row_store`) against the `Int64`
//! keys' per-key-group maps, which compute the same windows in the same
//! order; its duplicates, nulls and late rows; its checkpoints restored at
//! another parallelism and read by `read_state`.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, Int64Array, RecordBatch, StringArray};
use arrow::compute::filter_record_batch;
use arrow::datatypes::Int64Type;

use super::snapshot::state_table;
use super::{WindowAgg, WindowAssigner, WindowFactory, WindowOperator};
use crate::event::MAX_WATERMARK;
use crate::keygroup::{hash_keys, key_group};
use crate::operator::testing::{context, display_rows, split_keyed, Recorder};
use crate::operator::{CheckpointedState, Operator};
use crate::state::keyed::AggKind;
use crate::state::OperatorState;

const TUMBLE_10: WindowAssigner = WindowAssigner::Tumbling { size_ms: 10 };
const MAX_PARALLELISM: usize = 128;

fn factory(keys: &[&str], assigner: WindowAssigner, agg: AggKind) -> WindowFactory {
    let column = (agg != AggKind::Count).then(|| "v".to_string());
    WindowFactory::new(
        keys.iter().map(|k| k.to_string()).collect(),
        "t".into(),
        assigner,
        WindowAgg::Native(agg, column),
    )
}

/// A batch of ids, names, event times (ms) and values.
fn batch(id: Vec<Option<i64>>, name: Vec<Option<&str>>, t: Vec<i64>) -> RecordBatch {
    let v: Vec<i64> = t.iter().map(|t| t % 7).collect();
    RecordBatch::try_from_iter(vec![
        ("id", Arc::new(Int64Array::from(id)) as ArrayRef),
        ("name", Arc::new(StringArray::from(name)) as ArrayRef),
        ("t", Arc::new(Int64Array::from(t)) as ArrayRef),
        ("v", Arc::new(Int64Array::from(v)) as ArrayRef),
    ])
    .unwrap()
}

fn op(f: &WindowFactory, key_groups: std::ops::Range<usize>) -> WindowOperator {
    WindowOperator::new(f, &context("win", key_groups, MAX_PARALLELISM)).unwrap()
}

#[test]
fn test_row_keys_fire_each_distinct_key_once_per_window_in_first_seen_order() {
    let f = factory(&["id", "name"], TUMBLE_10, AggKind::Count);
    let mut w = op(&f, 0..MAX_PARALLELISM);
    let mut out = Recorder::default();
    w.process_batch(
        0,
        batch(
            vec![
                Some(1),
                Some(1),
                Some(1),
                None,
                Some(1),
                None,
                None,
                Some(2),
            ],
            vec![
                Some("a"),
                Some("a"),
                Some("b"),
                Some("a"),
                None,
                None,
                None,
                Some("a"),
            ],
            vec![1, 2, 3, 4, 5, 6, 7, 12],
        ),
        &mut out,
    )
    .unwrap();
    // A second batch: a key seen in the first one, and one only here.
    w.process_batch(
        0,
        batch(
            vec![Some(1), Some(3)],
            vec![Some("b"), Some("c")],
            vec![8, 9],
        ),
        &mut out,
    )
    .unwrap();
    w.process_watermark(9, &mut out).unwrap();
    assert_eq!(
        display_rows(&out.batches),
        vec![
            "1 a 0 10 2",
            "1 b 0 10 2",
            " a 0 10 1",
            "1  0 10 1",
            "  0 10 2",
            "3 c 0 10 1",
        ]
    );
    // A row of the window that fired is late: counted and dropped.
    w.process_batch(0, batch(vec![Some(1)], vec![Some("z")], vec![9]), &mut out)
        .unwrap();
    assert_eq!(w.late_records(), 1);
    w.process_watermark(MAX_WATERMARK, &mut out).unwrap();
    assert_eq!(display_rows(&out.batches[1..]), vec!["2 a 10 20 1"]);
    assert_eq!(w.earliest_open_window_start(), None);
}

/// A deterministic pseudo-random sequence (a 64-bit LCG's high bits).
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % n
    }
}

/// Batches of ids (some null) and a constant name, times mostly rising
/// with some late ones, and the watermark after each batch.
fn random_input(seed: u64) -> Vec<(RecordBatch, i64)> {
    let mut rng = Lcg(seed);
    let mut clock = 0i64;
    (0..30)
        .map(|_| {
            let n = 1 + rng.below(40) as usize;
            let mut ids = Vec::with_capacity(n);
            let mut times = Vec::with_capacity(n);
            for _ in 0..n {
                clock += rng.below(3) as i64;
                ids.push((rng.below(10) != 0).then(|| rng.below(12) as i64));
                times.push(clock - rng.below(25) as i64);
            }
            let names = vec![Some("n"); n];
            (batch(ids, names, times), clock - 5)
        })
        .collect()
}

/// The rows the windows fire, displayed, with the name column dropped
/// from row-keyed outputs.
fn run(f: &WindowFactory, input: &[(RecordBatch, i64)]) -> (Vec<String>, u64) {
    let mut w = op(f, 0..MAX_PARALLELISM);
    let mut out = Recorder::default();
    for (b, watermark) in input {
        w.process_batch(0, b.clone(), &mut out).unwrap();
        w.process_watermark(*watermark, &mut out).unwrap();
    }
    w.process_watermark(MAX_WATERMARK, &mut out).unwrap();
    let rows = out
        .batches
        .iter()
        .map(|b| {
            let mut b = b.clone();
            if b.schema().field(1).name() == "name" {
                b.remove_column(1);
            }
            b
        })
        .collect::<Vec<_>>();
    (display_rows(&rows), w.late_records())
}

#[test]
fn test_row_keys_fire_what_int_keys_fire_with_late_rows_and_sliding_windows() {
    let sliding = WindowAssigner::Sliding {
        size_ms: 10,
        slide_ms: 4,
    };
    for seed in 0..8 {
        let input = random_input(seed);
        for (assigner, agg) in [
            (TUMBLE_10, AggKind::Count),
            (TUMBLE_10, AggKind::Sum),
            (sliding, AggKind::Max),
        ] {
            let (by_int, late_int) = run(&factory(&["id"], assigner, agg), &input);
            let (by_row, late_row) = run(&factory(&["id", "name"], assigner, agg), &input);
            assert!(!by_int.is_empty());
            assert!(late_int > 0, "seed {seed}: no late row");
            assert_eq!(by_row, by_int, "seed {seed}, {assigner:?}, {agg:?}");
            assert_eq!(late_row, late_int);
        }
    }
}

/// The rows of `b` whose (id, name) key is in `range`.
fn in_key_groups(b: &RecordBatch, range: &std::ops::Range<usize>) -> RecordBatch {
    let mut hashes = Vec::new();
    hash_keys(&[b.column(0).clone(), b.column(1).clone()], &mut hashes).unwrap();
    let mask: Vec<bool> = hashes
        .iter()
        .map(|h| range.contains(&key_group(*h, MAX_PARALLELISM)))
        .collect();
    filter_record_batch(b, &arrow::array::BooleanArray::from(mask)).unwrap()
}

fn mixed_keys_input() -> Vec<(RecordBatch, i64)> {
    let names = [
        Some("a"),
        Some("bb"),
        None,
        Some(""),
        Some("a long name, past 32 bytes..."),
    ];
    random_input(42)
        .into_iter()
        .enumerate()
        .map(|(i, (b, watermark))| {
            let name: StringArray = (0..b.num_rows())
                .map(|r| names[(r * 7 + i) % names.len()])
                .collect();
            let mut columns: Vec<(String, ArrayRef)> = b
                .schema()
                .fields()
                .iter()
                .map(|f| f.name().clone())
                .zip(b.columns().iter().cloned())
                .collect();
            columns[1].1 = Arc::new(name);
            (RecordBatch::try_from_iter(columns).unwrap(), watermark)
        })
        .collect()
}

#[test]
fn test_row_keys_restored_at_another_parallelism_fire_the_same_windows() {
    let f = factory(&["id", "name"], TUMBLE_10, AggKind::Count);
    let input = mixed_keys_input();
    let (head, tail) = input.split_at(input.len() / 2);
    let mut expected = {
        let mut w = op(&f, 0..MAX_PARALLELISM);
        let mut out = Recorder::default();
        for (b, watermark) in &input {
            w.process_batch(0, b.clone(), &mut out).unwrap();
            w.process_watermark(*watermark, &mut out).unwrap();
        }
        w.process_watermark(MAX_WATERMARK, &mut out).unwrap();
        display_rows(&out.batches)
    };
    // One subtask, snapshotted halfway (after a batch, before its
    // watermark: with open windows) ...
    let mut first = op(&f, 0..MAX_PARALLELISM);
    let mut out = Recorder::default();
    let (last_head, head) = head.split_last().unwrap();
    for (b, watermark) in head {
        first.process_batch(0, b.clone(), &mut out).unwrap();
        first.process_watermark(*watermark, &mut out).unwrap();
    }
    first
        .process_batch(0, last_head.0.clone(), &mut out)
        .unwrap();
    let state = first.snapshot_state(1).unwrap();
    assert!(first.earliest_open_window_start().is_some());
    // ... its later rows must not show in the snapshot (copy on write;
    // nothing fires without a watermark) ...
    first.process_batch(0, tail[0].0.clone(), &mut out).unwrap();
    // ... restored as two, then those two as one again.
    let ranges = [0..50, 50..MAX_PARALLELISM];
    let mut halves: Vec<WindowOperator> = ranges.iter().map(|r| op(&f, r.clone())).collect();
    for (half, state) in halves.iter_mut().zip(split_keyed(&state, &ranges)) {
        half.restore_state(state).unwrap();
        half.process_watermark(last_head.1, &mut out).unwrap();
    }
    let (middle, rest) = tail.split_at(tail.len() / 2);
    for (b, watermark) in middle {
        for (half, range) in halves.iter_mut().zip(&ranges) {
            half.process_batch(0, in_key_groups(b, range), &mut out)
                .unwrap();
            half.process_watermark(*watermark, &mut out).unwrap();
        }
    }
    let mut keyed = Vec::new();
    for half in &mut halves {
        keyed.extend(half.snapshot_state(2).unwrap().keyed);
    }
    let mut last = op(&f, 0..MAX_PARALLELISM);
    last.restore_state(OperatorState {
        operator: None,
        keyed: split_keyed(
            &OperatorState {
                operator: None,
                keyed,
            },
            std::slice::from_ref(&(0..MAX_PARALLELISM)),
        )
        .remove(0)
        .keyed,
    })
    .unwrap();
    for (b, watermark) in rest {
        last.process_batch(0, b.clone(), &mut out).unwrap();
        last.process_watermark(*watermark, &mut out).unwrap();
    }
    last.process_watermark(MAX_WATERMARK, &mut out).unwrap();
    let mut got = display_rows(&out.batches);
    got.sort();
    expected.sort();
    assert_eq!(got, expected);
}

#[test]
fn test_row_keys_state_reads_back_per_key_group() {
    let f = factory(&["id", "name"], TUMBLE_10, AggKind::Count);
    let mut w = op(&f, 0..MAX_PARALLELISM);
    let mut out = Recorder::default();
    w.process_batch(
        0,
        batch(
            vec![Some(1), Some(1), None, Some(1)],
            vec![Some("a"), Some("a"), Some("x"), Some("a")],
            vec![1, 2, 3, 14],
        ),
        &mut out,
    )
    .unwrap();
    let state = w.snapshot_state(1).unwrap();
    let mut rows = Vec::new();
    for (kg, blob) in &state.keyed {
        for b in state_table(&blob.to_bytes().unwrap(), *kg).unwrap() {
            let ids = b.column(0).as_primitive::<Int64Type>();
            assert_eq!(b.schema().field(4).name(), "count");
            for r in 0..b.num_rows() {
                let mut hashes = Vec::new();
                hash_keys(
                    &[b.column(0).slice(r, 1), b.column(1).slice(r, 1)],
                    &mut hashes,
                )
                .unwrap();
                assert_eq!(key_group(hashes[0], MAX_PARALLELISM), *kg as usize);
                rows.push(ids.is_valid(r).then(|| ids.value(r)));
            }
        }
    }
    rows.sort();
    assert_eq!(rows, vec![None, Some(1), Some(1)]);
    // Before a watermark only the key groups with windows are written.
    let kg_of = |id: Option<i64>, name: &str| {
        let mut hashes = Vec::new();
        let ids: ArrayRef = Arc::new(Int64Array::from(vec![id]));
        let names: ArrayRef = Arc::new(StringArray::from(vec![name]));
        hash_keys(&[ids, names], &mut hashes).unwrap();
        key_group(hashes[0], MAX_PARALLELISM) as u32
    };
    let mut expected = vec![kg_of(Some(1), "a"), kg_of(None, "x")];
    expected.dedup();
    let mut written: Vec<u32> = state.keyed.iter().map(|(kg, _)| *kg).collect();
    written.sort();
    expected.sort();
    assert_eq!(written, expected);
}
