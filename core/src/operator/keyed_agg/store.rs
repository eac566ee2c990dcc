//! The per-key-group state of the keyed aggregates: integer keys in a map
//! of `i64`, other keys in arrow's row format, a copy-on-write map per key
//! group so a snapshot is a clone of `Arc`s (see the parent module's docs).

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, PrimitiveArray};
use arrow::datatypes::{DataType, FieldRef, Int64Type};
use arrow::row::{RowConverter, Rows};
use rustc_hash::FxHashMap;

use super::*;
use crate::error::{Error, ForOperator, Result};
use crate::keygroup::{hash_keys, KeyGroupOwnership};
use crate::state::keyed::{sort_fields, values_array, Acc, AggKind, Num, ValueKind};
use crate::state::StateBlob;

// ---------------------------------------------------------------------------
// Keyed state

/// State of one key group for a single `Int64` key.
#[derive(Debug, Clone, Default)]
pub(crate) struct IntGroup<V> {
    pub(crate) map: FxHashMap<i64, Acc<V>>,
    pub(crate) null: Option<Acc<V>>,
}

impl<V> IntGroup<V> {
    pub(crate) fn is_empty(&self) -> bool {
        self.map.is_empty() && self.null.is_none()
    }
}

/// State of one key group keyed by Arrow row-format bytes.
#[derive(Debug, Clone, Default)]
pub(crate) struct RowGroup<V> {
    pub(crate) map: FxHashMap<Box<[u8]>, Acc<V>>,
}

pub(crate) enum KeyState<V> {
    Int64 {
        groups: Vec<Arc<IntGroup<V>>>,
    },
    Rows {
        converter: RowConverter,
        rows: Rows,
        groups: Vec<Arc<RowGroup<V>>>,
    },
}

/// The keyed state and scratch of one accumulator type.
pub(crate) struct Store<V: Num> {
    /// The operator's name, for errors.
    pub(crate) name: Arc<str>,
    pub(crate) key_fields: Vec<FieldRef>,
    pub(crate) keys: KeyState<V>,
    pub(crate) partials: Vec<Acc<V>>,
    /// Change tracking for incremental checkpoints (DESIGN.md
    /// "Checkpoints"): per key group the snapshot epoch in which it was last
    /// modified. A snapshot gives each view the token
    /// `token_base | changed[i]` and then starts a new epoch, so a key group
    /// not modified since has the same token.
    changed: Vec<u64>,
    epoch: u64,
    token_base: u64,
}

pub(crate) fn uses_int64_path(key_types: &[&DataType]) -> bool {
    // Must match the fast path of `keygroup::hash_keys`.
    key_types.len() == 1 && key_types[0] == &DataType::Int64
}

/// Encodes `key_cols` into the reused `rows` and hashes every row into
/// `hashes` exactly as [`hash_keys`] does for multi-column or non-`Int64` keys.
pub(crate) fn encode_and_hash(
    converter: &RowConverter,
    rows: &mut Rows,
    key_cols: &[ArrayRef],
    hashes: &mut Vec<u64>,
) -> std::result::Result<(), arrow::error::ArrowError> {
    rows.clear();
    converter.append(rows, key_cols)?;
    hashes.clear();
    hashes.extend(rows.iter().map(|r| xxhash_rust::xxh3::xxh3_64(r.as_ref())));
    Ok(())
}

impl<V: Num> Store<V> {
    pub(crate) fn new(name: Arc<str>, key_fields: Vec<FieldRef>, n_groups: usize) -> Result<Self> {
        let types: Vec<&DataType> = key_fields.iter().map(|f| f.data_type()).collect();
        let keys = if uses_int64_path(&types) {
            KeyState::Int64 {
                groups: (0..n_groups)
                    .map(|_| Arc::new(IntGroup::default()))
                    .collect(),
            }
        } else {
            let converter = RowConverter::new(sort_fields(&key_fields)).for_operator(&name)?;
            let rows = converter.empty_rows(0, 0);
            KeyState::Rows {
                converter,
                rows,
                groups: (0..n_groups)
                    .map(|_| Arc::new(RowGroup::default()))
                    .collect(),
            }
        };
        Ok(Store {
            name,
            key_fields,
            keys,
            partials: Vec::new(),
            changed: vec![0; n_groups],
            epoch: 0,
            token_base: crate::state::change_token_base(),
        })
    }

    /// Groups, aggregates and merges one batch; returns the new aggregate
    /// values, one per group of `scratch.groups` (first-occurrence order).
    pub(crate) fn process(
        &mut self,
        agg: AggKind,
        key_cols: &[ArrayRef],
        input: &ValueInput<V>,
        scratch: &mut Scratch,
        own: &KeyGroupOwnership,
    ) -> Result<ArrayRef> {
        let n = key_cols.first().map_or(0, |c| c.len());
        let Scratch {
            hashes,
            groups,
            group_keys,
            out_valid,
        } = scratch;
        groups.begin(n);
        match &mut self.keys {
            KeyState::Int64 { groups: state } => {
                hash_keys(key_cols, hashes).for_operator(&own.name)?;
                group_keys.clear();
                let keys = key_cols[0].as_primitive::<Int64Type>();
                let vals = keys.values();
                match keys.nulls().filter(|n| n.null_count() > 0) {
                    None => {
                        for (i, &k) in vals.iter().enumerate() {
                            if groups.assign(i as u32, hashes[i], |g, _| group_keys[g] == k) {
                                group_keys.push(k);
                            }
                        }
                    }
                    Some(nulls) => {
                        let mut null_group: Option<u32> = None;
                        for (i, &k) in vals.iter().enumerate() {
                            if nulls.is_null(i) {
                                match null_group {
                                    Some(g) => groups.group_of_row.push(g),
                                    None => {
                                        let g = groups.push_untracked_group(i as u32, hashes[i]);
                                        null_group = Some(g);
                                        // Placeholder keeping `group_keys` indexed by group.
                                        group_keys.push(0);
                                    }
                                }
                            } else if groups.assign(i as u32, hashes[i], |g, _| group_keys[g] == k)
                            {
                                group_keys.push(k);
                            }
                        }
                    }
                }
                partial_aggregate(
                    agg,
                    input,
                    &groups.group_of_row,
                    groups.n_groups(),
                    &mut self.partials,
                );
                let mut out = Vec::with_capacity(groups.n_groups());
                out_valid.clear();
                for (g, &partial) in self.partials.iter().enumerate() {
                    let local = own.local_index(groups.group_hashes[g])?;
                    self.changed[local] = self.epoch;
                    let group = Arc::make_mut(&mut state[local]);
                    let slot = if groups.untracked == Some(g as u32) {
                        group.null.get_or_insert_with(Acc::default)
                    } else {
                        group.map.entry(group_keys[g]).or_default()
                    };
                    *slot = slot.merge(agg, partial);
                    out.push(slot.value);
                    out_valid.push(slot.has);
                }
                groups.end();
                Ok(values_array::<V>(out, out_valid))
            }
            KeyState::Rows {
                converter,
                rows,
                groups: state,
            } => {
                encode_and_hash(converter, rows, key_cols, hashes).for_operator(&own.name)?;
                let rows = &*rows;
                for (i, (key, &hash)) in rows.iter().zip(hashes.iter()).enumerate() {
                    groups.assign(i as u32, hash, |_, first| {
                        rows.row(first).as_ref() == key.as_ref()
                    });
                }
                partial_aggregate(
                    agg,
                    input,
                    &groups.group_of_row,
                    groups.n_groups(),
                    &mut self.partials,
                );
                let mut out = Vec::with_capacity(groups.n_groups());
                out_valid.clear();
                for ((&first, &hash), &partial) in groups
                    .first_rows
                    .iter()
                    .zip(groups.group_hashes.iter())
                    .zip(self.partials.iter())
                {
                    let local = own.local_index(hash)?;
                    self.changed[local] = self.epoch;
                    let group = Arc::make_mut(&mut state[local]);
                    let key = rows.row(first as usize);
                    let slot = match group.map.get_mut(key.as_ref()) {
                        Some(slot) => slot,
                        None => group.map.entry(Box::from(key.as_ref())).or_default(),
                    };
                    *slot = slot.merge(agg, partial);
                    out.push(slot.value);
                    out_valid.push(slot.has);
                }
                groups.end();
                Ok(values_array::<V>(out, out_valid))
            }
        }
    }

    pub(crate) fn snapshot(
        &mut self,
        agg: AggKind,
        start: usize,
        column: &Arc<str>,
    ) -> Vec<(u32, StateBlob)> {
        let mut blobs = Vec::new();
        // Modifications from now on belong to the next epoch.
        let tokens: Vec<u64> = self.changed.iter().map(|c| self.token_base | c).collect();
        let epoch = self.epoch;
        self.epoch += 1;
        match &self.keys {
            KeyState::Int64 { groups } => {
                for (i, group) in groups.iter().enumerate() {
                    if group.is_empty() {
                        continue;
                    }
                    if self.changed[i] == epoch && Arc::strong_count(group) == 1 {
                        // Modified since the last snapshot: copied flat now
                        // rather than shared and cloned whole by the next
                        // write (see `IntFlat`).
                        let (null_key, keys, values, has) = IntFlat::copy(group);
                        let view = IntFlat {
                            name: self.name.clone(),
                            agg,
                            column: column.clone(),
                            key_field: self.key_fields[0].clone(),
                            null_key,
                            keys,
                            values,
                            has,
                            token: tokens[i],
                        };
                        blobs.push(((start + i) as u32, StateBlob::Deferred(Arc::new(view))));
                    } else {
                        let view = IntSnapshot {
                            name: self.name.clone(),
                            agg,
                            column: column.clone(),
                            key_field: self.key_fields[0].clone(),
                            group: group.clone(),
                            token: tokens[i],
                        };
                        blobs.push(((start + i) as u32, StateBlob::Deferred(Arc::new(view))));
                    }
                }
            }
            KeyState::Rows { groups, .. } => {
                for (i, group) in groups.iter().enumerate() {
                    if !group.map.is_empty() {
                        let view = RowSnapshot {
                            name: self.name.clone(),
                            agg,
                            column: column.clone(),
                            key_fields: self.key_fields.clone(),
                            group: group.clone(),
                            token: tokens[i],
                        };
                        blobs.push(((start + i) as u32, StateBlob::Deferred(Arc::new(view))));
                    }
                }
            }
        }
        blobs
    }

    /// Inserts the restored entries of key group `local` (already checked
    /// to hash to that key group).
    pub(crate) fn restore_entries(
        &mut self,
        local: usize,
        kg: usize,
        key_cols: &[ArrayRef],
        acc: &PrimitiveArray<V::Arrow>,
    ) -> Result<()> {
        let duplicate = || {
            Error::checkpoint(
                None,
                format!("the state of key group {kg} holds a key twice"),
            )
        };
        self.changed[local] = self.epoch;
        match &mut self.keys {
            KeyState::Int64 { groups } => {
                let group = Arc::make_mut(&mut groups[local]);
                let keys = key_cols[0].as_primitive::<Int64Type>();
                for i in 0..keys.len() {
                    let entry = Acc {
                        value: acc.values()[i],
                        has: acc.is_valid(i),
                    };
                    if keys.is_null(i) {
                        if group.null.replace(entry).is_some() {
                            return Err(duplicate());
                        }
                    } else if group.map.insert(keys.value(i), entry).is_some() {
                        return Err(duplicate());
                    }
                }
            }
            KeyState::Rows {
                converter, groups, ..
            } => {
                let rows = converter
                    .convert_columns(key_cols)
                    .for_operator(&self.name)?;
                let group = Arc::make_mut(&mut groups[local]);
                for (i, row) in rows.iter().enumerate() {
                    let entry = Acc {
                        value: acc.values()[i],
                        has: acc.is_valid(i),
                    };
                    if group.map.insert(Box::from(row.as_ref()), entry).is_some() {
                        return Err(duplicate());
                    }
                }
            }
        }
        Ok(())
    }
}

/// The keyed state, by accumulator type.
pub(crate) enum Engine {
    Int(Store<i64>),
    Float(Store<f64>),
}

impl Engine {
    pub(crate) fn new(
        name: &str,
        kind: ValueKind,
        key_fields: Vec<FieldRef>,
        n_groups: usize,
    ) -> Result<Self> {
        let name: Arc<str> = Arc::from(name);
        Ok(match kind {
            ValueKind::Int => Engine::Int(Store::new(name, key_fields, n_groups)?),
            ValueKind::Float => Engine::Float(Store::new(name, key_fields, n_groups)?),
        })
    }

    pub(crate) fn kind(&self) -> ValueKind {
        match self {
            Engine::Int(_) => ValueKind::Int,
            Engine::Float(_) => ValueKind::Float,
        }
    }

    pub(crate) fn key_fields(&self) -> &[FieldRef] {
        match self {
            Engine::Int(s) => &s.key_fields,
            Engine::Float(s) => &s.key_fields,
        }
    }

    /// Whether `key_types`/`kind` describe the same state layout.
    pub(crate) fn matches(&self, key_types: &[&DataType], kind: ValueKind) -> bool {
        self.kind() == kind
            && self.key_fields().len() == key_types.len()
            && self
                .key_fields()
                .iter()
                .zip(key_types)
                .all(|(f, t)| f.data_type() == *t)
    }

    pub(crate) fn describe(&self) -> String {
        let keys = self
            .key_fields()
            .iter()
            .map(|f| format!("{}: {}", f.name(), f.data_type()))
            .collect::<Vec<_>>()
            .join(", ");
        format!(
            "keys ({keys}) with a {} accumulator",
            self.kind().data_type()
        )
    }
}
