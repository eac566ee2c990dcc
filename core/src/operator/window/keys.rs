//! How the windows encode their keys: one `i64` column as itself, any
//! other key in arrow's row format (see the parent module's docs; the
//! row-format keys' state is `row_store`'s).

use std::hash::Hash;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, Int64Array};
use arrow::buffer::NullBuffer;
use arrow::datatypes::{FieldRef, Int64Type};
use arrow::row::{RowConverter, Rows};
use rustc_hash::FxHashMap;

use super::*;

// ---------------------------------------------------------------------------
// Keys

/// How a key is held in the per-key-group [`Store`]: an `Option<i64>` for a
/// single `Int64` key column (row-format keys live in `row_store`).
pub(crate) trait StateKey: Eq + Hash + Clone + Send + Sync + 'static {
    /// Per-operator encoding scratch.
    type Codec: Send;
    /// The keys of one batch, ready for lookups.
    type Batch<'a>
    where
        Self: 'a;

    // Their errors are Arrow's: the caller names the operator.
    fn codec(fields: &[FieldRef]) -> ArrowResult<Self::Codec>;

    /// Encodes the key columns of a batch and hashes every row into `hashes`
    /// exactly as [`hash_keys`] does.
    fn prepare<'a>(
        codec: &'a mut Self::Codec,
        columns: &'a [ArrayRef],
        hashes: &mut Vec<u64>,
    ) -> ArrowResult<Self::Batch<'a>>;

    /// The entry of row `row`'s key in `map`, created by `fresh` if missing.
    fn upsert<'m, V: Copy>(
        map: &'m mut FxHashMap<Self, Entry<V>>,
        batch: &Self::Batch<'_>,
        row: usize,
        fresh: impl FnOnce() -> Entry<V>,
    ) -> &'m mut Entry<V>;

    /// Arrow key columns (of `fields`' types) holding `keys`.
    fn to_columns<'k>(
        fields: &[FieldRef],
        keys: impl Iterator<Item = &'k Self>,
    ) -> ArrowResult<Vec<ArrayRef>>;

    /// The keys held by Arrow key columns.
    fn from_columns(codec: &mut Self::Codec, columns: &[ArrayRef]) -> ArrowResult<Vec<Self>>;
}

/// The keys of one batch with a single `Int64` key column.
pub(crate) struct IntKeys<'a> {
    pub(crate) values: &'a [i64],
    pub(crate) nulls: Option<&'a NullBuffer>,
}

impl StateKey for Option<i64> {
    type Codec = ();
    type Batch<'a> = IntKeys<'a>;

    fn codec(_fields: &[FieldRef]) -> ArrowResult<()> {
        Ok(())
    }

    fn prepare<'a>(
        _codec: &'a mut (),
        columns: &'a [ArrayRef],
        hashes: &mut Vec<u64>,
    ) -> ArrowResult<IntKeys<'a>> {
        hash_keys(columns, hashes)?;
        let keys = columns[0].as_primitive::<Int64Type>();
        Ok(IntKeys {
            values: keys.values(),
            nulls: keys.nulls().filter(|n| n.null_count() > 0),
        })
    }

    #[inline]
    fn upsert<'m, V: Copy>(
        map: &'m mut FxHashMap<Self, Entry<V>>,
        batch: &IntKeys<'_>,
        row: usize,
        fresh: impl FnOnce() -> Entry<V>,
    ) -> &'m mut Entry<V> {
        let key = match batch.nulls {
            Some(n) if n.is_null(row) => None,
            _ => Some(batch.values[row]),
        };
        map.entry(key).or_insert_with(fresh)
    }

    fn to_columns<'k>(
        _fields: &[FieldRef],
        keys: impl Iterator<Item = &'k Self>,
    ) -> ArrowResult<Vec<ArrayRef>> {
        Ok(vec![Arc::new(keys.copied().collect::<Int64Array>())])
    }

    fn from_columns(_codec: &mut (), columns: &[ArrayRef]) -> ArrowResult<Vec<Self>> {
        Ok(columns[0].as_primitive::<Int64Type>().iter().collect())
    }
}

/// Row-format encoding of keys, with a reused buffer.
pub(crate) struct RowCodec {
    pub(crate) converter: RowConverter,
    pub(crate) rows: Rows,
}
