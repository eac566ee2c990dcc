//! `collect()`: a two-phase-commit sink into driver memory.
//!
//! Each subtask stages its batches per checkpoint in a shared
//! [`CollectStore`]; a completed checkpoint moves them to the committed
//! area. Staging lives in the store (in the driver), not in the subtask, so
//! it survives a subtask restart, and committing the same (checkpoint,
//! subtask) twice is a no-op.
//!
//! A subtask's state is an entry list with the one entry `(subtask,
//! checkpoint)`: restoring it commits what that subtask staged up to the
//! checkpoint. At another parallelism (FLIP-147 redistribution) the entries
//! are dealt to the new subtasks, each to exactly one.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::record_batch::RecordBatch;
use parking_lot::Mutex;

use crate::error::Result;
use crate::operator::{CheckpointedState, Collector, Operator, OperatorContext, OperatorFactory};
use crate::source::{decode_positions, encode_positions};
use crate::state::{decode_entries, encode_entries, OperatorState, Redistribution, StateBlob};

type TxnKey = (u64, usize);

/// One operation on a collect store; a worker process forwards them to the
/// driver's store (see [`CollectStore::forward_to`]).
#[derive(Debug, Clone)]
pub enum CollectOp {
    Stage {
        checkpoint: u64,
        subtask: usize,
        batches: Vec<RecordBatch>,
    },
    Commit {
        checkpoint: u64,
        subtask: usize,
    },
    Restore {
        subtask: usize,
        checkpoint: Option<u64>,
    },
}

/// Where a worker's collect store sends its operations.
pub type CollectForward = Arc<dyn Fn(CollectOp) -> Result<()> + Send + Sync>;

#[derive(Default)]
struct Inner {
    staged: BTreeMap<TxnKey, Vec<RecordBatch>>,
    committed: BTreeMap<TxnKey, Vec<RecordBatch>>,
}

/// The driver-side store of a collect sink.
#[derive(Default)]
pub struct CollectStore {
    inner: Mutex<Inner>,
    forward: Mutex<Option<CollectForward>>,
}

impl CollectStore {
    /// A new, empty store.
    pub fn new() -> Arc<Self> {
        Arc::new(CollectStore::default())
    }

    /// In a worker process: send every operation to `forward` (the driver
    /// holds the store the user reads) instead of applying it here.
    pub fn forward_to(&self, forward: CollectForward) {
        *self.forward.lock() = Some(forward);
    }

    /// Applies `op` here, or forwards it (see [`CollectStore::forward_to`]).
    pub fn apply(&self, op: CollectOp) -> Result<()> {
        let forward = self.forward.lock().clone();
        if let Some(f) = forward {
            return f(op);
        }
        match op {
            CollectOp::Stage {
                checkpoint,
                subtask,
                batches,
            } => self.stage_here(checkpoint, subtask, batches),
            CollectOp::Commit {
                checkpoint,
                subtask,
            } => self.commit_here(checkpoint, subtask),
            CollectOp::Restore {
                subtask,
                checkpoint,
            } => self.restore_here(subtask, checkpoint),
        }
        Ok(())
    }

    /// Stages (pre-commits) the batches of `subtask` for `checkpoint`.
    pub fn stage(&self, checkpoint: u64, subtask: usize, batches: Vec<RecordBatch>) -> Result<()> {
        self.apply(CollectOp::Stage {
            checkpoint,
            subtask,
            batches,
        })
    }

    /// Commits every staged transaction of `subtask` up to `checkpoint`.
    pub fn commit(&self, checkpoint: u64, subtask: usize) -> Result<()> {
        self.apply(CollectOp::Commit {
            checkpoint,
            subtask,
        })
    }

    /// Restores `subtask` at `checkpoint` (see `restore_here`).
    pub fn restore(&self, subtask: usize, checkpoint: Option<u64>) -> Result<()> {
        self.apply(CollectOp::Restore {
            subtask,
            checkpoint,
        })
    }

    fn stage_here(&self, checkpoint: u64, subtask: usize, batches: Vec<RecordBatch>) {
        let mut inner = self.inner.lock();
        if inner.committed.contains_key(&(checkpoint, subtask)) {
            return;
        }
        inner.staged.insert((checkpoint, subtask), batches);
    }

    fn commit_here(&self, checkpoint: u64, subtask: usize) {
        let mut inner = self.inner.lock();
        let keys: Vec<TxnKey> = inner
            .staged
            .keys()
            .filter(|(c, s)| *c <= checkpoint && *s == subtask)
            .copied()
            .collect();
        for k in keys {
            if let Some(b) = inner.staged.remove(&k) {
                inner.committed.entry(k).or_insert(b);
            }
        }
    }

    /// Restores `subtask` at checkpoint `checkpoint`: what it staged up to
    /// that checkpoint is committed (idempotently: that checkpoint
    /// completed), what it staged later is dropped (those checkpoints never
    /// completed, their records will be produced again). `None`: the job
    /// starts from scratch and everything `subtask` staged is dropped.
    fn restore_here(&self, subtask: usize, checkpoint: Option<u64>) {
        let mut inner = self.inner.lock();
        let keys: Vec<TxnKey> = inner
            .staged
            .keys()
            .filter(|(_, s)| *s == subtask)
            .copied()
            .collect();
        for k in keys {
            if let Some(b) = inner.staged.remove(&k) {
                if checkpoint.is_some_and(|last| k.0 <= last) {
                    inner.committed.entry(k).or_insert(b);
                }
            }
        }
    }

    /// Every committed batch, in (checkpoint, subtask) order.
    pub fn committed(&self) -> Vec<RecordBatch> {
        let inner = self.inner.lock();
        inner.committed.values().flatten().cloned().collect()
    }

    /// Number of committed rows.
    pub fn committed_rows(&self) -> usize {
        let inner = self.inner.lock();
        inner
            .committed
            .values()
            .flatten()
            .map(|b| b.num_rows())
            .sum()
    }
}

/// Factory of collect sink subtasks writing into one store.
pub struct CollectSinkFactory {
    store: Arc<CollectStore>,
}

impl CollectSinkFactory {
    /// A sink into `store`.
    pub fn new(store: Arc<CollectStore>) -> Self {
        CollectSinkFactory { store }
    }
}

impl OperatorFactory for CollectSinkFactory {
    /// One entry `(subtask, checkpoint)` per subtask.
    fn redistribution(&self) -> Redistribution {
        Redistribution::EvenSplit
    }

    fn create(&self, ctx: &OperatorContext) -> Result<Box<dyn Operator>> {
        Ok(Box::new(CollectSink {
            store: self.store.clone(),
            subtask: ctx.subtask_index,
            current: Vec::new(),
            restored: false,
        }))
    }
}

/// One subtask of a collect sink.
pub struct CollectSink {
    store: Arc<CollectStore>,
    subtask: usize,
    current: Vec<RecordBatch>,
    restored: bool,
}

impl Operator for CollectSink {
    fn open(&mut self, _ctx: &OperatorContext) -> Result<()> {
        if !self.restored {
            self.store.restore(self.subtask, None)?;
        }
        Ok(())
    }

    fn process_batch(
        &mut self,
        _input: usize,
        batch: RecordBatch,
        _out: &mut dyn Collector,
    ) -> Result<()> {
        self.current.push(batch);
        Ok(())
    }

    fn process_watermark(&mut self, _watermark: i64, _out: &mut dyn Collector) -> Result<()> {
        Ok(())
    }

    fn state(&mut self) -> Option<&mut dyn CheckpointedState> {
        Some(self)
    }
}

impl CheckpointedState for CollectSink {
    fn snapshot_state(&mut self, checkpoint_id: u64) -> Result<OperatorState> {
        let batches = std::mem::take(&mut self.current);
        self.store.stage(checkpoint_id, self.subtask, batches)?;
        let entry = encode_positions(&[self.subtask as u64, checkpoint_id]);
        Ok(OperatorState {
            operator: Some(StateBlob::Bytes(Arc::new(encode_entries(&[entry])))),
            keyed: Vec::new(),
        })
    }

    /// Commits what the old subtasks of its entries staged up to their
    /// checkpoint. At another parallelism each old subtask's entry lands
    /// on exactly one new subtask, so each is committed once.
    fn restore_state(&mut self, state: OperatorState) -> Result<()> {
        let malformed =
            || crate::error::Error::checkpoint(None, "the collect sink's state is malformed");
        let bytes = state
            .operator
            .as_ref()
            .and_then(|b| b.as_bytes())
            .ok_or_else(malformed)?;
        match decode_entries(bytes) {
            Some(entries) => {
                for e in entries {
                    let f = decode_positions(&e, 2).ok_or_else(malformed)?;
                    let old = usize::try_from(f[0]).map_err(|_| malformed())?;
                    self.store.restore(old, Some(f[1]))?;
                }
            }
            None => {
                // State of an older checkpoint: this subtask's checkpoint.
                let checkpoint = <[u8; 8]>::try_from(bytes)
                    .map(u64::from_le_bytes)
                    .map_err(|_| malformed())?;
                self.store.restore(self.subtask, Some(checkpoint))?;
            }
        }
        self.restored = true;
        Ok(())
    }

    fn notify_checkpoint_complete(&mut self, checkpoint_id: u64) -> Result<()> {
        self.store.commit(checkpoint_id, self.subtask)
    }
}
