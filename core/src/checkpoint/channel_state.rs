//! Channel state of unaligned checkpoints (Flink's FLIP-76; DESIGN.md
//! "Unaligned checkpoints").
//!
//! With unaligned checkpoints a barrier overtakes the data queued in its
//! channel, and a task snapshots its operators on the *first* barrier of a
//! checkpoint. The records that then reach the operators after the snapshot
//! but belong before the barrier in their channel are the checkpoint's
//! channel state:
//!
//! * on the channel whose barrier overtook its queue: the data queued before
//!   the barrier's in-band marker (taken off the queue by
//!   [`crate::channel::EventReceiver::drain_to_marker`]);
//! * on every other live channel: the data read from it until its own barrier
//!   arrives.
//!
//! [`ChannelCapture`] is the pure bookkeeping of one checkpoint at one task.
//! It keeps references to the batches (Arrow buffers are reference counted),
//! never copies; [`ChannelState`] serializes them as Arrow IPC on a
//! checkpoint writer thread (a [`DeferredState`]), like operator state. On
//! restore the task puts each channel's batches back in front of the
//! channel, so they are processed, in order, before any new data.
//!
//! The channel state of a task is stored as the state file of the pseudo
//! operator [`channel_state_uid`] of its chain head, one per subtask, in its
//! own manifest entry; the `operator` section holds the encoding below.
//!
//! Encoding (little-endian): `"EDCHST01"` | channel count u32 | per channel:
//! segment count u32 | per segment: length u64 | an Arrow IPC stream (a new
//! segment starts where the schema changes).

use std::io::Cursor;
use std::sync::Arc;

use arrow::ipc::reader::StreamReader;
use arrow::ipc::writer::StreamWriter;
use arrow::record_batch::RecordBatch;

use crate::error::{Error, Result};
use crate::state::{DeferredState, OperatorState, StateBlob};

const MAGIC: &[u8; 8] = b"EDCHST01";

/// Whether `bytes` start like channel state [`encode`] wrote (an Arrow IPC
/// stream, e.g. a FLIP-16 loop log, does not).
pub fn is_encoded(bytes: &[u8]) -> bool {
    bytes.starts_with(MAGIC)
}

/// The uid under which the channel state of the tasks headed by operator
/// `uid` is stored.
pub fn channel_state_uid(uid: &str) -> String {
    format!("{uid}#channels")
}

/// The operator uid whose channel state `uid` names, if it names one.
pub fn channel_state_owner(uid: &str) -> Option<&str> {
    uid.strip_suffix("#channels")
}

/// The manifest entry of the channel state of the tasks headed by `node`:
/// its own pseudo operator, one subtask per subtask of `node`.
pub(crate) fn manifest_entry(node: &crate::graph::Node) -> crate::checkpoint::OperatorEntry {
    crate::checkpoint::OperatorEntry {
        uid: channel_state_uid(&node.uid),
        name: format!("{} (channel state)", node.name),
        finished: false,
        null_state_checkpoint: None,
        schema: None,
        key: None,
        subtasks: (0..node.parallelism)
            .map(|s| crate::checkpoint::SubtaskEntry {
                subtask: s as u32,
                state: None,
                reused: Vec::new(),
                source_offsets: Vec::new(),
                finished: false,
            })
            .collect(),
    }
}

/// The channel state one task captures for one unaligned checkpoint.
#[derive(Debug)]
pub struct ChannelCapture {
    checkpoint: u64,
    /// Per input channel: its barrier arrived (or it ended), so nothing
    /// more it delivers belongs to this checkpoint.
    done: Vec<bool>,
    missing: usize,
    records: Vec<Vec<RecordBatch>>,
}

impl ChannelCapture {
    /// Capture for `checkpoint` on a task whose channels ended as `ended`
    /// says (an ended channel delivers nothing more: it is done).
    pub fn new(checkpoint: u64, ended: &[bool]) -> Self {
        ChannelCapture {
            checkpoint,
            done: ended.to_vec(),
            missing: ended.iter().filter(|e| !**e).count(),
            records: vec![Vec::new(); ended.len()],
        }
    }

    /// The checkpoint captured.
    pub fn checkpoint(&self) -> u64 {
        self.checkpoint
    }

    /// Whether `channel` still records what it delivers.
    #[inline]
    pub fn records(&self, channel: usize) -> bool {
        !self.done.get(channel).copied().unwrap_or(true)
    }

    /// `channel` delivered `batch` to the operators (call for every batch
    /// taken, in order): recorded while its barrier has not arrived.
    #[inline]
    pub fn on_data(&mut self, channel: usize, batch: &RecordBatch) {
        if self.records(channel) {
            self.records[channel].push(batch.clone());
        }
    }

    /// The barrier of this checkpoint arrived on `channel`, having overtaken
    /// `overtaken` (the batches queued before it, in order): they are the
    /// last of the channel's state. Returns whether every channel is done.
    pub fn on_barrier(
        &mut self,
        channel: usize,
        overtaken: impl IntoIterator<Item = RecordBatch>,
    ) -> bool {
        if self.records(channel) {
            self.records[channel].extend(overtaken);
            self.done[channel] = true;
            self.missing -= 1;
        }
        self.is_complete()
    }

    /// `channel` ended (FLIP-147: it counts as having delivered every later
    /// barrier). Returns whether every channel is done.
    pub fn on_end(&mut self, channel: usize) -> bool {
        self.on_barrier(channel, std::iter::empty())
    }

    /// Whether every channel delivered its barrier or ended.
    pub fn is_complete(&self) -> bool {
        self.missing == 0
    }

    /// The captured batches per channel.
    pub fn batches(&self) -> &[Vec<RecordBatch>] {
        &self.records
    }

    /// The captured state, to write asynchronously; `None` when no channel
    /// holds a record.
    pub fn into_state(self, operator: &str) -> Option<OperatorState> {
        if self.records.iter().all(Vec::is_empty) {
            return None;
        }
        Some(OperatorState {
            operator: Some(StateBlob::Deferred(Arc::new(ChannelState {
                operator: operator.to_string(),
                channels: self.records,
            }))),
            keyed: Vec::new(),
        })
    }
}

/// Captured channel state, serialized on a writer thread.
pub struct ChannelState {
    operator: String,
    pub channels: Vec<Vec<RecordBatch>>,
}

impl DeferredState for ChannelState {
    fn serialize(&self) -> Result<Vec<u8>> {
        encode(&self.operator, &self.channels)
    }
}

/// Encodes per-channel batches (see the module docs).
pub fn encode(operator: &str, channels: &[Vec<RecordBatch>]) -> Result<Vec<u8>> {
    let arrow_err = |e: arrow::error::ArrowError| Error::arrow(operator.to_string(), &e);
    let mut out = Vec::new();
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&(channels.len() as u32).to_le_bytes());
    for batches in channels {
        let mut segments: Vec<Vec<u8>> = Vec::new();
        let mut writer: Option<(arrow::datatypes::SchemaRef, StreamWriter<Vec<u8>>)> = None;
        for batch in batches {
            if writer.as_ref().is_some_and(|(s, _)| **s != *batch.schema()) {
                if let Some((_, w)) = writer.take() {
                    segments.push(w.into_inner().map_err(arrow_err)?);
                }
            }
            if writer.is_none() {
                let w = StreamWriter::try_new(Vec::new(), &batch.schema()).map_err(arrow_err)?;
                writer = Some((batch.schema(), w));
            }
            if let Some((_, w)) = writer.as_mut() {
                w.write(batch).map_err(arrow_err)?;
            }
        }
        if let Some((_, w)) = writer {
            segments.push(w.into_inner().map_err(arrow_err)?);
        }
        out.extend_from_slice(&(segments.len() as u32).to_le_bytes());
        for s in segments {
            out.extend_from_slice(&(s.len() as u64).to_le_bytes());
            out.extend_from_slice(&s);
        }
    }
    Ok(out)
}

/// Decodes what [`encode`] wrote; errors name `operator`.
pub fn decode(operator: &str, bytes: &[u8]) -> Result<Vec<Vec<RecordBatch>>> {
    let bad = |why: &str| {
        Error::checkpoint(
            None,
            format!("the channel state of operator '{operator}' is corrupt: {why}"),
        )
    };
    let mut at = 0usize;
    let mut take = |n: usize| -> Result<&[u8]> {
        let s = bytes
            .get(at..at + n)
            .ok_or_else(|| bad("it ends too early"))?;
        at += n;
        Ok(s)
    };
    if take(8)? != MAGIC {
        return Err(bad("wrong magic"));
    }
    let u32_of = |b: &[u8]| u32::from_le_bytes(b.try_into().unwrap_or([0; 4]));
    let channels = u32_of(take(4)?) as usize;
    let mut out = Vec::with_capacity(channels.min(1 << 16));
    for _ in 0..channels {
        let segments = u32_of(take(4)?);
        let mut batches = Vec::new();
        for _ in 0..segments {
            let len = u64::from_le_bytes(take(8)?.try_into().unwrap_or([0; 8])) as usize;
            let seg = take(len)?;
            let reader =
                StreamReader::try_new(Cursor::new(seg), None).map_err(|e| bad(&e.to_string()))?;
            for b in reader {
                batches.push(b.map_err(|e| bad(&e.to_string()))?);
            }
        }
        out.push(batches);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Int64Array;
    use arrow::datatypes::{DataType, Field, Schema};

    fn batch(vals: &[i64]) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]));
        RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(vals.to_vec()))])
            .expect("a valid batch")
    }

    #[test]
    fn test_capture_records_until_each_channel_barrier_and_encodes_round_trip() {
        let mut c = ChannelCapture::new(7, &[false, false, true]);
        // Channel 0's barrier overtook two batches.
        assert!(!c.on_barrier(0, [batch(&[1]), batch(&[2, 3])]));
        c.on_data(0, &batch(&[99])); // after its barrier: not recorded
        c.on_data(1, &batch(&[4]));
        c.on_data(2, &batch(&[98])); // ended channel: not recorded
        assert!(c.on_barrier(1, [batch(&[5])]));
        let channels = c.batches().to_vec();
        let rows: Vec<usize> = channels.iter().map(|b| b.len()).collect();
        assert_eq!(rows, vec![2, 2, 0]);
        let bytes = encode("op", &channels).expect("encodes");
        let back = decode("op", &bytes).expect("decodes");
        assert_eq!(back, channels);
        assert!(decode("op", &bytes[..bytes.len() - 3]).is_err());
    }

    #[test]
    fn test_capture_batches_are_shared_not_copied() {
        let b = batch(&[1, 2]);
        let mut c = ChannelCapture::new(1, &[false]);
        c.on_barrier(0, [b.clone()]);
        let kept = &c.batches()[0][0];
        assert_eq!(
            kept.column(0).to_data().buffers()[0].as_ptr(),
            b.column(0).to_data().buffers()[0].as_ptr()
        );
    }
}
