//! Key hashing and key groups (DESIGN.md "Runtime": keyed state is stored per
//! key group so a checkpoint can be restored at another parallelism).
//!
//! The hash must be stable across processes, runs and versions, because key
//! groups are written into checkpoints: it is xxh3 over a canonical encoding
//! for variable-width keys and a fixed integer mixer for 64-bit integer keys.
//! Nulls are their own group (SQL semantics) with a fixed hash.

use std::ops::Range;

use arrow::array::{Array, ArrayRef, AsArray};
use arrow::datatypes::{DataType, Int64Type};
use arrow::row::{RowConverter, SortField};

use crate::error::{Error, Result};

/// Default number of key groups.
pub const DEFAULT_MAX_PARALLELISM: usize = 128;

const NULL_HASH: u64 = 0x9E37_79B9_7F4A_7C15;

/// A stable 64-bit mixer (the murmur3 finalizer).
#[inline]
pub fn mix64(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^= x >> 33;
    x
}

/// Computes one hash per row of the key columns into `out` (cleared first).
///
/// A single non-null-free or nullable `Int64` column takes a fast path; any
/// other combination of columns is encoded with Arrow's row format and
/// hashed with xxh3, so equal keys always hash equally.
///
/// Its error is Arrow's: the caller names the operator
/// (`hash_keys(..).for_operator(name)`).
pub fn hash_keys(
    columns: &[ArrayRef],
    out: &mut Vec<u64>,
) -> std::result::Result<(), arrow::error::ArrowError> {
    out.clear();
    let Some(first) = columns.first() else {
        return Err(arrow::error::ArrowError::InvalidArgumentError(
            "key_by needs at least one key column".into(),
        ));
    };
    let rows = first.len();
    if columns.len() == 1 && first.data_type() == &DataType::Int64 {
        let arr = first.as_primitive::<Int64Type>();
        out.reserve(rows);
        if arr.null_count() == 0 {
            out.extend(arr.values().iter().map(|v| mix64(*v as u64)));
        } else {
            out.extend(arr.iter().map(|v| v.map_or(NULL_HASH, |v| mix64(v as u64))));
        }
        return Ok(());
    }
    let fields = columns
        .iter()
        .map(|c| SortField::new(c.data_type().clone()))
        .collect();
    let converter = RowConverter::new(fields)?;
    let encoded = converter.convert_columns(columns)?;
    out.reserve(rows);
    out.extend(
        encoded
            .iter()
            .map(|row| xxhash_rust::xxh3::xxh3_64(row.as_ref())),
    );
    Ok(())
}

/// The key group of a key hash.
#[inline]
pub fn key_group(hash: u64, max_parallelism: usize) -> usize {
    (hash % max_parallelism as u64) as usize
}

/// The subtask that owns `key_group` at `parallelism` (Flink's formula).
#[inline]
pub fn subtask_for_key_group(
    key_group: usize,
    parallelism: usize,
    max_parallelism: usize,
) -> usize {
    key_group * parallelism / max_parallelism
}

/// The contiguous key-group range owned by `subtask`.
pub fn key_group_range(subtask: usize, parallelism: usize, max_parallelism: usize) -> Range<usize> {
    let start = (subtask * max_parallelism).div_ceil(parallelism);
    let end = ((subtask + 1) * max_parallelism).div_ceil(parallelism);
    start..end
}

/// The key groups a keyed operator's subtask owns, and the check that every
/// key it receives hashes into them (the input must be hash-partitioned by
/// the same key columns).
#[derive(Debug, Clone)]
pub struct KeyGroupOwnership {
    /// The operator's name, for errors.
    pub name: String,
    pub key_groups: Range<usize>,
    pub max_parallelism: usize,
}

impl KeyGroupOwnership {
    /// The ownership of the subtask `ctx` describes; refuses key groups that
    /// do not fit `max_parallelism`.
    pub fn from_context(ctx: &crate::operator::OperatorContext) -> Result<Self> {
        if ctx.max_parallelism == 0
            || ctx.key_groups.end > ctx.max_parallelism
            || ctx.key_groups.start > ctx.key_groups.end
        {
            return Err(Error::graph(
                &ctx.name,
                format!(
                    "key groups {}..{} do not fit max_parallelism {}",
                    ctx.key_groups.start, ctx.key_groups.end, ctx.max_parallelism
                ),
            ));
        }
        Ok(KeyGroupOwnership {
            name: ctx.name.clone(),
            key_groups: ctx.key_groups.clone(),
            max_parallelism: ctx.max_parallelism,
        })
    }

    /// Checks that restored state for key group `kg` belongs to this subtask.
    pub fn check_restored(&self, kg: usize) -> Result<()> {
        if self.key_groups.contains(&kg) {
            return Ok(());
        }
        Err(Error::checkpoint(
            None,
            format!(
                "operator '{}' was given state for key group {kg}, which this subtask does not \
                 own (it owns key groups {}..{})",
                self.name, self.key_groups.start, self.key_groups.end
            ),
        ))
    }

    /// The index of `hash`'s key group among the owned ones.
    #[inline]
    pub fn local_index(&self, hash: u64) -> Result<usize> {
        let kg = key_group(hash, self.max_parallelism);
        if self.key_groups.contains(&kg) {
            Ok(kg - self.key_groups.start)
        } else {
            Err(Error::operator(
                &self.name,
                format!(
                    "received a key of key group {kg}, which this subtask does not own (it owns \
                     key groups {}..{}); the input is not partitioned by the key columns",
                    self.key_groups.start, self.key_groups.end
                ),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int64Array, StringArray};
    use std::sync::Arc;

    #[test]
    fn ranges_cover_all_key_groups_and_match_owner() {
        for max_p in [1usize, 7, 128, 1000] {
            for p in 1..=max_p.min(9) {
                let mut next = 0;
                for s in 0..p {
                    let r = key_group_range(s, p, max_p);
                    assert_eq!(r.start, next);
                    for kg in r.clone() {
                        assert_eq!(subtask_for_key_group(kg, p, max_p), s);
                    }
                    next = r.end;
                }
                assert_eq!(next, max_p);
            }
        }
    }

    #[test]
    fn equal_keys_hash_equally_and_nulls_group_together() {
        let a: ArrayRef = Arc::new(Int64Array::from(vec![Some(1), None, Some(1), None]));
        let mut h = Vec::new();
        hash_keys(&[a], &mut h).unwrap();
        assert_eq!(h[0], h[2]);
        assert_eq!(h[1], h[3]);
        assert_ne!(h[0], h[1]);
        let s: ArrayRef = Arc::new(StringArray::from(vec![
            Some("x"),
            Some("y"),
            Some("x"),
            None,
        ]));
        hash_keys(&[s], &mut h).unwrap();
        assert_eq!(h[0], h[2]);
        assert_ne!(h[0], h[1]);
    }

    #[test]
    fn hash_is_stable_across_versions() {
        // Written into checkpoints: must never change.
        assert_eq!(mix64(0), 0);
        assert_eq!(mix64(1), 0xb456_bcfc_34c2_cb2c);
    }
}
