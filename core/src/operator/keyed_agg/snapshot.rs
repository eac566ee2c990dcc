//! The keyed aggregates' per-key-group blob (format version
//! [`STATE_FORMAT_VERSION`]): written off the task thread from a
//! copy-on-write snapshot, read back on restore.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, Int64Array, PrimitiveArray, RecordBatch};
use arrow::buffer::{NullBuffer, ScalarBuffer};
use arrow::datatypes::{Field, FieldRef, Schema, SchemaRef};
use arrow::row::RowConverter;

use super::*;
use crate::error::{Error, ForOperator, Result};
use crate::state::keyed::open_blob;
use crate::state::keyed::{sort_fields, Acc, AggKind, Num};
use crate::state::DeferredState;

// ---------------------------------------------------------------------------
// Serialization

/// A copy-on-write view of one key group with a single `Int64` key.
pub(crate) struct IntSnapshot<V> {
    pub(crate) name: Arc<str>,
    pub(crate) agg: AggKind,
    /// The output column's name, written into the metadata for `read_state`.
    pub(crate) column: Arc<str>,
    pub(crate) key_field: FieldRef,
    pub(crate) group: Arc<IntGroup<V>>,
    /// Its change token (`Store::snapshot`).
    pub(crate) token: u64,
}

impl<V: Num> DeferredState for IntSnapshot<V> {
    fn token(&self) -> Option<u64> {
        Some(self.token)
    }

    fn serialize(&self) -> Result<Vec<u8>> {
        let len = self.group.map.len() + usize::from(self.group.null.is_some());
        let mut keys: Vec<Option<i64>> = Vec::with_capacity(len);
        let mut accs: Vec<Option<V>> = Vec::with_capacity(len);
        if let Some(acc) = self.group.null {
            keys.push(None);
            accs.push(acc.has.then_some(acc.value));
        }
        for (k, acc) in &self.group.map {
            keys.push(Some(*k));
            accs.push(acc.has.then_some(acc.value));
        }
        let keys: ArrayRef = Arc::new(Int64Array::from(keys));
        let accs: ArrayRef = Arc::new(accs.into_iter().collect::<PrimitiveArray<V::Arrow>>());
        encode_state(
            self.agg,
            &self.column,
            std::slice::from_ref(&self.key_field),
            vec![keys],
            accs,
        )
        .for_operator(&self.name)
    }
}

/// A flat copy of one key group with a single `Int64` key, taken on the
/// task thread at the snapshot (`Store::snapshot`) for key groups modified
/// since the previous snapshot: those would almost surely be modified again
/// and then cloned whole by `Arc::make_mut`, so copying just their keys and
/// accumulators into three arrays now is cheaper (no hash table allocated
/// and filled, nothing cloned later) and serializes without another pass
/// over a map (benches/RESULTS.md "W3: the checkpoint cost, cut").
/// Serializes to exactly the bytes [`IntSnapshot`] gives for the same
/// group: the null key first, then the map's entries in iteration order.
pub(crate) struct IntFlat<V: Num> {
    pub(crate) name: Arc<str>,
    pub(crate) agg: AggKind,
    /// The output column's name, written into the metadata for `read_state`.
    pub(crate) column: Arc<str>,
    pub(crate) key_field: FieldRef,
    /// Whether entry 0 is the null key's (its key value is a placeholder).
    pub(crate) null_key: bool,
    pub(crate) keys: ScalarBuffer<i64>,
    pub(crate) values: ScalarBuffer<V>,
    /// `Acc::has` per entry; `None` when every entry has a value.
    pub(crate) has: Option<Vec<bool>>,
    /// Its change token (`Store::snapshot`).
    pub(crate) token: u64,
}

impl<V: Num> IntFlat<V> {
    /// Copies `group`: whether it has a null key, the keys (the null key
    /// first, then the map in iteration order), the values (the default
    /// where there is none, as the `Option` collection of `IntSnapshot`
    /// writes) and the `has` flags when some are false.
    #[allow(clippy::type_complexity)]
    pub(crate) fn copy(
        group: &IntGroup<V>,
    ) -> (bool, ScalarBuffer<i64>, ScalarBuffer<V>, Option<Vec<bool>>) {
        let len = group.map.len() + usize::from(group.null.is_some());
        let mut keys: Vec<i64> = Vec::with_capacity(len);
        let mut values: Vec<V> = Vec::with_capacity(len);
        let mut all = true;
        let value = |acc: &Acc<V>| if acc.has { acc.value } else { V::default() };
        if let Some(acc) = &group.null {
            keys.push(0);
            values.push(value(acc));
            all &= acc.has;
        }
        for (k, acc) in &group.map {
            keys.push(*k);
            values.push(value(acc));
            all &= acc.has;
        }
        // A second pass only when some key has no value yet (a min, max or
        // sum of nulls only): rare, and it keeps the common pass lean.
        let has = (!all).then(|| {
            group
                .null
                .iter()
                .map(|a| a.has)
                .chain(group.map.values().map(|a| a.has))
                .collect()
        });
        (group.null.is_some(), keys.into(), values.into(), has)
    }
}

impl<V: Num> DeferredState for IntFlat<V> {
    fn token(&self) -> Option<u64> {
        Some(self.token)
    }

    fn serialize(&self) -> Result<Vec<u8>> {
        let n = self.keys.len();
        let key_nulls = self
            .null_key
            .then(|| NullBuffer::from_iter((0..n).map(|i| i != 0)));
        let keys: ArrayRef = Arc::new(Int64Array::new(self.keys.clone(), key_nulls));
        let acc_nulls = self.has.as_deref().map(NullBuffer::from);
        let accs: ArrayRef = Arc::new(PrimitiveArray::<V::Arrow>::new(
            self.values.clone(),
            acc_nulls,
        ));
        encode_state(
            self.agg,
            &self.column,
            std::slice::from_ref(&self.key_field),
            vec![keys],
            accs,
        )
        .for_operator(&self.name)
    }
}

/// A copy-on-write view of one key group keyed by row-format bytes.
pub(crate) struct RowSnapshot<V> {
    pub(crate) name: Arc<str>,
    pub(crate) agg: AggKind,
    /// The output column's name, written into the metadata for `read_state`.
    pub(crate) column: Arc<str>,
    pub(crate) key_fields: Vec<FieldRef>,
    pub(crate) group: Arc<RowGroup<V>>,
    /// Its change token (`Store::snapshot`).
    pub(crate) token: u64,
}

impl<V: Num> DeferredState for RowSnapshot<V> {
    fn token(&self) -> Option<u64> {
        Some(self.token)
    }

    fn serialize(&self) -> Result<Vec<u8>> {
        let converter =
            RowConverter::new(sort_fields(&self.key_fields)).for_operator(&self.name)?;
        let parser = converter.parser();
        let entries: Vec<(&[u8], Acc<V>)> = self
            .group
            .map
            .iter()
            .map(|(k, acc)| (k.as_ref(), *acc))
            .collect();
        let keys = converter
            .convert_rows(entries.iter().map(|(k, _)| parser.parse(k)))
            .for_operator(&self.name)?;
        let accs: ArrayRef = Arc::new(
            entries
                .iter()
                .map(|(_, acc)| acc.has.then_some(acc.value))
                .collect::<PrimitiveArray<V::Arrow>>(),
        );
        encode_state(self.agg, &self.column, &self.key_fields, keys, accs).for_operator(&self.name)
    }
}

pub(crate) fn encode_state(
    agg: AggKind,
    column: &str,
    key_fields: &[FieldRef],
    key_cols: Vec<ArrayRef>,
    acc: ArrayRef,
) -> std::result::Result<Vec<u8>, arrow::error::ArrowError> {
    let mut fields: Vec<Field> = Vec::with_capacity(key_fields.len() + 1);
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(key_fields.len() + 1);
    for (field, col) in key_fields.iter().zip(key_cols) {
        let col = if col.data_type() == field.data_type() {
            col
        } else {
            arrow::compute::cast(&col, field.data_type())?
        };
        fields.push(Field::new(field.name(), field.data_type().clone(), true));
        columns.push(col);
    }
    fields.push(Field::new(ACC_FIELD, acc.data_type().clone(), true));
    columns.push(acc);
    let metadata = HashMap::from([
        (KIND_METADATA_KEY.to_string(), agg.name().to_string()),
        (COLUMN_METADATA_KEY.to_string(), column.to_string()),
    ]);
    let schema = Arc::new(Schema::new_with_metadata(fields, metadata));
    crate::state::encode_ipc_blob(STATE_FORMAT_VERSION, &schema, columns)
}

/// Decodes one key-group blob into its schema and batches.
pub(crate) fn decode_state(
    bytes: &[u8],
    kg: usize,
    agg: AggKind,
) -> Result<(SchemaRef, Vec<RecordBatch>)> {
    let bad = |msg: String| {
        Error::checkpoint(
            None,
            format!("the keyed {} state of key group {kg} {msg}", agg.name()),
        )
    };
    let reader = open_blob(bytes, STATE_FORMAT_VERSION, &bad)?;
    let schema = reader.schema();
    match schema.metadata().get(KIND_METADATA_KEY) {
        Some(kind) if kind == agg.name() => {}
        other => {
            return Err(bad(format!(
                "was written by a '{}' aggregate",
                other.map_or("unknown", |s| s.as_str())
            )))
        }
    }
    if schema.fields().len() < 2 {
        return Err(bad("has no key columns".to_string()));
    }
    let batches = reader
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| bad(format!("cannot be read: {e}")))?;
    Ok((schema, batches))
}

// ---------------------------------------------------------------------------
// Reading state from checkpoints (`read_state`)

/// Whether a decoded blob schema is a keyed aggregate's.
pub(crate) fn is_state_schema(schema: &Schema) -> bool {
    schema.metadata().contains_key(KIND_METADATA_KEY)
}

/// One key-group blob as `read_state` shows it: the key columns, then the
/// aggregate under its output column name (`count` for a count; blobs that
/// predate the column metadata use the aggregate's name).
pub(crate) fn state_table(bytes: &[u8], kg: u32) -> Result<Vec<RecordBatch>> {
    let bad = |msg: String| {
        Error::checkpoint(
            None,
            format!("the keyed aggregate state of key group {kg} {msg}"),
        )
    };
    let reader = open_blob(bytes, STATE_FORMAT_VERSION, &bad)?;
    let schema = reader.schema();
    let meta = schema.metadata();
    let Some(kind) = meta.get(KIND_METADATA_KEY) else {
        return Err(bad("has no aggregate kind".to_string()));
    };
    let column = meta.get(COLUMN_METADATA_KEY).unwrap_or(kind);
    let fields = schema.fields();
    if fields.len() < 2 {
        return Err(bad("has no key columns".to_string()));
    }
    let mut out: Vec<Field> = fields[..fields.len() - 1]
        .iter()
        .map(|f| f.as_ref().clone())
        .collect();
    let acc = &fields[fields.len() - 1];
    out.push(Field::new(column, acc.data_type().clone(), true));
    let out = Arc::new(Schema::new(out));
    reader
        .map(|batch| {
            let batch = batch.map_err(|e| bad(format!("cannot be read: {e}")))?;
            RecordBatch::try_new(out.clone(), batch.columns().to_vec())
                .map_err(|e| bad(format!("cannot be read: {e}")))
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use arrow::datatypes::DataType;

    fn views<V: Num>(group: IntGroup<V>, agg: AggKind) -> (IntSnapshot<V>, IntFlat<V>) {
        let key_field: FieldRef = Arc::new(Field::new("k", DataType::Int64, true));
        let (null_key, keys, values, has) = IntFlat::copy(&group);
        let flat = IntFlat {
            name: Arc::from("agg"),
            agg,
            column: Arc::from("v"),
            key_field: key_field.clone(),
            null_key,
            keys,
            values,
            has,
            token: 7,
        };
        let shared = IntSnapshot {
            name: Arc::from("agg"),
            agg,
            column: Arc::from("v"),
            key_field,
            group: Arc::new(group),
            token: 7,
        };
        (shared, flat)
    }

    /// The flat copy serializes to the very bytes of the copy-on-write view
    /// (incremental checkpoints compare sections by checksum, restore reads
    /// either): with and without a null key, with keys that have no value.
    #[test]
    fn test_flat_copy_serializes_like_the_shared_view() {
        let acc = |value: i64, has: bool| Acc { value, has };
        let mut group = IntGroup::<i64>::default();
        for k in 0..1000i64 {
            group.map.insert(k * 7 - 300, acc(k * 3, true));
        }
        let (a, b) = views(group.clone(), AggKind::Sum);
        assert!(b.has.is_none() && !b.null_key);
        assert_eq!(a.serialize().unwrap(), b.serialize().unwrap());

        group.null = Some(acc(-5, true));
        group.map.insert(99_999, acc(0, false));
        let (a, b) = views(group.clone(), AggKind::Max);
        assert!(b.has.is_some() && b.null_key);
        assert_eq!(a.serialize().unwrap(), b.serialize().unwrap());

        group.null = Some(acc(0, false));
        let (a, b) = views(group, AggKind::Min);
        assert_eq!(a.serialize().unwrap(), b.serialize().unwrap());

        let mut floats = IntGroup::<f64>::default();
        floats.map.insert(
            3,
            Acc {
                value: 1.5,
                has: true,
            },
        );
        floats.map.insert(
            -4,
            Acc {
                value: 0.0,
                has: false,
            },
        );
        floats.null = Some(Acc {
            value: -2.25,
            has: true,
        });
        let (a, b) = views(floats, AggKind::Sum);
        assert_eq!(a.serialize().unwrap(), b.serialize().unwrap());

        // And what it serializes restores: the blob decodes to the entries.
        let (_, b) = views(IntGroup::<i64>::default(), AggKind::Count);
        let (_, batches) = decode_state(&b.serialize().unwrap(), 0, AggKind::Count).unwrap();
        assert_eq!(batches.iter().map(|b| b.num_rows()).sum::<usize>(), 0);
    }
}
