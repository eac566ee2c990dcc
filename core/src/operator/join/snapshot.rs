//! The joins' per-key-group blob (format version [`STATE_FORMAT_VERSION`]):
//! written off the task thread from a copy-on-write view of the group, read
//! back and checked against the operator on restore.
//!
//! ```text
//! byte 0       format version, currently 1
//! bytes 1..9   the operator's watermark (i64, little endian)
//! then, for the left and then the right side:
//!   8 bytes    n, the length of what follows (u64, little endian)
//!   n bytes    an Arrow IPC stream of the side's kept rows (no batch when
//!              none): the input's columns, then __eddyline_ts (Int64, event
//!              time in ms) and __eddyline_matched (Boolean); schema metadata:
//!                "eddyline.join"       "<join type> <bounds>", e.g.
//!                                      "left interval -5000 10000"
//!                "eddyline.join.keys"  the side's key columns, then the
//!                                      output's (the left's) key names,
//!                                      all separated by U+001F
//! ```
//!
//! [`state_table`] turns a blob into the rows `read_state` shows: the keys
//! (the left's names), `side` ("left" or "right"), the kept row as a struct
//! in `left` or `right` (the other null), `time_ms` and `matched`.

use std::collections::HashMap;
use std::io::Cursor;
use std::sync::Arc;

use arrow::array::{
    new_null_array, Array, ArrayRef, AsArray, BooleanArray, Int64Array, RecordBatch, StringArray,
    StructArray,
};
use arrow::datatypes::{DataType, Field, Int64Type, Schema, SchemaRef};
use arrow::ipc::reader::StreamReader;
use arrow::ipc::writer::StreamWriter;

use super::rows::{gather, Group};
use super::{JoinBounds, JoinType};
use crate::error::{Error, ForOperator, Result};
use crate::state::DeferredState;

/// The version byte that opens every serialized key-group blob.
pub const STATE_FORMAT_VERSION: u8 = 1;

const META_JOIN: &str = "eddyline.join";
const META_KEYS: &str = "eddyline.join.keys";
const SEP: char = '\u{1f}';
const TS_FIELD: &str = "__eddyline_ts";
const MATCHED_FIELD: &str = "__eddyline_matched";

fn describe(how: JoinType, bounds: JoinBounds) -> String {
    format!("{} {}", how.name(), bounds.describe())
}

/// What every blob of one snapshot shares.
pub(super) struct SnapshotMeta {
    pub name: Arc<str>,
    pub how: JoinType,
    pub bounds: JoinBounds,
    pub schemas: [SchemaRef; 2],
    /// Per side: its key column names, then the output's key names.
    pub keys: [String; 2],
}

/// A copy-on-write view of one key group.
pub(super) struct GroupSnapshot {
    pub meta: Arc<SnapshotMeta>,
    pub group: Arc<Group>,
    /// The watermark the key group has reached (see `JoinOperator::reached`).
    pub watermark: i64,
}

impl GroupSnapshot {
    /// The IPC stream of one side's kept rows (no batch when none).
    fn side_bytes(&self, side: usize) -> std::result::Result<Vec<u8>, arrow::error::ArrowError> {
        let s = &self.group.sides[side];
        let mut indices = Vec::with_capacity(s.live);
        let mut ts = Vec::with_capacity(s.live);
        let mut matched = Vec::with_capacity(s.live);
        for r in s.rows.values().flatten() {
            indices.push((r.batch as usize, r.row as usize));
            ts.push(r.ts);
            matched.push(Some(r.matched));
        }
        let input = &self.meta.schemas[side];
        let mut fields: Vec<Field> = input
            .fields()
            .iter()
            .map(|f| f.as_ref().clone().with_nullable(true))
            .collect();
        fields.push(Field::new(TS_FIELD, DataType::Int64, false));
        fields.push(Field::new(MATCHED_FIELD, DataType::Boolean, false));
        let metadata = HashMap::from([
            (
                META_JOIN.to_string(),
                describe(self.meta.how, self.meta.bounds),
            ),
            (META_KEYS.to_string(), self.meta.keys[side].clone()),
        ]);
        let schema = Arc::new(Schema::new_with_metadata(fields, metadata));
        let mut out = Vec::new();
        let mut writer = StreamWriter::try_new(&mut out, &schema)?;
        if s.live > 0 {
            let rows = gather(&s.batches, &indices)?;
            let mut columns = rows.columns().to_vec();
            columns.push(Arc::new(Int64Array::from(ts)));
            columns.push(Arc::new(BooleanArray::from(matched)));
            writer.write(&RecordBatch::try_new(schema.clone(), columns)?)?;
        }
        writer.finish()?;
        drop(writer);
        Ok(out)
    }
}

impl DeferredState for GroupSnapshot {
    fn serialize(&self) -> Result<Vec<u8>> {
        let mut out = vec![STATE_FORMAT_VERSION];
        out.extend_from_slice(&self.watermark.to_le_bytes());
        for side in 0..2 {
            let bytes = self.side_bytes(side).for_operator(&self.meta.name)?;
            out.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
            out.extend_from_slice(&bytes);
        }
        Ok(out)
    }
}

/// One side's restored rows: the input's columns, their event times and
/// whether they matched.
pub(super) type DecodedSide = (RecordBatch, Vec<i64>, Vec<bool>);

/// One decoded key-group blob.
pub(super) struct DecodedGroup {
    pub watermark: i64,
    pub sides: [Option<DecodedSide>; 2],
}

/// One side of a blob as written: its schema (input columns, time,
/// matched) and its rows (`None` when it kept none).
struct RawSide {
    schema: SchemaRef,
    rows: Option<RecordBatch>,
}

/// The watermark and the two sides of a blob, checked for shape only.
fn read_sides(bytes: &[u8], bad: &dyn Fn(String) -> Error) -> Result<(i64, [RawSide; 2])> {
    match bytes.first() {
        None => return Err(bad("is empty".to_string())),
        Some(&v) if v != STATE_FORMAT_VERSION => {
            return Err(bad(format!(
                "has format version {v}, but this build reads version {STATE_FORMAT_VERSION}"
            )))
        }
        _ => {}
    }
    let watermark = read_u64(bytes, 1).ok_or_else(|| bad("is truncated".to_string()))? as i64;
    let mut at = 9;
    let mut sides = Vec::with_capacity(2);
    for _ in 0..2 {
        let n = read_u64(bytes, at).ok_or_else(|| bad("is truncated".to_string()))? as usize;
        at += 8;
        let body = bytes
            .get(at..at.saturating_add(n))
            .ok_or_else(|| bad("is truncated".to_string()))?;
        at += n;
        let reader = StreamReader::try_new(Cursor::new(body), None)
            .map_err(|e| bad(format!("cannot be read: {e}")))?;
        let schema = reader.schema();
        if schema.fields().len() < 3 || !schema.metadata().contains_key(META_JOIN) {
            return Err(bad("is not a join's state".to_string()));
        }
        let mut batches = Vec::new();
        for b in reader {
            batches.push(b.map_err(|e| bad(format!("cannot be read: {e}")))?);
        }
        let rows = match batches.len() {
            0 => None,
            _ => Some(
                arrow::compute::concat_batches(&schema, &batches)
                    .map_err(|e| bad(format!("cannot be read: {e}")))?,
            ),
        }
        .filter(|b| b.num_rows() > 0);
        sides.push(RawSide { schema, rows });
    }
    if at != bytes.len() {
        return Err(bad("has trailing bytes".to_string()));
    }
    let right = sides.pop().expect("invariant: two sides were read");
    let left = sides.pop().expect("invariant: two sides were read");
    Ok((watermark, [left, right]))
}

/// The time and matched columns of a side's rows, checked.
fn time_and_matched(
    rows: &RecordBatch,
    bad: &dyn Fn(String) -> Error,
) -> Result<(Vec<i64>, Vec<bool>)> {
    let width = rows.num_columns();
    let (ts, matched) = (rows.column(width - 2), rows.column(width - 1));
    if ts.data_type() != &DataType::Int64 || matched.data_type() != &DataType::Boolean {
        return Err(bad("has mistyped time or matched columns".to_string()));
    }
    Ok((
        ts.as_primitive::<Int64Type>().values().to_vec(),
        matched
            .as_boolean()
            .iter()
            .map(|m| m.unwrap_or(false))
            .collect(),
    ))
}

/// The input columns of a side's rows (without time and matched).
fn input_rows(rows: &RecordBatch, bad: &dyn Fn(String) -> Error) -> Result<RecordBatch> {
    let width = rows.num_columns();
    let schema = rows.schema();
    let fields: Vec<_> = schema.fields()[..width - 2].to_vec();
    RecordBatch::try_new(
        Arc::new(Schema::new(fields)),
        rows.columns()[..width - 2].to_vec(),
    )
    .map_err(|e| bad(format!("cannot be read: {e}")))
}

fn read_u64(bytes: &[u8], at: usize) -> Option<u64> {
    bytes
        .get(at..at + 8)
        .map(|b| u64::from_le_bytes(b.try_into().expect("invariant: 8 bytes")))
}

pub(super) fn decode_group(
    bytes: &[u8],
    kg: usize,
    how: JoinType,
    bounds: JoinBounds,
) -> Result<DecodedGroup> {
    let bad =
        |msg: String| Error::checkpoint(None, format!("the join state of key group {kg} {msg}"));
    let (watermark, raw) = read_sides(bytes, &bad)?;
    let expected = describe(how, bounds);
    let mut sides: [Option<DecodedSide>; 2] = [None, None];
    for (slot, side) in sides.iter_mut().zip(raw) {
        let found = side
            .schema
            .metadata()
            .get(META_JOIN)
            .map_or("unknown", String::as_str);
        if found != expected {
            return Err(bad(format!(
                "was written by a '{found}' join, not '{expected}'"
            )));
        }
        if let Some(rows) = side.rows {
            let (times, matched) = time_and_matched(&rows, &bad)?;
            *slot = Some((input_rows(&rows, &bad)?, times, matched));
        }
    }
    Ok(DecodedGroup { watermark, sides })
}

/// Whether `bytes` is a join's key-group blob.
pub(crate) fn is_state_blob(bytes: &[u8]) -> bool {
    read_sides(bytes, &|m| Error::checkpoint(None, m)).is_ok()
}

/// The rows `read_state` shows for one key-group blob (see the module docs).
pub(crate) fn state_table(bytes: &[u8], kg: u32) -> Result<Vec<RecordBatch>> {
    let bad =
        |msg: String| Error::checkpoint(None, format!("the join state of key group {kg} {msg}"));
    let (_, sides) = read_sides(bytes, &bad)?;
    let keys_of = |side: &RawSide| -> Result<(Vec<String>, Vec<String>)> {
        let all: Vec<String> = side
            .schema
            .metadata()
            .get(META_KEYS)
            .ok_or_else(|| bad("names no key columns".to_string()))?
            .split(SEP)
            .map(str::to_string)
            .collect();
        if !all.len().is_multiple_of(2) || all.is_empty() {
            return Err(bad("has unreadable key names".to_string()));
        }
        let out = all[all.len() / 2..].to_vec();
        Ok((all[..all.len() / 2].to_vec(), out))
    };
    let struct_type = |side: &RawSide| {
        let width = side.schema.fields().len();
        DataType::Struct(side.schema.fields()[..width - 2].to_vec().into())
    };
    let types = [struct_type(&sides[0]), struct_type(&sides[1])];
    let (left_keys, out_keys) = keys_of(&sides[0])?;
    let mut key_fields = Vec::with_capacity(left_keys.len());
    for (k, name) in left_keys.iter().zip(&out_keys) {
        let f = sides[0]
            .schema
            .field_with_name(k)
            .map_err(|_| bad(format!("has no key column '{k}'")))?;
        key_fields.push(Field::new(name, f.data_type().clone(), true));
    }
    let mut fields = key_fields;
    fields.push(Field::new("side", DataType::Utf8, false));
    fields.push(Field::new("left", types[0].clone(), true));
    fields.push(Field::new("right", types[1].clone(), true));
    fields.push(Field::new("time_ms", DataType::Int64, false));
    fields.push(Field::new("matched", DataType::Boolean, false));
    let schema = Arc::new(Schema::new(fields));
    let mut out = Vec::new();
    for (i, side) in sides.iter().enumerate() {
        let Some(rows) = &side.rows else {
            continue;
        };
        let n = rows.num_rows();
        let (keys, _) = keys_of(side)?;
        let mut columns: Vec<ArrayRef> = Vec::new();
        for k in &keys {
            let c = rows
                .column_by_name(k)
                .ok_or_else(|| bad(format!("has no key column '{k}'")))?;
            columns.push(c.clone());
        }
        columns.push(Arc::new(StringArray::from(vec![
            if i == 0 {
                "left"
            } else {
                "right"
            };
            n
        ])));
        let input = input_rows(rows, &bad)?;
        let row: ArrayRef = Arc::new(StructArray::from(input));
        for (j, t) in types.iter().enumerate() {
            columns.push(if j == i {
                row.clone()
            } else {
                new_null_array(t, n)
            });
        }
        let width = rows.num_columns();
        columns.push(rows.column(width - 2).clone());
        columns.push(rows.column(width - 1).clone());
        out.push(
            RecordBatch::try_new(schema.clone(), columns)
                .map_err(|e| bad(format!("cannot be shown: {e}")))?,
        );
    }
    Ok(out)
}
