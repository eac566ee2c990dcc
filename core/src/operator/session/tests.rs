#![allow(clippy::unwrap_used)]

use super::*;
use arrow::array::{AsArray, Int64Array};
use arrow::datatypes::Int64Type;
use proptest::prelude::*;

use crate::event::MAX_WATERMARK;
use crate::keygroup::hash_keys;
use crate::operator::testing::{split_keyed, Recorder};

/// (key, start, end, sum) of every fired session, in emission order.
fn fired(out: &Recorder) -> Vec<(Option<i64>, i64, i64, Option<i64>)> {
    let mut rows = Vec::new();
    for b in &out.batches {
        let col = |i: usize| b.column(i).as_primitive::<Int64Type>().clone();
        let (k, s, e, v) = (col(0), col(1), col(2), col(3));
        for i in 0..b.num_rows() {
            rows.push((
                k.is_valid(i).then(|| k.value(i)),
                s.value(i),
                e.value(i),
                v.is_valid(i).then(|| v.value(i)),
            ));
        }
    }
    rows
}

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, true),
        Field::new("t", DataType::Int64, false),
        Field::new("v", DataType::Int64, true),
    ]))
}

fn batch(rows: &[(i64, i64, i64)]) -> RecordBatch {
    RecordBatch::try_new(
        schema(),
        vec![
            Arc::new(rows.iter().map(|r| Some(r.0)).collect::<Int64Array>()),
            Arc::new(rows.iter().map(|r| r.1).collect::<Int64Array>()),
            Arc::new(rows.iter().map(|r| Some(r.2)).collect::<Int64Array>()),
        ],
    )
    .unwrap()
}

fn factory(gap_ms: i64, late_output: bool) -> SessionFactory {
    SessionFactory {
        keys: vec!["k".into()],
        time_column: "t".into(),
        gap_ms,
        agg: AggKind::Sum,
        column: Some("v".into()),
        late_output,
    }
}

fn ctx(key_groups: std::ops::Range<usize>) -> OperatorContext {
    crate::operator::testing::context("sessions", key_groups, 16)
}

#[test]
fn test_rows_gap_apart_start_a_new_session_and_a_bridge_merges_two() {
    let mut op = SessionOperator::new(&factory(10, false), &ctx(0..16)).unwrap();
    let mut out = Recorder::default();
    // 0 and 10 are exactly gap apart: two sessions; 25 opens a third.
    op.process_batch(0, batch(&[(1, 0, 1), (1, 10, 2), (1, 25, 4)]), &mut out)
        .unwrap();
    assert_eq!(op.open_sessions(), 3);
    // 17 bridges [10, 20) and [25, 35).
    op.process_batch(0, batch(&[(1, 17, 8)]), &mut out).unwrap();
    assert_eq!(op.open_sessions(), 2);
    op.process_watermark(9, &mut out).unwrap();
    assert_eq!(fired(&out), vec![(Some(1), 0, 10, Some(1))]);
    op.process_watermark(MAX_WATERMARK, &mut out).unwrap();
    assert_eq!(fired(&out)[1], (Some(1), 10, 35, Some(14)));
}

#[test]
fn test_a_late_row_alone_is_dropped_or_side_output_but_joins_an_open_session() {
    let mut op = SessionOperator::new(&factory(10, true), &ctx(0..16)).unwrap();
    let mut out = Recorder::default();
    op.process_batch(0, batch(&[(1, 100, 1)]), &mut out)
        .unwrap();
    op.process_watermark(105, &mut out).unwrap();
    // 96's own session [96, 106) is over, but it touches the open [100, 110).
    op.process_batch(0, batch(&[(1, 96, 2), (2, 50, 4)]), &mut out)
        .unwrap();
    assert_eq!(op.late_records(), 1);
    assert_eq!(out.side[0].0, LATE_PORT);
    assert_eq!(out.side[0].1.num_rows(), 1);
    op.process_watermark(MAX_WATERMARK, &mut out).unwrap();
    assert_eq!(fired(&out), vec![(Some(1), 96, 110, Some(3))]);
}

#[derive(Debug, Clone)]
enum Event {
    Rows(Vec<(i64, i64, i64)>),
    Watermark,
}

/// The sessions of all rows: per key, sorted times split where the next row
/// is `gap` or more after the previous one.
fn reference(gap: i64, rows: &[(i64, i64, i64)]) -> Vec<(Option<i64>, i64, i64, Option<i64>)> {
    let mut by_key: std::collections::BTreeMap<i64, Vec<(i64, i64)>> = Default::default();
    for r in rows {
        by_key.entry(r.0).or_default().push((r.1, r.2));
    }
    let mut out = Vec::new();
    for (k, mut ts) in by_key {
        ts.sort_unstable();
        let (mut start, mut last, mut sum) = (ts[0].0, ts[0].0, 0);
        for (t, v) in ts {
            if t >= last + gap {
                out.push((Some(k), start, last + gap, Some(sum)));
                start = t;
                sum = 0;
            }
            last = t;
            sum += v;
        }
        out.push((Some(k), start, last + gap, Some(sum)));
    }
    out.sort_unstable();
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn prop_sessions_equal_the_reference_across_a_restore(
        events in prop::collection::vec(prop_oneof![
            3 => prop::collection::vec((0i64..4, 0i64..200, 1i64..9), 1..6).prop_map(Event::Rows),
            1 => Just(Event::Watermark),
        ], 1..25),
        gap in 1i64..30,
        cut in prop::option::of(0usize..25),
    ) {
        let all: Vec<(i64, i64, i64)> = events
            .iter()
            .filter_map(|e| match e { Event::Rows(r) => Some(r.clone()), _ => None })
            .flatten()
            .collect();
        prop_assume!(!all.is_empty());
        let f = factory(gap, false);
        let mut out = Recorder::default();
        let mut ops = vec![SessionOperator::new(&f, &ctx(0..16)).unwrap()];
        let mut seen = 0;
        for (i, e) in events.iter().enumerate() {
            match e {
                Event::Rows(rows) => {
                    seen += rows.len();
                    for op in &mut ops {
                        let mut hashes = Vec::new();
                        let keys: ArrayRef =
                            Arc::new(rows.iter().map(|r| Some(r.0)).collect::<Int64Array>());
                        hash_keys(&[keys], &mut hashes).unwrap();
                        let mine: Vec<(i64, i64, i64)> = rows
                            .iter()
                            .zip(&hashes)
                            .filter(|(_, h)| op.own.key_groups.contains(&crate::keygroup::key_group(**h, 16)))
                            .map(|(r, _)| *r)
                            .collect();
                        if !mine.is_empty() {
                            op.process_batch(0, batch(&mine), &mut out).unwrap();
                        }
                    }
                }
                Event::Watermark => {
                    // Never ahead of a row still to come: nothing is late.
                    let future = all[seen..].iter().map(|r| r.1).min().unwrap_or(i64::MAX - 1);
                    for op in &mut ops {
                        op.process_watermark(future - 1, &mut out).unwrap();
                    }
                }
            }
            if cut == Some(i) {
                let state = ops[0].snapshot_state(1).unwrap();
                let ranges = [0..8, 8..16];
                ops = split_keyed(&state, &ranges)
                    .into_iter()
                    .zip(ranges)
                    .map(|(part, range)| {
                        let mut op = SessionOperator::new(&f, &ctx(range)).unwrap();
                        op.restore_state(part).unwrap();
                        op
                    })
                    .collect();
            }
        }
        for op in &mut ops {
            op.process_watermark(MAX_WATERMARK, &mut out).unwrap();
            prop_assert_eq!(op.late_records(), 0);
        }
        let mut got = fired(&out);
        got.sort_unstable();
        prop_assert_eq!(got, reference(gap, &all));
    }
}

/// Two subtasks that had reached different watermarks (an unaligned barrier
/// overtakes watermarks) restored into one: a row of the key group behind
/// stays on time (its session still fires), one of the key group ahead
/// stays late (its session fired before, never again).
#[test]
fn test_restore_from_subtasks_at_different_watermarks_keeps_each_key_group_at_its_own() {
    let kg = |k: i64| {
        let mut hashes = Vec::new();
        let col: ArrayRef = Arc::new(Int64Array::from(vec![k]));
        crate::keygroup::hash_keys(&[col], &mut hashes).unwrap();
        crate::keygroup::key_group(hashes[0], 16)
    };
    let behind = (0..1000).find(|&k| kg(k) < 8).unwrap();
    let ahead = (0..1000).find(|&k| kg(k) >= 8).unwrap();
    let f = factory(10, true);
    let mut out = Recorder::default();
    let mut a = SessionOperator::new(&f, &ctx(8..16)).unwrap();
    let mut b = SessionOperator::new(&f, &ctx(0..8)).unwrap();
    a.process_batch(0, batch(&[(ahead, 3, 1)]), &mut out)
        .unwrap();
    a.process_watermark(19, &mut out).unwrap();
    b.process_batch(0, batch(&[(behind, 0, 1)]), &mut out)
        .unwrap();
    b.process_watermark(5, &mut out).unwrap();
    assert_eq!(fired(&out), vec![(Some(ahead), 3, 13, Some(1))]);
    let mut keyed = a.snapshot_state(1).unwrap().keyed;
    keyed.extend(b.snapshot_state(1).unwrap().keyed);
    let mut op = SessionOperator::new(&f, &ctx(0..16)).unwrap();
    op.restore_state(OperatorState {
        operator: None,
        keyed,
    })
    .unwrap();
    // In-flight rows of both: behind's at 10 opens [10, 20) (its session
    // [0, 10) is exactly a gap away), ahead's at 7 would reopen [3, 13).
    op.process_batch(0, batch(&[(behind, 10, 10), (ahead, 7, 100)]), &mut out)
        .unwrap();
    assert_eq!(
        op.late_records(),
        1,
        "the row of the key group ahead is late"
    );
    op.process_watermark(MAX_WATERMARK, &mut out).unwrap();
    assert_eq!(
        fired(&out),
        vec![
            (Some(ahead), 3, 13, Some(1)),
            (Some(behind), 0, 10, Some(1)),
            (Some(behind), 10, 20, Some(10))
        ]
    );
}
