#![allow(clippy::unwrap_used)]

use super::*;
use crate::event::MAX_WATERMARK;
use crate::operator::testing::{
    context, display_rows, key_time_value_batch, split_keyed, Recorder,
};

const MAXP: usize = 8;

fn factory(preceding: usize) -> OverRowsFactory {
    framed(OverPreceding::Rows(preceding))
}

fn framed(preceding: OverPreceding) -> OverRowsFactory {
    let agg = |function, column: Option<&str>, name: &str| OverAggregate {
        function,
        column: column.map(str::to_string),
        name: name.to_string(),
    };
    OverRowsFactory {
        keys: vec!["k".into()],
        time_column: "t".into(),
        order_by: vec![],
        preceding,
        aggregates: vec![
            agg(OverFunction::Sum, Some("v"), "s"),
            agg(OverFunction::Count, None, "n"),
            agg(OverFunction::Count, Some("v"), "nv"),
            agg(OverFunction::Avg, Some("v"), "a"),
            agg(OverFunction::Min, Some("v"), "lo"),
            agg(OverFunction::Max, Some("v"), "hi"),
        ],
    }
}

fn operator(f: &OverRowsFactory, groups: std::ops::Range<usize>) -> OverRowsOperator {
    OverRowsOperator::new(f, &context("over", groups, MAXP)).unwrap()
}

fn sorted(batches: &[RecordBatch]) -> Vec<String> {
    let mut rows = display_rows(batches);
    rows.sort();
    rows
}

#[test]
fn test_over_rows_aggregates_each_row_with_its_preceding_rows_in_time_order() {
    let f = factory(1);
    let mut op = operator(&f, 0..MAXP);
    let mut out = Recorder::default();
    // Out of order within the watermark: processed by time.
    let batch = key_time_value_batch(
        vec!["a", "a", "a", "b"],
        vec![30, 10, 20, 10],
        vec![Some(3), Some(1), None, Some(7)],
    );
    op.process_batch(0, batch, &mut out).unwrap();
    assert!(out.batches.is_empty(), "held until the watermark");
    op.process_watermark(25, &mut out).unwrap();
    assert_eq!(
        sorted(&out.batches),
        vec![
            "a 10 1 1 1 1 1.0 1 1",
            "a 20  1 2 1 1.0 1 1",
            "b 10 7 7 1 1 7.0 7 7",
        ]
    );
    op.process_watermark(MAX_WATERMARK, &mut out).unwrap();
    let last = display_rows(&out.batches[1..]);
    // Frame: the row at 20 (null) and 30.
    assert_eq!(last, vec!["a 30 3 3 2 1 3.0 3 3"]);
    assert_eq!(op.pending_rows(), 0);
    assert_eq!(out.watermarks, vec![25, MAX_WATERMARK]);
}

#[test]
fn test_over_rows_drops_and_counts_rows_at_or_before_the_watermark() {
    let f = factory(2);
    let mut op = operator(&f, 0..MAXP);
    let mut out = Recorder::default();
    op.process_watermark(10, &mut out).unwrap();
    let batch = key_time_value_batch(vec!["a", "a", "a"], vec![10, 5, 11], vec![Some(1); 3]);
    op.process_batch(0, batch, &mut out).unwrap();
    assert_eq!(op.late_records(), 2);
    op.process_watermark(MAX_WATERMARK, &mut out).unwrap();
    assert_eq!(sorted(&out.batches), vec!["a 11 1 1 1 1 1.0 1 1"]);
}

#[test]
fn test_over_rows_orders_ties_by_the_rows_values_whatever_the_arrival() {
    let f = factory(1);
    let run = |k: Vec<&str>, v: Vec<Option<i64>>| {
        let mut op = operator(&f, 0..MAXP);
        let mut out = Recorder::default();
        let t = vec![5; k.len()];
        op.process_batch(0, key_time_value_batch(k, t, v), &mut out)
            .unwrap();
        op.process_watermark(MAX_WATERMARK, &mut out).unwrap();
        display_rows(&out.batches)
    };
    let one = run(vec!["a", "a", "a"], vec![Some(9), Some(2), Some(4)]);
    let two = run(vec!["a", "a", "a"], vec![Some(4), Some(9), Some(2)]);
    assert_eq!(one, two);
    // Ordered by v: 2, 4, 9; each with the one before.
    assert_eq!(
        one,
        vec![
            "a 5 2 2 1 1 2.0 2 2",
            "a 5 4 6 2 2 3.0 2 4",
            "a 5 9 13 2 2 6.5 4 9",
        ]
    );
}

#[test]
fn test_over_rows_restores_at_another_parallelism_with_exact_output() {
    let f = factory(2);
    let keys: Vec<String> = (0..20).map(|i| format!("k{}", i % 5)).collect();
    let first = key_time_value_batch(
        keys.iter().map(String::as_str).collect(),
        (0..20).collect(),
        (0..20).map(Some).collect(),
    );
    let second = key_time_value_batch(
        keys.iter().map(String::as_str).collect(),
        (20..40).collect(),
        (20..40).map(Some).collect(),
    );
    // Snapshot after the first watermark (pending rows and history).
    assert_restores_split(&f, first, second, 9);
}

#[test]
fn test_over_rows_refuses_bad_input_naming_the_operator() {
    let batch = key_time_value_batch(vec!["a"], vec![1], vec![Some(1)]);
    let schema = batch.schema();
    let mut f = factory(1);
    f.aggregates[0].name = "v".into();
    let err = f.output_schema("over", &schema).unwrap_err().to_string();
    assert!(err.contains("'over'") && err.contains("'v'"), "{err}");
    let mut f = factory(1);
    f.aggregates[0].column = Some("k".into());
    let err = f.output_schema("over", &schema).unwrap_err().to_string();
    assert!(err.contains("numeric") && err.contains("'k'"), "{err}");
    let mut f = factory(1);
    f.time_column = "nope".into();
    let err = f.output_schema("over", &schema).unwrap_err().to_string();
    assert!(err.contains("nope"), "{err}");
}

#[test]
fn test_over_rows_corrupt_state_is_a_checkpoint_error() {
    let f = factory(1);
    let mut op = operator(&f, 0..MAXP);
    let state = OperatorState {
        operator: None,
        keyed: vec![(0, StateBlob::Bytes(Arc::new(vec![VERSION, 1, 2])))],
    };
    let err = op.restore_state(state).unwrap_err().to_string();
    assert!(err.contains("corrupt"), "{err}");
}

/// `b` with every column nullable, so batches with and without nulls have
/// one schema.
fn nullable(b: RecordBatch) -> RecordBatch {
    let fields: Vec<Field> = b
        .schema()
        .fields()
        .iter()
        .map(|f| f.as_ref().clone().with_nullable(true))
        .collect();
    RecordBatch::try_new(Arc::new(Schema::new(fields)), b.columns().to_vec()).unwrap()
}

/// `batch`'s rows through an operator of `f` with a watermark after each
/// batch, then the end of input; the output rows sorted.
fn run_all(f: &OverRowsFactory, batches: Vec<(RecordBatch, i64)>) -> Vec<String> {
    let mut op = operator(f, 0..MAXP);
    let mut out = Recorder::default();
    for (batch, watermark) in batches {
        op.process_batch(0, nullable(batch), &mut out).unwrap();
        op.process_watermark(watermark, &mut out).unwrap();
    }
    op.process_watermark(MAX_WATERMARK, &mut out).unwrap();
    assert_eq!(op.pending_rows(), 0);
    sorted(&out.batches)
}

#[test]
fn test_over_unbounded_rows_is_a_running_aggregate_across_watermarks() {
    let f = framed(OverPreceding::AllRows);
    let got = run_all(
        &f,
        vec![
            (
                key_time_value_batch(
                    vec!["a", "a", "b", "a"],
                    vec![20, 10, 10, 20],
                    vec![None, Some(4), Some(7), Some(-1)],
                ),
                15,
            ),
            (
                key_time_value_batch(vec!["a", "b"], vec![30, 40], vec![Some(9), None]),
                35,
            ),
        ],
    );
    // a: 4 (t 10), then at 20 null before -1 (nulls first), then 9.
    assert_eq!(
        got,
        vec![
            "a 10 4 4 1 1 4.0 4 4",
            "a 20  4 2 1 4.0 4 4",
            "a 20 -1 3 3 2 1.5 -1 4",
            "a 30 9 12 4 3 4.0 -1 9",
            "b 10 7 7 1 1 7.0 7 7",
            "b 40  7 2 1 7.0 7 7",
        ]
    );
    // The state of a key is its accumulators, not its rows.
    let mut op = operator(&f, 0..MAXP);
    let mut out = Recorder::default();
    let n = 500;
    let keys = vec!["a"; n];
    let batch = key_time_value_batch(keys, (0..n as i64).collect(), vec![Some(1); n]);
    op.process_batch(0, batch, &mut out).unwrap();
    op.process_watermark(MAX_WATERMARK, &mut out).unwrap();
    let history: usize = op
        .groups
        .iter()
        .flat_map(|g| g.history.values())
        .map(VecDeque::len)
        .sum();
    let slots: usize = f.aggregates.iter().map(|a| running_slots(a.function)).sum();
    assert_eq!(history, slots);
    let last = display_rows(&out.batches).pop().unwrap();
    assert_eq!(last, "a 499 1 500 500 500 1.0 1 1");
}

#[test]
fn test_over_unbounded_range_gives_rows_of_one_time_one_value() {
    let f = framed(OverPreceding::AllRange);
    let got = run_all(
        &f,
        vec![
            (
                key_time_value_batch(
                    vec!["a", "a", "a", "b"],
                    vec![10, 20, 10, 10],
                    vec![Some(2), Some(5), None, Some(1)],
                ),
                10,
            ),
            (key_time_value_batch(vec!["a"], vec![20], vec![Some(3)]), 30),
        ],
    );
    assert_eq!(
        got,
        vec![
            "a 10  2 2 1 2.0 2 2",
            "a 10 2 2 2 1 2.0 2 2",
            "a 20 3 10 4 3 3.3333333333333335 2 5",
            "a 20 5 10 4 3 3.3333333333333335 2 5",
            "b 10 1 1 1 1 1.0 1 1",
        ]
    );
}

#[test]
fn test_over_range_frames_hold_the_rows_of_the_last_interval_and_all_peers() {
    let f = framed(OverPreceding::Range(1_000));
    let got = run_all(
        &f,
        vec![
            (
                key_time_value_batch(
                    vec!["a", "a", "a"],
                    vec![0, 1_000, 1_000],
                    vec![Some(1), Some(3), Some(4)],
                ),
                1_000,
            ),
            // 2_000 reaches back to 1_000 (inclusive), 2_500 only to 1_500.
            (
                key_time_value_batch(vec!["a", "a"], vec![2_500, 2_000], vec![Some(8), None]),
                3_000,
            ),
        ],
    );
    assert_eq!(
        got,
        vec![
            "a 0 1 1 1 1 1.0 1 1",
            "a 1000 3 8 3 3 2.6666666666666665 1 4",
            "a 1000 4 8 3 3 2.6666666666666665 1 4",
            "a 2000  7 3 2 3.5 3 4",
            "a 2500 8 8 2 1 8.0 8 8",
        ]
    );
    // RANGE 0 PRECEDING: the peers alone.
    let f = framed(OverPreceding::Range(0));
    let batch = key_time_value_batch(vec!["a", "a", "a"], vec![5, 5, 6], vec![Some(1); 3]);
    let got = run_all(&f, vec![(batch, 10)]);
    assert_eq!(
        got,
        vec![
            "a 5 1 2 2 2 1.0 1 1",
            "a 5 1 2 2 2 1.0 1 1",
            "a 6 1 1 1 1 1.0 1 1",
        ]
    );
}

/// Asserts that a run of `f`'s operator snapshotted mid-way and restored on
/// two subtasks gives the uninterrupted output.
fn assert_restores_at_another_parallelism(f: &OverRowsFactory) {
    let keys: Vec<String> = (0..20).map(|i| format!("k{}", i % 5)).collect();
    let key_refs = || keys.iter().map(String::as_str).collect::<Vec<_>>();
    // Pairs of rows at one time (ties and peers).
    let first = nullable(key_time_value_batch(
        key_refs(),
        (0..20).map(|t| t / 2 * 3).collect(),
        (0..20).map(|v| (v % 3 != 0).then_some(v)).collect(),
    ));
    let second = nullable(key_time_value_batch(
        key_refs(),
        (20..40).map(|t| t / 2 * 3).collect(),
        (20..40).map(Some).collect(),
    ));
    assert_restores_split(f, first, second, 14);
}

/// Asserts that `f`'s operator given `first`, the watermark `mid`, then
/// `second`, gives the same rows (40) when snapshotted after `mid` and
/// restored on two subtasks as uninterrupted.
fn assert_restores_split(f: &OverRowsFactory, first: RecordBatch, second: RecordBatch, mid: i64) {
    let mut op = operator(f, 0..MAXP);
    let mut want = Recorder::default();
    op.process_batch(0, first.clone(), &mut want).unwrap();
    op.process_watermark(mid, &mut want).unwrap();
    op.process_batch(0, second.clone(), &mut want).unwrap();
    op.process_watermark(MAX_WATERMARK, &mut want).unwrap();
    let mut op = operator(f, 0..MAXP);
    let mut got = Recorder::default();
    op.process_batch(0, first, &mut got).unwrap();
    op.process_watermark(mid, &mut got).unwrap();
    let state = op.snapshot_state(1).unwrap();
    let ranges = [0..3, 3..MAXP];
    for (range, state) in ranges.iter().zip(split_keyed(&state, &ranges)) {
        let mut op = operator(f, range.clone());
        op.restore_state(state).unwrap();
        // A row at the restored watermark is still late.
        let mine = crate::operator::testing::rows_in_key_groups(&second, 0, range, MAXP);
        op.process_batch(0, mine, &mut got).unwrap();
        op.process_watermark(MAX_WATERMARK, &mut got).unwrap();
    }
    assert_eq!(sorted(&got.batches), sorted(&want.batches));
    assert_eq!(display_rows(&want.batches).len(), 40);
}

#[test]
fn test_over_unbounded_and_range_frames_restore_at_another_parallelism() {
    for preceding in [
        OverPreceding::AllRows,
        OverPreceding::AllRange,
        OverPreceding::Range(4),
        OverPreceding::Rows(3),
    ] {
        assert_restores_at_another_parallelism(&framed(preceding));
    }
}

#[test]
fn test_over_state_of_another_frame_is_a_checkpoint_error() {
    let mut op = operator(&factory(2), 0..MAXP);
    let mut out = Recorder::default();
    let batch = key_time_value_batch(vec!["a"; 3], vec![1, 2, 3], vec![Some(1); 3]);
    op.process_batch(0, batch, &mut out).unwrap();
    op.process_watermark(5, &mut out).unwrap();
    let state = op.snapshot_state(1).unwrap();
    let mut running = operator(&framed(OverPreceding::AllRows), 0..MAXP);
    let err = running.restore_state(state).unwrap_err().to_string();
    assert!(err.contains("another OVER frame"), "{err}");
}
