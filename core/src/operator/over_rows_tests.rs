#![allow(clippy::unwrap_used)]

use super::*;
use crate::event::MAX_WATERMARK;
use crate::operator::testing::{
    context, display_rows, key_time_value_batch, split_keyed, Recorder,
};

const MAXP: usize = 8;

fn factory(preceding: usize) -> OverRowsFactory {
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
    // Uninterrupted.
    let mut op = operator(&f, 0..MAXP);
    let mut want = Recorder::default();
    op.process_batch(0, first.clone(), &mut want).unwrap();
    op.process_watermark(9, &mut want).unwrap();
    op.process_batch(0, second.clone(), &mut want).unwrap();
    op.process_watermark(MAX_WATERMARK, &mut want).unwrap();
    // Snapshot after the first watermark (pending rows and history), then
    // restored on two subtasks.
    let mut op = operator(&f, 0..MAXP);
    let mut got = Recorder::default();
    op.process_batch(0, first, &mut got).unwrap();
    op.process_watermark(9, &mut got).unwrap();
    let state = op.snapshot_state(1).unwrap();
    let ranges = [0..3, 3..MAXP];
    for (range, state) in ranges.iter().zip(split_keyed(&state, &ranges)) {
        let mut op = operator(&f, range.clone());
        op.restore_state(state).unwrap();
        let mine = crate::operator::testing::rows_in_key_groups(&second, 0, range, MAXP);
        // A row at the restored watermark is still late.
        op.process_batch(0, mine, &mut got).unwrap();
        op.process_watermark(MAX_WATERMARK, &mut got).unwrap();
    }
    assert_eq!(sorted(&got.batches), sorted(&want.batches));
    assert_eq!(display_rows(&want.batches).len(), 40);
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
