//! The windows' per-key-group blob (format version [`STATE_FORMAT_VERSION`]):
//! written off the task thread from a copy-on-write snapshot, read back and
//! checked against the operator's layout on restore.

use std::collections::HashMap;
use std::str::FromStr;
use std::sync::Arc;

use arrow::array::{ArrayRef, Int64Array, RecordBatch, UInt64Array};
use arrow::datatypes::{ArrowPrimitiveType, DataType, Field, Schema};

use super::*;
use crate::error::{Error, ForOperator, Result};
use crate::state::keyed::open_blob;

// ---------------------------------------------------------------------------
// Serialization

/// What every blob of one snapshot shares.
pub(crate) struct SnapshotMeta {
    /// The operator's name, for errors.
    pub(crate) name: Arc<str>,
    pub(crate) agg: AggKind,
    pub(crate) assigner: WindowAssigner,
    pub(crate) layout: Layout,
    /// The aggregate's output column name (metadata for `read_state`).
    pub(crate) column: Arc<str>,
}

/// A copy-on-write view of one key group.
pub(crate) struct GroupSnapshot<K, V> {
    pub(crate) meta: Arc<SnapshotMeta>,
    pub(crate) group: Arc<GroupState<K, V>>,
    /// The watermark the key group had reached (the operator's `reached`).
    pub(crate) watermark: i64,
}

impl<K: StateKey, V: Num> DeferredState for GroupSnapshot<K, V> {
    fn serialize(&self) -> Result<Vec<u8>> {
        let meta = &self.meta;
        let n: usize = self.group.windows.values().map(|m| m.len()).sum();
        let mut rows: Vec<(i64, u64, &K, Acc<V>)> = Vec::with_capacity(n);
        for (&start, map) in &self.group.windows {
            rows.extend(map.iter().map(|(k, e)| (start, e.seq, k, e.acc)));
        }
        rows.sort_unstable_by_key(|r| (r.0, r.1));
        let keys = K::to_columns(&meta.layout.key_fields, rows.iter().map(|r| r.2))
            .for_operator(&meta.name)?;
        encode_group(
            meta,
            self.watermark,
            keys,
            rows.iter().map(|r| (r.0, r.1, r.3)),
        )
    }
}

/// One key group's blob: its `key_columns` and, row by row, the window
/// start, the first-seen sequence number and the accumulator, ordered by
/// (window start, sequence number).
pub(crate) fn encode_group<V: Num>(
    meta: &SnapshotMeta,
    watermark: i64,
    key_columns: Vec<ArrayRef>,
    rows: impl Iterator<Item = (i64, u64, Acc<V>)> + Clone,
) -> Result<Vec<u8>> {
    let key_fields = &meta.layout.key_fields;
    let mut columns = key_columns;
    let mut fields: Vec<Field> = key_fields.iter().map(|f| f.as_ref().clone()).collect();
    fields.push(Field::new(START_FIELD, DataType::Int64, false));
    columns.push(Arc::new(rows.clone().map(|r| r.0).collect::<Int64Array>()));
    fields.push(Field::new(SEQ_FIELD, DataType::UInt64, false));
    columns.push(Arc::new(rows.clone().map(|r| r.1).collect::<UInt64Array>()));
    fields.push(Field::new(ACC_FIELD, V::Arrow::DATA_TYPE, true));
    columns.push(acc_array::<V>(rows.map(|r| r.2)));
    let metadata = HashMap::from([
        (META_AGG.to_string(), meta.agg.name().to_string()),
        (META_ASSIGNER.to_string(), meta.assigner.describe()),
        (
            META_TIME_TYPE.to_string(),
            meta.layout.time_type.to_string(),
        ),
        (META_WATERMARK.to_string(), watermark.to_string()),
        (META_COLUMN.to_string(), meta.column.to_string()),
    ]);
    let schema = Arc::new(Schema::new_with_metadata(fields, metadata));
    crate::state::encode_ipc_blob(STATE_FORMAT_VERSION, &schema, columns).for_operator(&meta.name)
}

/// One decoded key-group blob.
pub(crate) struct DecodedGroup {
    pub(crate) layout: Layout,
    pub(crate) watermark: i64,
    pub(crate) batches: Vec<RecordBatch>,
}

pub(crate) fn decode_group(
    bytes: &[u8],
    kg: usize,
    agg: AggKind,
    assigner: WindowAssigner,
) -> Result<DecodedGroup> {
    let bad =
        |msg: String| Error::checkpoint(None, format!("the window state of key group {kg} {msg}"));
    let reader = open_blob(bytes, STATE_FORMAT_VERSION, &bad)?;
    let schema = reader.schema();
    let meta = schema.metadata();
    let get = |key: &str| meta.get(key).map(String::as_str).unwrap_or("unknown");
    if get(META_AGG) != agg.name() {
        return Err(bad(format!(
            "was written by a '{}' window aggregate, not '{}'",
            get(META_AGG),
            agg.name()
        )));
    }
    if get(META_ASSIGNER) != assigner.describe() {
        return Err(bad(format!(
            "was written by '{}' windows, not '{}'",
            get(META_ASSIGNER),
            assigner.describe()
        )));
    }
    let time_type = DataType::from_str(get(META_TIME_TYPE))
        .map_err(|e| bad(format!("has an unreadable event-time type: {e}")))?;
    let watermark: i64 = get(META_WATERMARK)
        .parse()
        .map_err(|e| bad(format!("has an unreadable watermark: {e}")))?;
    let fields = schema.fields();
    if fields.len() < 4 {
        return Err(bad("has no key columns".to_string()));
    }
    let n_keys = fields.len() - 3;
    let value_kind = match (
        fields[n_keys].data_type(),
        fields[n_keys + 1].data_type(),
        fields[n_keys + 2].data_type(),
    ) {
        (DataType::Int64, DataType::UInt64, DataType::Int64) => ValueKind::Int,
        (DataType::Int64, DataType::UInt64, DataType::Float64) => ValueKind::Float,
        (s, q, a) => {
            return Err(bad(format!(
                "has window/sequence/accumulator columns of types {s}, {q}, {a}"
            )))
        }
    };
    let layout = Layout {
        key_fields: fields[..n_keys].to_vec(),
        time_type,
        value_kind,
    };
    let batches = reader
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| bad(format!("cannot be read: {e}")))?;
    Ok(DecodedGroup {
        layout,
        watermark,
        batches,
    })
}

// ---------------------------------------------------------------------------
// Reading state from checkpoints (`read_state`)

/// Whether a decoded blob schema is a window's.
pub(crate) fn is_state_schema(schema: &Schema) -> bool {
    schema.metadata().contains_key(META_AGG)
}

/// The window length (ms) of an assigner as [`WindowAssigner::describe`]
/// writes it.
fn size_of_described(described: &str) -> Option<i64> {
    let mut parts = described.split(' ');
    match (parts.next(), parts.next()) {
        (Some("tumbling" | "sliding"), Some(size)) => size.parse().ok(),
        _ => None,
    }
}

/// One key-group blob as `read_state` shows it: the key columns,
/// `window_start` and `window_end` (the event-time column's type), then the
/// accumulator under the aggregate's output column name, one row per open
/// (key, window) in first-seen order.
pub(crate) fn state_table(bytes: &[u8], kg: u32) -> Result<Vec<RecordBatch>> {
    let bad =
        |msg: String| Error::checkpoint(None, format!("the window state of key group {kg} {msg}"));
    let reader = open_blob(bytes, STATE_FORMAT_VERSION, &bad)?;
    let schema = reader.schema();
    let meta = schema.metadata();
    let get = |key: &str| meta.get(key).map(String::as_str).unwrap_or("unknown");
    let size = size_of_described(get(META_ASSIGNER))
        .ok_or_else(|| bad(format!("has an unknown assigner '{}'", get(META_ASSIGNER))))?;
    let time_type = DataType::from_str(get(META_TIME_TYPE))
        .map_err(|e| bad(format!("has an unreadable event-time type: {e}")))?;
    let column = meta
        .get(META_COLUMN)
        .map_or_else(|| get(META_AGG).to_string(), Clone::clone);
    let fields = schema.fields();
    if fields.len() < 4 {
        return Err(bad("has no key columns".to_string()));
    }
    let n_keys = fields.len() - 3;
    let mut out: Vec<Field> = fields[..n_keys]
        .iter()
        .map(|f| f.as_ref().clone())
        .collect();
    out.push(Field::new("window_start", time_type.clone(), false));
    out.push(Field::new("window_end", time_type.clone(), false));
    out.push(Field::new(
        column,
        fields[n_keys + 2].data_type().clone(),
        true,
    ));
    let out = Arc::new(Schema::new(out));
    let convert = |batch: RecordBatch| -> std::result::Result<RecordBatch, String> {
        let starts = batch
            .column(n_keys)
            .as_any()
            .downcast_ref::<Int64Array>()
            .ok_or("has a window start column that is not Int64")?;
        let bound = |offset: i64| -> std::result::Result<ArrayRef, String> {
            let raw: Int64Array = starts
                .iter()
                .map(|s| s.map(|s| from_millis(s.saturating_add(offset), &time_type)))
                .collect();
            arrow::compute::cast(&raw, &time_type).map_err(|e| e.to_string())
        };
        let mut columns: Vec<ArrayRef> = batch.columns()[..n_keys].to_vec();
        columns.push(bound(0)?);
        columns.push(bound(size)?);
        columns.push(batch.column(n_keys + 2).clone());
        RecordBatch::try_new(out.clone(), columns).map_err(|e| e.to_string())
    };
    reader
        .map(|batch| {
            let batch = batch.map_err(|e| bad(format!("cannot be read: {e}")))?;
            convert(batch).map_err(|e| bad(format!("cannot be read: {e}")))
        })
        .collect()
}
