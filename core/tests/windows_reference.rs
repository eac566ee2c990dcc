//! Event-time windows and timestamp assignment against a plain-Rust
//! reference (Flink's bounded-out-of-orderness watermarks and event-time
//! window semantics): with random keyed records (some out of order within
//! the bound, some late), random batch splits and random watermark points,
//! tumbling and sliding windows of every native aggregate fire exactly the
//! reference rows in the reference order, late records are counted like the
//! reference, and snapshot -> serialize -> restore mid-stream (into one fresh
//! operator, or split across two key-group ranges) gives the same output.

#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, Float64Array, Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Float64Type, Int64Type, TimeUnit};
use eddyline_core::event::MAX_WATERMARK;
use eddyline_core::keygroup::{hash_keys, key_group};
use eddyline_core::operator::timestamps::{AssignTimestampsFactory, AssignTimestampsOperator};
use eddyline_core::operator::window::{WindowAgg, WindowAssigner, WindowFactory, WindowOperator};
use eddyline_core::operator::{CheckpointedState, Collector, Operator, OperatorContext};
use eddyline_core::state::keyed::AggKind;
use eddyline_core::state::{OperatorState, StateBlob};
use eddyline_core::Result;
use proptest::prelude::*;

const MAX_P: usize = 128;

#[derive(Default)]
struct Recorder {
    batches: Vec<RecordBatch>,
    watermarks: Vec<i64>,
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
}

fn ctx(key_groups: std::ops::Range<usize>) -> OperatorContext {
    OperatorContext {
        name: "win".to_string(),
        uid: "win".to_string(),
        subtask_index: 0,
        parallelism: 1,
        max_parallelism: MAX_P,
        key_groups,
        attempt: 0,
    }
}

type Key = (Option<String>, Option<i64>);

#[derive(Debug, Clone)]
struct Rec {
    key: Key,
    t: i64,
    value: Option<i64>,
}

/// One fired row: key, window start, window end, aggregate.
type OutRow = (Key, i64, i64, Option<f64>);

#[derive(Debug, Clone, Copy)]
struct Case {
    composite: bool,
    float: bool,
    agg: AggKind,
    assigner: WindowAssigner,
    bound: i64,
}

impl Case {
    fn factory(&self) -> WindowFactory {
        let keys = if self.composite {
            vec!["s".to_string(), "k".to_string()]
        } else {
            vec!["k".to_string()]
        };
        let column = (self.agg != AggKind::Count).then(|| "v".to_string());
        WindowFactory::new(
            keys,
            "t".to_string(),
            self.assigner,
            WindowAgg::Native(self.agg, column),
        )
    }

    fn n_keys(&self) -> usize {
        1 + usize::from(self.composite)
    }

    fn value(&self, v: i64) -> f64 {
        if self.float {
            v as f64 * 0.5
        } else {
            v as f64
        }
    }

    fn batch(&self, recs: &[Rec]) -> RecordBatch {
        let mut cols: Vec<(&str, ArrayRef)> = Vec::new();
        if self.composite {
            let s: StringArray = recs.iter().map(|r| r.key.0.clone()).collect();
            cols.push(("s", Arc::new(s)));
        }
        cols.push((
            "k",
            Arc::new(recs.iter().map(|r| r.key.1).collect::<Int64Array>()),
        ));
        cols.push((
            "t",
            Arc::new(recs.iter().map(|r| r.t).collect::<Int64Array>()),
        ));
        let v: ArrayRef = if self.float {
            Arc::new(
                recs.iter()
                    .map(|r| r.value.map(|v| self.value(v)))
                    .collect::<Float64Array>(),
            )
        } else {
            Arc::new(recs.iter().map(|r| r.value).collect::<Int64Array>())
        };
        cols.push(("v", v));
        RecordBatch::try_from_iter(cols).unwrap()
    }

    fn read(&self, out: &RecordBatch) -> Vec<OutRow> {
        let n = self.n_keys();
        let k = out.column(n - 1).as_primitive::<Int64Type>();
        let s = self.composite.then(|| out.column(0).as_string::<i32>());
        let starts = out.column(n).as_primitive::<Int64Type>();
        let ends = out.column(n + 1).as_primitive::<Int64Type>();
        let agg = out.column(n + 2);
        let values: Vec<Option<f64>> = if agg.data_type() == &DataType::Float64 {
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
                ((skey, ikey), starts.value(i), ends.value(i), values[i])
            })
            .collect()
    }

    fn key_group_of(&self, key: &Key) -> usize {
        let mut cols: Vec<ArrayRef> = Vec::new();
        if self.composite {
            cols.push(Arc::new(StringArray::from(vec![key.0.clone()])));
        }
        cols.push(Arc::new(Int64Array::from(vec![key.1])));
        let mut h = Vec::new();
        hash_keys(&cols, &mut h).unwrap();
        key_group(h[0], MAX_P)
    }
}

/// The reference: a map (key, window start) -> (first-seen seq, accumulator).
struct Reference {
    case: Case,
    watermark: i64,
    windows: HashMap<(Key, i64), (u64, Option<f64>)>,
    seq: u64,
    late: u64,
}

impl Reference {
    fn new(case: Case) -> Self {
        Reference {
            case,
            watermark: i64::MIN,
            windows: HashMap::new(),
            seq: 0,
            late: 0,
        }
    }

    fn add(&mut self, r: &Rec) {
        let (size, slide) = (self.case.assigner.size_ms(), self.case.assigner.slide_ms());
        let last = r.t - r.t.rem_euclid(slide);
        let starts: Vec<i64> = (0..)
            .map(|i| last - i * slide)
            .take_while(|s| *s > r.t - size)
            .filter(|s| s + size - 1 > self.watermark)
            .collect();
        if starts.is_empty() {
            self.late += 1;
            return;
        }
        for s in starts {
            let agg = self.case.agg;
            let seq = &mut self.seq;
            let entry = self.windows.entry((r.key.clone(), s)).or_insert_with(|| {
                *seq += 1;
                (*seq, (agg == AggKind::Count).then_some(0.0))
            });
            let v = match agg {
                AggKind::Count => Some(1.0),
                _ => r.value.map(|v| self.case.value(v)),
            };
            if let Some(v) = v {
                entry.1 = Some(match (entry.1, agg) {
                    (None, _) => v,
                    (Some(a), AggKind::Sum | AggKind::Count) => a + v,
                    (Some(a), AggKind::Min) => a.min(v),
                    (Some(a), _) => a.max(v),
                });
            }
        }
    }

    fn watermark(&mut self, w: i64) -> Vec<OutRow> {
        self.watermark = w;
        let size = self.case.assigner.size_ms();
        let mut fired: Vec<(i64, u64, Key, Option<f64>)> = self
            .windows
            .iter()
            .filter(|((_, s), _)| w == MAX_WATERMARK || s + size - 1 <= w)
            .map(|((k, s), (seq, acc))| (*s, *seq, k.clone(), *acc))
            .collect();
        fired.sort_by_key(|f| (f.0, f.1));
        self.windows
            .retain(|(_, s), _| !(w == MAX_WATERMARK || s + size - 1 <= w));
        fired
            .into_iter()
            .map(|(s, _, k, acc)| (k, s, s + size, acc))
            .collect()
    }
}

/// One step of the stream: a batch, optionally followed by the watermark
/// the bounded-out-of-orderness generator would emit.
#[derive(Debug, Clone)]
struct Step {
    recs: Vec<Rec>,
    watermark_after: bool,
}

fn watermark_for(max_t: i64, bound: i64) -> i64 {
    max_t - bound - 1
}

/// Feeds `step` to `op`; returns the fired rows.
fn feed(
    case: &Case,
    op: &mut WindowOperator,
    step: &Step,
    w: Option<i64>,
    filter: Option<&dyn Fn(&Key) -> bool>,
) -> Vec<OutRow> {
    let recs: Vec<Rec> = match filter {
        Some(f) => step.recs.iter().filter(|r| f(&r.key)).cloned().collect(),
        None => step.recs.clone(),
    };
    let mut out = Recorder::default();
    if !recs.is_empty() {
        op.process_batch(0, case.batch(&recs), &mut out).unwrap();
    }
    if let Some(w) = w {
        op.process_watermark(w, &mut out).unwrap();
        assert_eq!(out.watermarks, vec![w]);
    }
    assert!(out.batches.len() <= 1, "one batch per watermark");
    out.batches.iter().flat_map(|b| case.read(b)).collect()
}

fn serialize(state: OperatorState) -> OperatorState {
    OperatorState {
        operator: None,
        keyed: state
            .keyed
            .into_iter()
            .map(|(kg, b)| (kg, StateBlob::Bytes(b.to_bytes().unwrap())))
            .collect(),
    }
}

fn keyed_subset(state: &OperatorState, range: &std::ops::Range<usize>) -> OperatorState {
    OperatorState {
        operator: None,
        keyed: state
            .keyed
            .iter()
            .filter(|(kg, _)| range.contains(&(*kg as usize)))
            .cloned()
            .collect(),
    }
}

fn check(case: Case, steps: Vec<Step>, restore_at: usize, split: usize) {
    let mut reference = Reference::new(case);
    let mut op = WindowOperator::new(&case.factory(), &ctx(0..MAX_P)).unwrap();
    let mut max_t = i64::MIN;
    let mut last_w = i64::MIN;
    // (watermark or none) per step, the last step ends with MAX_WATERMARK.
    let mut marks = Vec::new();
    for (i, step) in steps.iter().enumerate() {
        for r in &step.recs {
            max_t = max_t.max(r.t);
        }
        let mut w = None;
        if step.watermark_after && max_t != i64::MIN {
            let cand = watermark_for(max_t, case.bound);
            if cand > last_w {
                last_w = cand;
                w = Some(cand);
            }
        }
        if i + 1 == steps.len() {
            w = Some(MAX_WATERMARK);
        }
        marks.push(w);
    }

    let mut expected: Vec<Vec<OutRow>> = Vec::new();
    for (step, w) in steps.iter().zip(&marks) {
        for r in &step.recs {
            reference.add(r);
        }
        expected.push(w.map(|w| reference.watermark(w)).unwrap_or_default());
    }

    let mut got: Vec<Vec<OutRow>> = Vec::new();
    let mut snapshot = None;
    let mut late_before = 0;
    for (i, (step, w)) in steps.iter().zip(&marks).enumerate() {
        if i == restore_at {
            snapshot = Some(serialize(op.snapshot_state(7).unwrap()));
            late_before = op.late_records();
        }
        got.push(feed(&case, &mut op, step, *w, None));
    }
    assert_eq!(got, expected);
    assert_eq!(op.late_records(), reference.late);
    assert_eq!(op.earliest_open_window_start(), None);

    // Restore into one fresh operator and continue.
    let Some(snapshot) = snapshot else { return };
    let mut fresh = WindowOperator::new(&case.factory(), &ctx(0..MAX_P)).unwrap();
    fresh.restore_state(snapshot.clone()).unwrap();
    for (i, (step, w)) in steps.iter().zip(&marks).enumerate().skip(restore_at) {
        assert_eq!(feed(&case, &mut fresh, step, *w, None), expected[i]);
    }
    assert_eq!(late_before + fresh.late_records(), reference.late);

    // Restore split across two key-group ranges (a rescale to parallelism 2).
    let ranges = [0..split, split..MAX_P];
    let mut halves: Vec<WindowOperator> = ranges
        .iter()
        .map(|r| {
            let mut o = WindowOperator::new(&case.factory(), &ctx(r.clone())).unwrap();
            o.restore_state(keyed_subset(&snapshot, r)).unwrap();
            o
        })
        .collect();
    let mut late_after = 0;
    for (i, (step, w)) in steps.iter().zip(&marks).enumerate().skip(restore_at) {
        for (o, r) in halves.iter_mut().zip(&ranges) {
            let owns = |k: &Key| r.contains(&case.key_group_of(k));
            let rows = feed(&case, o, step, *w, Some(&owns));
            let want: Vec<OutRow> = expected[i]
                .iter()
                .filter(|row| owns(&row.0))
                .cloned()
                .collect();
            assert_eq!(rows, want);
        }
    }
    for o in &halves {
        late_after += o.late_records();
    }
    assert_eq!(late_before + late_after, reference.late);
}

fn agg_strategy() -> impl Strategy<Value = AggKind> {
    prop_oneof![
        Just(AggKind::Sum),
        Just(AggKind::Count),
        Just(AggKind::Min),
        Just(AggKind::Max)
    ]
}

fn assigner_strategy() -> impl Strategy<Value = WindowAssigner> {
    prop_oneof![
        (1i64..40).prop_map(|size_ms| WindowAssigner::Tumbling { size_ms }),
        (1i64..12, 1i64..4).prop_map(|(slide, n)| WindowAssigner::Sliding {
            size_ms: slide * n,
            slide_ms: slide
        }),
        (2i64..30).prop_flat_map(|size| (1..=size).prop_map(move |slide| {
            WindowAssigner::Sliding {
                size_ms: size,
                slide_ms: slide,
            }
        })),
    ]
}

fn case_strategy() -> impl Strategy<Value = Case> {
    (
        any::<bool>(),
        any::<bool>(),
        agg_strategy(),
        assigner_strategy(),
        0i64..20,
    )
        .prop_map(|(composite, float, agg, assigner, bound)| Case {
            composite,
            float,
            agg,
            assigner,
            bound,
        })
}

/// Records whose time mostly advances, jitters within (and sometimes far
/// beyond) the bound, with some negative times.
fn steps_strategy(composite: bool) -> impl Strategy<Value = Vec<Step>> {
    let rec = (
        prop::option::weighted(0.9, 0i64..6),
        prop::option::of(prop_oneof![Just("a".to_string()), Just("bb".to_string())]),
        0i64..8,
        prop_oneof![8 => -10i64..3, 1 => -80i64..-10],
        prop::option::weighted(0.85, -20i64..20),
    );
    prop::collection::vec((prop::collection::vec(rec, 0..12), any::<bool>()), 1..14).prop_map(
        move |raw| {
            let mut clock = -30i64;
            raw.into_iter()
                .map(|(recs, watermark_after)| Step {
                    recs: recs
                        .into_iter()
                        .map(|(k, s, advance, jitter, value)| {
                            clock += advance;
                            Rec {
                                key: (if composite { s } else { None }, k),
                                t: clock + jitter,
                                value,
                            }
                        })
                        .collect(),
                    watermark_after,
                })
                .collect()
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn windows_match_the_reference(
        (case, steps) in case_strategy()
            .prop_flat_map(|c| (Just(c), steps_strategy(c.composite))),
        restore_pick in any::<prop::sample::Index>(),
        split in 1usize..MAX_P,
    ) {
        let restore_at = restore_pick.index(steps.len());
        check(case, steps, restore_at, split);
    }

    #[test]
    fn assign_timestamps_watermarks_match_the_reference(
        batches in prop::collection::vec(prop::collection::vec(-1000i64..1000, 0..8), 1..12),
        bound in 0i64..50,
        unit_pick in 0usize..4,
    ) {
        let (unit, per_ms) = [
            (TimeUnit::Second, 0),
            (TimeUnit::Millisecond, 1),
            (TimeUnit::Microsecond, 1_000),
            (TimeUnit::Nanosecond, 1_000_000),
        ][unit_pick];
        let f = AssignTimestampsFactory::new("t".into(), bound);
        let mut op = AssignTimestampsOperator::new(&f, &ctx(0..MAX_P)).unwrap();
        let mut out = Recorder::default();
        let mut expected = Vec::new();
        let (mut max_ms, mut last) = (i64::MIN, i64::MIN);
        for raw in &batches {
            // Seconds are whole seconds; other units are in ms scaled up.
            let (values, ms): (Vec<i64>, Vec<i64>) = raw
                .iter()
                .map(|v| if per_ms == 0 { (*v, v * 1000) } else { (v * per_ms, *v) })
                .unzip();
            let col: ArrayRef = match unit {
                TimeUnit::Second => Arc::new(arrow::array::TimestampSecondArray::from(values)),
                TimeUnit::Millisecond => Arc::new(arrow::array::TimestampMillisecondArray::from(values)),
                TimeUnit::Microsecond => Arc::new(arrow::array::TimestampMicrosecondArray::from(values)),
                TimeUnit::Nanosecond => Arc::new(arrow::array::TimestampNanosecondArray::from(values)),
            };
            let b = RecordBatch::try_from_iter(vec![("t", col)]).unwrap();
            op.process_batch(0, b, &mut out).unwrap();
            if let Some(m) = ms.iter().max() {
                max_ms = max_ms.max(*m);
                let w = max_ms - bound - 1;
                if w > last {
                    last = w;
                    expected.push(w);
                }
            }
            // Upstream watermarks other than the final one are ignored.
            op.process_watermark(max_ms.saturating_add(5000), &mut out).unwrap();
        }
        op.process_watermark(MAX_WATERMARK, &mut out).unwrap();
        expected.push(MAX_WATERMARK);
        prop_assert_eq!(out.watermarks, expected);
        let rows: usize = batches.iter().map(Vec::len).sum();
        prop_assert_eq!(out.batches.iter().map(|b| b.num_rows()).sum::<usize>(), rows);
    }
}

#[test]
fn test_sub_millisecond_timestamps_round_down() {
    let f = AssignTimestampsFactory::new("t".into(), 0);
    let mut op = AssignTimestampsOperator::new(&f, &ctx(0..MAX_P)).unwrap();
    let mut out = Recorder::default();
    let col: ArrayRef = Arc::new(arrow::array::TimestampNanosecondArray::from(vec![
        -1, 2_999_999,
    ]));
    op.process_batch(
        0,
        RecordBatch::try_from_iter(vec![("t", col)]).unwrap(),
        &mut out,
    )
    .unwrap();
    assert_eq!(out.watermarks, vec![1]);
}
