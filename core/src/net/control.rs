//! The messages between the driver (coordinator) and its workers, over the
//! same framing and authentication as the data plane.
//!
//! Worker -> driver: hello, task reports (finished, closed, failed,
//! snapshots with their state bytes), metric deltas, collect-sink
//! operations, output schema proposals, done. Driver -> worker: start
//! (spec, addresses, restore point), control messages for one task, agreed
//! output schemas, cancel.

use std::sync::Arc;
use std::time::Duration;

use arrow::record_batch::RecordBatch;

use crate::checkpoint::coordinator::NodeSnapshot;
use crate::error::{Error, Result};
use crate::message::{Control, TaskReport};
use crate::net::wire::{get_barrier, put_barrier, BatchDecoder, BatchEncoder, Dec, Enc};
use crate::sink::collect::CollectOp;
use crate::state::{OperatorState, StateBlob};

pub(crate) const TAG_HELLO: u8 = 10;
pub(crate) const TAG_START: u8 = 11;
pub(crate) const TAG_CONTROL: u8 = 12;
pub(crate) const TAG_CANCEL: u8 = 13;
pub(crate) const TAG_REPORT: u8 = 14;
pub(crate) const TAG_METRICS: u8 = 15;
pub(crate) const TAG_COLLECT: u8 = 16;
pub(crate) const TAG_DONE: u8 = 17;
/// A worker's proposal of a node's output schema (channel: the node), and
/// the driver's answer, the agreed one (DESIGN.md "One schema per
/// operator"); the payload is `crate::schemas::encode_schema`'s.
pub(crate) const TAG_SCHEMA: u8 = 18;

/// A worker introducing itself.
#[derive(Debug, Clone)]
pub(crate) struct Hello {
    pub index: usize,
    /// The attempt the worker was launched for (`u64::MAX`: any; Spark
    /// tasks do not know the driver's attempt number).
    pub attempt: u64,
    pub data_addr: String,
}

impl Hello {
    pub fn encode(&self) -> Vec<u8> {
        let mut e = Enc::default();
        e.u32(self.index as u32)
            .u64(self.attempt)
            .str(&self.data_addr);
        e.0
    }
    pub fn decode(buf: &[u8]) -> Result<Hello> {
        let mut d = Dec::new(buf);
        Ok(Hello {
            index: d.u32()? as usize,
            attempt: d.u64()?,
            data_addr: d.str()?,
        })
    }
}

/// What the driver tells each worker once all have said hello.
#[derive(Debug, Clone)]
pub struct Start {
    pub attempt: u64,
    pub workers: usize,
    pub index: usize,
    pub addrs: Vec<String>,
    /// The job, as the front end serialized it (opaque to the core).
    pub spec: Arc<Vec<u8>>,
    /// The checkpoint to restore, if any.
    pub restore: Option<String>,
}

impl Start {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut e = Enc::default();
        e.u64(self.attempt)
            .u32(self.workers as u32)
            .u32(self.index as u32)
            .u32(self.addrs.len() as u32);
        for a in &self.addrs {
            e.str(a);
        }
        e.bytes(&self.spec).opt_str(self.restore.as_deref());
        e.0
    }
    pub(crate) fn decode(buf: &[u8]) -> Result<Start> {
        let mut d = Dec::new(buf);
        let attempt = d.u64()?;
        let workers = d.u32()? as usize;
        let index = d.u32()? as usize;
        let n = d.u32()? as usize;
        let mut addrs = Vec::with_capacity(n.min(4096));
        for _ in 0..n {
            addrs.push(d.str()?);
        }
        Ok(Start {
            attempt,
            workers,
            index,
            addrs,
            spec: Arc::new(d.bytes()?.to_vec()),
            restore: d.opt_str()?,
        })
    }
}

pub(crate) fn encode_control(c: &Control) -> Vec<u8> {
    let mut e = Enc::default();
    match c {
        Control::TriggerCheckpoint(b) => {
            e.u8(1);
            put_barrier(&mut e, b);
        }
        Control::StopSource(b) => {
            e.u8(2);
            match b {
                Some(b) => {
                    e.u8(1);
                    put_barrier(&mut e, b);
                }
                None => {
                    e.u8(0);
                }
            }
        }
        Control::NotifyComplete(id) => {
            e.u8(3).u64(*id);
        }
        Control::AbortCheckpoint(id) => {
            e.u8(4).u64(*id);
        }
        Control::Finalize { commit_end_of_job } => {
            e.u8(5).u8(*commit_end_of_job as u8);
        }
        Control::Cancel => {
            e.u8(6);
        }
        Control::ExpectBarrier(id) => {
            e.u8(7).u64(*id);
        }
    }
    e.0
}

pub(crate) fn decode_control(buf: &[u8]) -> Result<Control> {
    let mut d = Dec::new(buf);
    Ok(match d.u8()? {
        1 => Control::TriggerCheckpoint(get_barrier(&mut d)?),
        2 => Control::StopSource(match d.u8()? {
            0 => None,
            _ => Some(get_barrier(&mut d)?),
        }),
        3 => Control::NotifyComplete(d.u64()?),
        4 => Control::AbortCheckpoint(d.u64()?),
        5 => Control::Finalize {
            commit_end_of_job: d.u8()? != 0,
        },
        7 => Control::ExpectBarrier(d.u64()?),
        _ => Control::Cancel,
    })
}

pub(crate) fn encode_error(e: &mut Enc, err: &Error) {
    match err {
        Error::Schema { operator, message } => {
            e.u8(1).str(operator).str(message);
        }
        Error::UserFunction {
            operator,
            message,
            traceback,
            ..
        } => {
            e.u8(2)
                .str(operator)
                .str(message)
                .opt_str(traceback.as_deref());
        }
        Error::Checkpoint { path, message } => {
            e.u8(3)
                .opt_str(path.as_ref().map(|p| p.to_string_lossy()).as_deref())
                .str(message);
        }
        Error::Scope { message } => {
            e.u8(4).str(message);
        }
        Error::Graph { operator, message } => {
            e.u8(5).str(operator).str(message);
        }
        Error::Io {
            operator,
            path,
            message,
            ..
        } => {
            e.u8(6)
                .str(operator)
                .str(&path.to_string_lossy())
                .str(message);
        }
        Error::Operator {
            operator, message, ..
        } => {
            e.u8(7).str(operator).str(message);
        }
        Error::Cancelled => {
            e.u8(8);
        }
        Error::Runtime { message, .. } => {
            e.u8(9).str(message);
        }
        Error::Storage { uri, message } => {
            e.u8(10).str(uri).str(message);
        }
        Error::JobGraph { message } => {
            e.u8(11).str(message);
        }
    }
}

pub(crate) fn decode_error(d: &mut Dec<'_>) -> Result<Error> {
    Ok(match d.u8()? {
        1 => Error::Schema {
            operator: d.str()?,
            message: d.str()?,
        },
        2 => Error::UserFunction {
            operator: d.str()?,
            message: d.str()?,
            traceback: d.opt_str()?,
            cause: None,
        },
        3 => Error::Checkpoint {
            path: d.opt_str()?.map(Into::into),
            message: d.str()?,
        },
        4 => Error::Scope { message: d.str()? },
        5 => Error::Graph {
            operator: d.str()?,
            message: d.str()?,
        },
        6 => Error::Io {
            operator: d.str()?,
            path: d.str()?.into(),
            message: d.str()?,
            source: None,
        },
        7 => Error::Operator {
            operator: d.str()?,
            message: d.str()?,
            source: None,
        },
        9 => Error::Runtime {
            message: d.str()?,
            source: None,
        },
        10 => Error::Storage {
            uri: d.str()?,
            message: d.str()?,
        },
        11 => Error::JobGraph { message: d.str()? },
        _ => Error::Cancelled,
    })
}

fn put_blob(e: &mut Enc, blob: &StateBlob) -> Result<()> {
    // Deferred views are serialized here, on the worker's report thread,
    // not on the task thread.
    e.bytes(&blob.to_bytes()?);
    Ok(())
}

/// Encodes a task report (serializing deferred state).
pub(crate) fn encode_report(r: &TaskReport) -> Result<Vec<u8>> {
    let mut e = Enc::default();
    match r {
        TaskReport::Finished { task } => {
            e.u8(1).u32(*task as u32);
        }
        TaskReport::Closed { task } => {
            e.u8(2).u32(*task as u32);
        }
        TaskReport::Failed { task, error } => {
            e.u8(3).u32(*task as u32);
            encode_error(&mut e, error);
        }
        TaskReport::Snapshot {
            task,
            checkpoint,
            states,
            alignment,
            finished,
            channels,
        } => {
            e.u8(4)
                .u32(*task as u32)
                .u64(*checkpoint)
                .u64(alignment.as_micros() as u64)
                .u8(*finished as u8)
                .u32(states.len() as u32);
            for s in states {
                e.u32(s.node as u32);
                match s.null_state {
                    Some(v) => e.u8(1).u64(v),
                    None => e.u8(0),
                };
                match &s.state.operator {
                    Some(b) => {
                        e.u8(1);
                        put_blob(&mut e, b)?;
                    }
                    None => {
                        e.u8(0);
                    }
                }
                e.u32(s.state.keyed.len() as u32);
                for (kg, b) in &s.state.keyed {
                    e.u32(*kg);
                    put_blob(&mut e, b)?;
                }
            }
            // Channel state of an unaligned checkpoint (FLIP-76): its
            // operator blob (serialized here, off the task thread).
            match channels.as_ref().and_then(|c| c.operator.as_ref()) {
                Some(b) => {
                    e.u8(1);
                    put_blob(&mut e, b)?;
                }
                None => {
                    e.u8(0);
                }
            }
        }
    }
    Ok(e.0)
}

fn get_blob(d: &mut Dec<'_>) -> Result<StateBlob> {
    Ok(StateBlob::Bytes(Arc::new(d.bytes()?.to_vec())))
}

/// Decodes a task report.
pub(crate) fn decode_report(buf: &[u8]) -> Result<TaskReport> {
    let mut d = Dec::new(buf);
    Ok(match d.u8()? {
        1 => TaskReport::Finished {
            task: d.u32()? as usize,
        },
        2 => TaskReport::Closed {
            task: d.u32()? as usize,
        },
        3 => TaskReport::Failed {
            task: d.u32()? as usize,
            error: decode_error(&mut d)?,
        },
        _ => {
            let task = d.u32()? as usize;
            let checkpoint = d.u64()?;
            let alignment = Duration::from_micros(d.u64()?);
            let finished = d.u8()? != 0;
            let n = d.u32()? as usize;
            let mut states = Vec::with_capacity(n.min(1024));
            for _ in 0..n {
                let node = d.u32()? as usize;
                let null_state = match d.u8()? {
                    0 => None,
                    _ => Some(d.u64()?),
                };
                let operator = match d.u8()? {
                    0 => None,
                    _ => Some(get_blob(&mut d)?),
                };
                let k = d.u32()? as usize;
                let mut keyed = Vec::with_capacity(k.min(1 << 16));
                for _ in 0..k {
                    let kg = d.u32()?;
                    keyed.push((kg, get_blob(&mut d)?));
                }
                states.push(NodeSnapshot {
                    node,
                    state: OperatorState { operator, keyed },
                    null_state,
                });
            }
            let channels = match d.u8()? {
                0 => None,
                _ => Some(OperatorState {
                    operator: Some(get_blob(&mut d)?),
                    keyed: Vec::new(),
                }),
            };
            TaskReport::Snapshot {
                task,
                checkpoint,
                states,
                alignment,
                finished,
                channels,
            }
        }
    })
}

/// Encodes a collect-sink operation (batches as Arrow IPC).
pub(crate) fn encode_collect(op: &CollectOp) -> Result<Vec<u8>> {
    let mut e = Enc::default();
    match op {
        CollectOp::Stage {
            checkpoint,
            subtask,
            batches,
        } => {
            e.u8(1)
                .u64(*checkpoint)
                .u32(*subtask as u32)
                .u32(batches.len() as u32);
            let mut enc = BatchEncoder::default();
            for b in batches {
                let (fresh, bytes) = enc.encode(b)?;
                e.u8(fresh as u8).bytes(&bytes);
            }
        }
        CollectOp::Commit {
            checkpoint,
            subtask,
        } => {
            e.u8(2).u64(*checkpoint).u32(*subtask as u32);
        }
        CollectOp::Restore {
            subtask,
            checkpoint,
        } => {
            e.u8(3).u32(*subtask as u32);
            match checkpoint {
                Some(c) => e.u8(1).u64(*c),
                None => e.u8(0),
            };
        }
    }
    Ok(e.0)
}

/// Decodes a collect-sink operation.
pub(crate) fn decode_collect(buf: &[u8]) -> Result<CollectOp> {
    let mut d = Dec::new(buf);
    Ok(match d.u8()? {
        1 => {
            let checkpoint = d.u64()?;
            let subtask = d.u32()? as usize;
            let n = d.u32()? as usize;
            let mut dec = BatchDecoder::default();
            let mut batches: Vec<RecordBatch> = Vec::with_capacity(n.min(1 << 16));
            for _ in 0..n {
                let fresh = d.u8()? != 0;
                let bytes = d.bytes()?.to_vec();
                batches.push(dec.decode(fresh, bytes)?);
            }
            CollectOp::Stage {
                checkpoint,
                subtask,
                batches,
            }
        }
        2 => CollectOp::Commit {
            checkpoint: d.u64()?,
            subtask: d.u32()? as usize,
        },
        _ => {
            let subtask = d.u32()? as usize;
            let checkpoint = match d.u8()? {
                0 => None,
                _ => Some(d.u64()?),
            };
            CollectOp::Restore {
                subtask,
                checkpoint,
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Barrier, BarrierKind};

    #[test]
    fn controls_round_trip() {
        let b = Barrier {
            id: 4,
            kind: BarrierKind::Checkpoint,
            aligned: true,
            timestamp_ms: 77,
        };
        for c in [
            Control::TriggerCheckpoint(b),
            Control::StopSource(Some(b)),
            Control::StopSource(None),
            Control::NotifyComplete(3),
            Control::AbortCheckpoint(5),
            Control::ExpectBarrier(6),
            Control::Finalize {
                commit_end_of_job: true,
            },
            Control::Cancel,
        ] {
            let back = decode_control(&encode_control(&c)).unwrap();
            assert_eq!(format!("{c:?}"), format!("{back:?}"));
        }
    }

    #[test]
    fn reports_round_trip_with_state_bytes() {
        let r = TaskReport::Snapshot {
            task: 3,
            checkpoint: 9,
            states: vec![NodeSnapshot {
                node: 2,
                state: OperatorState {
                    operator: Some(StateBlob::Bytes(Arc::new(vec![1, 2, 3]))),
                    keyed: vec![(5, StateBlob::Bytes(Arc::new(vec![9; 10])))],
                },
                null_state: Some(8),
            }],
            alignment: Duration::from_micros(1500),
            finished: true,
            // Channel state of an unaligned checkpoint travels too.
            channels: Some(OperatorState {
                operator: Some(StateBlob::Bytes(Arc::new(vec![7, 8]))),
                keyed: Vec::new(),
            }),
        };
        let back = decode_report(&encode_report(&r).unwrap()).unwrap();
        assert_eq!(format!("{r:?}"), format!("{back:?}"));
        let f = TaskReport::Failed {
            task: 1,
            error: Error::UserFunction {
                operator: "map".into(),
                message: "boom".into(),
                traceback: Some("Traceback".into()),
                cause: None,
            },
        };
        let back = decode_report(&encode_report(&f).unwrap()).unwrap();
        assert_eq!(format!("{f:?}"), format!("{back:?}"));
    }

    #[test]
    fn start_and_hello_round_trip() {
        let s = Start {
            attempt: 2,
            workers: 3,
            index: 1,
            addrs: vec!["127.0.0.1:1".into(), "127.0.0.1:2".into()],
            spec: Arc::new(vec![7; 100]),
            restore: Some("/tmp/x".into()),
        };
        let back = Start::decode(&s.encode()).unwrap();
        assert_eq!(format!("{s:?}"), format!("{back:?}"));
        let h = Hello {
            index: 4,
            attempt: u64::MAX,
            data_addr: "h:1".into(),
        };
        assert_eq!(
            format!("{h:?}"),
            format!("{:?}", Hello::decode(&h.encode()).unwrap())
        );
    }
}
