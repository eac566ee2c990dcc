//! Operator state as checkpoints see it (flink-fault-tolerance-mechanism.txt,
//! "asynchronous state snapshots").
//!
//! `Operator::snapshot_state` returns an [`OperatorState`] whose blobs may be
//! *deferred*: a copy-on-write view (an `Arc` of immutable per-key-group
//! state) that is serialized later, on the checkpoint writer thread, while the
//! operator keeps processing. Keyed state is always split by key group so it
//! can be redistributed when the parallelism changes.

use std::sync::Arc;

use crate::error::Result;

/// State that is serialized lazily, off the task thread.
pub trait DeferredState: Send + Sync {
    /// Serializes the captured view. Called on a background thread.
    fn serialize(&self) -> Result<Vec<u8>>;
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
