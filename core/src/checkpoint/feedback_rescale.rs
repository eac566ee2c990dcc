//! Restoring a loop head's feedback state at another parallelism (DESIGN.md
//! "Unaligned checkpoints", "Loops"; FLIP-16 and FLIP-76's rescaling of
//! in-flight data applied to the feedback channel of FLIP-15).
//!
//! A loop head subtask's state is the feedback in flight at the checkpoint:
//! the FLIP-16 log of an aligned checkpoint (one Arrow IPC stream) or the
//! feedback channel state of an unaligned one (the channel-state format, one
//! channel per feedback queue). It holds records whose effect is in no
//! operator's state; the head re-emits them into the body before anything
//! else. The feedback edge is never keyed (`spawn.rs` `wire_feedback`:
//! forward from tail subtask `t` to head subtask `t` at equal parallelism,
//! rebalance otherwise), so which head subtask re-emits a record does not
//! matter; what matters is that every record is re-emitted exactly once and
//! that one old queue's records keep their order. At another parallelism
//! the whole state of old head subtask `d` therefore goes to new subtask
//! `d % p` (as a forward channel's state does in `channel_rescale.rs`),
//! appended in old-subtask order, and is handed over as one channel of
//! channel state.

use std::io::Cursor;

use arrow::ipc::reader::StreamReader;
use arrow::record_batch::RecordBatch;

use crate::checkpoint::channel_state;
use crate::error::{Error, Result};

/// The feedback records of one loop head subtask's state, in order: `bytes`
/// is a FLIP-16 log or feedback channel state. Errors name `head`.
pub fn decode_feedback(head: &str, bytes: &[u8]) -> Result<Vec<RecordBatch>> {
    if bytes.is_empty() {
        return Ok(Vec::new());
    }
    if channel_state::is_encoded(bytes) {
        let name = format!("{head} (feedback)");
        let queues = channel_state::decode(&name, bytes)?;
        return Ok(queues.into_iter().flatten().collect());
    }
    let corrupt = |e: arrow::error::ArrowError| {
        Error::checkpoint(
            None,
            format!("the feedback log of loop head '{head}' is corrupt: {e}"),
        )
    };
    let reader = StreamReader::try_new(Cursor::new(bytes), None).map_err(corrupt)?;
    reader.map(|b| b.map_err(corrupt)).collect()
}

/// The feedback state new head subtask `subtask` of `new_p` restores, from
/// the states `old` of the old head subtasks (`None`: it wrote nothing):
/// every old subtask `d` with `d % new_p == subtask`, in order, as one
/// channel of channel state; `None` when that is no record at all.
pub fn redistribute_feedback(
    head: &str,
    old: &[Option<&[u8]>],
    subtask: usize,
    new_p: usize,
) -> Result<Option<Vec<u8>>> {
    let mut mine = Vec::new();
    for (d, bytes) in old.iter().enumerate() {
        if d % new_p.max(1) != subtask {
            continue;
        }
        if let Some(bytes) = bytes {
            mine.extend(decode_feedback(head, bytes)?);
        }
    }
    if mine.iter().all(|b| b.num_rows() == 0) {
        return Ok(None);
    }
    let name = format!("{head} (feedback)");
    Ok(Some(channel_state::encode(&name, &[mine])?))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{ArrayRef, AsArray, Int64Array};
    use arrow::datatypes::Int64Type;
    use arrow::ipc::writer::StreamWriter;

    use super::*;

    fn batch(values: &[i64]) -> RecordBatch {
        let a: ArrayRef = Arc::new(Int64Array::from(values.to_vec()));
        RecordBatch::try_from_iter([("value", a)]).unwrap()
    }

    fn flip16_log(batches: &[RecordBatch]) -> Vec<u8> {
        let mut w = StreamWriter::try_new(Vec::new(), &batches[0].schema()).unwrap();
        for b in batches {
            w.write(b).unwrap();
        }
        w.into_inner().unwrap()
    }

    fn values(bytes: &[u8]) -> Vec<i64> {
        decode_feedback("h", bytes)
            .unwrap()
            .iter()
            .flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().to_vec())
            .collect()
    }

    #[test]
    fn test_every_old_subtasks_feedback_goes_to_exactly_one_new_subtask_in_order() {
        // Old subtask 0: a FLIP-16 log; 1: channel state of two queues; 2:
        // nothing; 3: an empty (nothing logged) state.
        let log = flip16_log(&[batch(&[1, 2]), batch(&[3])]);
        let chst =
            channel_state::encode("h", &[vec![batch(&[10])], vec![batch(&[11, 12])]]).unwrap();
        let old: Vec<Option<&[u8]>> = vec![Some(&log), Some(&chst), None, Some(&[])];
        for new_p in 1..=5 {
            let mut all = Vec::new();
            for s in 0..new_p {
                let got = redistribute_feedback("h", &old, s, new_p).unwrap();
                let v = got.as_deref().map(values).unwrap_or_default();
                let expected: Vec<i64> = [vec![1, 2, 3], vec![10, 11, 12]]
                    .into_iter()
                    .enumerate()
                    .filter(|(d, _)| d % new_p == s)
                    .flat_map(|(_, v)| v)
                    .collect();
                assert_eq!(v, expected, "subtask {s} of {new_p}");
                all.extend(v);
            }
            all.sort_unstable();
            assert_eq!(all, vec![1, 2, 3, 10, 11, 12], "at {new_p}");
        }
    }

    #[test]
    fn test_a_corrupt_log_is_a_checkpoint_error_naming_the_head() {
        let err = redistribute_feedback("loop head x", &[Some(b"garbage".as_slice())], 0, 1)
            .unwrap_err()
            .to_string();
        assert!(err.contains("loop head x"), "{err}");
    }
}
