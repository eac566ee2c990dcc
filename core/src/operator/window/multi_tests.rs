use super::*;
use crate::expr::{Expr, ScalarValue};
use arrow::array::{Int64Array, StringArray};
use arrow::util::display::array_value_to_string;

#[derive(Default)]
struct Recorder {
    batches: Vec<RecordBatch>,
    watermarks: Vec<i64>,
    late: Vec<RecordBatch>,
}

impl Collector for Recorder {
    fn emit(&mut self, batch: RecordBatch) -> Result<()> {
        self.batches.push(batch);
        Ok(())
    }
    fn emit_watermark(&mut self, watermark: i64) -> Result<()> {
        self.watermarks.push(watermark);
        Ok(())
    }
    fn emit_to_port(&mut self, port: u8, batch: RecordBatch) -> Result<()> {
        assert_eq!(port, LATE_PORT);
        self.late.push(batch);
        Ok(())
    }
}

fn ctx(key_groups: std::ops::Range<usize>) -> OperatorContext {
    OperatorContext {
        name: "win".to_string(),
        uid: "win".to_string(),
        subtask_index: 0,
        parallelism: 1,
        max_parallelism: 8,
        key_groups,
        attempt: 0,
    }
}

fn factory(assigner: WindowAssigner) -> WindowAggsFactory {
    WindowAggsFactory {
        keys: vec!["k".to_string()],
        time_column: "t".to_string(),
        assigner,
        aggregates: vec![
            (
                "count(1)".to_string(),
                Aggregate::new("count", vec![Expr::lit(ScalarValue::Int64(1))]).expect("known"),
            ),
            (
                "sum(v)".to_string(),
                Aggregate::new("sum", vec![Expr::col("v")]).expect("known"),
            ),
            (
                "collect_list(v)".to_string(),
                Aggregate::new("collect_list", vec![Expr::col("v")]).expect("known"),
            ),
        ],
        late_output: true,
        input: None,
    }
}

fn batch(k: Vec<&str>, t: Vec<i64>, v: Vec<Option<i64>>) -> RecordBatch {
    RecordBatch::try_from_iter(vec![
        ("k", Arc::new(StringArray::from(k)) as ArrayRef),
        ("t", Arc::new(Int64Array::from(t)) as ArrayRef),
        ("v", Arc::new(Int64Array::from(v)) as ArrayRef),
    ])
    .expect("batch")
}

fn rows(batches: &[RecordBatch]) -> Vec<String> {
    let mut out = Vec::new();
    for b in batches {
        for r in 0..b.num_rows() {
            let cells: Vec<String> = b
                .columns()
                .iter()
                .map(|c| array_value_to_string(c, r).expect("display"))
                .collect();
            out.push(cells.join(" "));
        }
    }
    out
}

fn names(keys: &[String]) -> Vec<&str> {
    keys.iter().map(String::as_str).collect()
}

fn op(f: &WindowAggsFactory, range: std::ops::Range<usize>) -> Box<dyn Operator> {
    f.create(&ctx(range)).expect("operator")
}

#[test]
fn test_tumbling_windows_fire_every_aggregate_in_order() {
    let f = factory(WindowAssigner::Tumbling { size_ms: 10 });
    let schema = batch(vec![], vec![], vec![]).schema();
    let names: Vec<String> = f
        .output_schema("win", &schema)
        .expect("schema")
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect();
    assert_eq!(
        names,
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
    assert_eq!(rows(&out.late), ["b 3 7"]);
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
    for range in [0..5, 5..8] {
        let mut part = op(&f, range.clone());
        let mine = state
            .keyed
            .iter()
            .filter(|(kg, _)| range.contains(&(*kg as usize)))
            .cloned()
            .collect();
        part.state()
            .expect("stateful")
            .restore_state(OperatorState {
                operator: None,
                keyed: mine,
            })
            .expect("restore");
        let mut hashes = Vec::new();
        let key_col: ArrayRef = second.column(0).clone();
        hash_keys(&[key_col], &mut hashes).expect("hash");
        let mask: Vec<bool> = hashes
            .iter()
            .map(|h| range.contains(&crate::keygroup::key_group(*h, 8)))
            .collect();
        let mine = filter_record_batch(&second, &BooleanArray::from(mask)).expect("filter");
        let mut out = Recorder::default();
        part.process_batch(0, mine, &mut out).expect("process");
        // A row of window [0, 10) stays late after the restore.
        let late_key = keys
            .iter()
            .zip(&hashes)
            .find(|(_, h)| range.contains(&crate::keygroup::key_group(**h, 8)))
            .map(|(k, _)| k.as_str())
            .expect("a key of the range");
        part.process_batch(0, batch(vec![late_key], vec![3], vec![Some(1)]), &mut out)
            .expect("process");
        assert_eq!(out.late.len(), 1);
        part.process_watermark(MAX_WATERMARK, &mut out)
            .expect("watermark");
        got.extend(rows(&out.batches));
    }
    got.sort();
    assert_eq!(got, want);
    // read_state shows keys, window_start and the values.
    let (kg, blob) = &state.keyed[0];
    let table = state_table(&blob.to_bytes().expect("bytes"), *kg).expect("table");
    let names: Vec<String> = table[0]
        .schema()
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect();
    assert_eq!(
        names,
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
        f.input = known;
        let mut restored = op(&f, 0..8);
        restored
            .state()
            .expect("stateful")
            .restore_state(state.clone())
            .expect("restore");
        let mut out = Recorder::default();
        restored
            .process_watermark(MAX_WATERMARK, &mut out)
            .expect("watermark");
        let mut got = rows(&out.batches);
        got.sort();
        assert_eq!(got, want);
    }
}
