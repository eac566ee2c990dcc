//! Completing a checkpoint (flink-fault-tolerance-mechanism.txt,
//! "checkpointing"): once every task acknowledged and every state file is
//! written, the final state held back for recompute recovery is written if
//! the checkpoint turns out final (FLIP-147, FLINK-4120), the manifest is
//! written last, and only then are retention, the stats, the tasks (two-phase
//! commit) and the waiters told.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{now_ms, Coordinator, InFlight, Outgoing, TaskInfo, Waiter};
use crate::checkpoint::channel_state::manifest_entry;
use crate::checkpoint::incremental::SubtaskBase;
use crate::checkpoint::recompute::{NullStateOutcome, Recovery};
use crate::checkpoint::restore::key_identity;
use crate::checkpoint::{
    CheckpointDone, CheckpointFailure, CheckpointInfo, CheckpointStats, OperatorEntry,
    PendingCheckpoint, SubtaskEntry,
};
use crate::error::Error;
use crate::event::{Barrier, BarrierKind};
use crate::graph::JobGraph;

impl Coordinator {
    /// Completes the checkpoint in flight once every task reported and every
    /// state file is written.
    pub(super) fn maybe_complete(
        &mut self,
        graph: &JobGraph,
        tasks: &[TaskInfo],
        out: &mut Vec<Outgoing>,
    ) {
        if !self.ready_to_complete() {
            return;
        }
        let Some(f) = self.inflight.take() else {
            return;
        };
        let id = f.barrier.id;
        let null_state = if f.barrier.kind == BarrierKind::Checkpoint
            && self.config.recovery == Recovery::Recompute
        {
            Some(
                self.ledger
                    .resolve(graph, &self.recomputed, id, &f.null_states),
            )
        } else {
            None
        };
        let info = CheckpointInfo {
            kind: f.barrier.kind,
            trigger_ms: f.barrier.timestamp_ms,
            completion_ms: Some(now_ms()),
            alignments: f.alignments.clone(),
            operators: self.manifest_operators(graph, tasks, &f, null_state.as_ref()),
            final_state: f.final_state,
        };
        let mut stats = completed_stats(graph, &f, null_state.as_ref());
        let (pending, settled) = f.settle();
        match pending.complete(info) {
            Ok(_) => {
                stats.duration = settled.started.elapsed();
                self.completed(settled, stats, null_state.as_ref(), out);
            }
            Err(e) => self.manifest_failed(settled, e, out),
        }
    }

    /// Whether the checkpoint in flight can complete now: every task
    /// reported and every write is done. The final checkpoint (FLIP-147)
    /// first writes the final state held for it (nothing is left to
    /// recompute after it), and completes when those writes are done.
    fn ready_to_complete(&mut self) -> bool {
        let Some(f) = self.inflight.as_mut() else {
            return false;
        };
        let done = f.reported.iter().all(|r| *r) && f.outstanding.iter().all(|o| *o == 0);
        if !done {
            return false;
        }
        if !f.final_state
            && f.barrier.kind == BarrierKind::Checkpoint
            && f.finished_at_ack.iter().all(|x| *x)
        {
            f.final_state = true;
            let held = std::mem::take(&mut f.held);
            if !held.is_empty() {
                for job in held {
                    f.outstanding[job.task] += 1;
                    self.writers.submit(job);
                }
                return false;
            }
        }
        true
    }

    /// The manifest's entry of every node (its subtasks' state files are
    /// filled in by the pending checkpoint), then the channel-state entries.
    fn manifest_operators(
        &self,
        graph: &JobGraph,
        tasks: &[TaskInfo],
        f: &InFlight,
        null_state: Option<&NullStateOutcome>,
    ) -> Vec<OperatorEntry> {
        let mut operators = Vec::new();
        for node in &graph.nodes {
            let node_tasks: Vec<usize> = tasks
                .iter()
                .enumerate()
                .filter(|(_, t)| t.nodes.contains(&node.id))
                .map(|(i, _)| i)
                .collect();
            let finished = node_tasks.iter().all(|t| f.finished_at_ack[*t]);
            operators.push(OperatorEntry {
                uid: node.uid.clone(),
                name: node.name.clone(),
                finished,
                null_state_checkpoint: null_state.and_then(|o| o.per_node[node.id]),
                schema: self.schemas.get(node.id),
                key: key_identity(graph, node),
                subtasks: (0..node.parallelism)
                    .map(|s| SubtaskEntry {
                        subtask: s as u32,
                        state: None,
                        reused: Vec::new(),
                        source_offsets: f.offsets.get(&(node.id, s)).cloned().unwrap_or_default(),
                        finished: node_tasks
                            .iter()
                            .any(|t| tasks[*t].subtask == s && f.finished_at_ack[*t]),
                    })
                    .collect(),
            });
        }
        operators.extend(
            f.channel_nodes
                .iter()
                .map(|&n| manifest_entry(&graph.nodes[n])),
        );
        operators
    }

    /// The manifest is written: retention runs (for checkpoints), the stats
    /// are published, then the tasks and the waiters are told.
    fn completed(
        &mut self,
        f: Settled,
        mut stats: CheckpointStats,
        null_state: Option<&NullStateOutcome>,
        out: &mut Vec<Outgoing>,
    ) {
        let id = f.barrier.id;
        let is_checkpoint = f.barrier.kind == BarrierKind::Checkpoint;
        if is_checkpoint {
            self.last_completed = Some(id);
            if f.incremental {
                self.bases = f.bases;
            }
            let since = null_state.map_or(u64::MAX, |o| o.null_state_checkpoint);
            stats.retention_errors = self.retain(id, since);
            if null_state.is_some() {
                if let Ok(kept) = self.storage.list() {
                    if let Some(oldest) = kept.last() {
                        self.ledger.forget_before(oldest.id);
                    }
                }
            }
        }
        // Published after retention: whoever sees the stats of a
        // checkpoint sees the storage as it leaves it.
        let path = stats.path.clone();
        self.stats.lock().push(stats);
        if f.notify {
            out.push(Outgoing::Notify { checkpoint: id });
        }
        if let Some(stop) = &mut self.stopping {
            if !is_checkpoint {
                stop.savepoint_done = true;
            }
        }
        if f.notify && f.all_finished {
            self.final_done = true;
            if let Some(stop) = &mut self.stopping {
                stop.finalized = true;
            }
            out.push(Outgoing::Finalize);
        }
        let done = CheckpointDone { id, path };
        for w in f.waiters {
            // No receiver: whoever asked stopped waiting for the answer.
            let _ = w.send(Ok(done.clone()));
        }
    }

    /// Writing the manifest failed: the checkpoint is aborted and its
    /// waiters get the cause.
    fn manifest_failed(&mut self, f: Settled, e: Error, out: &mut Vec<Outgoing>) {
        let id = f.barrier.id;
        self.ledger.discard(id);
        self.failed.record(CheckpointFailure {
            id,
            kind: f.barrier.kind,
            reason: format!("its manifest could not be written: {e}"),
        });
        out.push(Outgoing::Abort { checkpoint: id });
        for w in f.waiters {
            // No receiver: whoever asked stopped waiting for the answer.
            let _ = w.send(Err(e.clone()));
        }
    }
}

/// What the completion of a checkpoint reports, once its pending
/// checkpoint is split off to write the manifest.
struct Settled {
    barrier: Barrier,
    started: Instant,
    notify: bool,
    /// Every task had finished when it acknowledged.
    all_finished: bool,
    incremental: bool,
    bases: BTreeMap<(String, u32), Arc<SubtaskBase>>,
    waiters: Vec<Waiter>,
}

impl InFlight {
    fn settle(self) -> (PendingCheckpoint, Settled) {
        let settled = Settled {
            barrier: self.barrier,
            started: self.started,
            notify: self.notify,
            all_finished: self.finished_at_ack.iter().all(|x| *x),
            incremental: self.incremental,
            bases: self.bases,
            waiters: self.waiters,
        };
        (self.pending, settled)
    }
}

/// The stats of a checkpoint about to complete (its duration is set once
/// the manifest is written, its retention errors once retention ran).
fn completed_stats(
    graph: &JobGraph,
    f: &InFlight,
    null_state: Option<&NullStateOutcome>,
) -> CheckpointStats {
    let per_node = |n: usize| null_state.and_then(|o| o.per_node[n]);
    let alignment = f
        .alignments
        .iter()
        .map(|a| Duration::from_micros(a.alignment_us))
        .max()
        .unwrap_or_default();
    let operators = graph
        .nodes
        .iter()
        .map(|n| {
            let bytes = f.bytes.get(&n.uid).copied().unwrap_or(0);
            (n.uid.clone(), n.name.clone(), bytes, n.parallelism)
        })
        .collect();
    let recomputes = graph
        .nodes
        .iter()
        .map(|n| matches!(n.kind, crate::graph::NodeKind::Operator(_)) && per_node(n.id).is_some())
        .collect();
    CheckpointStats {
        id: f.barrier.id,
        kind: f.barrier.kind,
        trigger_ms: f.barrier.timestamp_ms,
        duration: f.started.elapsed(),
        alignment,
        bytes: f.bytes.values().sum(),
        state_bytes: f.state_bytes,
        path: f.pending.dir().to_path_buf(),
        operators,
        recomputes,
        null_state_checkpoint: null_state.map_or(f.barrier.id, |o| o.null_state_checkpoint),
        retention_errors: Vec::new(),
    }
}
