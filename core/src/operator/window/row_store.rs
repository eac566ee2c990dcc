//! The window state of keys held in arrow's row format (any key but a
//! single `Int64` column; the parent module's docs): one table per open
//! window for the whole subtask, whose entries are the rows' key bytes back
//! to back in one buffer, in the order they were first seen.
//!
//! The per-key-group maps of [`Store`] cost a boxed key per (key, window),
//! a hash map per key group and window, a second hash of every key's bytes
//! and, to fire, a sort of the fired rows by (window, first seen). A
//! `GROUP BY` without aggregates over a windowing table function (docs/API.md
//! "SQL"; Nexmark q8's persons, an `Int64` and a string key) is nothing but
//! those costs. Here a row costs its key's encoding, the xxh3 hash the
//! exchange computes too ([`hash_keys`]), one probe of its window's table by
//! that hash with an exact comparison of the key bytes, and for a new key an
//! append to the window's buffers; a window fires in its entries' order,
//! which is the first-seen order, without sorting.
//!
//! Checkpoints keep the per-key-group blobs of the parent module's format
//! (docs/DESIGN.md "Checkpoints": state is split by key group for
//! rescaling): a snapshot shares the windows copy-on-write, and the first
//! key group serialized splits their entries by key group once for all of
//! them, off the task thread. Restored entries come back key group by key
//! group, so a restored window sorts its entries by sequence number when it
//! fires.

use std::collections::hash_map::Entry as MapEntry;
use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::{Arc, OnceLock};

use arrow::array::{ArrayRef, Int64Array, PrimitiveArray, UInt64Array};
use arrow::datatypes::FieldRef;
use arrow::row::{RowConverter, Rows};

use super::*;
use crate::error::{Error, ForOperator, Result};

/// No next entry in a hash chain.
const NONE: u32 = u32::MAX;

/// Hashes a `u64` that is already a hash (xxh3 of the key bytes) by itself.
#[derive(Default, Clone, Copy)]
pub(crate) struct PreHashed(u64);

impl Hasher for PreHashed {
    fn finish(&self) -> u64 {
        // A subtask's keys share the low bits that pick their key group
        // (hash % max_parallelism): the table indexes buckets by the low
        // bits, so it gets the high half there.
        self.0.rotate_left(32)
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, value: u64) {
        self.0 = value;
    }
}

/// The entries of one open window, in first-seen order (restored ones in
/// restore order).
#[derive(Clone)]
pub(crate) struct RowWindow<V> {
    /// Every entry's row-format key, back to back.
    bytes: Vec<u8>,
    /// Entry `i`'s key ends at `ends[i]` (and starts where `i - 1`'s ends).
    ends: Vec<usize>,
    /// Entry `i`'s local key group.
    groups: Vec<u32>,
    entries: Vec<Entry<V>>,
    /// The last entry of each key hash; `chain[i]` is the entry before `i`
    /// with the same hash ([`NONE`]: none).
    heads: HashMap<u64, u32, BuildHasherDefault<PreHashed>>,
    chain: Vec<u32>,
}

impl<V> Default for RowWindow<V> {
    fn default() -> Self {
        RowWindow {
            bytes: Vec::new(),
            ends: Vec::new(),
            groups: Vec::new(),
            entries: Vec::new(),
            heads: HashMap::default(),
            chain: Vec::new(),
        }
    }
}

impl<V: Copy> RowWindow<V> {
    fn key(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.bytes[start..self.ends[i]]
    }

    /// The entry of `key` (hashed `hash`, of local key group `group`),
    /// created by `fresh` if missing; whether it was created.
    fn upsert(
        &mut self,
        key: &[u8],
        hash: u64,
        group: u32,
        fresh: impl FnOnce() -> Entry<V>,
    ) -> Result<(&mut Entry<V>, bool)> {
        let n = self.entries.len();
        let Ok(index) = u32::try_from(n) else {
            return Err(Error::runtime(format!(
                "a window holds {n} keys, more than its table can index"
            )));
        };
        let previous = match self.heads.entry(hash) {
            MapEntry::Occupied(mut head) => {
                let mut at = *head.get();
                while at != NONE {
                    let i = at as usize;
                    let start = if i == 0 { 0 } else { self.ends[i - 1] };
                    if &self.bytes[start..self.ends[i]] == key {
                        return Ok((&mut self.entries[i], false));
                    }
                    at = self.chain[i];
                }
                std::mem::replace(head.get_mut(), index)
            }
            MapEntry::Vacant(slot) => {
                slot.insert(index);
                NONE
            }
        };
        self.bytes.extend_from_slice(key);
        self.ends.push(self.bytes.len());
        self.groups.push(group);
        self.chain.push(previous);
        self.entries.push(fresh());
        Ok((&mut self.entries[n], true))
    }

    /// The entries' indices by sequence number: their own order, unless
    /// the window was restored from several key groups.
    fn order(&self) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.entries.len()).collect();
        if !self.entries.windows(2).all(|w| w[0].seq < w[1].seq) {
            order.sort_unstable_by_key(|&i| self.entries[i].seq);
        }
        order
    }
}

/// The keyed window state for row-format keys; see the module docs.
pub(crate) struct RowStore<V: Num> {
    /// The operator's name, for errors.
    pub(crate) name: Arc<str>,
    codec: RowCodec,
    windows: BTreeMap<i64, Arc<RowWindow<V>>>,
    /// Per local key group, how many (key, window) entries it holds.
    live: Vec<u64>,
}

impl<V: Num> RowStore<V> {
    pub(crate) fn new(name: Arc<str>, layout: &Layout, n_groups: usize) -> Result<Self> {
        let converter = RowConverter::new(sort_fields(&layout.key_fields)).for_operator(&name)?;
        let rows = converter.empty_rows(0, 0);
        Ok(RowStore {
            name,
            codec: RowCodec { converter, rows },
            windows: BTreeMap::new(),
            live: vec![0; n_groups],
        })
    }

    /// Encodes `columns` into the codec's rows and hashes each row into
    /// `hashes` exactly as [`hash_keys`] does.
    fn encode<'a>(
        codec: &'a mut RowCodec,
        columns: &[ArrayRef],
        hashes: &mut Vec<u64>,
    ) -> ArrowResult<&'a Rows> {
        codec.rows.clear();
        codec.converter.append(&mut codec.rows, columns)?;
        hashes.clear();
        hashes.extend(
            codec
                .rows
                .iter()
                .map(|r| xxhash_rust::xxh3::xxh3_64(r.as_ref())),
        );
        Ok(&codec.rows)
    }

    /// Removes and returns the windows with a start before `cut` (all of
    /// them when `cut` is `None`), ordered by (start, first-seen order).
    pub(crate) fn fire(
        &mut self,
        cut: Option<i64>,
        _key_fields: &[FieldRef],
    ) -> Result<Option<Fired>> {
        let fired = match cut {
            None => std::mem::take(&mut self.windows),
            Some(c) => {
                if self.windows.first_key_value().is_none_or(|(&s, _)| s >= c) {
                    return Ok(None);
                }
                let rest = self.windows.split_off(&c);
                std::mem::replace(&mut self.windows, rest)
            }
        };
        let orders: Vec<Vec<usize>> = fired.values().map(|w| w.order()).collect();
        let n: usize = orders.iter().map(Vec::len).sum();
        if n == 0 {
            return Ok(None);
        }
        let mut starts = Vec::with_capacity(n);
        for ((&start, window), order) in fired.iter().zip(&orders) {
            starts.extend(std::iter::repeat_n(start, order.len()));
            for &i in order {
                self.live[window.groups[i] as usize] -= 1;
            }
        }
        let parser = self.codec.converter.parser();
        let rows = fired
            .values()
            .zip(&orders)
            .flat_map(|(w, order)| order.iter().map(|&i| parser.parse(w.key(i))));
        let keys = self
            .codec
            .converter
            .convert_rows(rows)
            .for_operator(&self.name)?;
        let acc = acc_array::<V>(
            fired
                .values()
                .zip(&orders)
                .flat_map(|(w, order)| order.iter().map(|&i| w.entries[i].acc)),
        );
        Ok(Some(Fired { keys, starts, acc }))
    }

    pub(crate) fn earliest_open_window_start(&self) -> Option<i64> {
        self.windows.first_key_value().map(|(&s, _)| s)
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
        let shared = Arc::new(SharedWindows {
            meta: meta.clone(),
            windows: self
                .windows
                .iter()
                .map(|(&s, w)| (s, Arc::clone(w)))
                .collect(),
            n_groups: self.live.len(),
            split: OnceLock::new(),
        });
        self.live
            .iter()
            .enumerate()
            .filter(|(i, live)| reached.snapshots(*i, watermark, **live > 0))
            .map(|(i, _)| {
                let view = RowGroupSnapshot {
                    shared: shared.clone(),
                    local: i,
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
        let mut hashes = Vec::new();
        let rows = Self::encode(&mut self.codec, key_cols, &mut hashes).for_operator(&self.name)?;
        let group = local as u32;
        let mut max_seq = 0;
        for (i, row) in rows.iter().enumerate() {
            let entry = Entry {
                seq: seqs.value(i),
                acc: Acc {
                    value: acc.values()[i],
                    has: acc.is_valid(i),
                },
            };
            max_seq = max_seq.max(entry.seq);
            let window = Arc::make_mut(self.windows.entry(starts.value(i)).or_default());
            let (_, created) = window
                .upsert(row.as_ref(), hashes[i], group, || entry)
                .map_err(|e| e.in_operator(&self.name))?;
            if !created {
                return Err(Error::checkpoint(
                    None,
                    format!(
                        "the window state of key group {kg} holds a key twice for window start {}",
                        starts.value(i)
                    ),
                ));
            }
            self.live[local] += 1;
        }
        Ok(max_seq)
    }
}

impl<V: Num> WindowStore<V> for RowStore<V> {
    fn process(
        &mut self,
        key_cols: &[ArrayRef],
        input: &BatchInput<'_, V>,
        hashes: &mut Vec<u64>,
        own: &KeyGroupOwnership,
        next_seq: &mut u64,
        late_rows: Option<&mut Vec<u32>>,
    ) -> Result<u64> {
        let RowStore {
            name,
            codec,
            windows,
            live,
            ..
        } = self;
        let rows = Self::encode(codec, key_cols, hashes).for_operator(name)?;
        let (agg, fresh_acc) = (input.agg, Acc::<V>::empty(input.agg));
        input.for_each_window(hashes, own, late_rows, |i, local, start, value| {
            let window = Arc::make_mut(windows.entry(start).or_default());
            // Key groups number far below u32::MAX (max_parallelism).
            let (entry, created) = window
                .upsert(rows.row(i).as_ref(), hashes[i], local as u32, || {
                    let seq = *next_seq;
                    *next_seq += 1;
                    Entry {
                        seq,
                        acc: fresh_acc,
                    }
                })
                .map_err(|e| e.in_operator(name))?;
            if let Some(v) = value {
                entry.acc.add(agg, v);
            }
            if created {
                live[local] += 1;
            }
            Ok(())
        })
    }
}

/// The windows of one snapshot, shared by its key groups' views.
struct SharedWindows<V> {
    meta: Arc<SnapshotMeta>,
    windows: Vec<(i64, Arc<RowWindow<V>>)>,
    n_groups: usize,
    /// Per local key group, its entries as (window, entry) indices in
    /// (start, sequence number) order; split once, by the first view
    /// serialized.
    split: OnceLock<Vec<Vec<(u32, u32)>>>,
}

impl<V: Copy> SharedWindows<V> {
    fn split(&self) -> &[Vec<(u32, u32)>] {
        self.split.get_or_init(|| {
            let mut split = vec![Vec::new(); self.n_groups];
            for (w, (_, window)) in self.windows.iter().enumerate() {
                for i in window.order() {
                    // Both below u32::MAX: windows of one subtask, and
                    // `RowWindow::upsert` bounds the entries.
                    split[window.groups[i] as usize].push((w as u32, i as u32));
                }
            }
            split
        })
    }
}

/// A copy-on-write view of one key group of a [`RowStore`].
struct RowGroupSnapshot<V> {
    shared: Arc<SharedWindows<V>>,
    local: usize,
    /// The watermark the key group had reached (the operator's `reached`).
    watermark: i64,
}

impl<V: Num> DeferredState for RowGroupSnapshot<V> {
    fn serialize(&self) -> Result<Vec<u8>> {
        let shared = &*self.shared;
        let meta = &shared.meta;
        let entries = &shared.split()[self.local];
        let converter =
            RowConverter::new(sort_fields(&meta.layout.key_fields)).for_operator(&meta.name)?;
        let parser = converter.parser();
        let keys = converter
            .convert_rows(
                entries
                    .iter()
                    .map(|&(w, i)| parser.parse(shared.windows[w as usize].1.key(i as usize))),
            )
            .for_operator(&meta.name)?;
        let rows = entries.iter().map(|&(w, i)| {
            let (start, window) = &shared.windows[w as usize];
            let entry = window.entries[i as usize];
            (*start, entry.seq, entry.acc)
        });
        encode_group(meta, self.watermark, keys, rows)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn test_upsert_finds_equal_keys_and_separates_colliding_hashes() {
        let mut w: RowWindow<i64> = RowWindow::default();
        let fresh = |seq| {
            move || Entry {
                seq,
                acc: Acc {
                    value: 0,
                    has: true,
                },
            }
        };
        // Two keys forced onto one hash: the chain keeps both apart.
        assert!(w.upsert(b"a", 7, 0, fresh(0)).unwrap().1);
        assert!(w.upsert(b"bb", 7, 1, fresh(1)).unwrap().1);
        assert!(!w.upsert(b"a", 7, 0, fresh(9)).unwrap().1);
        let (e, created) = w.upsert(b"bb", 7, 1, fresh(9)).unwrap();
        assert!(!created);
        assert_eq!(e.seq, 1);
        assert!(w.upsert(b"a", 8, 0, fresh(2)).unwrap().1);
        assert_eq!(w.entries.len(), 3);
        assert_eq!(
            (w.key(0), w.key(1), w.key(2)),
            (&b"a"[..], &b"bb"[..], &b"a"[..])
        );
        assert_eq!(w.order(), vec![0, 1, 2]);
        w.entries[0].seq = 5;
        assert_eq!(w.order(), vec![1, 2, 0]);
    }
}
