//! The task's side of recovery by recomputation (FLINK-4120; the protocol
//! is described in [`crate::checkpoint::recompute`]).
//!
//! A task holds one [`TaskRecompute`]: which of its operators recompute
//! (they take no state snapshot and report a null-state watermark), the
//! checkpoint its operators start from, and, while a recompute recovery
//! replays, the id of the restored checkpoint whose barrier ends the replay.
//! Barriers with an id up to it are *replayed*: they pass every operator
//! (which learns the epoch) but nothing is snapshotted nor reported.
//! Persisted operators drop their input until that barrier passed the task
//! (with aligned barriers that is when it passed on all inputs). A source
//! task also re-injects the replayed barriers at their recorded offsets and
//! holds back the triggers of new checkpoints until the replay is over.

use crate::checkpoint::recompute::{recomputed_nodes, Recovery};
use crate::checkpoint::{ReplayPlan, RestoredCheckpoint, SourceReplay};
use crate::error::Result;
use crate::event::{Barrier, BarrierKind};
use crate::graph::{JobGraph, NodeKind};
use crate::operator::Operator;

/// What recompute means for one attempt: who recomputes from now on, and
/// what the restore replays.
#[derive(Debug, Default)]
pub(crate) struct AttemptRecompute {
    /// Per node: recomputes (writes no state into checkpoints).
    pub recomputed: Vec<bool>,
    /// Per node: was recomputed in the restored checkpoint (starts empty
    /// and processes the replay instead of dropping it).
    pub replayed: Vec<bool>,
    /// The replay of the restore, if it needs one.
    pub plan: Option<ReplayPlan>,
    /// Per node: the checkpoint it starts from when replayed (a leaf starts
    /// at its own null-state watermark and drops the replay before it).
    pub starts: Vec<u64>,
    /// The restored checkpoint (0: none).
    pub restored: u64,
}

impl AttemptRecompute {
    /// Decides it for an attempt of `graph` restored from `restored`.
    pub fn prepare(
        graph: &JobGraph,
        recovery: Recovery,
        restored: Option<&RestoredCheckpoint>,
    ) -> Result<Self> {
        let plan = match restored {
            Some(rc) => ReplayPlan::for_restore(graph, rc)?,
            None => None,
        };
        let replayed = graph
            .nodes
            .iter()
            .map(|n| {
                plan.is_some()
                    && restored.is_some_and(|rc| {
                        rc.manifest()
                            .operator(&n.uid)
                            .is_some_and(|o| o.null_state_checkpoint.is_some())
                    })
            })
            .collect();
        let replayed: Vec<bool> = replayed;
        let from = plan.as_ref().map_or(0, |p| p.from);
        let starts = graph
            .nodes
            .iter()
            .map(|n| {
                let leaf = graph.consumers(n.id).iter().all(|c| !replayed[*c]);
                let own = restored
                    .and_then(|rc| rc.manifest().operator(&n.uid))
                    .and_then(|o| o.null_state_checkpoint);
                match own {
                    Some(w) if replayed[n.id] && leaf => w.max(from),
                    _ => from,
                }
            })
            .collect();
        Ok(AttemptRecompute {
            recomputed: recomputed_nodes(graph, recovery, restored),
            replayed,
            starts,
            plan,
            restored: restored.map_or(0, RestoredCheckpoint::id),
        })
    }

    /// Whether the chain of `nodes` takes part in the replay (it must run
    /// even if it had finished in the restored checkpoint).
    pub fn replays_chain(&self, graph: &JobGraph, nodes: &[usize]) -> bool {
        self.plan.is_some()
            && nodes
                .iter()
                .any(|n| self.replayed[*n] || matches!(graph.nodes[*n].kind, NodeKind::Source(_)))
    }

    /// The offset a source subtask seeks to: `Some(None)` for the start of
    /// its input, `None` when it restores as usual.
    pub fn source_start(&self, uid: &str, subtask: usize) -> Option<Option<Vec<u8>>> {
        let plan = self.plan.as_ref()?;
        let r = plan.sources.get(&(uid.to_string(), subtask as u32))?;
        Some(r.start.clone())
    }

    /// The bookkeeping of subtask `subtask` of the chain of `nodes`, whose
    /// operators (not the source) are `op_nodes`.
    pub fn for_task(
        &self,
        graph: &JobGraph,
        nodes: &[usize],
        op_nodes: &[usize],
        subtask: usize,
    ) -> TaskRecompute {
        let source = nodes.iter().find_map(|n| {
            let node = &graph.nodes[*n];
            matches!(node.kind, NodeKind::Source(_))
                .then(|| {
                    self.plan
                        .as_ref()
                        .and_then(|p| p.sources.get(&(node.uid.clone(), subtask as u32)))
                        .cloned()
                })
                .flatten()
        });
        TaskRecompute {
            recomputed: op_nodes.iter().map(|n| self.recomputed[*n]).collect(),
            replayed: op_nodes.iter().map(|n| self.replayed[*n]).collect(),
            start_epochs: op_nodes
                .iter()
                .map(|n| match &self.plan {
                    Some(_) if self.replayed[*n] => self.starts[*n],
                    _ => self.restored,
                })
                .collect(),
            passed: self.plan.as_ref().map_or(0, |p| p.from),
            replay_until: self.plan.as_ref().map(|p| p.until),
            source,
            deferred: Vec::new(),
        }
    }
}

/// Recompute bookkeeping of one task (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct TaskRecompute {
    /// Per operator of the chain: it recomputes instead of persisting.
    pub recomputed: Vec<bool>,
    /// Per operator of the chain: it rebuilds its state from the replay.
    pub replayed: Vec<bool>,
    /// Per operator: the checkpoint it starts from (0: the job start).
    pub start_epochs: Vec<u64>,
    /// While replaying: the restored checkpoint whose barrier ends it.
    pub replay_until: Option<u64>,
    /// For a source task: the barriers to re-inject.
    pub source: Option<SourceReplay>,
    /// Checkpoint triggers that arrived while the source replayed.
    pub deferred: Vec<Barrier>,
    /// The last replayed barrier that passed (the replay start before).
    pub passed: u64,
}

impl TaskRecompute {
    /// Whether input is being replayed.
    pub fn replaying(&self) -> bool {
        self.replay_until.is_some()
    }

    /// Whether operator `i` drops its input now: while replaying, a
    /// persisted operator until the end of the replay, a recomputed one
    /// until the barrier of the checkpoint it starts from passed.
    pub fn drops(&self, i: usize) -> bool {
        self.replaying()
            && (!self.replayed.get(i).copied().unwrap_or(false)
                || self.passed < self.start_epoch(i))
    }

    /// The checkpoint operator `i` starts from.
    pub fn start_epoch(&self, i: usize) -> u64 {
        self.start_epochs.get(i).copied().unwrap_or(0)
    }

    /// Whether `barrier` is one of the replayed ones.
    pub fn is_replayed(&self, barrier: &Barrier) -> bool {
        barrier.kind == BarrierKind::Checkpoint
            && self.replay_until.is_some_and(|until| barrier.id <= until)
    }

    /// Whether operator `i` snapshots its state for `barrier` (recomputed
    /// operators write none into checkpoints; savepoints hold everything).
    /// Once the task `finished`, a recomputed operator's state is final: it
    /// is reported, and the coordinator writes it only into the final
    /// checkpoint (FLIP-147), for `read_state` (`coordinator.rs`).
    pub fn persists(&self, i: usize, barrier: &Barrier, finished: bool) -> bool {
        barrier.kind == BarrierKind::Savepoint
            || finished
            || !self.recomputed.get(i).copied().unwrap_or(false)
    }

    /// The null-state watermark operator `i` reports with `barrier`.
    pub fn null_state(
        &self,
        i: usize,
        op: &mut dyn Operator,
        barrier: &Barrier,
    ) -> Result<Option<u64>> {
        if barrier.kind != BarrierKind::Checkpoint || self.recomputed.get(i).copied() != Some(true)
        {
            return Ok(None);
        }
        match op.recompute() {
            Some(r) => r.null_state_watermark(barrier.id),
            None => Ok(None),
        }
    }

    /// A replayed barrier passed: returns true when it ended the replay.
    pub fn passed(&mut self, barrier: &Barrier) -> bool {
        self.passed = barrier.id;
        if self.replay_until == Some(barrier.id) {
            self.replay_until = None;
            true
        } else {
            false
        }
    }

    /// A source's barriers due at `offset`.
    pub fn due(&mut self, offset: &[u8], source: &str) -> Result<Vec<Barrier>> {
        match &mut self.source {
            Some(r) if r.is_active() => r.due(offset, source),
            _ => Ok(Vec::new()),
        }
    }

    /// A source's barriers of checkpoints taken after it had finished: they
    /// go after its final watermark.
    pub fn take_after_end(&mut self) -> Vec<Barrier> {
        self.source
            .as_mut()
            .map(SourceReplay::take_after_end)
            .unwrap_or_default()
    }

    /// A source's input ended: every replayed barrier must have been met.
    pub fn check_end(&self, offset: &[u8], source: &str) -> Result<()> {
        match &self.source {
            Some(r) => r.check_end(offset, source),
            None => Ok(()),
        }
    }
}
