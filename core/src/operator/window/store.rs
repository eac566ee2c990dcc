//! The per-key-group window state: (key, window) entries with their
//! accumulators in a copy-on-write map per key group, fired as the
//! watermark passes their end.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, Int64Array, PrimitiveArray, UInt64Array};
use arrow::datatypes::{
    DataType, FieldRef, TimeUnit, TimestampMicrosecondType, TimestampMillisecondType,
    TimestampNanosecondType, TimestampSecondType,
};
use rustc_hash::FxHashMap;

use super::row_store::RowStore;
use super::*;
use crate::error::{Error, ForOperator, Result};

// ---------------------------------------------------------------------------
// Keyed state

/// The open windows of one key group: window start -> key -> entry.
pub(crate) struct GroupState<K, V> {
    pub(crate) windows: BTreeMap<i64, FxHashMap<K, Entry<V>>>,
}

impl<K: Clone, V: Clone> Clone for GroupState<K, V> {
    fn clone(&self) -> Self {
        GroupState {
            windows: self.windows.clone(),
        }
    }
}

impl<K, V> GroupState<K, V> {
    pub(crate) fn empty() -> Self {
        GroupState {
            windows: BTreeMap::new(),
        }
    }
}

/// What one batch needs besides the key columns.
pub(crate) struct BatchInput<'a, V: Num> {
    pub(crate) agg: AggKind,
    pub(crate) size: i64,
    pub(crate) slide: i64,
    pub(crate) watermark: i64,
    /// Per local key group, the watermark it had reached when restored
    /// (above `watermark` only after a restore at another parallelism).
    pub(crate) reached: &'a KeyGroupWatermarks,
    pub(crate) times: &'a [i64],
    pub(crate) contribution: &'a Contribution<V>,
}

/// The rows a watermark fires, as output columns.
pub(crate) struct Fired {
    pub(crate) keys: Vec<ArrayRef>,
    pub(crate) starts: Vec<i64>,
    pub(crate) acc: ArrayRef,
}

/// The keyed state of one key layout and accumulator type.
pub(crate) struct Store<K: StateKey, V: Num> {
    /// The operator's name, for errors.
    pub(crate) name: Arc<str>,
    pub(crate) codec: K::Codec,
    pub(crate) groups: Vec<Arc<GroupState<K, V>>>,
}

/// Adding a batch to a window state, whatever its key layout.
pub(crate) trait WindowStore<V: Num> {
    /// Adds the records of one batch to their windows; returns how many
    /// were late. With `late_rows`, the indices of the late records are
    /// appended to it (in order).
    fn process(
        &mut self,
        key_cols: &[ArrayRef],
        input: &BatchInput<'_, V>,
        hashes: &mut Vec<u64>,
        own: &KeyGroupOwnership,
        next_seq: &mut u64,
        late_rows: Option<&mut Vec<u32>>,
    ) -> Result<u64>;
}

impl<K: StateKey, V: Num> Store<K, V> {
    pub(crate) fn new(name: Arc<str>, layout: &Layout, n_groups: usize) -> Result<Self> {
        Ok(Store {
            codec: K::codec(&layout.key_fields).for_operator(&name)?,
            name,
            groups: (0..n_groups)
                .map(|_| Arc::new(GroupState::empty()))
                .collect(),
        })
    }

    /// Removes and returns the windows with a start before `cut` (all of
    /// them when `cut` is `None`), ordered by (start, first-seen order).
    pub(crate) fn fire(
        &mut self,
        cut: Option<i64>,
        key_fields: &[FieldRef],
    ) -> Result<Option<Fired>> {
        let range = match cut {
            None => (Bound::Unbounded, Bound::Unbounded),
            Some(c) => (Bound::Unbounded, Bound::Excluded(c)),
        };
        let mut rows: Vec<(i64, u64, &K, Acc<V>)> = Vec::new();
        for group in &self.groups {
            for (&start, map) in group.windows.range(range) {
                rows.extend(map.iter().map(|(k, e)| (start, e.seq, k, e.acc)));
            }
        }
        if rows.is_empty() {
            return Ok(None);
        }
        rows.sort_unstable_by_key(|r| (r.0, r.1));
        let keys = K::to_columns(key_fields, rows.iter().map(|r| r.2)).for_operator(&self.name)?;
        let starts: Vec<i64> = rows.iter().map(|r| r.0).collect();
        let acc = acc_array::<V>(rows.iter().map(|r| r.3));
        drop(rows);
        for group in &mut self.groups {
            let rest_start = match cut {
                None => None,
                Some(c) => match group.windows.last_key_value() {
                    Some((&last, _)) if last >= c => Some(c),
                    _ => None,
                },
            };
            match rest_start {
                // Every window of the group fired: drop the map (a snapshot
                // may still share it).
                None => {
                    if !group.windows.is_empty() {
                        *group = Arc::new(GroupState::empty());
                    }
                }
                Some(c) => {
                    if group.windows.first_key_value().is_some_and(|(&s, _)| s < c) {
                        let g = Arc::make_mut(group);
                        let rest = g.windows.split_off(&c);
                        g.windows = rest;
                    }
                }
            }
        }
        Ok(Some(Fired { keys, starts, acc }))
    }

    pub(crate) fn earliest_open_window_start(&self) -> Option<i64> {
        self.groups
            .iter()
            .filter_map(|g| g.windows.first_key_value().map(|(&s, _)| s))
            .min()
    }

    /// Views of the key groups: every one when `watermark` is set, else the
    /// ones with windows or a watermark of their own (`reached`).
    pub(crate) fn snapshot(
        &self,
        meta: &Arc<SnapshotMeta>,
        start: usize,
        watermark: i64,
        reached: &KeyGroupWatermarks,
    ) -> Vec<(u32, StateBlob)> {
        self.groups
            .iter()
            .enumerate()
            .filter(|(i, g)| reached.snapshots(*i, watermark, !g.windows.is_empty()))
            .map(|(i, g)| {
                let view = GroupSnapshot {
                    meta: meta.clone(),
                    group: g.clone(),
                    watermark: reached.at(i, watermark),
                };
                ((start + i) as u32, StateBlob::Deferred(Arc::new(view)))
            })
            .collect()
    }

    /// Inserts the restored rows of key group `kg` (local index `local`).
    pub(crate) fn restore_rows(
        &mut self,
        local: usize,
        kg: usize,
        key_cols: &[ArrayRef],
        starts: &Int64Array,
        seqs: &UInt64Array,
        acc: &PrimitiveArray<V::Arrow>,
    ) -> Result<u64> {
        let keys = K::from_columns(&mut self.codec, key_cols).for_operator(&self.name)?;
        let group = Arc::make_mut(&mut self.groups[local]);
        let mut max_seq = 0;
        for (i, key) in keys.into_iter().enumerate() {
            let entry = Entry {
                seq: seqs.value(i),
                acc: Acc {
                    value: acc.values()[i],
                    has: acc.is_valid(i),
                },
            };
            max_seq = max_seq.max(entry.seq);
            let map = group.windows.entry(starts.value(i)).or_default();
            if map.insert(key, entry).is_some() {
                return Err(Error::checkpoint(
                    None,
                    format!(
                        "the window state of key group {kg} holds a key twice for window start {}",
                        starts.value(i)
                    ),
                ));
            }
        }
        Ok(max_seq)
    }
}

impl<'a, V: Num> BatchInput<'a, V> {
    /// Walks the batch's rows in order. A row whose windows are all over by
    /// its key group's watermark is late: counted (the returned number) and,
    /// with `late_rows`, its index appended. An on-time row calls
    /// `add(row, local key group, window start, contribution)` once per window
    /// that is not over, from the latest start back.
    pub(crate) fn for_each_window(
        &self,
        hashes: &[u64],
        own: &KeyGroupOwnership,
        mut late_rows: Option<&mut Vec<u32>>,
        mut add: impl FnMut(usize, usize, i64, Option<V>) -> Result<()>,
    ) -> Result<u64> {
        let (size, slide) = (self.size, self.slide);
        let mut late = 0u64;
        for (i, (&t, &hash)) in self.times.iter().zip(hashes.iter()).enumerate() {
            let local = own.local_index(hash)?;
            let watermark = self.reached.at(local, self.watermark);
            let last_start = t - t.rem_euclid(slide);
            // The window [start, start + size) is over when start + size - 1 <= watermark.
            if last_start.saturating_add(size - 1) <= watermark {
                late += 1;
                if let Some(rows) = late_rows.as_deref_mut() {
                    // Batches are far below u32::MAX rows (Arrow offsets are i32).
                    rows.push(i as u32);
                }
                continue;
            }
            let value = self.contribution.at(i);
            let first_start = t.saturating_sub(size);
            let mut start = last_start;
            loop {
                add(i, local, start, value)?;
                match start.checked_sub(slide) {
                    Some(s) if s > first_start && s.saturating_add(size - 1) > watermark => {
                        start = s
                    }
                    _ => break,
                }
            }
        }
        Ok(late)
    }
}

impl<K: StateKey, V: Num> WindowStore<V> for Store<K, V> {
    fn process(
        &mut self,
        key_cols: &[ArrayRef],
        input: &BatchInput<'_, V>,
        hashes: &mut Vec<u64>,
        own: &KeyGroupOwnership,
        next_seq: &mut u64,
        late_rows: Option<&mut Vec<u32>>,
    ) -> Result<u64> {
        let keys = K::prepare(&mut self.codec, key_cols, hashes).for_operator(&self.name)?;
        let (agg, fresh_acc) = (input.agg, Acc::<V>::empty(input.agg));
        let groups = &mut self.groups;
        input.for_each_window(hashes, own, late_rows, |i, local, start, value| {
            let group = Arc::make_mut(&mut groups[local]);
            let map = group.windows.entry(start).or_default();
            let entry = K::upsert(map, &keys, i, || {
                let seq = *next_seq;
                *next_seq += 1;
                Entry {
                    seq,
                    acc: fresh_acc,
                }
            });
            if let Some(v) = value {
                entry.acc.add(agg, v);
            }
            Ok(())
        })
    }
}

/// Milliseconds as an array of the event-time column's type.
pub(crate) fn time_array(
    operator: &str,
    ms: impl Iterator<Item = i64>,
    data_type: &DataType,
) -> Result<ArrayRef> {
    let values: Vec<i64> = ms.map(|m| from_millis(m, data_type)).collect();
    Ok(match data_type {
        DataType::Int64 => Arc::new(Int64Array::from(values)),
        DataType::Timestamp(unit, tz) => match unit {
            TimeUnit::Second => Arc::new(
                PrimitiveArray::<TimestampSecondType>::from(values).with_timezone_opt(tz.clone()),
            ),
            TimeUnit::Millisecond => Arc::new(
                PrimitiveArray::<TimestampMillisecondType>::from(values)
                    .with_timezone_opt(tz.clone()),
            ),
            TimeUnit::Microsecond => Arc::new(
                PrimitiveArray::<TimestampMicrosecondType>::from(values)
                    .with_timezone_opt(tz.clone()),
            ),
            TimeUnit::Nanosecond => Arc::new(
                PrimitiveArray::<TimestampNanosecondType>::from(values)
                    .with_timezone_opt(tz.clone()),
            ),
        },
        other => {
            return Err(Error::schema(
                operator,
                format!("event time cannot be of type {other}"),
            ))
        }
    })
}

/// The keyed state, by key layout and accumulator type.
pub(crate) enum Engine {
    IntInt(Store<Option<i64>, i64>),
    IntFloat(Store<Option<i64>, f64>),
    RowInt(RowStore<i64>),
    RowFloat(RowStore<f64>),
}

/// Runs `$body` with `$s` bound to the store, whatever its types.
macro_rules! with_store {
    ($engine:expr, $s:ident => $body:expr) => {
        match $engine {
            Engine::IntInt($s) => $body,
            Engine::IntFloat($s) => $body,
            Engine::RowInt($s) => $body,
            Engine::RowFloat($s) => $body,
        }
    };
}
pub(crate) use with_store;

impl Engine {
    pub(crate) fn new(name: &str, layout: &Layout, n_groups: usize) -> Result<Self> {
        let name: Arc<str> = Arc::from(name);
        let int_key =
            layout.key_fields.len() == 1 && layout.key_fields[0].data_type() == &DataType::Int64;
        Ok(match (int_key, layout.value_kind) {
            (true, ValueKind::Int) => Engine::IntInt(Store::new(name.clone(), layout, n_groups)?),
            (true, ValueKind::Float) => {
                Engine::IntFloat(Store::new(name.clone(), layout, n_groups)?)
            }
            (false, ValueKind::Int) => {
                Engine::RowInt(RowStore::new(name.clone(), layout, n_groups)?)
            }
            (false, ValueKind::Float) => {
                Engine::RowFloat(RowStore::new(name.clone(), layout, n_groups)?)
            }
        })
    }
}
