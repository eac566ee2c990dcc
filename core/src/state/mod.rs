//! Operator state as checkpoints see it (flink-fault-tolerance-mechanism.txt,
//! "asynchronous state snapshots").
//!
//! `Operator::snapshot_state` returns an [`OperatorState`] whose blobs may be
//! *deferred*: a copy-on-write view (an `Arc` of immutable per-key-group
//! state) that is serialized later, on the checkpoint writer thread, while the
//! operator keeps processing. Keyed state is always split by key group so it
//! can be redistributed when the parallelism changes.

pub mod group_watermarks;
pub mod keyed;
pub(crate) mod keyed_slots;

use std::sync::Arc;

use crate::error::Result;

/// Encodes one versioned key-group blob: the format `version` byte, then
/// `columns` under `schema` as one Arrow IPC stream (the layout the keyed
/// aggregates and the windows share).
pub(crate) fn encode_ipc_blob(
    version: u8,
    schema: &arrow::datatypes::SchemaRef,
    columns: Vec<arrow::array::ArrayRef>,
) -> std::result::Result<Vec<u8>, arrow::error::ArrowError> {
    use arrow::array::Array;
    // Sized for the whole stream up front (the column buffers, the validity
    // bitmaps the IPC writer adds for columns without nulls, the messages):
    // growing it by doubling would copy a large key group's bytes several
    // times and touch twice the memory (benches/RESULTS.md "W3: the
    // checkpoint cost, cut").
    let rows = columns.first().map_or(0, |c| c.len());
    let capacity = columns
        .iter()
        .map(|c| c.get_buffer_memory_size() + rows / 8 + 64)
        .sum::<usize>()
        + 4096;
    let batch = arrow::record_batch::RecordBatch::try_new(schema.clone(), columns)?;
    let mut out = Vec::with_capacity(capacity);
    out.push(version);
    let mut writer = arrow::ipc::writer::StreamWriter::try_new(&mut out, schema)?;
    writer.write(&batch)?;
    writer.finish()?;
    drop(writer);
    Ok(out)
}

/// Encodes a list of u64 positions as an offset or state entry.
pub fn encode_positions(positions: &[u64]) -> Vec<u8> {
    positions.iter().flat_map(|p| p.to_le_bytes()).collect()
}

/// Decodes `n` u64 positions; `None` when the bytes do not have that shape.
pub fn decode_positions(bytes: &[u8], n: usize) -> Option<Vec<u64>> {
    if bytes.len() != n * 8 {
        return None;
    }
    Some(
        bytes
            .chunks_exact(8)
            .map(|c| {
                let mut a = [0u8; 8];
                a.copy_from_slice(c);
                u64::from_le_bytes(a)
            })
            .collect(),
    )
}

/// State that is serialized lazily, off the task thread.
pub trait DeferredState: Send + Sync {
    /// Serializes the captured view. Called on a background thread.
    fn serialize(&self) -> Result<Vec<u8>>;

    /// A change token of the captured view, for operators that track
    /// changes (incremental checkpoints, `checkpoint/incremental.rs`): two
    /// views of the same key group with equal tokens serialize to equal
    /// bytes, so a view whose token the last checkpoint recorded is not
    /// serialized again. Tokens must be unique across operator instances
    /// (see [`change_token_base`]). `None`: unknown, compare the bytes.
    fn token(&self) -> Option<u64> {
        None
    }

    /// The serialized bytes as runs the view already holds (their
    /// concatenation is what [`DeferredState::serialize`] returns), so a
    /// writer can write them without joining them into one buffer first (a
    /// Python sink's pending transactions: `python/src/entries.rs`). `None`:
    /// call `serialize`.
    fn runs(&self) -> Option<Vec<&[u8]>> {
        None
    }
}

/// A fresh, process-wide unique base for the change tokens of one operator
/// instance: its upper 32 bits number the instance, so tokens of another
/// instance (a restarted attempt) never equal its own.
pub fn change_token_base() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed) << 32
}

/// One unit of state: bytes, or a view to serialize later.
#[derive(Clone)]
pub enum StateBlob {
    Bytes(Arc<Vec<u8>>),
    Deferred(Arc<dyn DeferredState>),
}

impl std::fmt::Debug for StateBlob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StateBlob::Bytes(b) => write!(f, "StateBlob::Bytes({} bytes)", b.len()),
            StateBlob::Deferred(_) => f.write_str("StateBlob::Deferred"),
        }
    }
}

impl StateBlob {
    /// The serialized bytes (serializing a deferred view).
    pub fn to_bytes(&self) -> Result<Arc<Vec<u8>>> {
        match self {
            StateBlob::Bytes(b) => Ok(b.clone()),
            StateBlob::Deferred(d) => Ok(Arc::new(d.serialize()?)),
        }
    }

    /// The change token of a deferred view ([`DeferredState::token`]).
    pub fn token(&self) -> Option<u64> {
        match self {
            StateBlob::Bytes(_) => None,
            StateBlob::Deferred(d) => d.token(),
        }
    }

    /// Bytes already in hand, if this blob is not deferred.
    pub fn as_bytes(&self) -> Option<&[u8]> {
        match self {
            StateBlob::Bytes(b) => Some(b.as_slice()),
            StateBlob::Deferred(_) => None,
        }
    }
}

/// The state of one operator instance at a checkpoint.
#[derive(Debug, Clone, Default)]
pub struct OperatorState {
    /// Non-keyed ("operator") state: source offsets, sink transactions, ...
    pub operator: Option<StateBlob>,
    /// Keyed state, one blob per key group (absolute key-group index).
    pub keyed: Vec<(u32, StateBlob)>,
}

impl OperatorState {
    /// Whether the operator holds no state at all.
    pub fn is_empty(&self) -> bool {
        self.operator.is_none() && self.keyed.is_empty()
    }
}

/// The first bytes of non-keyed state held as a list of entries.
pub const ENTRY_LIST_MAGIC: [u8; 8] = *b"EDLIST01";

/// Encodes non-keyed state as a list of independent entries, Flink's
/// operator list state (FLIP-147, "partially finished operators"): each
/// entry (a source split with its offset, a pending transaction, ...) can be
/// restored by any subtask, so the entries of all old subtasks can be dealt
/// to the subtasks of another parallelism.
///
/// Layout (little-endian): `"EDLIST01"` | count u64 | per entry: length
/// u64 | bytes, zero-padded to a multiple of 8. Entries whose lengths are
/// multiples of 8 (the built-in sources' u64 fields) keep the whole
/// encoding a sequence of u64 words.
pub fn encode_entries<B: AsRef<[u8]>>(entries: &[B]) -> Vec<u8> {
    let mut out = Vec::with_capacity(
        16 + entries
            .iter()
            .map(|e| 8 + e.as_ref().len().next_multiple_of(8))
            .sum::<usize>(),
    );
    out.extend_from_slice(&ENTRY_LIST_MAGIC);
    out.extend_from_slice(&(entries.len() as u64).to_le_bytes());
    for e in entries {
        let e = e.as_ref();
        out.extend_from_slice(&(e.len() as u64).to_le_bytes());
        out.extend_from_slice(e);
        out.resize(out.len().next_multiple_of(8), 0);
    }
    out
}

/// Decodes what [`encode_entries`] wrote; `None` when `bytes` is not an
/// entry list (state written in another format, e.g. before entry lists
/// existed) or is malformed.
pub fn decode_entries(bytes: &[u8]) -> Option<Vec<Vec<u8>>> {
    let rest = bytes.strip_prefix(&ENTRY_LIST_MAGIC)?;
    let word = |b: &[u8], at: usize| -> Option<u64> {
        let w: [u8; 8] = b.get(at..at + 8)?.try_into().ok()?;
        Some(u64::from_le_bytes(w))
    };
    let count = usize::try_from(word(rest, 0)?).ok()?;
    let mut at = 8;
    let mut entries = Vec::with_capacity(count.min(rest.len() / 8));
    for _ in 0..count {
        let len = usize::try_from(word(rest, at)?).ok()?;
        at += 8;
        let end = at.checked_add(len)?;
        entries.push(rest.get(at..end)?.to_vec());
        at = end.checked_next_multiple_of(8)?;
    }
    (at == rest.len()).then_some(entries)
}

/// How an operator's non-keyed state is handed to the subtasks of a restore
/// at another parallelism (keyed state always moves by key group).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Redistribution {
    /// Every subtask writes an entry list ([`encode_entries`]); on restore
    /// the entries of all old subtasks, in subtask order, are dealt
    /// round-robin to the new subtasks (entry `j` to subtask `j % p`). A
    /// subtask that finished contributes the entries it has left (none for
    /// a source that read everything). Each entry lands on exactly one new
    /// subtask, so a pending transaction is committed by exactly one.
    EvenSplit,
    /// Every subtask writes an entry list; on restore at another
    /// parallelism every new subtask gets the entries of all old subtasks,
    /// in subtask order (Flink's union list state), and keeps what
    /// concerns it (a timestamp assigner: the watermarks of the splits it
    /// reads now, and the smallest watermark of the old subtasks).
    Union,
    /// Broadcast state (Flink's broadcast state pattern): every subtask
    /// holds the same state once it has read the same broadcast rows, but an
    /// unaligned checkpoint may catch the subtasks at different offsets of
    /// the broadcast stream, so every subtask writes its own copy and new
    /// subtask `i` restores old subtask `i mod p_old`'s, together with that
    /// subtask's broadcast rows in flight (docs/DESIGN.md "Unaligned
    /// checkpoints"). A checkpoint in which subtask 0 alone wrote it gives
    /// every subtask subtask 0's copy (and rows in flight). When the
    /// subtasks write entry lists (subtask 0 the broadcast state among its
    /// entries, every subtask entries of its own: a keyed broadcast process
    /// function's watermark), every subtask of every restore gets the entries
    /// of all old subtasks, in subtask order (`checkpoint/restore.rs`
    /// `broadcast_for`).
    Broadcast,
    /// The state belongs to the subtask that wrote it; restoring it at
    /// another parallelism is refused with this reason.
    Unsupported(String),
}

impl Redistribution {
    /// The default of operators that did not choose: their non-keyed state
    /// stays with its subtask.
    pub fn unsupported() -> Self {
        Redistribution::Unsupported(
            "its non-keyed state belongs to the subtask that wrote it and cannot be split \
             or merged"
                .into(),
        )
    }
}

/// The entries of all old subtasks (`old[s]`: subtask `s`'s non-keyed
/// state, if any), in subtask order: what every new subtask gets under
/// [`Redistribution::Union`]. `Err(s)`: old subtask `s` holds state that is
/// not an entry list.
pub fn union_entries(old: &[Option<&[u8]>]) -> std::result::Result<Vec<Vec<u8>>, usize> {
    let mut all = Vec::new();
    for (s, blob) in old.iter().enumerate() {
        let Some(blob) = blob else { continue };
        all.extend(decode_entries(blob).ok_or(s)?);
    }
    Ok(all)
}

/// Deals the entry lists of the old subtasks (`old[s]`: subtask `s`'s
/// non-keyed state, if any) to `parallelism` new subtasks, round-robin in
/// entry order. `Err(s)`: old subtask `s` holds state that is not an entry
/// list.
pub fn even_split(
    old: &[Option<&[u8]>],
    parallelism: usize,
) -> std::result::Result<Vec<Vec<Vec<u8>>>, usize> {
    let p = parallelism.max(1);
    let mut new = vec![Vec::new(); p];
    let mut next = 0;
    for (s, blob) in old.iter().enumerate() {
        let Some(blob) = blob else { continue };
        for e in decode_entries(blob).ok_or(s)? {
            new[next % p].push(e);
            next += 1;
        }
    }
    Ok(new)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_lists_round_trip_and_stay_word_aligned() {
        let entries = vec![vec![], vec![1u8, 2, 3], vec![7u8; 16]];
        let bytes = encode_entries(&entries);
        assert_eq!(bytes.len() % 8, 0);
        assert_eq!(decode_entries(&bytes), Some(entries));
        assert_eq!(
            decode_entries(&encode_entries::<Vec<u8>>(&[])),
            Some(vec![])
        );
    }

    #[test]
    fn other_blobs_are_not_entry_lists() {
        assert_eq!(decode_entries(&42u64.to_le_bytes()), None);
        assert_eq!(decode_entries(b""), None);
        let mut truncated = encode_entries(&[vec![1u8; 9]]);
        truncated.pop();
        assert_eq!(decode_entries(&truncated), None);
        let mut extended = encode_entries(&[vec![1u8; 8]]);
        extended.push(0);
        assert_eq!(decode_entries(&extended), None);
    }

    #[test]
    fn even_split_deals_every_entry_once_in_order() {
        let a = encode_entries(&[b"a0".to_vec(), b"a1".to_vec(), b"a2".to_vec()]);
        let b = encode_entries(&[b"b0".to_vec()]);
        let done = encode_entries::<Vec<u8>>(&[]);
        let old = [
            Some(a.as_slice()),
            Some(done.as_slice()),
            None,
            Some(b.as_slice()),
        ];
        let new = even_split(&old, 3).unwrap();
        assert_eq!(
            new,
            vec![
                vec![b"a0".to_vec(), b"b0".to_vec()],
                vec![b"a1".to_vec()],
                vec![b"a2".to_vec()],
            ]
        );
        let one = even_split(&old, 1).unwrap();
        assert_eq!(one[0].len(), 4);
        let legacy = 5u64.to_le_bytes();
        assert_eq!(even_split(&[Some(a.as_slice()), Some(&legacy)], 2), Err(1));
    }
}
