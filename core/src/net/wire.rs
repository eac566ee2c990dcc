//! Framing and the small binary encoding used on every connection.
//!
//! A frame is a 9-byte header (payload length `u32`, tag `u8`, channel
//! `u32`, little endian) followed by the payload. The payload is read into
//! its own allocation so the Arrow IPC bodies inside it are aligned and can
//! be used by record batches without a copy.

use std::io::{self, Read, Write};
use std::sync::Arc;

use arrow::buffer::Buffer;
use arrow::datatypes::SchemaRef;
use arrow::ipc::reader::StreamDecoder;
use arrow::ipc::writer::StreamWriter;
use arrow::record_batch::RecordBatch;

use crate::error::{Error, Result};
use crate::event::{Activity, Barrier, BarrierKind, Event, TerminationToken};

/// Largest payload accepted (a corrupt length must not allocate gigabytes).
pub const MAX_FRAME: usize = 1 << 30;

/// One frame read from a connection.
#[derive(Debug)]
pub struct Frame {
    pub tag: u8,
    pub channel: u32,
    pub payload: Vec<u8>,
}

/// Writes one frame made of `parts` (concatenated as the payload).
pub fn write_frame(w: &mut impl Write, tag: u8, channel: u32, parts: &[&[u8]]) -> io::Result<()> {
    let len: usize = parts.iter().map(|p| p.len()).sum();
    if len > MAX_FRAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("a frame of {len} bytes exceeds the limit of {MAX_FRAME}"),
        ));
    }
    let mut header = [0u8; 9];
    header[..4].copy_from_slice(&(len as u32).to_le_bytes());
    header[4] = tag;
    header[5..].copy_from_slice(&channel.to_le_bytes());
    w.write_all(&header)?;
    for p in parts {
        w.write_all(p)?;
    }
    w.flush()
}

/// Reads one frame; `Ok(None)` on a clean end of stream before a header.
pub fn read_frame(r: &mut impl Read) -> io::Result<Option<Frame>> {
    let mut header = [0u8; 9];
    let mut got = 0;
    while got < header.len() {
        match r.read(&mut header[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]) as usize;
    if len > MAX_FRAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a frame announces {len} bytes, more than the limit of {MAX_FRAME}"),
        ));
    }
    let channel = u32::from_le_bytes([header[5], header[6], header[7], header[8]]);
    let mut payload = vec![0u8; len];
    r.read_exact(&mut payload)?;
    Ok(Some(Frame {
        tag: header[4],
        channel,
        payload,
    }))
}

/// Appends little-endian fields to a byte vector.
#[derive(Default)]
pub struct Enc(pub Vec<u8>);

impl Enc {
    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn i64(&mut self, v: i64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn bytes(&mut self, v: &[u8]) -> &mut Self {
        self.u64(v.len() as u64);
        self.0.extend_from_slice(v);
        self
    }
    pub fn str(&mut self, v: &str) -> &mut Self {
        self.bytes(v.as_bytes())
    }
    pub fn opt_str(&mut self, v: Option<&str>) -> &mut Self {
        match v {
            Some(s) => self.u8(1).str(s),
            None => self.u8(0),
        }
    }
}

/// Reads the fields [`Enc`] wrote; every read checks the length.
pub struct Dec<'a> {
    buf: &'a [u8],
    pos: usize,
}

fn malformed(what: &str) -> Error {
    Error::runtime(format!("malformed message from a peer: {what}"))
}

impl<'a> Dec<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Dec { buf, pos: 0 }
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|e| *e <= self.buf.len())
            .ok_or_else(|| malformed("truncated"))?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    pub fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }
    pub fn u32(&mut self) -> Result<u32> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    pub fn u64(&mut self) -> Result<u64> {
        let mut a = [0u8; 8];
        a.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(a))
    }
    pub fn i64(&mut self) -> Result<i64> {
        Ok(self.u64()? as i64)
    }
    pub fn bytes(&mut self) -> Result<&'a [u8]> {
        let n = self.u64()?;
        let n = usize::try_from(n).map_err(|_| malformed("length"))?;
        self.take(n)
    }
    pub fn str(&mut self) -> Result<String> {
        String::from_utf8(self.bytes()?.to_vec()).map_err(|_| malformed("invalid UTF-8"))
    }
    pub fn opt_str(&mut self) -> Result<Option<String>> {
        match self.u8()? {
            0 => Ok(None),
            _ => Ok(Some(self.str()?)),
        }
    }
    /// The bytes not read yet.
    pub fn rest(&self) -> &'a [u8] {
        &self.buf[self.pos..]
    }
}

/// Encodes a barrier.
pub fn put_barrier(e: &mut Enc, b: &Barrier) {
    e.u64(b.id)
        .u8(match b.kind {
            BarrierKind::Checkpoint => 0,
            BarrierKind::Savepoint => 1,
        })
        .u8(b.aligned as u8)
        .u64(b.timestamp_ms);
}

/// Decodes a barrier.
pub fn get_barrier(d: &mut Dec<'_>) -> Result<Barrier> {
    Ok(Barrier {
        id: d.u64()?,
        kind: match d.u8()? {
            0 => BarrierKind::Checkpoint,
            _ => BarrierKind::Savepoint,
        },
        aligned: d.u8()? != 0,
        timestamp_ms: d.u64()?,
    })
}

/// Encodes a control event (anything but a data batch).
pub fn encode_control_event(ev: &Event) -> Vec<u8> {
    let mut e = Enc::default();
    match ev {
        Event::Data(_) => {}
        Event::Barrier(b) => {
            e.u8(1);
            put_barrier(&mut e, b);
        }
        Event::Watermark(w) => {
            e.u8(2).i64(*w);
        }
        Event::EndOfData { drain } => {
            e.u8(3).u8(*drain as u8);
        }
        Event::EndOfPartition => {
            e.u8(4);
        }
        Event::Idle => {
            e.u8(6);
        }
        Event::Termination(t) => {
            e.u8(5).u32(t.loop_id).u64(t.round).u8(match t.activity {
                Activity::Idle => 0,
                Activity::Busy => 1,
            });
        }
    }
    e.0
}

/// Decodes what [`encode_control_event`] wrote.
pub fn decode_control_event(buf: &[u8]) -> Result<Event> {
    let mut d = Dec::new(buf);
    Ok(match d.u8()? {
        1 => Event::Barrier(get_barrier(&mut d)?),
        2 => Event::Watermark(d.i64()?),
        3 => Event::EndOfData {
            drain: d.u8()? != 0,
        },
        4 => Event::EndOfPartition,
        6 => Event::Idle,
        5 => Event::Termination(TerminationToken {
            loop_id: d.u32()?,
            round: d.u64()?,
            activity: match d.u8()? {
                0 => Activity::Idle,
                _ => Activity::Busy,
            },
        }),
        other => return Err(malformed(&format!("unknown event kind {other}"))),
    })
}

/// Encodes the batches of one channel as an Arrow IPC stream: the schema
/// message is sent once, then only record-batch messages (a new schema
/// starts a new stream).
#[derive(Default)]
pub struct BatchEncoder {
    writer: Option<(SchemaRef, StreamWriter<Vec<u8>>)>,
}

impl BatchEncoder {
    /// The IPC bytes of `batch`; `true` when they start a new stream (a
    /// schema message comes first).
    pub fn encode(&mut self, batch: &RecordBatch) -> Result<(bool, Vec<u8>)> {
        let schema = batch.schema();
        let same = match &self.writer {
            Some((s, _)) => Arc::ptr_eq(s, &schema) || **s == *schema,
            None => false,
        };
        let mut fresh = false;
        if !same {
            let w = StreamWriter::try_new(Vec::new(), &schema)
                .map_err(|e| Error::runtime_caused(format!("cannot encode a batch: {e}"), e))?;
            self.writer = Some((schema, w));
            fresh = true;
        }
        let Some((_, w)) = self.writer.as_mut() else {
            return Err(Error::runtime("internal: no IPC writer"));
        };
        w.write(batch)
            .map_err(|e| Error::runtime_caused(format!("cannot encode a batch: {e}"), e))?;
        Ok((fresh, std::mem::take(w.get_mut())))
    }
}

/// Decodes the batches of one channel (zero-copy from the frame's buffer).
#[derive(Default)]
pub struct BatchDecoder {
    decoder: StreamDecoder,
}

impl BatchDecoder {
    /// Decodes the batch in `payload`; `fresh` resets the stream first.
    pub fn decode(&mut self, fresh: bool, payload: Vec<u8>) -> Result<RecordBatch> {
        if fresh {
            self.decoder = StreamDecoder::new();
        }
        let mut buf = Buffer::from_vec(payload);
        while !buf.is_empty() {
            let decoded = self.decoder.decode(&mut buf).map_err(|e| {
                Error::runtime_caused(format!("malformed record batch from a peer: {e}"), e)
            })?;
            if let Some(batch) = decoded {
                return Ok(batch);
            }
        }
        Err(malformed("a data frame without a record batch"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{ArrayRef, Int64Array, StringArray};

    #[test]
    fn frames_round_trip_and_end_cleanly() {
        let mut buf = Vec::new();
        write_frame(&mut buf, 7, 42, &[b"ab", b"cd"]).unwrap();
        write_frame(&mut buf, 1, 0, &[]).unwrap();
        let mut r = std::io::Cursor::new(buf);
        let f = read_frame(&mut r).unwrap().unwrap();
        assert_eq!(
            (f.tag, f.channel, f.payload.as_slice()),
            (7, 42, &b"abcd"[..])
        );
        let f = read_frame(&mut r).unwrap().unwrap();
        assert_eq!((f.tag, f.payload.len()), (1, 0));
        assert!(read_frame(&mut r).unwrap().is_none());
    }

    #[test]
    fn truncated_and_oversized_frames_are_errors() {
        let mut buf = Vec::new();
        write_frame(&mut buf, 1, 1, &[b"hello"]).unwrap();
        buf.truncate(buf.len() - 2);
        assert!(read_frame(&mut std::io::Cursor::new(buf)).is_err());
        let mut bad = vec![0xff, 0xff, 0xff, 0x7f, 1, 0, 0, 0, 0];
        bad.extend_from_slice(b"x");
        assert!(read_frame(&mut std::io::Cursor::new(bad)).is_err());
    }

    #[test]
    fn control_events_round_trip() {
        let events = [
            Event::Barrier(Barrier {
                id: 9,
                kind: BarrierKind::Savepoint,
                aligned: true,
                timestamp_ms: 123,
            }),
            Event::Watermark(-5),
            Event::EndOfData { drain: false },
            Event::EndOfPartition,
            Event::Idle,
            Event::Termination(TerminationToken {
                loop_id: 3,
                round: 17,
                activity: Activity::Busy,
            }),
        ];
        for ev in events {
            let back = decode_control_event(&encode_control_event(&ev)).unwrap();
            assert_eq!(format!("{ev:?}"), format!("{back:?}"));
        }
        assert!(decode_control_event(&[99]).is_err());
        assert!(decode_control_event(&[1, 0]).is_err());
    }

    #[test]
    fn batches_round_trip_with_the_schema_sent_once() {
        let a: ArrayRef = Arc::new(Int64Array::from_iter_values(0..1000));
        let s: ArrayRef = Arc::new(StringArray::from_iter_values(
            (0..1000).map(|i| i.to_string()),
        ));
        let b = RecordBatch::try_from_iter([("a", a), ("s", s)]).unwrap();
        let mut enc = BatchEncoder::default();
        let mut dec = BatchDecoder::default();
        let (fresh1, p1) = enc.encode(&b).unwrap();
        let (fresh2, p2) = enc.encode(&b.slice(10, 20)).unwrap();
        assert!(fresh1 && !fresh2);
        assert!(p2.len() < p1.len());
        assert_eq!(dec.decode(fresh1, p1).unwrap(), b);
        assert_eq!(dec.decode(fresh2, p2).unwrap(), b.slice(10, 20));
        // A new schema starts a new stream.
        let c: ArrayRef = Arc::new(Int64Array::from_iter_values(0..3));
        let b2 = RecordBatch::try_from_iter([("c", c)]).unwrap();
        let (fresh3, p3) = enc.encode(&b2).unwrap();
        assert!(fresh3);
        assert_eq!(dec.decode(fresh3, p3).unwrap(), b2);
    }
}
