//! The keyed aggregate protocol against a plain-Rust reference (a `HashMap`
//! per key): every batch emits exactly its distinct keys in first-occurrence
//! order with the running aggregate, and snapshot -> serialize -> restore
//! (also split across two subtasks with other key-group ranges, i.e. a
//! rescale) continues to the same results; snapshots are copy-on-write.

#![allow(clippy::unwrap_used)]

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, Float64Array, Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{Float64Type, Int64Type};
use eddyline_core::keygroup::{hash_keys, key_group};
use eddyline_core::operator::keyed_agg::KeyedAggFactory;
use eddyline_core::operator::{Collector, Operator, OperatorContext, OperatorFactory};
use eddyline_core::state::keyed::AggKind;
use eddyline_core::state::{OperatorState, StateBlob};
use eddyline_core::Result;
use proptest::prelude::*;

/// Test collector: keeps every emitted batch.
struct VecCollector(Vec<RecordBatch>);

impl Collector for VecCollector {
    fn emit(&mut self, batch: RecordBatch) -> Result<()> {
        self.0.push(batch);
        Ok(())
    }
    fn emit_watermark(&mut self, _watermark: i64) -> Result<()> {
        Ok(())
    }
}

/// A key of either layout: a single Int64 key uses only `.1`.
type Key = (Option<String>, Option<i64>);

#[derive(Debug, Clone, Copy)]
struct Case {
    composite: bool,
    float: bool,
    agg: AggKind,
}

#[derive(Debug, Clone)]
struct Row {
    key: Key,
    value: Option<i64>,
}

impl Case {
    fn factory(&self) -> KeyedAggFactory {
        let keys = if self.composite {
            vec!["s".to_string(), "k".to_string()]
        } else {
            vec!["k".to_string()]
        };
        let column = (self.agg != AggKind::Count).then(|| "v".to_string());
        KeyedAggFactory::new(keys, self.agg, column)
    }

    fn n_keys(&self) -> usize {
        if self.composite {
            2
        } else {
            1
        }
    }

    /// The value as the operator sees it (floats are exact halves).
    fn value(&self, v: i64) -> f64 {
        if self.float {
            v as f64 * 0.5
        } else {
            v as f64
        }
    }

    fn batch(&self, rows: &[Row]) -> RecordBatch {
        let mut cols: Vec<(&str, ArrayRef)> = Vec::new();
        if self.composite {
            let s: StringArray = rows.iter().map(|r| r.key.0.clone()).collect();
            cols.push(("s", Arc::new(s)));
        }
        let k: Int64Array = rows.iter().map(|r| r.key.1).collect();
        cols.push(("k", Arc::new(k)));
        let v: ArrayRef = if self.float {
            Arc::new(
                rows.iter()
                    .map(|r| r.value.map(|v| self.value(v)))
                    .collect::<Float64Array>(),
            )
        } else {
            Arc::new(rows.iter().map(|r| r.value).collect::<Int64Array>())
        };
        cols.push(("v", v));
        RecordBatch::try_from_iter(cols).unwrap()
    }

    /// Reads an output batch as (key, aggregate) rows.
    fn read(&self, out: &RecordBatch) -> Vec<(Key, Option<f64>)> {
        let n = self.n_keys();
        let k = out.column(n - 1).as_primitive::<Int64Type>();
        let s = self.composite.then(|| out.column(0).as_string::<i32>());
        let agg = out.column(n);
        let values: Vec<Option<f64>> = if agg.data_type() == &arrow::datatypes::DataType::Float64 {
            agg.as_primitive::<Float64Type>().iter().collect()
        } else {
            agg.as_primitive::<Int64Type>()
                .iter()
                .map(|v| v.map(|v| v as f64))
                .collect()
        };
        (0..out.num_rows())
            .map(|i| {
                let skey = s.and_then(|s| s.is_valid(i).then(|| s.value(i).to_string()));
                let ikey = k.is_valid(i).then(|| k.value(i));
                ((skey, ikey), values[i])
            })
            .collect()
    }

    /// Applies a row to the reference.
    fn update(&self, reference: &mut HashMap<Key, Option<f64>>, row: &Row) {
        let acc = reference.entry(row.key.clone()).or_insert(None);
        if self.agg == AggKind::Count {
            *acc = Some(acc.unwrap_or(0.0) + 1.0);
            return;
        }
        let Some(v) = row.value.map(|v| self.value(v)) else {
            return;
        };
        *acc = Some(match (*acc, self.agg) {
            (None, _) => v,
            (Some(a), AggKind::Sum) => a + v,
            (Some(a), AggKind::Min) => a.min(v),
            (Some(a), _) => a.max(v),
        });
    }

    /// The key group of every row.
    fn key_groups(&self, batch: &RecordBatch, max_parallelism: usize) -> Vec<usize> {
        let cols: Vec<ArrayRef> = batch.columns()[..self.n_keys()].to_vec();
        let mut hashes = Vec::new();
        hash_keys(&cols, &mut hashes).unwrap();
        hashes
            .iter()
            .map(|h| key_group(*h, max_parallelism))
            .collect()
    }
}

fn ctx(key_groups: std::ops::Range<usize>, max_parallelism: usize) -> OperatorContext {
    OperatorContext {
        name: "agg".to_string(),
        uid: "agg".to_string(),
        subtask_index: 0,
        parallelism: 1,
        max_parallelism,
        key_groups,
        attempt: 0,
    }
}

fn create(case: &Case, key_groups: std::ops::Range<usize>, max_p: usize) -> Box<dyn Operator> {
    case.factory().create(&ctx(key_groups, max_p)).unwrap()
}

/// Feeds `rows` in batches cut at `cuts`, checking every emitted batch
/// against `reference` (updated as it goes). Returns the emitted rows.
fn feed_and_check(
    case: &Case,
    op: &mut dyn Operator,
    rows: &[Row],
    cuts: &[usize],
    reference: &mut HashMap<Key, Option<f64>>,
) -> Vec<Vec<(Key, Option<f64>)>> {
    let mut emitted = Vec::new();
    for chunk in split(rows, cuts) {
        if chunk.is_empty() {
            continue;
        }
        let mut out = VecCollector(Vec::new());
        op.process_batch(0, case.batch(chunk), &mut out).unwrap();
        assert_eq!(out.0.len(), 1, "one output batch per input batch");
        for row in chunk {
            case.update(reference, row);
        }
        let got = case.read(&out.0[0]);
        let mut seen = HashSet::new();
        let expected_keys: Vec<Key> = chunk
            .iter()
            .filter(|r| seen.insert(r.key.clone()))
            .map(|r| r.key.clone())
            .collect();
        let got_keys: Vec<Key> = got.iter().map(|(k, _)| k.clone()).collect();
        assert_eq!(
            got_keys, expected_keys,
            "distinct keys in first-occurrence order"
        );
        for (key, value) in &got {
            assert_eq!(value, &reference[key], "aggregate of key {key:?}");
        }
        emitted.push(got);
    }
    emitted
}

fn split<'a>(rows: &'a [Row], cuts: &[usize]) -> Vec<&'a [Row]> {
    let mut points: Vec<usize> = cuts.iter().map(|c| c % (rows.len() + 1)).collect();
    points.push(0);
    points.push(rows.len());
    points.sort_unstable();
    points.dedup();
    points.windows(2).map(|w| &rows[w[0]..w[1]]).collect()
}

fn serialize(state: &OperatorState) -> Vec<(u32, StateBlob)> {
    state
        .keyed
        .iter()
        .map(|(kg, blob)| (*kg, StateBlob::Bytes(blob.to_bytes().unwrap())))
        .collect()
}

fn case_strategy() -> impl Strategy<Value = Case> {
    (
        any::<bool>(),
        any::<bool>(),
        prop_oneof![
            Just(AggKind::Sum),
            Just(AggKind::Count),
            Just(AggKind::Min),
            Just(AggKind::Max)
        ],
    )
        .prop_map(|(composite, float, agg)| Case {
            composite,
            float,
            agg,
        })
}

fn rows_strategy(composite: bool) -> impl Strategy<Value = Vec<Row>> {
    let skey = prop_oneof![
        1 => Just(None),
        4 => prop::sample::select(vec!["a", "b", "", "long key ü"]).prop_map(|s| Some(s.to_string())),
    ];
    let ikey = prop_oneof![1 => Just(None), 5 => (-4i64..12).prop_map(Some)];
    let value = prop_oneof![1 => Just(None), 4 => (-1000i64..1000).prop_map(Some)];
    prop::collection::vec((skey, ikey, value), 0..300).prop_map(move |rows| {
        rows.into_iter()
            .map(|(s, k, value)| Row {
                key: (if composite { s } else { None }, k),
                value,
            })
            .collect()
    })
}

fn case_and_rows() -> impl Strategy<Value = (Case, Vec<Row>)> {
    case_strategy().prop_flat_map(|case| (Just(case), rows_strategy(case.composite)))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn keyed_agg_matches_reference(
        (case, rows) in case_and_rows(),
        cuts in prop::collection::vec(any::<usize>(), 0..8),
        max_p in 1usize..=16,
    ) {
        let mut op = create(&case, 0..max_p, max_p);
        let mut reference = HashMap::new();
        let emitted = feed_and_check(&case, op.as_mut(), &rows, &cuts, &mut reference);
        // The last value emitted per key is the reference's final value.
        let mut last = HashMap::new();
        for (key, value) in emitted.into_iter().flatten() {
            last.insert(key, value);
        }
        prop_assert_eq!(last, reference);
    }

    #[test]
    fn keyed_agg_snapshot_restore_and_rescale_continue(
        (case, rows) in case_and_rows(),
        cuts in prop::collection::vec(any::<usize>(), 0..6),
        at in any::<usize>(),
        max_p in 1usize..=16,
        split_at in any::<usize>(),
    ) {
        let at = at % (rows.len() + 1);
        let (before, after) = rows.split_at(at);
        let mut op = create(&case, 0..max_p, max_p);
        let mut reference = HashMap::new();
        feed_and_check(&case, op.as_mut(), before, &cuts, &mut reference);
        let snapshot = op.state().unwrap().snapshot_state(1).unwrap();
        let reference_at_snapshot = reference.clone();

        // Keep mutating the original; serializing the snapshot afterwards
        // must still see the state as of the snapshot (copy-on-write).
        let continued = feed_and_check(&case, op.as_mut(), after, &cuts, &mut reference);
        let blobs = serialize(&snapshot);
        let again = serialize(&op.state().unwrap().snapshot_state(2).unwrap());
        prop_assert!(blobs.len() <= again.len());

        // Restore into a fresh operator of the same range.
        let mut fresh = create(&case, 0..max_p, max_p);
        fresh.state().unwrap().restore_state(OperatorState { operator: None, keyed: blobs.clone() }).unwrap();
        let mut ref_fresh = reference_at_snapshot.clone();
        let replayed = feed_and_check(&case, fresh.as_mut(), after, &cuts, &mut ref_fresh);
        prop_assert_eq!(&replayed, &continued);
        prop_assert_eq!(&ref_fresh, &reference);

        // Rescale: two subtasks with key groups [0, m) and [m, max_p).
        let m = split_at % (max_p + 1);
        let mut lower = create(&case, 0..m, max_p);
        let mut upper = create(&case, m..max_p, max_p);
        let (low_blobs, high_blobs): (Vec<_>, Vec<_>) =
            blobs.into_iter().partition(|(kg, _)| (*kg as usize) < m);
        lower.state().unwrap().restore_state(OperatorState { operator: None, keyed: low_blobs }).unwrap();
        upper.state().unwrap().restore_state(OperatorState { operator: None, keyed: high_blobs }).unwrap();
        let mut ref_low = reference_at_snapshot.clone();
        let mut ref_high = reference_at_snapshot;
        let mut low_rows = Vec::new();
        let mut high_rows = Vec::new();
        if !after.is_empty() {
            let groups = case.key_groups(&case.batch(after), max_p);
            for (row, kg) in after.iter().zip(groups) {
                if kg < m { low_rows.push(row.clone()) } else { high_rows.push(row.clone()) }
            }
        }
        feed_and_check(&case, lower.as_mut(), &low_rows, &cuts, &mut ref_low);
        feed_and_check(&case, upper.as_mut(), &high_rows, &cuts, &mut ref_high);
        // Each key's final value is held by the subtask owning its key group.
        let keys: Vec<Row> = reference.keys().map(|k| Row { key: k.clone(), value: None }).collect();
        if !keys.is_empty() {
            let groups = case.key_groups(&case.batch(&keys), max_p);
            for (row, kg) in keys.iter().zip(groups) {
                let owner = if kg < m { &ref_low } else { &ref_high };
                prop_assert_eq!(owner.get(&row.key), reference.get(&row.key), "key {:?}", &row.key);
            }
        }
    }
}

#[test]
fn test_restore_of_unowned_key_group_names_it() {
    let case = Case {
        composite: true,
        float: false,
        agg: AggKind::Sum,
    };
    let rows: Vec<Row> = (0..50)
        .map(|i| Row {
            key: (Some(format!("k{i}")), Some(i)),
            value: Some(i),
        })
        .collect();
    let mut op = create(&case, 0..8, 8);
    feed_and_check(&case, op.as_mut(), &rows, &[], &mut HashMap::new());
    let blobs = serialize(&op.state().unwrap().snapshot_state(1).unwrap());
    let (kg, _) = blobs[0];
    let start = (kg as usize + 1) % 8;
    let mut other = create(&case, start..start + 1, 8);
    let err = other
        .state()
        .unwrap()
        .restore_state(OperatorState {
            operator: None,
            keyed: blobs,
        })
        .unwrap_err();
    assert!(matches!(err, eddyline_core::Error::Checkpoint { .. }));
    assert!(err.to_string().contains("key group"), "{err}");
}
