//! The frames of the event-time over window (`operator/over_rows.rs`,
//! docs/API.md "Over windows"): its aggregate functions, where a frame
//! starts ([`OverPreceding`]), and each row's aggregates over its frame from
//! one fire's sorted rows and each partition's history (the values of its
//! last rows, its running accumulators, or its rows of the last interval;
//! the layouts are described in `over_rows.rs`'s "State").

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use arrow::array::ArrayRef;
use arrow::datatypes::{Float64Type, Int64Type};

use crate::state::keyed::{Acc, AggKind, ValueKind};

/// The aggregate functions of an over window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OverFunction {
    Sum,
    Count,
    Avg,
    Min,
    Max,
}

impl OverFunction {
    /// The function of `name` (`sum`, `count`, `avg`/`mean`, `min`, `max`).
    pub fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "sum" => OverFunction::Sum,
            "count" => OverFunction::Count,
            "avg" | "mean" => OverFunction::Avg,
            "min" => OverFunction::Min,
            "max" => OverFunction::Max,
            _ => return None,
        })
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            OverFunction::Sum => "sum",
            OverFunction::Count => "count",
            OverFunction::Avg => "avg",
            OverFunction::Min => "min",
            OverFunction::Max => "max",
        }
    }
}

/// One aggregate of an over window: the function, the column it reads
/// (None: `count` of rows) and its output column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OverAggregate {
    pub function: OverFunction,
    pub column: Option<String>,
    pub name: String,
}

/// The start of an over window's frame (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OverPreceding {
    /// `ROWS BETWEEN n PRECEDING AND CURRENT ROW`.
    Rows(usize),
    /// `ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW`.
    AllRows,
    /// `RANGE BETWEEN x PRECEDING AND CURRENT ROW`, `x` in milliseconds of
    /// event time.
    Range(i64),
    /// `RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW`.
    AllRange,
}

impl OverPreceding {
    /// Whether rows of one event time share one frame (`RANGE`).
    pub(crate) fn peers(self) -> bool {
        matches!(self, OverPreceding::Range(_) | OverPreceding::AllRange)
    }
}

/// One aggregated value of a row: an `i64`, or an `f64` as its bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Value {
    pub(crate) bits: u64,
    pub(crate) valid: bool,
}

/// One fire's rows, sorted by partition and time, as the frames read them.
pub(crate) struct Sorted<'a> {
    pub(crate) aggregates: &'a [OverAggregate],
    pub(crate) kinds: &'a [(Option<usize>, ValueKind)],
    /// Per aggregate, each row's value.
    pub(crate) values: &'a [Vec<Value>],
    /// Each row's event time (ms).
    pub(crate) times: &'a [i64],
}

/// The aggregates' output bits and validity, one pair per aggregate.
type Outs = Vec<(Vec<u64>, Vec<bool>)>;

/// The aggregates' columns of rows sorted by partition (`keys`) and time,
/// each over its frame (the partition's `history`, then the rows), updating
/// `history`.
pub(crate) fn aggregate_frames(
    preceding: OverPreceding,
    rows: &Sorted<'_>,
    keys: &arrow::row::Rows,
    history: &mut HashMap<Box<[u8]>, VecDeque<Value>>,
) -> Vec<ArrayRef> {
    let n = keys.num_rows();
    let mut outs: Outs = (0..rows.kinds.len())
        .map(|_| (Vec::with_capacity(n), Vec::with_capacity(n)))
        .collect();
    let mut at = 0;
    while at < n {
        let key = keys.row(at);
        let mut end = at + 1;
        while end < n && keys.row(end) == key {
            end += 1;
        }
        // A partition's key is copied once, when first seen, not per fire.
        if !history.contains_key(key.as_ref()) {
            history.insert(Box::from(key.as_ref()), VecDeque::new());
        }
        let ring = history
            .get_mut(key.as_ref())
            .expect("invariant: inserted just above");
        match preceding {
            OverPreceding::Rows(p) => rows_frames(rows, p, at..end, ring, &mut outs),
            OverPreceding::AllRows | OverPreceding::AllRange => {
                running_frames(rows, preceding.peers(), at..end, ring, &mut outs)
            }
            OverPreceding::Range(ms) => range_frames(rows, ms, at..end, ring, &mut outs),
        }
        if ring.is_empty() {
            history.remove(key.as_ref());
        }
        at = end;
    }
    rows.aggregates
        .iter()
        .zip(rows.kinds)
        .zip(outs)
        .map(|((a, (_, kind)), (bits, valid))| output_column(a.function, *kind, bits, &valid))
        .collect()
}

/// `ROWS BETWEEN preceding PRECEDING AND CURRENT ROW` over one partition's
/// `rows`: `ring` holds the values of its last `preceding` rows, oldest
/// first, one [`Value`] per aggregate each.
fn rows_frames(
    s: &Sorted<'_>,
    preceding: usize,
    rows: std::ops::Range<usize>,
    ring: &mut VecDeque<Value>,
    outs: &mut Outs,
) {
    let width = s.kinds.len();
    for row in rows {
        for (j, (a, (_, kind))) in s.aggregates.iter().zip(s.kinds).enumerate() {
            let current = s.values[j][row];
            let frame = ring.iter().skip(j).step_by(width).chain([&current]);
            let (bits, valid) = frame_value(a.function, *kind, frame);
            outs[j].0.push(bits);
            outs[j].1.push(valid);
        }
        for value in s.values {
            ring.push_back(value[row]);
        }
        while ring.len() > preceding * width {
            ring.pop_front();
        }
    }
}

/// An unbounded frame over one partition's `rows`: `ring` holds only the
/// running accumulators ([`running_slots`] values per aggregate), so the
/// state of a partition stays a few words however many rows it saw. With
/// `peers` (`RANGE`), rows of one time are added together and share the
/// value.
fn running_frames(
    s: &Sorted<'_>,
    peers: bool,
    rows: std::ops::Range<usize>,
    ring: &mut VecDeque<Value>,
    outs: &mut Outs,
) {
    if ring.is_empty() {
        for a in s.aggregates {
            ring.extend(running_empty(a.function));
        }
    }
    let state = ring.make_contiguous();
    let mut row = rows.start;
    while row < rows.end {
        let mut last = row + 1;
        while peers && last < rows.end && s.times[last] == s.times[row] {
            last += 1;
        }
        let mut slot = 0;
        for (j, (a, (_, kind))) in s.aggregates.iter().zip(s.kinds).enumerate() {
            let width = running_slots(a.function);
            let acc = &mut state[slot..slot + width];
            for value in &s.values[j][row..last] {
                running_add(a.function, *kind, acc, *value);
            }
            let (bits, valid) = running_value(a.function, *kind, acc);
            outs[j].0.extend(std::iter::repeat_n(bits, last - row));
            outs[j].1.extend(std::iter::repeat_n(valid, last - row));
            slot += width;
        }
        row = last;
    }
}

/// `RANGE BETWEEN ms PRECEDING AND CURRENT ROW` over one partition's
/// `rows`: `ring` holds its rows of the last `ms` before its latest time,
/// oldest first, each as its time then one [`Value`] per aggregate. Rows of
/// one time share the frame, which holds them all.
fn range_frames(
    s: &Sorted<'_>,
    ms: i64,
    rows: std::ops::Range<usize>,
    ring: &mut VecDeque<Value>,
    outs: &mut Outs,
) {
    let stride = s.kinds.len() + 1;
    let mut row = rows.start;
    while row < rows.end {
        let t = s.times[row];
        let mut last = row + 1;
        while last < rows.end && s.times[last] == t {
            last += 1;
        }
        for r in row..last {
            ring.push_back(Value {
                bits: t as u64,
                valid: true,
            });
            ring.extend(s.values.iter().map(|v| v[r]));
        }
        let from = t.saturating_sub(ms);
        while ring.front().is_some_and(|v| (v.bits as i64) < from) {
            ring.drain(..stride);
        }
        for (j, (a, (_, kind))) in s.aggregates.iter().zip(s.kinds).enumerate() {
            let frame = ring.iter().skip(1 + j).step_by(stride);
            let (bits, valid) = frame_value(a.function, *kind, frame);
            outs[j].0.extend(std::iter::repeat_n(bits, last - row));
            outs[j].1.extend(std::iter::repeat_n(valid, last - row));
        }
        row = last;
    }
}

/// How many [`Value`]s an unbounded frame's running accumulator of
/// `function` takes: an `avg` its sum (an `i128` of an integer column as
/// two words, an `f64`'s bits and an unused word) and its count, the others
/// one value (a count's bits count).
pub(crate) fn running_slots(function: OverFunction) -> usize {
    match function {
        OverFunction::Avg => 3,
        _ => 1,
    }
}

/// A running accumulator of `function` that saw no value.
fn running_empty(function: OverFunction) -> Vec<Value> {
    let zero = Value {
        bits: 0,
        valid: false,
    };
    match function {
        OverFunction::Count => vec![Value {
            bits: 0,
            valid: true,
        }],
        OverFunction::Avg => vec![zero; 3],
        _ => vec![zero],
    }
}

/// Adds `value` (ignored if null) to the running accumulator `acc`.
fn running_add(function: OverFunction, kind: ValueKind, acc: &mut [Value], value: Value) {
    if !value.valid {
        return;
    }
    let agg = match function {
        OverFunction::Count => {
            acc[0].bits += 1;
            return;
        }
        OverFunction::Avg => {
            match kind {
                ValueKind::Int => {
                    let sum = (u128::from(acc[0].bits) | (u128::from(acc[1].bits) << 64)) as i128;
                    let sum = (sum + i128::from(value.bits as i64)) as u128;
                    acc[0].bits = sum as u64;
                    acc[1].bits = (sum >> 64) as u64;
                }
                ValueKind::Float => {
                    let sum = f64::from_bits(acc[0].bits) + f64::from_bits(value.bits);
                    acc[0].bits = sum.to_bits();
                }
            }
            acc[2].bits += 1;
            return;
        }
        OverFunction::Sum => AggKind::Sum,
        OverFunction::Min => AggKind::Min,
        OverFunction::Max => AggKind::Max,
    };
    let (bits, has) = match kind {
        ValueKind::Int => {
            let mut a = Acc::<i64> {
                value: acc[0].bits as i64,
                has: acc[0].valid,
            };
            a.add(agg, value.bits as i64);
            (a.value as u64, a.has)
        }
        ValueKind::Float => {
            let mut a = Acc::<f64> {
                value: f64::from_bits(acc[0].bits),
                has: acc[0].valid,
            };
            a.add(agg, f64::from_bits(value.bits));
            (a.value.to_bits(), a.has)
        }
    };
    acc[0] = Value { bits, valid: has };
}

/// The output bits of the running accumulator `acc`.
fn running_value(function: OverFunction, kind: ValueKind, acc: &[Value]) -> (u64, bool) {
    match function {
        OverFunction::Avg => {
            let count = acc[2].bits;
            if count == 0 {
                return (0, false);
            }
            let sum = match kind {
                ValueKind::Int => {
                    (u128::from(acc[0].bits) | (u128::from(acc[1].bits) << 64)) as i128 as f64
                }
                ValueKind::Float => f64::from_bits(acc[0].bits),
            };
            ((sum / count as f64).to_bits(), true)
        }
        _ => (acc[0].bits, acc[0].valid),
    }
}

/// The aggregate `function` of the values of one frame, as output bits.
fn frame_value<'a>(
    function: OverFunction,
    kind: ValueKind,
    frame: impl Iterator<Item = &'a Value>,
) -> (u64, bool) {
    let valid = frame.filter(|v| v.valid);
    let agg = match function {
        OverFunction::Count => return (valid.count() as u64, true),
        OverFunction::Avg => {
            let (mut count, mut int, mut float) = (0u64, 0i128, 0f64);
            for v in valid {
                count += 1;
                match kind {
                    ValueKind::Int => int += i128::from(v.bits as i64),
                    ValueKind::Float => float += f64::from_bits(v.bits),
                }
            }
            if count == 0 {
                return (0, false);
            }
            let sum = match kind {
                ValueKind::Int => int as f64,
                ValueKind::Float => float,
            };
            return ((sum / count as f64).to_bits(), true);
        }
        OverFunction::Sum => AggKind::Sum,
        OverFunction::Min => AggKind::Min,
        OverFunction::Max => AggKind::Max,
    };
    match kind {
        ValueKind::Int => {
            let mut acc = Acc::<i64>::empty(agg);
            valid.for_each(|v| acc.add(agg, v.bits as i64));
            (acc.value as u64, acc.has)
        }
        ValueKind::Float => {
            let mut acc = Acc::<f64>::empty(agg);
            valid.for_each(|v| acc.add(agg, f64::from_bits(v.bits)));
            (acc.value.to_bits(), acc.has)
        }
    }
}

/// An aggregate's output column from its bits.
fn output_column(
    function: OverFunction,
    kind: ValueKind,
    bits: Vec<u64>,
    valid: &[bool],
) -> ArrayRef {
    let nulls = (!valid.iter().all(|v| *v)).then(|| arrow::buffer::NullBuffer::from(valid));
    let float = match function {
        OverFunction::Count => false,
        OverFunction::Avg => true,
        _ => kind == ValueKind::Float,
    };
    if float {
        let values: Vec<f64> = bits.into_iter().map(f64::from_bits).collect();
        Arc::new(arrow::array::PrimitiveArray::<Float64Type>::new(
            values.into(),
            nulls,
        ))
    } else {
        let values: Vec<i64> = bits.into_iter().map(|b| b as i64).collect();
        Arc::new(arrow::array::PrimitiveArray::<Int64Type>::new(
            values.into(),
            nulls,
        ))
    }
}
