use super::*;
use crate::error::Error;
use crate::expr::{Expr, ScalarValue};
use crate::operator::testing::{
    context, display_rows as rows, field_names, fire_restored, key_time_value_batch as batch,
    rows_in_key_groups, split_keyed, windowed_aggs, Recorder,
};
use crate::operator::LATE_PORT;
use crate::state::keyed::{open_blob, META_INPUT_SCHEMA};
use crate::state::{OperatorState, StateBlob};
use arrow::array::{AsArray, RecordBatch};
use std::sync::Arc;

fn factory(assigner: WindowAssigner) -> WindowAggsFactory {
    WindowAggsFactory {
        aggs: windowed_aggs(vec![
            ("count(1)", "count", vec![Expr::lit(ScalarValue::Int64(1))]),
            ("sum(v)", "sum", vec![Expr::col("v")]),
            ("collect_list(v)", "collect_list", vec![Expr::col("v")]),
        ]),
        assigner,
    }
}

fn names(keys: &[String]) -> Vec<&str> {
    keys.iter().map(String::as_str).collect()
}

fn op(f: &WindowAggsFactory, range: std::ops::Range<usize>) -> Box<dyn Operator> {
    f.create(&context("win", range, 8)).expect("operator")
}

#[test]
fn test_tumbling_windows_fire_every_aggregate_in_order() {
    let f = factory(WindowAssigner::Tumbling { size_ms: 10 });
    let schema = batch(vec![], vec![], vec![]).schema();
    assert_eq!(
        field_names(&f.output_schema("win", &schema).expect("schema")),
        [
            "k",
            "window_start",
            "window_end",
            "count(1)",
            "sum(v)",
            "collect_list(v)"
        ]
    );
    let mut w = op(&f, 0..8);
    let mut out = Recorder::default();
    w.process_batch(
        0,
        batch(
            vec!["a", "b", "a", "a"],
            vec![1, 2, 12, 5],
            vec![Some(1), Some(2), Some(3), None],
        ),
        &mut out,
    )
    .expect("process");
    w.process_watermark(9, &mut out).expect("watermark");
    assert_eq!(rows(&out.batches), ["a 0 10 2 1 [1]", "b 0 10 1 2 [2]"]);
    // A row of a window that is over is late.
    w.process_batch(
        0,
        batch(vec!["b", "b"], vec![3, 15], vec![Some(7), Some(8)]),
        &mut out,
    )
    .expect("process");
    assert_eq!(rows(&out.on_port(LATE_PORT)), ["b 3 7"]);
    assert_eq!(w.late_records(), 1);
    w.process_watermark(MAX_WATERMARK, &mut out)
        .expect("watermark");
    assert_eq!(
        rows(&out.batches[1..]),
        ["a 10 20 1 3 [3]", "b 10 20 1 8 [8]"]
    );
    assert_eq!(out.watermarks, [9, MAX_WATERMARK]);
}

#[test]
fn test_sliding_windows_add_a_row_to_each_of_its_windows() {
    let f = factory(WindowAssigner::Sliding {
        size_ms: 10,
        slide_ms: 5,
    });
    let mut w = op(&f, 0..8);
    let mut out = Recorder::default();
    w.process_batch(
        0,
        batch(vec!["a", "a"], vec![7, 12], vec![Some(1), Some(2)]),
        &mut out,
    )
    .expect("process");
    w.process_watermark(MAX_WATERMARK, &mut out)
        .expect("watermark");
    assert_eq!(
        rows(&out.batches),
        ["a 0 10 1 1 [1]", "a 5 15 2 3 [1, 2]", "a 10 20 1 2 [2]"]
    );
}

/// A snapshot restored into two subtasks that split the key groups: they
/// fire what the one that wrote it would have, and keep its watermark (a
/// row late before is late after).
#[test]
fn test_restore_at_another_parallelism_fires_the_same_windows() {
    let f = factory(WindowAssigner::Tumbling { size_ms: 10 });
    let keys: Vec<String> = (0..30).map(|i| format!("key{i}")).collect();
    let first = batch(
        names(&keys),
        (0..30).map(|i| i % 20).collect(),
        (0..30).map(Some).collect(),
    );
    let second = batch(
        names(&keys),
        (0..30).map(|_| 15).collect(),
        (0..30).map(Some).collect(),
    );
    let mut whole = op(&f, 0..8);
    let mut out = Recorder::default();
    whole.process_batch(0, first, &mut out).expect("process");
    whole.process_watermark(9, &mut out).expect("watermark");
    let state = whole
        .state()
        .expect("stateful")
        .snapshot_state(1)
        .expect("snapshot");
    assert_eq!(state.keyed.len(), 8, "every key group keeps the watermark");
    let mut expected = Recorder::default();
    whole
        .process_batch(0, second.clone(), &mut expected)
        .expect("process");
    whole
        .process_watermark(MAX_WATERMARK, &mut expected)
        .expect("watermark");
    let mut want = rows(&expected.batches);
    want.sort();

    let mut got = Vec::new();
    let ranges = [0..5, 5..8];
    for (range, mine) in ranges.iter().zip(split_keyed(&state, &ranges)) {
        let mut part = op(&f, range.clone());
        part.state()
            .expect("stateful")
            .restore_state(mine)
            .expect("restore");
        let rows_of_part = rows_in_key_groups(&second, 0, range, 8);
        let mut out = Recorder::default();
        part.process_batch(0, rows_of_part.clone(), &mut out)
            .expect("process");
        // A row of window [0, 10) stays late after the restore.
        let late_key = rows_of_part
            .column(0)
            .as_string::<i32>()
            .value(0)
            .to_string();
        part.process_batch(0, batch(vec![&late_key], vec![3], vec![Some(1)]), &mut out)
            .expect("process");
        assert_eq!(out.on_port(LATE_PORT).len(), 1);
        part.process_watermark(MAX_WATERMARK, &mut out)
            .expect("watermark");
        got.extend(rows(&out.batches));
    }
    got.sort();
    assert_eq!(got, want);
    // read_state shows keys, window_start and the values.
    let (kg, blob) = &state.keyed[0];
    let table = state_table(&blob.to_bytes().expect("bytes"), *kg).expect("table");
    assert_eq!(
        field_names(&table[0].schema()),
        ["k", "window_start", "count(1)", "sum(v)", "collect_list(v)"]
    );
}

/// The state of `state` as an older checkpoint wrote it: without the input
/// schema in its blobs' metadata.
fn without_input_schema(state: &OperatorState) -> OperatorState {
    let keyed = state
        .keyed
        .iter()
        .map(|(kg, blob)| {
            let bytes = blob.to_bytes().expect("bytes");
            let bad = |m: String| Error::checkpoint(None, m);
            let reader = open_blob(&bytes, MULTI_FORMAT_VERSION, &bad).expect("blob");
            let mut metadata = reader.schema().metadata().clone();
            assert!(metadata.remove(META_INPUT_SCHEMA).is_some(), "recorded");
            let fields = reader.schema().fields().clone();
            let schema = Arc::new(Schema::new_with_metadata(fields, metadata));
            let batches: Vec<RecordBatch> = reader.map(|b| b.expect("batch")).collect();
            let columns = batches[0].columns().to_vec();
            let old = crate::state::encode_ipc_blob(MULTI_FORMAT_VERSION, &schema, columns)
                .expect("encode");
            (*kg, StateBlob::Bytes(Arc::new(old)))
        })
        .collect();
    OperatorState {
        operator: None,
        keyed,
    }
}

/// Restored windows fire on a watermark even when no record comes after the
/// restore, also when the graph does not know the input schema (a Python
/// function without `schema=` upstream): the state records the schema its
/// aggregates were bound to. A state without it (an older checkpoint) is an
/// error there, never a silent loss.
#[test]
fn test_restored_windows_fire_without_another_record() {
    let mut f = factory(WindowAssigner::Tumbling { size_ms: 10 });
    let b = batch(vec!["a", "b"], vec![1, 2], vec![Some(1), Some(2)]);
    let mut w = op(&f, 0..8);
    let mut out = Recorder::default();
    w.process_batch(0, b.clone(), &mut out).expect("process");
    let state = w
        .state()
        .expect("stateful")
        .snapshot_state(1)
        .expect("snapshot");
    let want = ["a 0 10 1 1 [1]", "b 0 10 1 2 [2]"];

    let mut old = op(&f, 0..8);
    old.state()
        .expect("stateful")
        .restore_state(without_input_schema(&state))
        .expect("restore");
    let err = old
        .process_watermark(MAX_WATERMARK, &mut Recorder::default())
        .expect_err("unbound");
    assert!(err.to_string().contains("input schema"), "{err}");

    for known in [None, Some(b.schema())] {
        f.aggs.input = known;
        assert_eq!(fire_restored(&mut *op(&f, 0..8), state.clone()), want);
    }
}
