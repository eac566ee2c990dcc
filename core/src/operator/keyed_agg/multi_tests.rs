use super::*;
use crate::expr::{Expr, ScalarValue};
use crate::operator::testing::{display_cells as rows, field_names, rows_in_key_groups, Recorder};
use arrow::array::{Int64Array, StringArray};

fn ctx(key_groups: std::ops::Range<usize>) -> OperatorContext {
    crate::operator::testing::context("agg", key_groups, 8)
}

fn factory() -> MultiAggFactory {
    let x = || Expr::col("x");
    MultiAggFactory::new(
        vec!["k".to_string()],
        vec![
            (
                "total".to_string(),
                Aggregate::new("sum", vec![x()]).expect("known"),
            ),
            (
                "count(1)".to_string(),
                Aggregate::new("count", vec![Expr::lit(ScalarValue::Int64(1))]).expect("known"),
            ),
            (
                "avg(x)".to_string(),
                Aggregate::new("avg", vec![x()]).expect("known"),
            ),
            (
                "count(DISTINCT x)".to_string(),
                Aggregate::new("count_distinct", vec![x()]).expect("known"),
            ),
        ],
    )
}

fn batch(k: Vec<Option<&str>>, x: Vec<Option<i64>>) -> RecordBatch {
    RecordBatch::try_from_iter(vec![
        ("k", Arc::new(StringArray::from(k)) as ArrayRef),
        ("x", Arc::new(Int64Array::from(x)) as ArrayRef),
    ])
    .expect("batch")
}

fn run(op: &mut MultiAggOperator, b: RecordBatch) -> Vec<Vec<String>> {
    let mut out = Recorder::default();
    op.process_batch(0, b, &mut out).expect("process");
    rows(&out.batches)
}

fn strs(rows: &[&[&str]]) -> Vec<Vec<String>> {
    rows.iter()
        .map(|r| r.iter().map(|s| s.to_string()).collect())
        .collect()
}

#[test]
fn test_emits_every_aggregate_of_the_keys_of_each_batch() {
    let f = factory();
    let mut op = MultiAggOperator::new(&f, &ctx(0..8)).expect("op");
    let schema = batch(vec![], vec![]).schema();
    let out = f.output_schema("agg", &schema).expect("schema");
    let names: Vec<&str> = out.fields().iter().map(|f| f.name().as_str()).collect();
    assert_eq!(
        names,
        ["k", "total", "count(1)", "avg(x)", "count(DISTINCT x)"]
    );
    let got = run(
        &mut op,
        batch(
            vec![Some("a"), Some("b"), Some("a"), None],
            vec![Some(1), None, Some(1), Some(4)],
        ),
    );
    assert_eq!(
        got,
        strs(&[
            &["a", "2", "2", "1.0", "1"],
            &["b", "", "1", "", "0"],
            &["", "4", "1", "4.0", "1"],
        ])
    );
    let got = run(
        &mut op,
        batch(vec![Some("b"), Some("a")], vec![Some(6), Some(4)]),
    );
    assert_eq!(
        got,
        strs(&[&["b", "6", "2", "6.0", "1"], &["a", "6", "3", "2.0", "2"]])
    );
}

/// A snapshot restores into two subtasks that split the key groups, and
/// both go on as the one that wrote it; key groups unchanged since the last
/// snapshot keep their change token (incremental checkpoints skip them).
#[test]
fn test_restore_at_another_parallelism_goes_on_exactly() {
    let f = factory();
    let keys: Vec<String> = (0..40).map(|i| format!("key{i}")).collect();
    let first = batch(
        keys.iter().map(|k| Some(k.as_str())).collect(),
        (0..40).map(Some).collect(),
    );
    let second = batch(
        keys.iter().map(|k| Some(k.as_str())).collect(),
        (0..40).map(|i| Some(i * 10)).collect(),
    );
    let mut whole = MultiAggOperator::new(&f, &ctx(0..8)).expect("op");
    run(&mut whole, first.clone());
    let state = whole.snapshot_state(1).expect("snapshot");
    let again = whole.snapshot_state(2).expect("snapshot");
    let tokens = |s: &OperatorState| s.keyed.iter().map(|(_, b)| b.token()).collect::<Vec<_>>();
    assert_eq!(tokens(&state), tokens(&again));
    let mut expected = run(&mut whole, second.clone());
    expected.sort();

    let mut got = Vec::new();
    for range in [0..3, 3..8] {
        let mut part = MultiAggOperator::new(&f, &ctx(range.clone())).expect("op");
        let mine: Vec<(u32, StateBlob)> = state
            .keyed
            .iter()
            .filter(|(kg, _)| range.contains(&(*kg as usize)))
            .map(|(kg, b)| (*kg, StateBlob::Bytes(b.to_bytes().expect("bytes"))))
            .collect();
        part.restore_state(OperatorState {
            operator: None,
            keyed: mine.clone(),
        })
        .expect("restore");
        // Before any batch, a snapshot passes the restored blobs on.
        let passed = part.snapshot_state(3).expect("snapshot");
        assert_eq!(passed.keyed.len(), mine.len());
        let part_batch = rows_in_key_groups(&second, 0, &range, 8);
        got.extend(run(&mut part, part_batch));
    }
    got.sort();
    assert_eq!(got, expected);
}

#[test]
fn test_state_table_shows_keys_and_values_and_restore_refuses_other_aggregates() {
    let f = factory();
    let mut op = MultiAggOperator::new(&f, &ctx(0..8)).expect("op");
    run(
        &mut op,
        batch(vec![Some("a"), Some("a")], vec![Some(2), Some(3)]),
    );
    let state = op.snapshot_state(1).expect("snapshot");
    assert_eq!(state.keyed.len(), 1);
    let (kg, blob) = &state.keyed[0];
    let bytes = blob.to_bytes().expect("bytes");
    let table = state_table(&bytes, *kg).expect("table");
    assert_eq!(rows(&table), strs(&[&["a", "5", "2", "2.5", "2"]]));
    assert_eq!(
        field_names(&table[0].schema()),
        ["k", "total", "count(1)", "avg(x)", "count(DISTINCT x)"]
    );

    let mut other = factory();
    other.aggregates.swap(0, 1);
    let mut op = MultiAggOperator::new(&other, &ctx(0..8)).expect("op");
    op.restore_state(state).expect("kept until the first batch");
    let mut out = Recorder::default();
    let err = op
        .process_batch(0, batch(vec![Some("a")], vec![Some(1)]), &mut out)
        .expect_err("other aggregates");
    assert!(err.to_string().contains("holds the aggregates"), "{err}");
}

#[test]
fn test_bind_errors_name_the_aggregate_and_clashing_names() {
    let schema = batch(vec![], vec![]).schema();
    let f = MultiAggFactory::new(
        vec!["k".to_string()],
        vec![(
            "avg(k)".to_string(),
            Aggregate::new("avg", vec![Expr::col("k")]).expect("known"),
        )],
    );
    let err = f.output_schema("op", &schema).expect_err("avg of strings");
    assert!(matches!(err, Error::Schema { .. }), "{err}");
    assert!(
        err.to_string().contains("aggregate 'avg'") && err.to_string().contains("'k'"),
        "{err}"
    );
    let f = MultiAggFactory::new(
        vec!["k".to_string()],
        vec![(
            "k".to_string(),
            Aggregate::new("sum", vec![Expr::col("x")]).expect("known"),
        )],
    );
    let err = f.output_schema("op", &schema).expect_err("clash");
    assert!(err.to_string().contains("key column"), "{err}");
}
