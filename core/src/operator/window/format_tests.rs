//! The multi-aggregates' checkpoint format is the one the operators wrote
//! before they shared their slots and window operator (`testdata/`: the
//! key-group blobs main's code wrote for these inputs): such a checkpoint
//! restores and fires the same windows, and this code writes the same blobs.
//!
//! Each `testdata/*.bin` is `encode_entries` of one entry per key group:
//! the key group (u32, little-endian), then its blob.

use std::io::Cursor;
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::Schema;
use arrow::ipc::reader::StreamReader;

use super::multi::WindowAggsFactory;
use super::session_multi::SessionAggsFactory;
use super::{WindowAssigner, WindowedAggs};
use crate::expr::{Aggregate, Expr, ScalarValue};
use crate::operator::keyed_agg::multi::MultiAggFactory;
use crate::operator::testing::{
    context, display_rows, fire_restored, key_time_value_batch as batch, Recorder,
};
use crate::operator::{Operator, OperatorFactory};
use crate::state::{decode_entries, OperatorState, StateBlob};

const TUMBLING: &[u8] = include_bytes!("testdata/tumbling.bin");
const SLIDING: &[u8] = include_bytes!("testdata/sliding.bin");
const SESSION: &[u8] = include_bytes!("testdata/session.bin");
const KEYED: &[u8] = include_bytes!("testdata/keyed.bin");

/// Two key groups: every blob of the fixtures.
const MAX_PARALLELISM: usize = 2;

fn aggregates() -> Vec<(String, Aggregate)> {
    let v = || vec![Expr::col("v")];
    [
        ("count(1)", "count", vec![Expr::lit(ScalarValue::Int64(1))]),
        ("sum(v)", "sum", v()),
        ("avg(v)", "avg", v()),
        ("collect_list(v)", "collect_list", v()),
        ("first(v)", "first", v()),
        ("count(DISTINCT v)", "count_distinct", v()),
    ]
    .into_iter()
    .map(|(name, f, args)| (name.to_string(), Aggregate::new(f, args).expect("known")))
    .collect()
}

fn windowed(input: Option<&RecordBatch>) -> WindowedAggs {
    WindowedAggs {
        keys: vec!["k".to_string()],
        time_column: "t".to_string(),
        aggregates: aggregates(),
        late_output: true,
        input: input.map(|b| b.schema()),
    }
}

/// The rows every fixture's operator read before its snapshot (after a
/// watermark of 0, for the windows).
fn written() -> RecordBatch {
    batch(
        vec!["a", "b", "a", "c", "b", "a"],
        vec![1, 2, 8, 25, 31, 40],
        vec![Some(1), Some(2), None, Some(4), Some(5), Some(6)],
    )
}

fn op(f: &dyn OperatorFactory) -> Box<dyn Operator> {
    f.create(&context("agg", 0..MAX_PARALLELISM, MAX_PARALLELISM))
        .expect("operator")
}

fn fixture(bytes: &[u8]) -> OperatorState {
    let keyed = decode_entries(bytes)
        .expect("entries")
        .into_iter()
        .map(|e| {
            let kg = u32::from_le_bytes(e[..4].try_into().expect("key group"));
            (kg, StateBlob::Bytes(Arc::new(e[4..].to_vec())))
        })
        .collect();
    OperatorState {
        operator: None,
        keyed,
    }
}

/// A blob's version byte, schema (with its metadata) and batches.
fn decoded(blob: &StateBlob) -> (u8, Schema, Vec<RecordBatch>) {
    let bytes = blob.to_bytes().expect("bytes");
    let reader = StreamReader::try_new(Cursor::new(bytes[1..].to_vec()), None).expect("ipc");
    let schema = reader.schema().as_ref().clone();
    let batches = reader.map(|b| b.expect("batch")).collect();
    (bytes[0], schema, batches)
}

/// `f`'s operator, fed as the fixture's was, snapshots the blobs of
/// `fixture`: same key groups, versions, schemas, metadata and columns.
fn assert_writes(f: &dyn OperatorFactory, watermark: bool, fixture: &OperatorState) {
    let mut w = op(f);
    let mut out = Recorder::default();
    if watermark {
        w.process_watermark(0, &mut out).expect("watermark");
    }
    w.process_batch(0, written(), &mut out).expect("process");
    let state = w
        .state()
        .expect("stateful")
        .snapshot_state(1)
        .expect("snapshot");
    let kgs = |s: &OperatorState| s.keyed.iter().map(|(kg, _)| *kg).collect::<Vec<_>>();
    assert_eq!(kgs(&state), kgs(fixture));
    for ((_, ours), (_, theirs)) in state.keyed.iter().zip(&fixture.keyed) {
        assert_eq!(decoded(ours), decoded(theirs));
    }
}

fn windows(assigner: WindowAssigner, input: Option<&RecordBatch>) -> WindowAggsFactory {
    WindowAggsFactory {
        aggs: windowed(input),
        assigner,
    }
}

fn sessions(input: Option<&RecordBatch>) -> SessionAggsFactory {
    SessionAggsFactory {
        aggs: windowed(input),
        gap_ms: 10,
    }
}

/// The blobs `bytes` main's code wrote for [`written`] restore into the
/// operator of `factory(input)`, whether the graph knows the input schema
/// or not (then the one the state recorded binds it), and fire `want`; and
/// this code writes the same blobs.
fn assert_main_format<F: OperatorFactory>(
    factory: impl Fn(Option<&RecordBatch>) -> F,
    bytes: &[u8],
    want: &[&str],
) {
    let b = written();
    for input in [None, Some(&b)] {
        let got = fire_restored(&mut *op(&factory(input)), fixture(bytes));
        assert_eq!(got, want);
    }
    assert_writes(&factory(None), true, &fixture(bytes));
}

#[test]
fn test_tumbling_windows_main_wrote_restore_and_fire() {
    let tumbling = WindowAssigner::Tumbling { size_ms: 10 };
    assert_main_format(
        |input| windows(tumbling, input),
        TUMBLING,
        &[
            "a 0 10 2 1 1.0 [1] 1 1",
            "a 40 50 1 6 6.0 [6] 6 1",
            "b 0 10 1 2 2.0 [2] 2 1",
            "b 30 40 1 5 5.0 [5] 5 1",
            "c 20 30 1 4 4.0 [4] 4 1",
        ],
    );
}

#[test]
fn test_sliding_windows_main_wrote_restore_and_fire() {
    let sliding = WindowAssigner::Sliding {
        size_ms: 10,
        slide_ms: 5,
    };
    // Window [5, 15) of a holds only a null value.
    assert_main_format(
        |input| windows(sliding, input),
        SLIDING,
        &[
            "a -5 5 1 1 1.0 [1] 1 1",
            "a 0 10 2 1 1.0 [1] 1 1",
            "a 35 45 1 6 6.0 [6] 6 1",
            "a 40 50 1 6 6.0 [6] 6 1",
            "a 5 15 1   []  0",
            "b -5 5 1 2 2.0 [2] 2 1",
            "b 0 10 1 2 2.0 [2] 2 1",
            "b 25 35 1 5 5.0 [5] 5 1",
            "b 30 40 1 5 5.0 [5] 5 1",
            "c 20 30 1 4 4.0 [4] 4 1",
            "c 25 35 1 4 4.0 [4] 4 1",
        ],
    );
}

#[test]
fn test_sessions_main_wrote_restore_and_fire() {
    assert_main_format(
        sessions,
        SESSION,
        &[
            "a 1 18 2 1 1.0 [1] 1 1",
            "a 40 50 1 6 6.0 [6] 6 1",
            "b 2 12 1 2 2.0 [2] 2 1",
            "b 31 41 1 5 5.0 [5] 5 1",
            "c 25 35 1 4 4.0 [4] 4 1",
        ],
    );
}

#[test]
fn test_keyed_aggregates_main_wrote_restore_and_run_on() {
    let f = MultiAggFactory::new(vec!["k".to_string()], aggregates());
    let mut restored = op(&f);
    restored
        .state()
        .expect("stateful")
        .restore_state(fixture(KEYED))
        .expect("restore");
    let mut out = Recorder::default();
    let next = batch(
        vec!["a", "b", "c", "d"],
        vec![50, 51, 52, 53],
        vec![Some(10), Some(2), None, Some(7)],
    );
    restored.process_batch(0, next, &mut out).expect("process");
    let mut got = display_rows(&out.batches);
    got.sort();
    assert_eq!(
        got,
        [
            "a 4 17 5.666666666666667 [1, 6, 10] 1 3",
            "b 3 9 3.0 [2, 5, 2] 2 2",
            "c 2 4 4.0 [4] 4 1",
            "d 1 7 7.0 [7] 7 1",
        ]
    );
    assert_writes(&f, false, &fixture(KEYED));
}
