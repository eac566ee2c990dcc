//! The joins' per-key-group blob (format version [`STATE_FORMAT_VERSION`]):
//! written off the task thread from a copy-on-write view of the group, read
//! back and checked against the operator on restore.
//!
//! ```text
//! byte 0       format version, currently 1
//! bytes 1..9   the operator's watermark (i64, little endian)
//! then, for the left and then the right side:
//!   8 bytes    n, the length of what follows (u64, little endian; 0: no rows)
//!   n bytes    an Arrow IPC stream of the side's kept rows: the input's
//!              columns, then __eddyline_ts (Int64, event time in ms) and
//!              __eddyline_matched (Boolean); schema metadata "eddyline.join"
//!              is "<join type> <bounds>", e.g. "left interval -5000 10000"
//! ```

use std::collections::HashMap;
use std::io::Cursor;
use std::sync::Arc;

use arrow::array::{Array, AsArray, BooleanArray, Int64Array, RecordBatch};
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
    pub watermark: i64,
}

/// A copy-on-write view of one key group.
pub(super) struct GroupSnapshot {
    pub meta: Arc<SnapshotMeta>,
    pub group: Arc<Group>,
}

impl GroupSnapshot {
    /// The IPC stream of one side's kept rows (empty when none).
    fn side_bytes(&self, side: usize) -> std::result::Result<Vec<u8>, arrow::error::ArrowError> {
        let s = &self.group.sides[side];
        if s.live == 0 {
            return Ok(Vec::new());
        }
        let mut indices = Vec::with_capacity(s.live);
        let mut ts = Vec::with_capacity(s.live);
        let mut matched = Vec::with_capacity(s.live);
        for r in s.rows.values().flatten() {
            indices.push((r.batch as usize, r.row as usize));
            ts.push(r.ts);
            matched.push(Some(r.matched));
        }
        let rows = gather(&s.batches, &indices)?;
        let input = &self.meta.schemas[side];
        let mut fields: Vec<Field> = input
            .fields()
            .iter()
            .map(|f| f.as_ref().clone().with_nullable(true))
            .collect();
        fields.push(Field::new(TS_FIELD, DataType::Int64, false));
        fields.push(Field::new(MATCHED_FIELD, DataType::Boolean, false));
        let metadata = HashMap::from([(
            META_JOIN.to_string(),
            describe(self.meta.how, self.meta.bounds),
        )]);
        let schema = Arc::new(Schema::new_with_metadata(fields, metadata));
        let mut columns = rows.columns().to_vec();
        columns.push(Arc::new(Int64Array::from(ts)));
        columns.push(Arc::new(BooleanArray::from(matched)));
        let batch = RecordBatch::try_new(schema.clone(), columns)?;
        let mut out = Vec::new();
        let mut writer = StreamWriter::try_new(&mut out, &schema)?;
        writer.write(&batch)?;
        writer.finish()?;
        drop(writer);
        Ok(out)
    }
}

impl DeferredState for GroupSnapshot {
    fn serialize(&self) -> Result<Vec<u8>> {
        let mut out = vec![STATE_FORMAT_VERSION];
        out.extend_from_slice(&self.meta.watermark.to_le_bytes());
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
    let mut sides: [Option<DecodedSide>; 2] = [None, None];
    let expected = describe(how, bounds);
    for slot in &mut sides {
        let n = read_u64(bytes, at).ok_or_else(|| bad("is truncated".to_string()))? as usize;
        at += 8;
        let body = bytes
            .get(at..at.saturating_add(n))
            .ok_or_else(|| bad("is truncated".to_string()))?;
        at += n;
        if n == 0 {
            continue;
        }
        let reader = StreamReader::try_new(Cursor::new(body), None)
            .map_err(|e| bad(format!("cannot be read: {e}")))?;
        let schema = reader.schema();
        let found = schema
            .metadata()
            .get(META_JOIN)
            .map_or("unknown", String::as_str);
        if found != expected {
            return Err(bad(format!(
                "was written by a '{found}' join, not '{expected}'"
            )));
        }
        let width = schema.fields().len();
        if width < 3 {
            return Err(bad("has no input columns".to_string()));
        }
        let mut batches = Vec::new();
        for b in reader {
            batches.push(b.map_err(|e| bad(format!("cannot be read: {e}")))?);
        }
        let batch = arrow::compute::concat_batches(&schema, &batches)
            .map_err(|e| bad(format!("cannot be read: {e}")))?;
        let ts = batch.column(width - 2);
        let matched = batch.column(width - 1);
        if ts.data_type() != &DataType::Int64 || matched.data_type() != &DataType::Boolean {
            return Err(bad("has mistyped time or matched columns".to_string()));
        }
        let times = ts.as_primitive::<Int64Type>().values().to_vec();
        let matched = matched
            .as_boolean()
            .iter()
            .map(|m| m.unwrap_or(false))
            .collect();
        let input_fields: Vec<_> = schema.fields()[..width - 2].to_vec();
        let rows = RecordBatch::try_new(
            Arc::new(Schema::new(input_fields)),
            batch.columns()[..width - 2].to_vec(),
        )
        .map_err(|e| bad(format!("cannot be read: {e}")))?;
        *slot = Some((rows, times, matched));
    }
    if at != bytes.len() {
        return Err(bad("has trailing bytes".to_string()));
    }
    Ok(DecodedGroup { watermark, sides })
}
