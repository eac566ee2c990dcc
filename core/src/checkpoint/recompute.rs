//! Recovery by recomputation (the seed FLINK-4120-recompute-lost-state.txt;
//! DESIGN.md "Checkpoints").
//!
//! # Null-state watermarks and checkpoints
//!
//! An operator whose factory is [`OperatorFactory::recomputable`] reports
//! with every checkpoint ack its null-state watermark
//! ([`Operator::null_state_watermark`]): the earliest checkpoint from whose
//! source positions its current state can be rebuilt from its input alone.
//! Its own input must then be right from that checkpoint on, so its
//! *replay point* `R(o, n)` at checkpoint `n` is the null-state watermark
//! `w` (rounded down to a completed checkpoint: barriers of aborted
//! checkpoints have no recorded offsets), lowered to the replay points at
//! `w` of every recomputed operator feeding it (sources feed correct input
//! from any checkpoint). The null-state checkpoint of `n` is the smallest
//! replay point of all recomputed operators (`n` itself when none
//! recomputes): the most recent checkpoint preceding all of them.
//!
//! [`NullStateLedger`] keeps the replay points of the retained checkpoints
//! (they are also written into each manifest as the operator's
//! `null_state_checkpoint`, so a restarted coordinator reads them back).
//!
//! # Which operators recompute
//!
//! With `recovery = recompute` ([`Recovery::Recompute`]) an operator
//! recomputes when its factory is recomputable, it is not a sink, every
//! operator feeding it is a source or recomputes too (a persisted operator
//! drops its input while the later barriers replay, so nothing behind it
//! could be rebuilt), none of its inputs is a round-robin (rebalance) edge
//! (whose dealing restarts with the replay), and the checkpoint it is restored from does not hold
//! persisted state for it. Recomputing operators write no state into
//! checkpoints (savepoints always hold full state), except into the final
//! checkpoint of a bounded job (FLIP-147; `coordinator.rs`): nothing is left
//! to recompute after it, so `read_state` reads that state, and a restore
//! from it loads every operator's state and replays nothing.
//!
//! # Recovery
//!
//! [`ReplayPlan::for_restore`] reads, for a restored checkpoint `n` whose
//! null-state checkpoint is `R < n`, the source offsets of `R` (none when
//! `R` is 0, the start of the job) and of every completed checkpoint in
//! `(R, n]`. Sources seek to `R` and re-inject each later barrier when
//! their offset equals the recorded one ([`SourceReplay`]); an offset that
//! passes a recorded one without meeting it, or an input that ends before
//! it, is an error: the replay is not the run that was checkpointed.
//! Recomputed operators start empty; persisted operators and sinks restore
//! `n` and drop their input until barrier `n` passed them.
//! A source subtask that had finished when a later checkpoint was taken
//! (the manifest's per-subtask `finished`) had sent its final watermark
//! before that checkpoint and no barrier: its replay re-injects such
//! barriers right after its final watermark, so the operators behind it fire
//! on either side of each barrier what they fired in the run.
//!
//! [`OperatorFactory::recomputable`]: crate::operator::OperatorFactory::recomputable
//! [`Operator::null_state_watermark`]: crate::operator::Operator::null_state_watermark

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::checkpoint::{CheckpointStorage, RestoredCheckpoint};
use crate::error::{Error, Result};
use crate::event::{Barrier, BarrierKind};
use crate::graph::{JobGraph, NodeKind, Role};
use crate::partition::Partitioning;
use crate::source::decode_positions;

/// How a job recovers (`CheckpointConfig(recovery=...)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Recovery {
    /// Every operator persists its state; recovery restores the latest
    /// checkpoint.
    #[default]
    Latest,
    /// Recomputable operators persist nothing and are rebuilt by replay.
    Recompute,
}

impl Recovery {
    /// `"latest"` or `"recompute"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Recovery::Latest => "latest",
            Recovery::Recompute => "recompute",
        }
    }
}

/// Which nodes of `graph` recompute in an attempt restored from `restored`.
pub fn recomputed_nodes(
    graph: &JobGraph,
    recovery: Recovery,
    restored: Option<&RestoredCheckpoint>,
) -> Vec<bool> {
    let mut out = vec![false; graph.nodes.len()];
    if recovery != Recovery::Recompute {
        return out;
    }
    for node in &graph.nodes {
        let NodeKind::Operator(f) = &node.kind else {
            continue;
        };
        if node.role == Role::Sink || !f.recomputable() {
            continue;
        }
        // Round-robin routing restarts with the replay and would deal the
        // replayed batches to other subtasks than the original run did.
        // An operator that must start exactly at its null-state watermark
        // cannot feed one that may need it exact from an earlier point.
        let inputs_replay = node.inputs.iter().all(|e| {
            let up = &graph.nodes[e.from];
            e.partitioning != Partitioning::Rebalance
                && match &up.kind {
                    NodeKind::Source(_) => true,
                    NodeKind::Operator(f) => out[e.from] && f.replayable_from_earlier(),
                }
        });
        let persisted_state = restored.is_some_and(|rc| {
            rc.manifest()
                .operator(&node.uid)
                .is_some_and(|o| o.null_state_checkpoint.is_none())
                && rc.subtask_states(&node.uid).any(|(_, s)| !s.is_empty())
        });
        out[node.id] = inputs_replay && !persisted_state;
    }
    out
}

/// The replay points of the retained checkpoints (see the module docs).
#[derive(Debug, Default)]
pub struct NullStateLedger {
    /// checkpoint id -> uid -> replay point, for every completed checkpoint
    /// (an empty map when nothing recomputed).
    history: BTreeMap<u64, BTreeMap<String, u64>>,
}

/// What [`NullStateLedger::resolve`] decided for one checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NullStateOutcome {
    /// What each node records as its `null_state_checkpoint`: a source the
    /// checkpoint it rewinds to, a recomputed operator read by no recomputed
    /// operator its own null-state watermark (it starts there), another
    /// recomputed operator its replay point; `None`: persisted.
    pub per_node: Vec<Option<u64>>,
    /// The null-state checkpoint: the smallest replay point, or the
    /// checkpoint itself.
    pub null_state_checkpoint: u64,
}

impl NullStateLedger {
    /// Reads the replay points recorded in the completed checkpoints of
    /// `storage` (unreadable manifests are skipped).
    pub fn load(storage: &CheckpointStorage) -> Self {
        let mut ledger = NullStateLedger::default();
        if let Ok(list) = storage.list() {
            for s in list {
                let Ok(info) = &s.info else { continue };
                if info.kind != BarrierKind::Checkpoint {
                    continue;
                }
                let Ok(m) = storage.load_manifest(s.id) else {
                    continue;
                };
                ledger.history.insert(
                    s.id,
                    m.operators
                        .iter()
                        .filter_map(|o| o.null_state_checkpoint.map(|r| (o.uid.clone(), r)))
                        .collect(),
                );
            }
        }
        ledger
    }

    /// The largest completed checkpoint `<= w` (0: the start of the job).
    fn floor(&self, w: u64, current: u64) -> u64 {
        if w >= current {
            return current;
        }
        self.history.range(..=w).next_back().map_or(0, |(k, _)| *k)
    }

    /// Computes the replay points at checkpoint `id` from the null-state
    /// watermarks `reported` (per node, the smallest over its subtasks) of
    /// the `recomputed` nodes, and records them.
    pub fn resolve(
        &mut self,
        graph: &JobGraph,
        recomputed: &[bool],
        id: u64,
        reported: &BTreeMap<usize, u64>,
    ) -> NullStateOutcome {
        let mut per_node: Vec<Option<u64>> = vec![None; graph.nodes.len()];
        let mut starts: Vec<Option<u64>> = vec![None; graph.nodes.len()];
        // Nodes are in topological order: inputs are earlier nodes.
        for node in &graph.nodes {
            if !recomputed.get(node.id).copied().unwrap_or(false) {
                continue;
            }
            let w = self.floor(reported.get(&node.id).copied().unwrap_or(id), id);
            let mut r = w;
            for e in &node.inputs {
                let up = &graph.nodes[e.from];
                if matches!(up.kind, NodeKind::Source(_)) {
                    continue;
                }
                let up_r = if w == id {
                    per_node[up.id]
                } else if w == 0 {
                    Some(0)
                } else {
                    self.history.get(&w).and_then(|m| m.get(&up.uid)).copied()
                };
                r = r.min(up_r.unwrap_or(w));
            }
            per_node[node.id] = Some(r);
            starts[node.id] = Some(w);
        }
        let null_state_checkpoint = per_node.iter().flatten().copied().min().unwrap_or(id);
        // A recomputed operator no recomputed operator reads from (a leaf)
        // starts exactly at its own null-state watermark: it records that,
        // and drops its replayed input until then. Inner ones record their
        // replay point. Sources record where they rewind to.
        for node in &graph.nodes {
            match node.kind {
                NodeKind::Source(_) => per_node[node.id] = Some(null_state_checkpoint),
                NodeKind::Operator(_) if per_node[node.id].is_some() => {
                    let leaf = graph
                        .consumers(node.id)
                        .iter()
                        .all(|c| !recomputed.get(*c).copied().unwrap_or(false));
                    if leaf {
                        per_node[node.id] = starts[node.id];
                    }
                }
                NodeKind::Operator(_) => {}
            }
        }
        let recorded = graph
            .nodes
            .iter()
            .filter_map(|n| per_node[n.id].map(|r| (n.uid.clone(), r)))
            .collect();
        self.history.insert(id, recorded);
        NullStateOutcome {
            per_node,
            null_state_checkpoint,
        }
    }

    /// Forgets checkpoint `id` (it did not complete after all).
    pub fn discard(&mut self, id: u64) {
        self.history.remove(&id);
    }

    /// Forgets checkpoints older than `keep_from` (they were deleted).
    pub fn forget_before(&mut self, keep_from: u64) {
        self.history = self.history.split_off(&keep_from);
    }

    /// The checkpoints it knows, oldest first.
    pub fn checkpoints(&self) -> Vec<u64> {
        self.history.keys().copied().collect()
    }
}

/// The null-state checkpoint recorded in a checkpoint's manifest: the
/// smallest replay point of its operators, or its own id.
pub fn null_state_checkpoint_of(rc: &RestoredCheckpoint) -> u64 {
    rc.manifest()
        .operators
        .iter()
        .filter_map(|o| o.null_state_checkpoint)
        .min()
        .unwrap_or(rc.id())
        .min(rc.id())
}

/// How one source subtask replays: where it starts and the barriers it
/// re-injects, each at the offset where it was first emitted.
#[derive(Debug, Clone, Default)]
pub struct SourceReplay {
    /// The offset to seek to (`None`: the start of the input).
    pub start: Option<Vec<u8>>,
    /// Barriers still to inject, oldest first, with their recorded offsets.
    pub barriers: VecDeque<(Barrier, Vec<u8>)>,
    /// Barriers of checkpoints taken after the subtask had finished (the
    /// manifest's `finished`): its consumers saw its end of input (the
    /// final watermark) before them, so the replay injects them after it.
    pub after_end: Vec<Barrier>,
}

/// `[1200, 3]` for messages.
fn show_offset(offset: &[u8]) -> String {
    match decode_positions(offset, offset.len() / 8) {
        Some(p) => format!("{p:?}"),
        _ => format!("{} bytes", offset.len()),
    }
}

impl SourceReplay {
    /// Whether barriers remain to be injected.
    pub fn is_active(&self) -> bool {
        !self.barriers.is_empty()
    }

    /// The barriers due at `offset`, in order. Error when `offset` passed
    /// the recorded offset of the next barrier without meeting it.
    pub fn due(&mut self, offset: &[u8], source: &str) -> Result<Vec<Barrier>> {
        let mut due = Vec::new();
        while let Some((barrier, at)) = self.barriers.front() {
            if at.as_slice() == offset {
                due.push(*barrier);
                self.barriers.pop_front();
                continue;
            }
            let (Some(now), Some(rec)) = (
                decode_positions(offset, offset.len() / 8),
                decode_positions(at, at.len() / 8),
            ) else {
                break;
            };
            if offset.len() == at.len() && now > rec {
                return Err(self.mismatch(barrier.id, at, offset, source, "passed it"));
            }
            break;
        }
        Ok(due)
    }

    /// The barriers to inject after the end of the input (`after_end`).
    pub fn take_after_end(&mut self) -> Vec<Barrier> {
        std::mem::take(&mut self.after_end)
    }

    /// The input ended: every barrier must have been injected.
    pub fn check_end(&self, offset: &[u8], source: &str) -> Result<()> {
        match self.barriers.front() {
            None => Ok(()),
            Some((b, at)) => Err(self.mismatch(b.id, at, offset, source, "ended before it")),
        }
    }

    fn mismatch(&self, id: u64, at: &[u8], now: &[u8], source: &str, what: &str) -> Error {
        Error::checkpoint(
            None,
            format!(
                "recompute recovery: source '{source}' first emitted the barrier of checkpoint \
                 {id} at offset {}, but its replay reached offset {} and {what}; the replayed \
                 input differs from the input that was checkpointed (was the input, the \
                 batch_size or the source changed?), so the recomputed state would be wrong",
                show_offset(at),
                show_offset(now)
            ),
        )
    }
}

/// What a recompute recovery replays (see the module docs).
#[derive(Debug, Clone)]
pub struct ReplayPlan {
    /// The null-state checkpoint the sources rewind to (0: the job start).
    pub from: u64,
    /// The restored (latest) checkpoint; its barrier ends the replay.
    pub until: u64,
    /// Per (source uid, subtask).
    pub sources: BTreeMap<(String, u32), SourceReplay>,
}

impl ReplayPlan {
    /// The replay needed to restore `latest` of `graph`: `None` when its
    /// null-state checkpoint is itself (nothing recomputes).
    pub fn for_restore(graph: &JobGraph, latest: &RestoredCheckpoint) -> Result<Option<Self>> {
        let from = null_state_checkpoint_of(latest);
        let until = latest.id();
        // The final checkpoint of a bounded job stores every operator's
        // state (FLIP-147, `coordinator.rs`): nothing is left to recompute.
        // Replaying would run the input's end again after its barrier (the
        // windows it fired would fire twice), and chains of finished,
        // persisted operators would not read the replayed input at all.
        if from >= until
            || latest.manifest().kind != BarrierKind::Checkpoint
            || latest.manifest().final_state
        {
            return Ok(None);
        }
        let Some(storage) = latest.parent_storage() else {
            return Err(Error::checkpoint(
                Some(latest.dir().to_path_buf()),
                format!(
                    "checkpoint {until} is recovered by recomputation from checkpoint {from}, \
                     but '{}' lies in no checkpoint storage root to find it in",
                    latest.dir().display()
                ),
            ));
        };
        let loaded = load_between(&storage, from, until)?;
        let start = loaded.iter().find(|rc| rc.id() == from);
        let later: Vec<&RestoredCheckpoint> = loaded
            .iter()
            .filter(|rc| rc.id() > from)
            .chain(std::iter::once(latest))
            .collect();
        let mut sources = BTreeMap::new();
        for node in &graph.nodes {
            if !matches!(node.kind, NodeKind::Source(_)) {
                continue;
            }
            for subtask in 0..node.parallelism as u32 {
                let offset_in = |rc: &RestoredCheckpoint| -> Result<Vec<u8>> {
                    rc.state(&node.uid, subtask)
                        .and_then(|s| s.operator.as_ref())
                        .and_then(|b| b.as_bytes().map(<[u8]>::to_vec))
                        .ok_or_else(|| {
                            Error::checkpoint(
                                Some(rc.dir().to_path_buf()),
                                format!(
                                    "recompute recovery needs the offset of source '{}' (uid \
                                     '{}') subtask {subtask} in checkpoint {}, which does not \
                                     record it (did the source's parallelism change?)",
                                    node.name,
                                    node.uid,
                                    rc.id()
                                ),
                            )
                        })
                };
                let mut replay = SourceReplay {
                    start: start.map(offset_in).transpose()?,
                    barriers: VecDeque::new(),
                    after_end: Vec::new(),
                };
                for rc in &later {
                    let barrier = Barrier {
                        id: rc.id(),
                        kind: BarrierKind::Checkpoint,
                        aligned: true,
                        timestamp_ms: rc.manifest().trigger_ms,
                    };
                    let finished = rc
                        .manifest()
                        .operators
                        .iter()
                        .find(|o| o.uid == node.uid)
                        .and_then(|o| o.subtasks.iter().find(|e| e.subtask == subtask))
                        .is_some_and(|e| e.finished);
                    if finished {
                        replay.after_end.push(barrier);
                    } else {
                        replay.barriers.push_back((barrier, offset_in(rc)?));
                    }
                }
                sources.insert((node.uid.clone(), subtask), replay);
            }
        }
        Ok(Some(ReplayPlan {
            from,
            until,
            sources,
        }))
    }
}

/// The checkpoints from `from` (the null-state checkpoint, which must exist
/// unless it is the job start) up to before `until`, loaded in id order.
fn load_between(
    storage: &CheckpointStorage,
    from: u64,
    until: u64,
) -> Result<Vec<RestoredCheckpoint>> {
    let ids: BTreeSet<u64> = storage
        .list()?
        .into_iter()
        .filter(|s| {
            s.id >= from
                && s.id < until
                && s.info
                    .as_ref()
                    .is_ok_and(|i| i.kind == BarrierKind::Checkpoint)
        })
        .map(|s| s.id)
        .collect();
    if from > 0 && !ids.contains(&from) {
        return Err(Error::checkpoint(
            Some(storage.checkpoint_dir(from)),
            format!(
                "checkpoint {until} is recovered by recomputation from its null-state \
                 checkpoint {from}, but checkpoint {from} is missing from '{}'",
                storage.dir().display()
            ),
        ));
    }
    let mut loaded: Vec<RestoredCheckpoint> = Vec::new();
    for id in &ids {
        loaded.push(storage.load(*id)?);
    }
    Ok(loaded)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::encode_positions;

    fn barrier(id: u64) -> Barrier {
        Barrier {
            id,
            kind: BarrierKind::Checkpoint,
            aligned: true,
            timestamp_ms: 0,
        }
    }

    #[test]
    fn test_source_replay_injects_at_recorded_offsets_in_order() {
        let mut r = SourceReplay {
            start: None,
            barriers: [
                (barrier(2), encode_positions(&[10])),
                (barrier(3), encode_positions(&[10])),
                (barrier(4), encode_positions(&[30])),
            ]
            .into_iter()
            .collect(),
            after_end: vec![],
        };
        assert!(r
            .due(&encode_positions(&[0]), "s")
            .unwrap_or_default()
            .is_empty());
        let ids: Vec<u64> = r
            .due(&encode_positions(&[10]), "s")
            .unwrap_or_default()
            .iter()
            .map(|b| b.id)
            .collect();
        assert_eq!(ids, vec![2, 3]);
        assert!(r.check_end(&encode_positions(&[20]), "s").is_err());
        let err = r
            .due(&encode_positions(&[40]), "src")
            .expect_err("passed the barrier");
        let msg = err.to_string();
        assert!(
            msg.contains("checkpoint 4") && msg.contains("[30]"),
            "{msg}"
        );
    }
}
