use super::*;
use crate::expr::{Expr, ScalarValue};
use arrow::array::{AsArray, Float64Array, Int64Array, StringArray};
use arrow::datatypes::{Float64Type, Int64Type};

fn batch(k: Vec<i64>, x: Vec<Option<i64>>, s: Vec<Option<&str>>) -> RecordBatch {
    RecordBatch::try_from_iter(vec![
        ("k", Arc::new(Int64Array::from(k)) as ArrayRef),
        ("x", Arc::new(Int64Array::from(x)) as ArrayRef),
        ("s", Arc::new(StringArray::from(s)) as ArrayRef),
    ])
    .expect("valid batch")
}

fn set(schema: &Schema) -> Arc<AggregateSet> {
    let x = || Expr::col("x");
    let aggs = vec![
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
            "collect_list(s)".to_string(),
            Aggregate::new("collect_list", vec![Expr::col("s")]).expect("known"),
        ),
        (
            "first(x)".to_string(),
            Aggregate::new("first", vec![x()]).expect("known"),
        ),
        (
            "last(x)".to_string(),
            Aggregate::new("last", vec![x()]).expect("known"),
        ),
        (
            "count(DISTINCT s)".to_string(),
            Aggregate::new("count_distinct", vec![Expr::col("s")]).expect("known"),
        ),
    ];
    Arc::new(AggregateSet::bind(&aggs, schema).expect("binds"))
}

/// The values of one slot, as display strings (one per aggregate).
fn row(slots: &mut AggregateSlots, slot: u32) -> Vec<String> {
    slots
        .evaluate(&[slot])
        .expect("evaluate")
        .iter()
        .map(|c| arrow::util::display::array_value_to_string(c, 0).expect("displayable"))
        .collect()
}

fn sample() -> RecordBatch {
    batch(
        vec![1, 2, 1, 3, 2, 1],
        vec![Some(10), Some(20), None, Some(30), Some(5), Some(7)],
        vec![Some("a"), Some("b"), Some("c"), None, Some("b"), Some("a")],
    )
}

#[test]
fn test_update_groups_rows_by_slot_in_arrival_order() {
    let b = sample();
    let mut slots = AggregateSlots::new(set(b.schema_ref()));
    let ids: Vec<u32> = (0..3).map(|_| slots.allocate().expect("slot")).collect();
    let slot_of: Vec<u32> = b
        .column(0)
        .as_primitive::<Int64Type>()
        .values()
        .iter()
        .map(|&k| ids[(k - 1) as usize])
        .collect();
    slots.update(&b, None, &slot_of).expect("update");
    let (distinct, first) = slots.last_update();
    assert_eq!(distinct, &[ids[0], ids[1], ids[2]]);
    assert_eq!(first, &[0, 1, 3]);
    assert_eq!(
        row(&mut slots, ids[0]),
        ["17", "3", "8.5", "[a, c, a]", "10", "7", "2"]
    );
    assert_eq!(
        row(&mut slots, ids[1]),
        ["25", "2", "12.5", "[b, b]", "20", "5", "1"]
    );
    // collect_list skips nulls, as Spark's does; first/last see the null-free rows.
    assert_eq!(
        row(&mut slots, ids[2]),
        ["30", "1", "30.0", "[]", "30", "30", "0"]
    );
    let out = slots.evaluate(&ids).expect("evaluate");
    assert_eq!(out.len(), 7);
    assert_eq!(
        out[0].as_primitive::<Int64Type>().values().to_vec(),
        vec![17, 25, 30]
    );
    assert_eq!(
        out[2].as_primitive::<Float64Type>().values().to_vec(),
        vec![8.5, 12.5, 30.0]
    );
    assert!(slots.evaluate(&[]).expect("evaluate")[3].is_empty());
}

/// A row may go to several slots (a sliding window's), through `rows`.
#[test]
fn test_update_with_rows_adds_a_row_to_several_slots() {
    let b = sample();
    let mut slots = AggregateSlots::new(set(b.schema_ref()));
    let (p, q) = (
        slots.allocate().expect("slot"),
        slots.allocate().expect("slot"),
    );
    // Rows 0, 1, 2 go to p; rows 1, 2, 5 go to q.
    slots
        .update(&b, Some(&[0, 1, 1, 2, 2, 5]), &[p, p, q, p, q, q])
        .expect("update");
    assert_eq!(row(&mut slots, p)[..4], ["30", "3", "15.0", "[a, b, c]"]);
    assert_eq!(row(&mut slots, q)[..4], ["27", "3", "13.5", "[b, c, a]"]);
}

/// A snapshot leaves the accumulators as they were (updates after it give
/// the same as without it), and its state columns restore into fresh
/// slots, one row each, or merge two slots into one.
#[test]
fn test_states_restore_and_merge_equal_one_pass() {
    let b = sample();
    let (head, tail) = (b.slice(0, 3), b.slice(3, 3));
    let set = set(b.schema_ref());
    let mut whole = AggregateSlots::new(set.clone());
    let w = whole.allocate().expect("slot");
    whole.update(&b, None, &[w; 6]).expect("update");
    let expected = row(&mut whole, w);

    let mut parts = AggregateSlots::new(set.clone());
    let (a, c) = (
        parts.allocate().expect("slot"),
        parts.allocate().expect("slot"),
    );
    parts.update(&head, None, &[a; 3]).expect("update");
    let saved = parts.states(&[a]).expect("states");
    assert_eq!(saved.len(), set.state_fields().len());
    parts.update(&tail, None, &[a; 3]).expect("update");
    assert_eq!(row(&mut parts, a), expected);

    let mut restored = AggregateSlots::new(set.clone());
    let r = restored.allocate().expect("slot");
    restored.merge_row(r, &saved, 0).expect("merge");
    restored.update(&tail, None, &[r; 3]).expect("update");
    assert_eq!(row(&mut restored, r), expected);

    parts.update(&head, None, &[c; 3]).expect("update");
    let d = parts.allocate().expect("slot");
    parts.update(&tail, None, &[d; 3]).expect("update");
    parts.merge_slots(c, d).expect("merge");
    assert_eq!(row(&mut parts, c), expected);
    assert_eq!(parts.live(), 2);
}

#[test]
fn test_released_slots_are_reused_empty() {
    let b = sample();
    let mut slots = AggregateSlots::new(set(b.schema_ref()));
    let a = slots.allocate().expect("slot");
    slots.update(&b, None, &[a; 6]).expect("update");
    slots.release(a);
    assert!(slots.evaluate(&[a]).is_err());
    let again = slots.allocate().expect("slot");
    assert_eq!(again, a);
    assert_eq!(row(&mut slots, again), ["", "0", "", "[]", "", "", "0"]);
}

#[test]
fn test_bind_refuses_two_aggregates_of_one_name_and_wrong_types() {
    let b = sample();
    let sum = Aggregate::new("sum", vec![Expr::col("x")]).expect("known");
    let err = AggregateSet::bind(
        &[("t".to_string(), sum.clone()), ("t".to_string(), sum)],
        b.schema_ref(),
    )
    .expect_err("duplicate name");
    assert!(err.to_string().contains("'t'"), "{err}");
    let avg = Aggregate::new("avg", vec![Expr::col("s")]).expect("known");
    let err = AggregateSet::bind(&[("a".to_string(), avg)], b.schema_ref()).expect_err("avg(s)");
    assert!(err.to_string().contains("aggregate 'avg'"), "{err}");
    assert!(AggregateSet::bind(&[], b.schema_ref()).is_err());
    // Float columns go through as well.
    let f = RecordBatch::try_from_iter(vec![(
        "f",
        Arc::new(Float64Array::from(vec![1.0, f64::NAN])) as ArrayRef,
    )])
    .expect("batch");
    let max = Aggregate::new("max", vec![Expr::col("f")]).expect("known");
    // DataFusion's approx_distinct takes no floats: they are counted by text.
    let approx = Aggregate::new("approx_count_distinct", vec![Expr::col("f")]).expect("known");
    let set = Arc::new(
        AggregateSet::bind(
            &[("m".to_string(), max), ("a".to_string(), approx)],
            f.schema_ref(),
        )
        .expect("binds"),
    );
    let mut slots = AggregateSlots::new(set);
    let s = slots.allocate().expect("slot");
    slots.update(&f, None, &[s, s]).expect("update");
    slots.update(&f, None, &[s, s]).expect("update");
    assert_eq!(row(&mut slots, s), ["NaN", "2"]);
}

#[test]
fn test_approx_percentile_of_longs_is_a_long_as_in_spark() {
    // 1, 2, 2, 3: the t-digest interpolates a double between the values;
    // Spark's percentile_approx of a bigint is a bigint.
    let b = batch(
        vec![1; 5],
        vec![Some(1), Some(2), Some(2), Some(3), None],
        vec![None; 5],
    );
    let aggs = vec![
        (
            "p".to_string(),
            Aggregate::new(
                "approx_percentile",
                vec![Expr::col("x"), Expr::lit(ScalarValue::Float64(0.5))],
            )
            .expect("known"),
        ),
        (
            "p_of_double".to_string(),
            Aggregate::new(
                "approx_percentile",
                vec![
                    Expr::cast(Expr::col("x"), "double").expect("castable"),
                    Expr::lit(ScalarValue::Float64(0.5)),
                ],
            )
            .expect("known"),
        ),
    ];
    let set = Arc::new(AggregateSet::bind(&aggs, b.schema_ref()).expect("binds"));
    assert_eq!(set.aggregates[0].data_type(), &DataType::Int64);
    assert_eq!(set.aggregates[1].data_type(), &DataType::Float64);
    let mut slots = AggregateSlots::new(set);
    let slot = slots.allocate().expect("slot");
    slots.update(&b, None, &[slot; 5]).expect("update");
    let columns = slots.evaluate(&[slot]).expect("evaluate");
    assert_eq!(columns[0].as_primitive::<Int64Type>().value(0), 2);
    assert_eq!(columns[1].data_type(), &DataType::Float64);
}

#[test]
fn test_approx_count_distinct_is_a_long_as_in_spark() {
    // DataFusion's approx_distinct counts in a UInt64; Spark's is a bigint.
    let b = batch(
        vec![1; 4],
        vec![Some(1), Some(2), Some(2), None],
        vec![None; 4],
    );
    let aggs = vec![(
        "d".to_string(),
        Aggregate::new("approx_count_distinct", vec![Expr::col("x")]).expect("known"),
    )];
    let set = Arc::new(AggregateSet::bind(&aggs, b.schema_ref()).expect("binds"));
    assert_eq!(set.aggregates[0].data_type(), &DataType::Int64);
    let mut slots = AggregateSlots::new(set);
    let slot = slots.allocate().expect("slot");
    slots.update(&b, None, &[slot; 4]).expect("update");
    let columns = slots.evaluate(&[slot]).expect("evaluate");
    assert_eq!(columns[0].as_primitive::<Int64Type>().value(0), 2);
}
