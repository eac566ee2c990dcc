use super::*;
use crate::event::MAX_WATERMARK;
use crate::expr::{Expr, ScalarValue};
use crate::operator::testing::{
    context, display_rows as rows, field_names, fire_restored, key_time_value_batch as batch,
    rows_in_key_groups, split_keyed, windowed_aggs, Recorder,
};
use crate::operator::LATE_PORT;

/// The output columns, which `read_state` shows too.
const OUTPUT: [&str; 7] = [
    "k",
    "window_start",
    "window_end",
    "count(1)",
    "sum(v)",
    "collect_list(v)",
    "first(v)",
];

fn factory() -> SessionAggsFactory {
    SessionAggsFactory {
        aggs: windowed_aggs(vec![
            ("count(1)", "count", vec![Expr::lit(ScalarValue::Int64(1))]),
            ("sum(v)", "sum", vec![Expr::col("v")]),
            ("collect_list(v)", "collect_list", vec![Expr::col("v")]),
            ("first(v)", "first", vec![Expr::col("v")]),
        ]),
        gap_ms: 10,
    }
}

fn op(f: &SessionAggsFactory, range: std::ops::Range<usize>) -> Box<dyn Operator> {
    f.create(&context("sess", range, 8)).expect("operator")
}

#[test]
fn test_sessions_form_merge_and_fire_with_every_aggregate() {
    let f = factory();
    let schema = f
        .output_schema("sess", &batch(vec![], vec![], vec![]).schema())
        .expect("schema");
    assert_eq!(field_names(&schema), OUTPUT);
    let mut s = op(&f, 0..8);
    let mut out = Recorder::default();
    // a: [0, 10) and [30, 40); b: [5, 15) then [5, 19).
    s.process_batch(
        0,
        batch(
            vec!["a", "b", "a", "b"],
            vec![0, 5, 30, 9],
            vec![Some(1), Some(2), Some(3), None],
        ),
        &mut out,
    )
    .expect("process");
    // Row a@20 bridges [0, 10)..[30, 40)? No: [20, 30) touches neither
    // ([0,10) ends at 10, [30,40) starts at 30); a@25 bridges [20,30) and
    // [30,40), and a@8 extends [0, 10) to [0, 18), which a@15 bridges to
    // [20, 30): everything of key a is one session [0, 40).
    s.process_batch(
        0,
        batch(
            vec!["a", "a", "a", "a"],
            vec![20, 25, 8, 15],
            vec![Some(4), Some(5), Some(6), Some(7)],
        ),
        &mut out,
    )
    .expect("process");
    s.process_watermark(18, &mut out).expect("watermark");
    assert_eq!(rows(&out.batches), ["b 5 19 2 2 [2] 2"]);
    s.process_watermark(MAX_WATERMARK, &mut out)
        .expect("watermark");
    // The earlier state (sessions by start: [0,10) then [30,40)) comes
    // before the batch's rows, in arrival order.
    assert_eq!(
        rows(&out.batches[1..]),
        ["a 0 40 6 26 [1, 3, 4, 5, 6, 7] 1"]
    );
}

#[test]
fn test_a_row_of_a_session_that_is_over_is_late() {
    let f = factory();
    let mut s = op(&f, 0..8);
    let mut out = Recorder::default();
    s.process_batch(0, batch(vec!["a"], vec![0], vec![Some(1)]), &mut out)
        .expect("process");
    s.process_watermark(30, &mut out).expect("watermark");
    // [5, 15) is over at 30 and touches no open session.
    s.process_batch(
        0,
        batch(vec!["a", "a"], vec![5, 35], vec![Some(2), Some(3)]),
        &mut out,
    )
    .expect("process");
    assert_eq!(rows(&out.on_port(LATE_PORT)), ["a 5 2"]);
    assert_eq!(s.late_records(), 1);
    s.process_watermark(MAX_WATERMARK, &mut out)
        .expect("watermark");
    assert_eq!(
        rows(&out.batches),
        ["a 0 10 1 1 [1] 1", "a 35 45 1 3 [3] 3"]
    );
}

/// A snapshot restored into two subtasks that split the key groups: they
/// fire what the one that wrote it would have, merging restored sessions
/// with the rows that come after the restore.
#[test]
fn test_restore_at_another_parallelism_merges_restored_sessions() {
    let f = factory();
    let keys: Vec<String> = (0..30).map(|i| format!("key{i}")).collect();
    let names: Vec<&str> = keys.iter().map(String::as_str).collect();
    // Two sessions per key, [i, i+10) and [i+15, i+25).
    let mut k2 = names.clone();
    k2.extend(names.iter());
    let first = batch(
        k2.clone(),
        (0..60).map(|i| (i % 30) + 15 * (i / 30)).collect(),
        (0..60).map(Some).collect(),
    );
    // One row per key bridges them: i + 9 (a row at i + 10 would start a
    // session of its own, `gap` after the first row).
    let second = batch(
        names.clone(),
        (0..30).map(|i| i + 9).collect(),
        (0..30).map(|i| Some(100 + i)).collect(),
    );
    let mut whole = op(&f, 0..8);
    let mut out = Recorder::default();
    whole.process_batch(0, first, &mut out).expect("process");
    whole.process_watermark(5, &mut out).expect("watermark");
    let state = whole
        .state()
        .expect("stateful")
        .snapshot_state(1)
        .expect("snapshot");
    let mut expected = Recorder::default();
    whole
        .process_batch(0, second.clone(), &mut expected)
        .expect("process");
    whole
        .process_watermark(MAX_WATERMARK, &mut expected)
        .expect("watermark");
    let mut want = rows(&expected.batches);
    want.sort();
    assert_eq!(want.len(), 30, "{want:?}");
    assert!(want.contains(&"key3 3 28 3 139 [3, 33, 103] 3".to_string()));

    let mut got = Vec::new();
    let ranges = [0..5, 5..8];
    for (range, mine) in ranges.iter().zip(split_keyed(&state, &ranges)) {
        let mut part = op(&f, range.clone());
        part.state()
            .expect("stateful")
            .restore_state(mine)
            .expect("restore");
        let mut out = Recorder::default();
        let rows_of_part = rows_in_key_groups(&second, 0, range, 8);
        part.process_batch(0, rows_of_part, &mut out)
            .expect("process");
        part.process_watermark(MAX_WATERMARK, &mut out)
            .expect("watermark");
        got.extend(rows(&out.batches));
    }
    got.sort();
    assert_eq!(got, want);
    // read_state shows keys, window bounds and the values.
    let (kg, blob) = &state.keyed[0];
    let table = state_table(&blob.to_bytes().expect("bytes"), *kg).expect("table");
    assert_eq!(field_names(&table[0].schema()), OUTPUT);
}

#[test]
fn test_restore_of_other_aggregates_or_gap_is_refused() {
    let f = factory();
    let b = batch(vec!["a"], vec![1], vec![Some(1)]);
    let mut s = op(&f, 0..8);
    s.process_batch(0, b.clone(), &mut Recorder::default())
        .expect("process");
    let state = s
        .state()
        .expect("stateful")
        .snapshot_state(1)
        .expect("snapshot");
    let mut other = factory();
    other.gap_ms = 20;
    other.aggs.input = Some(b.schema());
    let err = op(&other, 0..8)
        .state()
        .expect("stateful")
        .restore_state(state)
        .expect_err("another gap");
    assert!(err.to_string().contains("gap 10 ms"), "{err}");
}

/// Sessions restored into an operator whose graph did not know the input
/// schema (a Python function without `schema=` upstream) fire on a
/// watermark before any record comes: the state records the input schema
/// its aggregates were bound to (chaos seed 252776071 failed the job here).
#[test]
fn test_restored_sessions_fire_on_a_watermark_without_the_input_schema() {
    let f = factory();
    let b = batch(
        vec!["a", "a", "b"],
        vec![1, 5, 2],
        vec![Some(1), Some(2), Some(3)],
    );
    let mut s = op(&f, 0..8);
    let mut out = Recorder::default();
    s.process_batch(0, b, &mut out).expect("process");
    let state = s
        .state()
        .expect("stateful")
        .snapshot_state(1)
        .expect("snapshot");
    let mut want = Recorder::default();
    s.process_watermark(MAX_WATERMARK, &mut want)
        .expect("watermark");
    let mut want = rows(&want.batches);
    want.sort();
    assert_eq!(want.len(), 2);
    assert_eq!(fire_restored(&mut *op(&f, 0..8), state), want);
}
