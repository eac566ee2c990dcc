#![allow(clippy::unwrap_used)]

use super::*;
use arrow::array::{AsArray, Int64Array, StringArray};
use arrow::datatypes::{DataType, Field, Int64Type, Schema, SchemaRef};
use proptest::prelude::*;

use crate::operator::testing::{field_names, split_keyed, Recorder};

/// (key, left id, left ts, right id, right ts) of every output row; ids are
/// None where a side is absent.
type Out = (
    Option<i64>,
    Option<i64>,
    Option<i64>,
    Option<i64>,
    Option<i64>,
);

/// Every output row of `rec`, sorted.
fn rows_of(rec: &Recorder) -> Vec<Out> {
    {
        let mut out = Vec::new();
        for b in &rec.batches {
            let col = |name: &str| -> Vec<Option<i64>> {
                b.column_by_name(name)
                    .unwrap()
                    .as_primitive::<Int64Type>()
                    .iter()
                    .collect()
            };
            let (k, li, lt, ri, rt) = (col("k"), col("id"), col("t"), col("rid"), col("t_right"));
            for i in 0..b.num_rows() {
                out.push((k[i], li[i], lt[i], ri[i], rt[i]));
            }
        }
        out.sort();
        out
    }
}

fn left_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, true),
        Field::new("t", DataType::Int64, false),
        Field::new("id", DataType::Int64, false),
    ]))
}

fn right_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("rk", DataType::Int64, true),
        Field::new("t", DataType::Int64, false),
        Field::new("rid", DataType::Int64, false),
    ]))
}

fn spec(how: JoinType, bounds: JoinBounds) -> JoinSpec {
    JoinSpec {
        left_keys: vec!["k".into()],
        right_keys: vec!["rk".into()],
        time_columns: [Some("t".into()), Some("t".into())],
        how,
        bounds,
    }
}

fn factory(how: JoinType, bounds: JoinBounds) -> JoinFactory {
    JoinFactory::new("join", spec(how, bounds), &left_schema(), &right_schema()).unwrap()
}

fn ctx(key_groups: std::ops::Range<usize>) -> OperatorContext {
    crate::operator::testing::context("join", key_groups, 16)
}

fn batch(side: usize, k: Vec<Option<i64>>, t: Vec<i64>, id: Vec<i64>) -> RecordBatch {
    let schema = if side == 0 {
        left_schema()
    } else {
        right_schema()
    };
    RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int64Array::from(k)),
            Arc::new(Int64Array::from(t)),
            Arc::new(Int64Array::from(id)),
        ],
    )
    .unwrap()
}

const INTERVAL: JoinBounds = JoinBounds::Interval {
    lower_ms: -5,
    upper_ms: 10,
};

#[test]
fn test_output_schema_keys_once_left_then_right_with_suffix() {
    let f = factory(JoinType::Left, INTERVAL);
    let s = f.output_schema();
    let names: Vec<_> = s.fields().iter().map(|f| f.name().as_str()).collect();
    assert_eq!(names, ["k", "t", "id", "t_right", "rid"]);
    assert!(!s.field(1).is_nullable(), "the left side is always present");
    assert!(
        s.field(4).is_nullable(),
        "a left join may leave the right out"
    );
}

#[test]
fn test_build_errors_name_the_cause() {
    let err = |how, bounds, l: SchemaRef| {
        JoinFactory::new("j", spec(how, bounds), &l, &right_schema())
            .unwrap_err()
            .to_string()
    };
    let strings = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Utf8, true),
        Field::new("t", DataType::Int64, false),
    ]));
    let e = err(JoinType::Inner, INTERVAL, strings);
    assert!(
        e.contains("key types must match") && e.contains("Utf8"),
        "{e}"
    );
    let e = err(
        JoinType::Left,
        JoinBounds::Unbounded { ttl_ms: None },
        left_schema(),
    );
    assert!(e.contains("needs within="), "{e}");
    let bad = JoinBounds::Interval {
        lower_ms: 5,
        upper_ms: -5,
    };
    let e = err(JoinType::Inner, bad, left_schema());
    assert!(e.contains("lower <= upper"), "{e}");
    let mut no_time = spec(JoinType::Inner, INTERVAL);
    no_time.time_columns = [None, Some("t".into())];
    let e = JoinFactory::new("j", no_time, &left_schema(), &right_schema())
        .unwrap_err()
        .to_string();
    assert!(e.contains("assign_timestamps"), "{e}");
    let mut no_time = spec(JoinType::Inner, JoinBounds::Unbounded { ttl_ms: None });
    no_time.time_columns = [None, None];
    assert!(JoinFactory::new("j", no_time, &left_schema(), &right_schema()).is_ok());
}

#[test]
fn test_interval_bounds_are_inclusive_and_each_pair_is_emitted_once() {
    let f = factory(JoinType::Inner, INTERVAL);
    let mut op = JoinOperator::new(&f, &ctx(0..16)).unwrap();
    let mut out = Recorder::default();
    op.process_batch(0, batch(0, vec![Some(1)], vec![100], vec![1]), &mut out)
        .unwrap();
    // 95 and 110 are the bounds; 94 and 111 are outside.
    let right = batch(
        1,
        vec![Some(1); 4],
        vec![94, 95, 110, 111],
        vec![10, 11, 12, 13],
    );
    op.process_batch(1, right, &mut out).unwrap();
    op.process_batch(0, batch(0, vec![Some(2)], vec![100], vec![2]), &mut out)
        .unwrap();
    assert_eq!(
        rows_of(&out),
        vec![
            (Some(1), Some(1), Some(100), Some(11), Some(95)),
            (Some(1), Some(1), Some(100), Some(12), Some(110)),
        ]
    );
    assert_eq!(out.batches.len(), 1, "one output batch per input batch");
}

#[test]
fn test_outer_join_emits_unmatched_rows_once_when_the_watermark_passes() {
    let f = factory(JoinType::Outer, INTERVAL);
    let mut op = JoinOperator::new(&f, &ctx(0..16)).unwrap();
    let mut out = Recorder::default();
    op.process_batch(
        0,
        batch(0, vec![Some(1), Some(2)], vec![100, 100], vec![1, 2]),
        &mut out,
    )
    .unwrap();
    op.process_batch(
        1,
        batch(1, vec![Some(1), Some(3)], vec![104, 100], vec![10, 30]),
        &mut out,
    )
    .unwrap();
    assert_eq!(rows_of(&out).len(), 1);
    // Right rows expire at ts + 5, left rows at ts + 10.
    op.process_watermark(105, &mut out).unwrap();
    assert_eq!(rows_of(&out).len(), 2, "right 30 expired unmatched");
    assert!(rows_of(&out).contains(&(Some(3), None, None, Some(30), Some(100))));
    op.process_watermark(110, &mut out).unwrap();
    assert!(rows_of(&out).contains(&(Some(2), Some(2), Some(100), None, None)));
    assert_eq!(rows_of(&out).len(), 3, "matched rows are not emitted again");
    op.process_watermark(MAX_WATERMARK, &mut out).unwrap();
    assert_eq!(rows_of(&out).len(), 3);
    assert_eq!(op.kept_rows(0) + op.kept_rows(1), 0);
    assert_eq!(out.watermarks, vec![105, 110, MAX_WATERMARK]);
}

#[test]
fn test_late_rows_are_dropped_and_counted_null_keys_never_match() {
    let f = factory(JoinType::Left, INTERVAL);
    let mut op = JoinOperator::new(&f, &ctx(0..16)).unwrap();
    let mut out = Recorder::default();
    op.process_watermark(100, &mut out).unwrap();
    op.process_batch(
        1,
        batch(1, vec![Some(1), None], vec![101, 101], vec![10, 11]),
        &mut out,
    )
    .unwrap();
    op.process_batch(
        0,
        batch(
            0,
            vec![Some(1), None, Some(1)],
            vec![100, 101, 101],
            vec![1, 2, 3],
        ),
        &mut out,
    )
    .unwrap();
    assert_eq!(op.late_records(), 1, "left row 1 at the watermark is late");
    // The null-keyed left row is emitted at once; left 3 matches right 10.
    assert_eq!(
        rows_of(&out),
        vec![
            (None, Some(2), Some(101), None, None),
            (Some(1), Some(3), Some(101), Some(10), Some(101)),
        ]
    );
}

#[test]
fn test_unbounded_join_matches_every_pair_and_ttl_expires_rows() {
    let f = factory(JoinType::Inner, JoinBounds::Unbounded { ttl_ms: None });
    let mut op = JoinOperator::new(&f, &ctx(0..16)).unwrap();
    let mut out = Recorder::default();
    op.process_batch(
        0,
        batch(0, vec![Some(1), Some(1)], vec![0, 1_000_000], vec![1, 2]),
        &mut out,
    )
    .unwrap();
    op.process_watermark(5_000_000, &mut out).unwrap();
    op.process_batch(1, batch(1, vec![Some(1)], vec![-7], vec![10]), &mut out)
        .unwrap();
    assert_eq!(
        rows_of(&out).len(),
        2,
        "no time bound: every pair, no lateness"
    );

    let f = factory(JoinType::Inner, JoinBounds::Unbounded { ttl_ms: Some(100) });
    let mut op = JoinOperator::new(&f, &ctx(0..16)).unwrap();
    let mut out = Recorder::default();
    op.process_batch(
        0,
        batch(0, vec![Some(1), Some(1)], vec![0, 50], vec![1, 2]),
        &mut out,
    )
    .unwrap();
    op.process_watermark(100, &mut out).unwrap();
    assert_eq!(op.kept_rows(0), 1, "row at 0 expired at 0 + 100");
    op.process_batch(1, batch(1, vec![Some(1)], vec![101], vec![10]), &mut out)
        .unwrap();
    assert_eq!(
        rows_of(&out),
        vec![(Some(1), Some(2), Some(50), Some(10), Some(101))]
    );
}

#[test]
fn test_string_keys_and_compaction_keep_the_rows() {
    let l = Arc::new(Schema::new(vec![
        Field::new("name", DataType::Utf8, false),
        Field::new("v", DataType::Int64, false),
    ]));
    let r = Arc::new(Schema::new(vec![
        Field::new("name", DataType::Utf8, false),
        Field::new("v", DataType::Int64, false),
    ]));
    let s = JoinSpec {
        left_keys: vec!["name".into()],
        right_keys: vec!["name".into()],
        time_columns: [None, None],
        how: JoinType::Inner,
        bounds: JoinBounds::Unbounded { ttl_ms: None },
    };
    let f = JoinFactory::new("j", s, &l, &r).unwrap();
    let mut op = JoinOperator::new(&f, &ctx(0..16)).unwrap();
    let mut out = Recorder::default();
    let mk = |schema: &SchemaRef, name: &str, v: i64| {
        RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(StringArray::from(vec![name])),
                Arc::new(Int64Array::from(vec![v])),
            ],
        )
        .unwrap()
    };
    for i in 0..200 {
        op.process_batch(0, mk(&l, "a", i), &mut out).unwrap();
    }
    assert!(op
        .groups
        .iter()
        .all(|g| g.sides[0].batches.len() < COMPACT_TEST_BOUND));
    op.process_batch(1, mk(&r, "a", -1), &mut out).unwrap();
    let b = &out.batches[0];
    assert_eq!(b.num_rows(), 200);
    assert_eq!(field_names(&b.schema()), ["name", "v", "v_right"]);
    let mut vs: Vec<i64> = b.column(1).as_primitive::<Int64Type>().values().to_vec();
    vs.sort_unstable();
    assert_eq!(vs, (0..200).collect::<Vec<_>>());
}

const COMPACT_TEST_BOUND: usize = 65;

/// Runs `events` through an operator (restoring from a snapshot taken after
/// event `cut` into two subtasks' operators when given) and returns every
/// output row.
fn run(f: &JoinFactory, events: &[Event], cut: Option<usize>) -> Vec<Out> {
    let mut out = Recorder::default();
    let mut ops = vec![JoinOperator::new(f, &ctx(0..16)).unwrap()];
    for (i, e) in events.iter().enumerate() {
        for op in &mut ops {
            apply(op, e, &mut out);
        }
        if cut == Some(i) {
            let state = ops[0].snapshot_state(1).unwrap();
            // Restore into two subtasks owning half the key groups each.
            let ranges = [0..8, 8..16];
            ops = split_keyed(&state, &ranges)
                .into_iter()
                .zip(ranges)
                .map(|(part, range)| {
                    let mut op = JoinOperator::new(f, &ctx(range)).unwrap();
                    op.restore_state(part).unwrap();
                    op
                })
                .collect();
        }
    }
    rows_of(&out)
}

#[derive(Debug, Clone)]
enum Event {
    Rows(usize, Vec<(i64, i64)>),
    Watermark(i64),
}

/// Feeds one event; a two-subtask run routes each row to its subtask.
fn apply(op: &mut JoinOperator, e: &Event, out: &mut Recorder) {
    match e {
        Event::Rows(side, rows) => {
            let mut hashes = Vec::new();
            let keys: ArrayRef = Arc::new(Int64Array::from(
                rows.iter().map(|r| Some(r.0)).collect::<Vec<_>>(),
            ));
            hash_keys(&[keys], &mut hashes).unwrap();
            let mine: Vec<usize> = (0..rows.len())
                .filter(|&i| {
                    op.own
                        .key_groups
                        .contains(&crate::keygroup::key_group(hashes[i], 16))
                })
                .collect();
            if mine.is_empty() {
                return;
            }
            let ids = mine.iter().map(|&i| id_of(*side, rows, i)).collect();
            let b = batch(
                *side,
                mine.iter().map(|&i| Some(rows[i].0)).collect(),
                mine.iter().map(|&i| rows[i].1).collect(),
                ids,
            );
            op.process_batch(*side, b, out).unwrap();
        }
        Event::Watermark(w) => op.process_watermark(*w, out).unwrap(),
    }
}

/// A row's id: its side, position in the event and timestamp, unique enough.
fn id_of(side: usize, rows: &[(i64, i64)], i: usize) -> i64 {
    (side as i64) * 1_000_000_000 + rows[i].1 * 1000 + i as i64
}

/// The reference: rows not late on arrival pair when within the interval;
/// an outer side's rows without a partner appear once with nulls.
fn reference(how: JoinType, lower: i64, upper: i64, events: &[Event]) -> Vec<Out> {
    let mut w = i64::MIN;
    let mut kept: [Vec<(i64, i64, i64)>; 2] = [Vec::new(), Vec::new()];
    for e in events {
        match e {
            Event::Watermark(x) => w = w.max(*x),
            Event::Rows(side, rows) => {
                for (i, r) in rows.iter().enumerate() {
                    if r.1 > w {
                        kept[*side].push((r.0, r.1, id_of(*side, rows, i)));
                    }
                }
            }
        }
    }
    let mut out = Vec::new();
    let mut matched = [vec![false; kept[0].len()], vec![false; kept[1].len()]];
    for (i, l) in kept[0].iter().enumerate() {
        for (j, r) in kept[1].iter().enumerate() {
            if l.0 == r.0 && l.1 + lower <= r.1 && r.1 <= l.1 + upper {
                out.push((Some(l.0), Some(l.2), Some(l.1), Some(r.2), Some(r.1)));
                matched[0][i] = true;
                matched[1][j] = true;
            }
        }
    }
    for side in 0..2 {
        if how.keeps(side) {
            for (i, r) in kept[side].iter().enumerate() {
                if !matched[side][i] {
                    out.push(if side == 0 {
                        (Some(r.0), Some(r.2), Some(r.1), None, None)
                    } else {
                        (Some(r.0), None, None, Some(r.2), Some(r.1))
                    });
                }
            }
        }
    }
    out.sort();
    out
}

fn events() -> impl Strategy<Value = Vec<Event>> {
    let rows = (0usize..2, prop::collection::vec((0i64..4, 0i64..60), 1..6))
        .prop_map(|(side, rows)| Event::Rows(side, rows));
    let wm = (0i64..60).prop_map(Event::Watermark);
    prop::collection::vec(prop_oneof![3 => rows, 1 => wm], 1..30).prop_map(|mut v| {
        // Watermarks only advance in a real run; the end of input fires all.
        let mut hi = i64::MIN;
        for e in &mut v {
            if let Event::Watermark(w) = e {
                hi = hi.max(*w);
                *w = hi;
            }
        }
        v.push(Event::Watermark(MAX_WATERMARK));
        v
    })
}

fn how_strategy() -> impl Strategy<Value = JoinType> {
    prop_oneof![
        Just(JoinType::Inner),
        Just(JoinType::Left),
        Just(JoinType::Right),
        Just(JoinType::Outer)
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn prop_interval_join_equals_the_reference_across_a_restore(
        events in events(),
        how in how_strategy(),
        lower in -8i64..4,
        width in 0i64..10,
        cut in prop::option::of(0usize..30),
    ) {
        let upper = lower + width;
        let f = factory(how, JoinBounds::Interval { lower_ms: lower, upper_ms: upper });
        let cut = cut.filter(|c| *c + 1 < events.len());
        let got = run(&f, &events, cut);
        prop_assert_eq!(got, reference(how, lower, upper, &events));
    }
}

/// The temporal join's reference: versions in arrival order (a later one
/// at the same time replaces an earlier one); left rows not late on arrival
/// wait for the first watermark at or past their time and take the newest
/// version arrived by then at or before it.
fn temporal_reference(how: JoinType, events: &[Event]) -> Vec<Out> {
    let mut w = i64::MIN;
    let mut versions: Vec<(i64, i64, i64)> = Vec::new();
    let mut waiting: Vec<(i64, i64, i64)> = Vec::new();
    let mut out = Vec::new();
    for e in events {
        match e {
            Event::Rows(0, rows) => {
                for (i, r) in rows.iter().enumerate() {
                    if r.1 > w {
                        waiting.push((r.0, r.1, id_of(0, rows, i)));
                    }
                }
            }
            Event::Rows(_, rows) => {
                for (i, r) in rows.iter().enumerate() {
                    versions.retain(|v| !(v.0 == r.0 && v.1 == r.1));
                    versions.push((r.0, r.1, id_of(1, rows, i)));
                }
            }
            Event::Watermark(x) => {
                w = w.max(*x);
                waiting.retain(|l| {
                    if l.1 > w {
                        return true;
                    }
                    let best = versions
                        .iter()
                        .filter(|v| v.0 == l.0 && v.1 <= l.1)
                        .max_by_key(|v| v.1);
                    match best {
                        Some(v) => {
                            out.push((Some(l.0), Some(l.2), Some(l.1), Some(v.2), Some(v.1)))
                        }
                        None if how == JoinType::Left => {
                            out.push((Some(l.0), Some(l.2), Some(l.1), None, None))
                        }
                        None => {}
                    }
                    false
                });
            }
        }
    }
    out.sort();
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn prop_temporal_join_equals_the_reference_across_a_restore(
        events in events(),
        left_join in any::<bool>(),
        cut in prop::option::of(0usize..30),
    ) {
        let how = if left_join { JoinType::Left } else { JoinType::Inner };
        let f = factory(how, JoinBounds::Temporal);
        let cut = cut.filter(|c| *c + 1 < events.len());
        prop_assert_eq!(run(&f, &events, cut), temporal_reference(how, &events));
    }
}

#[test]
fn test_temporal_join_takes_the_newest_version_at_or_before_the_row() {
    let f = factory(JoinType::Left, JoinBounds::Temporal);
    let mut op = JoinOperator::new(&f, &ctx(0..16)).unwrap();
    let mut out = Recorder::default();
    op.process_batch(
        1,
        batch(
            1,
            vec![Some(1), Some(1), Some(1)],
            vec![10, 20, 30],
            vec![100, 200, 300],
        ),
        &mut out,
    )
    .unwrap();
    op.process_batch(
        0,
        batch(
            0,
            vec![Some(1), Some(1), Some(2)],
            vec![25, 9, 25],
            vec![1, 2, 3],
        ),
        &mut out,
    )
    .unwrap();
    assert!(
        out.batches.is_empty(),
        "nothing before the watermark reaches the rows"
    );
    // An upsert of the version at 20.
    op.process_batch(1, batch(1, vec![Some(1)], vec![20], vec![201]), &mut out)
        .unwrap();
    op.process_watermark(25, &mut out).unwrap();
    assert_eq!(
        rows_of(&out),
        vec![
            (Some(1), Some(1), Some(25), Some(201), Some(20)),
            (Some(1), Some(2), Some(9), None, None),
            (Some(2), Some(3), Some(25), None, None),
        ]
    );
    assert_eq!(
        op.kept_rows(1),
        2,
        "versions 20 (newest <= 25) and 30 are kept"
    );
    let e = JoinFactory::new(
        "j",
        spec(JoinType::Outer, JoinBounds::Temporal),
        &left_schema(),
        &right_schema(),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("'inner' or 'left'"), "{e}");
}

#[test]
fn test_window_join_pairs_rows_of_a_window_when_it_fires() {
    let f = factory(
        JoinType::Inner,
        JoinBounds::Window {
            size_ms: 10,
            slide_ms: 10,
        },
    );
    assert_eq!(
        field_names(&f.output_schema()),
        [
            "k",
            "window_start",
            "window_end",
            "t",
            "id",
            "t_right",
            "rid"
        ]
    );
    let mut op = JoinOperator::new(&f, &ctx(0..16)).unwrap();
    let mut out = Recorder::default();
    op.process_batch(
        0,
        batch(
            0,
            vec![Some(1), Some(1), Some(2)],
            vec![1, 12, 3],
            vec![1, 2, 3],
        ),
        &mut out,
    )
    .unwrap();
    op.process_batch(
        1,
        batch(
            1,
            vec![Some(1), Some(1), Some(2)],
            vec![9, 10, 25],
            vec![10, 11, 12],
        ),
        &mut out,
    )
    .unwrap();
    assert!(out.batches.is_empty(), "nothing before a window fires");
    op.process_watermark(9, &mut out).unwrap();
    assert_eq!(
        rows_of(&out),
        vec![(Some(1), Some(1), Some(1), Some(10), Some(9))]
    );
    let b = &out.batches[0];
    let bounds = |c: usize| b.column(c).as_primitive::<Int64Type>().value(0);
    assert_eq!((bounds(1), bounds(2)), (0, 10));
    // Row 3 at 0..10 and key 2's right row at 25 never meet; a row of a
    // closed window is late.
    op.process_batch(1, batch(1, vec![Some(1)], vec![5], vec![13]), &mut out)
        .unwrap();
    assert_eq!(op.late_records(), 1);
    op.process_watermark(MAX_WATERMARK, &mut out).unwrap();
    assert_eq!(
        rows_of(&out),
        vec![
            (Some(1), Some(1), Some(1), Some(10), Some(9)),
            (Some(1), Some(2), Some(12), Some(11), Some(10)),
        ]
    );
    assert_eq!(op.kept_rows(0) + op.kept_rows(1), 0);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(100))]

    #[test]
    fn prop_window_join_equals_pairs_in_one_window_across_a_restore(
        events in events(),
        slide in 1i64..20,
        slides in 1i64..4,
        cut in prop::option::of(0usize..30),
    ) {
        let size = slide * slides;
        let f = factory(JoinType::Inner, JoinBounds::Window { size_ms: size, slide_ms: slide });
        let cut = cut.filter(|c| *c + 1 < events.len());
        // Rows not late on arrival (their last window not over) pair within each
        // window they share that was not over when either arrived.
        let mut w = i64::MIN;
        let mut kept: [Vec<(i64, i64, i64, i64)>; 2] = [Vec::new(), Vec::new()];
        for e in &events {
            match e {
                Event::Watermark(x) => w = w.max(*x),
                Event::Rows(side, rows) => {
                    for (i, r) in rows.iter().enumerate() {
                        if r.1 - r.1.rem_euclid(slide) + size - 1 > w {
                            kept[*side].push((r.0, r.1, id_of(*side, rows, i), w));
                        }
                    }
                }
            }
        }
        let mut want = Vec::new();
        for l in &kept[0] {
            for r in &kept[1] {
                let mut s = l.1 - l.1.rem_euclid(slide);
                while s > l.1 - size {
                    let open = s + size - 1 > l.3.max(r.3);
                    if l.0 == r.0 && s <= r.1 && r.1 < s + size && open {
                        want.push((Some(l.0), Some(l.2), Some(l.1), Some(r.2), Some(r.1)));
                    }
                    s -= slide;
                }
            }
        }
        want.sort();
        prop_assert_eq!(run(&f, &events, cut), want);
    }
}

/// `events` with every watermark lowered below the rows still to come (so no row
/// is late), the last one kept at the end of time.
fn never_late(events: &[Event]) -> Vec<Event> {
    let mut out = events.to_vec();
    let mut future = i64::MAX;
    for e in out.iter_mut().rev() {
        match e {
            Event::Rows(_, rows) => {
                future = future.min(rows.iter().map(|r| r.1).min().unwrap_or(i64::MAX));
            }
            Event::Watermark(w) if *w != MAX_WATERMARK => *w = (*w).min(future - 1),
            Event::Watermark(_) => {}
        }
    }
    // Watermarks never go back.
    let mut hi = i64::MIN;
    for e in &mut out {
        if let Event::Watermark(w) = e {
            hi = hi.max(*w);
            *w = hi;
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(150))]

    #[test]
    fn prop_session_window_join_pairs_rows_of_one_session_across_a_restore(
        events in events(),
        gap in 1i64..15,
        cut in prop::option::of(0usize..30),
    ) {
        let events = never_late(&events);
        let f = factory(JoinType::Inner, JoinBounds::SessionWindow { gap_ms: gap });
        let cut = cut.filter(|c| *c + 1 < events.len());
        // Per key, every row of both sides sorted by time, split where the next
        // row is gap or more later: each session pairs its left and right rows.
        let mut by_key: std::collections::BTreeMap<i64, Vec<(i64, usize, i64)>> =
            Default::default();
        for e in &events {
            if let Event::Rows(side, rows) = e {
                for (i, r) in rows.iter().enumerate() {
                    by_key.entry(r.0).or_default().push((r.1, *side, id_of(*side, rows, i)));
                }
            }
        }
        let mut want = Vec::new();
        for (k, mut rows) in by_key {
            rows.sort_unstable();
            let mut start = 0;
            while start < rows.len() {
                let mut end = start + 1;
                while end < rows.len() && rows[end].0 - rows[end - 1].0 < gap {
                    end += 1;
                }
                let session = &rows[start..end];
                for l in session.iter().filter(|r| r.1 == 0) {
                    for r in session.iter().filter(|r| r.1 == 1) {
                        want.push((Some(k), Some(l.2), Some(l.0), Some(r.2), Some(r.0)));
                    }
                }
                start = end;
            }
        }
        want.sort();
        prop_assert_eq!(run(&f, &events, cut), want);
    }
}

#[test]
fn test_session_window_join_merges_sessions_a_row_bridges() {
    let f = factory(JoinType::Inner, JoinBounds::SessionWindow { gap_ms: 10 });
    let mut op = JoinOperator::new(&f, &ctx(0..16)).unwrap();
    let mut out = Recorder::default();
    op.process_batch(0, batch(0, vec![Some(1)], vec![0], vec![1]), &mut out)
        .unwrap();
    op.process_batch(1, batch(1, vec![Some(1)], vec![15], vec![10]), &mut out)
        .unwrap();
    op.process_watermark(5, &mut out).unwrap();
    assert!(
        out.batches.is_empty(),
        "0's session [0, 10) is not over at 5"
    );
    // 8 bridges [0, 10) and [15, 25): one session [0, 25).
    op.process_batch(0, batch(0, vec![Some(1)], vec![8], vec![2]), &mut out)
        .unwrap();
    op.process_watermark(24, &mut out).unwrap();
    assert_eq!(
        rows_of(&out),
        vec![
            (Some(1), Some(1), Some(0), Some(10), Some(15)),
            (Some(1), Some(2), Some(8), Some(10), Some(15)),
        ]
    );
    let b = &out.batches[0];
    let bound = |c: usize| b.column(c).as_primitive::<Int64Type>().value(0);
    assert_eq!((bound(1), bound(2)), (0, 25));
    assert_eq!(op.kept_rows(0) + op.kept_rows(1), 0);
    // A row whose own session is over and that touches none is late.
    op.process_batch(1, batch(1, vec![Some(1)], vec![3], vec![11]), &mut out)
        .unwrap();
    assert_eq!(op.late_records(), 1);
}

/// Subtasks at watermarks 19 and 5 (an unaligned barrier overtakes
/// watermarks) restored into one: a sliding window join fires every window
/// once, as one uninterrupted operator does (none lost, none fired again).
#[test]
fn test_window_join_restored_from_subtasks_at_different_watermarks_fires_each_window_once() {
    let bounds = JoinBounds::Window {
        size_ms: 20,
        slide_ms: 10,
    };
    let f = factory(JoinType::Inner, bounds);
    let rows: Vec<(i64, i64)> = (0..8).flat_map(|k| [(k, 3), (k, 14)]).collect();
    let events = [Event::Rows(0, rows.clone()), Event::Rows(1, rows)];
    let (mut out, mut reference) = (Recorder::default(), Recorder::default());
    let mut one = JoinOperator::new(&f, &ctx(0..16)).unwrap();
    let mut keyed = Vec::new();
    for (range, watermark) in [(0..8, 19), (8..16, 5)] {
        let mut old = JoinOperator::new(&f, &ctx(range)).unwrap();
        for e in events.iter().chain([&Event::Watermark(watermark)]) {
            apply(&mut old, e, &mut out);
        }
        keyed.extend(old.snapshot_state(1).unwrap().keyed);
    }
    assert!(!out.batches.is_empty(), "the subtask ahead fired windows");
    let mut op = JoinOperator::new(&f, &ctx(0..16)).unwrap();
    let state = OperatorState {
        operator: None,
        keyed,
    };
    op.restore_state(state).unwrap();
    op.process_watermark(MAX_WATERMARK, &mut out).unwrap();
    for e in &events {
        apply(&mut one, e, &mut reference);
    }
    one.process_watermark(MAX_WATERMARK, &mut reference)
        .unwrap();
    assert_eq!(rows_of(&out), rows_of(&reference));
}
