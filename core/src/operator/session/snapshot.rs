//! The session windows' per-key-group blob (format version
//! [`STATE_FORMAT_VERSION`]), written off the task thread from a
//! copy-on-write view of the group:
//!
//! ```text
//! byte 0      format version, currently 1
//! bytes 1..   an Arrow IPC stream; schema metadata:
//!               "eddyline.session"            the aggregate: sum | count | min | max
//!               "eddyline.session.gap"        the gap (ms)
//!               "eddyline.session.time_type"  the event-time column's Arrow type
//!               "eddyline.session.watermark"  the operator's watermark
//!               "eddyline.session.column"     the aggregate's output column name
//!             columns: the key columns (nullable), then
//!               __eddyline_window_start, __eddyline_window_end  Int64 (ms)
//!               __eddyline_seq, __eddyline_epoch              UInt64
//!               __eddyline_acc   Int64 or Float64, null = no value seen yet
//! ```

use std::collections::HashMap;
use std::str::FromStr;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, Int64Array, RecordBatch, UInt64Array};
use arrow::datatypes::{
    ArrowPrimitiveType, DataType, Field, FieldRef, Int64Type, Schema, UInt64Type,
};
use arrow::row::RowConverter;

use super::{Group, Session};
use crate::error::{Error, ForOperator, Result};
use crate::keygroup::KeyGroupOwnership;
use crate::state::group_watermarks::KeyGroupWatermarks;
use crate::state::keyed::{acc_array, check_key_group, open_blob, Acc, AggKind, Num, ValueKind};
use crate::state::{DeferredState, StateBlob};

/// The version byte that opens every serialized key-group blob.
pub const STATE_FORMAT_VERSION: u8 = 1;

const META_AGG: &str = "eddyline.session";
const META_GAP: &str = "eddyline.session.gap";
const META_TIME_TYPE: &str = "eddyline.session.time_type";
const META_WATERMARK: &str = "eddyline.session.watermark";
const META_COLUMN: &str = "eddyline.session.column";

/// What every blob of one snapshot shares.
pub(super) struct SnapshotMeta {
    pub name: Arc<str>,
    pub agg: AggKind,
    pub gap_ms: i64,
    pub key_fields: Vec<FieldRef>,
    pub time_type: DataType,
    pub column: String,
}

struct GroupSnapshot<V> {
    meta: Arc<SnapshotMeta>,
    group: Arc<Group<V>>,
    converter: Arc<RowConverter>,
    /// The watermark the key group had reached (the operator's `reached`).
    watermark: i64,
}

/// Copy-on-write views of the groups: every group once `watermark` is set,
/// else those with sessions or a watermark of their own (`reached`).
pub(super) fn snapshot<V: Num>(
    meta: &Arc<SnapshotMeta>,
    groups: &[Arc<Group<V>>],
    start: usize,
    watermark: i64,
    reached: &KeyGroupWatermarks,
) -> Vec<(u32, StateBlob)> {
    let sort = meta
        .key_fields
        .iter()
        .map(|f| arrow::row::SortField::new(f.data_type().clone()))
        .collect();
    let Ok(converter) = RowConverter::new(sort) else {
        return Vec::new();
    };
    let converter = Arc::new(converter);
    groups
        .iter()
        .enumerate()
        .filter(|(local, g)| reached.snapshots(*local, watermark, !g.sessions.is_empty()))
        .map(|(local, g)| {
            let view = GroupSnapshot {
                meta: meta.clone(),
                group: g.clone(),
                converter: converter.clone(),
                watermark: reached.at(local, watermark),
            };
            ((start + local) as u32, StateBlob::Deferred(Arc::new(view)))
        })
        .collect()
}

impl<V: Num> DeferredState for GroupSnapshot<V> {
    fn serialize(&self) -> Result<Vec<u8>> {
        let meta = &self.meta;
        let mut rows: Vec<(&[u8], &Session<V>)> = self
            .group
            .sessions
            .iter()
            .flat_map(|(k, list)| list.iter().map(move |s| (k.as_ref(), s)))
            .collect();
        rows.sort_unstable_by_key(|(_, s)| (s.end, s.seq));
        let parser = self.converter.parser();
        let mut columns = self
            .converter
            .convert_rows(rows.iter().map(|(k, _)| parser.parse(k)))
            .for_operator(&meta.name)?;
        let mut fields: Vec<Field> = meta.key_fields.iter().map(|f| f.as_ref().clone()).collect();
        let int = |name: &str| Field::new(name, DataType::Int64, false);
        let uint = |name: &str| Field::new(name, DataType::UInt64, false);
        fields.extend([
            int("__eddyline_window_start"),
            int("__eddyline_window_end"),
            uint("__eddyline_seq"),
            uint("__eddyline_epoch"),
            Field::new("__eddyline_acc", V::Arrow::DATA_TYPE, true),
        ]);
        columns.push(Arc::new(
            rows.iter().map(|r| r.1.start).collect::<Int64Array>(),
        ));
        columns.push(Arc::new(
            rows.iter().map(|r| r.1.end).collect::<Int64Array>(),
        ));
        columns.push(Arc::new(
            rows.iter().map(|r| r.1.seq).collect::<UInt64Array>(),
        ));
        columns.push(Arc::new(
            rows.iter().map(|r| r.1.epoch).collect::<UInt64Array>(),
        ));
        columns.push(acc_array::<V>(rows.iter().map(|r| r.1.acc)));
        let metadata = HashMap::from([
            (META_AGG.to_string(), meta.agg.name().to_string()),
            (META_GAP.to_string(), meta.gap_ms.to_string()),
            (META_TIME_TYPE.to_string(), meta.time_type.to_string()),
            (META_WATERMARK.to_string(), self.watermark.to_string()),
            (META_COLUMN.to_string(), meta.column.clone()),
        ]);
        let schema = Arc::new(Schema::new_with_metadata(fields, metadata));
        crate::state::encode_ipc_blob(STATE_FORMAT_VERSION, &schema, columns)
            .for_operator(&meta.name)
    }
}

/// One decoded key-group blob.
pub(super) struct Decoded {
    pub watermark: i64,
    pub key_fields: Vec<FieldRef>,
    pub value_kind: ValueKind,
    pub time_type: DataType,
    pub column: String,
    pub batch: RecordBatch,
}

fn decode(bytes: &[u8], kg: usize) -> Result<(Decoded, String, i64)> {
    let bad =
        |msg: String| Error::checkpoint(None, format!("the session state of key group {kg} {msg}"));
    let reader = open_blob(bytes, STATE_FORMAT_VERSION, &bad)?;
    let schema = reader.schema();
    let meta = schema.metadata();
    let get = |key: &str| meta.get(key).map(String::as_str).unwrap_or("unknown");
    let time_type = DataType::from_str(get(META_TIME_TYPE))
        .map_err(|e| bad(format!("has an unreadable event-time type: {e}")))?;
    let watermark: i64 = get(META_WATERMARK)
        .parse()
        .map_err(|e| bad(format!("has an unreadable watermark: {e}")))?;
    let gap: i64 = get(META_GAP)
        .parse()
        .map_err(|e| bad(format!("has an unreadable gap: {e}")))?;
    let fields = schema.fields();
    if fields.len() < 6 {
        return Err(bad("has no key columns".to_string()));
    }
    let n_keys = fields.len() - 5;
    let value_kind = match fields[n_keys + 4].data_type() {
        DataType::Int64 => ValueKind::Int,
        DataType::Float64 => ValueKind::Float,
        other => return Err(bad(format!("has an accumulator of type {other}"))),
    };
    let mut batches = Vec::new();
    for b in reader {
        batches.push(b.map_err(|e| bad(format!("cannot be read: {e}")))?);
    }
    let batch = arrow::compute::concat_batches(&schema, &batches)
        .map_err(|e| bad(format!("cannot be read: {e}")))?;
    Ok((
        Decoded {
            watermark,
            key_fields: fields[..n_keys].to_vec(),
            value_kind,
            time_type,
            column: get(META_COLUMN).to_string(),
            batch,
        },
        get(META_AGG).to_string(),
        gap,
    ))
}

/// Decodes a blob and checks it was written by the same aggregate and gap.
pub(super) fn decode_group(bytes: &[u8], kg: usize, agg: AggKind, gap_ms: i64) -> Result<Decoded> {
    let (decoded, found_agg, found_gap) = decode(bytes, kg)?;
    if found_agg != agg.name() || found_gap != gap_ms {
        return Err(Error::checkpoint(
            None,
            format!(
                "the session state of key group {kg} was written by a '{found_agg}' session \
                 window with gap {found_gap} ms, not '{}' with gap {gap_ms} ms",
                agg.name()
            ),
        ));
    }
    Ok(decoded)
}

/// Puts the sessions of `decoded` into `group`; returns the largest sequence
/// number.
pub(super) fn restore_rows<V: Num>(
    own: &KeyGroupOwnership,
    kg: usize,
    decoded: &Decoded,
    codec: &RowConverter,
    group: &mut Group<V>,
    hashes: &mut Vec<u64>,
) -> Result<u64> {
    let b = &decoded.batch;
    let n_keys = decoded.key_fields.len();
    let key_cols = &b.columns()[..n_keys];
    check_key_group(
        &own.name,
        "the session state",
        key_cols,
        hashes,
        kg,
        own.max_parallelism,
    )?;
    let keys = codec.convert_columns(key_cols).for_operator(&own.name)?;
    let col = |i: usize| b.column(n_keys + i);
    let (starts, ends) = (
        col(0).as_primitive::<Int64Type>(),
        col(1).as_primitive::<Int64Type>(),
    );
    let (seqs, epochs) = (
        col(2).as_primitive::<UInt64Type>(),
        col(3).as_primitive::<UInt64Type>(),
    );
    let acc = col(4);
    if acc.data_type() != &V::Arrow::DATA_TYPE {
        return Err(Error::checkpoint(
            None,
            format!(
                "the session state of key group {kg} holds {} accumulators, but the operator \
                 holds {}",
                acc.data_type(),
                V::Arrow::DATA_TYPE
            ),
        ));
    }
    let accs = acc.as_primitive::<V::Arrow>();
    let mut max_seq = 0;
    for (i, key) in keys.iter().enumerate() {
        let s = Session {
            start: starts.value(i),
            end: ends.value(i),
            seq: seqs.value(i),
            epoch: epochs.value(i),
            acc: match accs.is_valid(i) {
                true => Acc {
                    value: accs.value(i),
                    has: true,
                },
                false => Acc::default(),
            },
        };
        max_seq = max_seq.max(s.seq);
        group.min_end = group.min_end.min(s.end);
        group
            .sessions
            .entry(Box::from(key.as_ref()))
            .or_default()
            .push(s);
    }
    Ok(max_seq)
}

/// Whether a blob's schema is a session window's (for `read_state`).
pub(crate) fn is_state_schema(schema: &Schema) -> bool {
    schema.metadata().contains_key(META_AGG)
}

/// The rows `read_state` shows for one blob: the keys, `window_start`,
/// `window_end` (the time column's type) and the accumulator under its
/// output name, one row per open session.
pub(crate) fn state_table(bytes: &[u8], kg: u32) -> Result<Vec<RecordBatch>> {
    let (d, _, _) = decode(bytes, kg as usize)?;
    let n_keys = d.key_fields.len();
    let b = &d.batch;
    let name = "read_state";
    let ms = |i: usize| {
        b.column(n_keys + i)
            .as_primitive::<Int64Type>()
            .values()
            .to_vec()
    };
    let mut columns: Vec<ArrayRef> = b.columns()[..n_keys].to_vec();
    columns.push(crate::operator::window::time_array(
        name,
        ms(0).into_iter(),
        &d.time_type,
    )?);
    columns.push(crate::operator::window::time_array(
        name,
        ms(1).into_iter(),
        &d.time_type,
    )?);
    columns.push(b.column(n_keys + 4).clone());
    let mut fields: Vec<Field> = d.key_fields.iter().map(|f| f.as_ref().clone()).collect();
    fields.push(Field::new("window_start", d.time_type.clone(), false));
    fields.push(Field::new("window_end", d.time_type.clone(), false));
    fields.push(Field::new(&d.column, d.value_kind.data_type(), true));
    let batch = RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).map_err(|e| {
        Error::checkpoint(None, format!("the session state of key group {kg}: {e}"))
    })?;
    Ok(vec![batch])
}
