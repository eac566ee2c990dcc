//! Restoring a checkpoint into a job (flink-fault-tolerance-mechanism.txt,
//! "recovery"; FLIP-147 for finished operators and redistributed state):
//! which state each subtask gets back, how keyed state moves by key group
//! and non-keyed state by its [`Redistribution`] at another parallelism, and
//! whether a checkpoint fits the job at all (operators matched by uid, key
//! identity and key-group count, finished predecessors). The coordinator
//! (`coordinator.rs`) takes checkpoints; this module reads them back.

use std::sync::Arc;

use crate::checkpoint::{KeyColumn, KeyIdentity, RestoredCheckpoint};
use crate::error::{Error, Result};
use crate::graph::{JobGraph, Node, NodeKind};
use crate::partition::Partitioning;
use crate::state::{
    encode_entries, even_split, union_entries, OperatorState, Redistribution, StateBlob,
    ENTRY_LIST_MAGIC,
};

/// The state to restore for subtask `subtask` (of `parallelism`, owning
/// `key_groups`) of `node`, from `rc`.
///
/// At the parallelism of the checkpoint every subtask gets back what it
/// wrote (also state written before entry lists existed). At another
/// parallelism keyed state moves by key group, and non-keyed state as the
/// node's factory decides ([`Redistribution`]): entry lists are dealt
/// round-robin (FLIP-147: what a partially finished operator has left is
/// redistributed); anything else is a `CheckpointError` naming the
/// operator, unless the operator fully finished (its task is skipped).
/// A subtask dealt no entries still gets an (empty) list, so it knows it
/// has nothing left to do: a source then reads nothing.
///
/// An operator whose key identity changed gets nothing: [`check_compatible`]
/// refused the restore unless `allow_non_restored_state` drops that state.
pub(crate) fn state_for(
    rc: &RestoredCheckpoint,
    graph: &JobGraph,
    node: &Node,
    subtask: usize,
    parallelism: usize,
    key_groups: std::ops::Range<usize>,
) -> Result<Option<OperatorState>> {
    let uid = node.uid.as_str();
    let Some(entry) = rc.manifest().operator(uid) else {
        return Ok(None);
    };
    if key_mismatch(rc, graph, node).is_some() || recomputed_in(rc, entry, node) {
        return Ok(None);
    }
    let old_p = entry.subtasks.len();
    let keyed = rc.keyed_state(uid, key_groups.start as u32..key_groups.end as u32);
    let operator = if redistribution_of(node) == Redistribution::Broadcast {
        broadcast_for(rc, uid, subtask)?
    } else if old_p == parallelism {
        rc.state(uid, subtask as u32)
            .and_then(|s| s.operator.clone())
    } else if graph.loop_with_head(node.id).is_some() {
        // A loop head's state is the feedback in flight (FLIP-16 log or
        // feedback channel state), dealt out by old subtask.
        feedback_for(rc, node, old_p, subtask, parallelism)?
    } else if rc.operator_blobs(uid).is_empty() || entry.finished && !redistributes(node) {
        // A fully finished operator is skipped (FLIP-147): its non-keyed
        // state is not needed, whether or not it could be redistributed.
        None
    } else {
        Some(StateBlob::Bytes(Arc::new(redistributed(
            rc,
            node,
            old_p,
            subtask,
            parallelism,
        )?)))
    };
    if operator.is_none() && keyed.is_empty() {
        return Ok(None);
    }
    Ok(Some(OperatorState { operator, keyed }))
}

/// The non-keyed state new subtask `subtask` of broadcast-state operator
/// `uid` restores, at any parallelism ([`Redistribution::Broadcast`]).
///
/// When every old subtask wrote its own copy (Flink's broadcast state
/// pattern; docs/DESIGN.md "Unaligned checkpoints"), new subtask `i` gets
/// the copy of old subtask [`broadcast_source`]`(i)`, `i mod` the old
/// parallelism: the subtasks of an unaligned checkpoint may have taken it
/// at different offsets of the broadcast stream, and the broadcast rows in
/// flight a subtask replays are that same old subtask's
/// (`runtime/spawn.rs` `restored_channels`), so state and replay agree.
///
/// Checkpoints in which subtask 0 alone wrote the broadcast state restore
/// subtask 0's copy everywhere, as they were written. When the old subtasks
/// wrote entry lists, every new subtask gets the entries of all of them, in
/// subtask order (union list state next to the broadcast state: a keyed
/// broadcast process function's subtask 0 writes its broadcast state and
/// its watermark, the others their watermark alone; docs/DESIGN.md "Keyed
/// state layer"). Subtask 0's state is given as it is when it is not an
/// entry list and the source subtask wrote none.
fn broadcast_for(rc: &RestoredCheckpoint, uid: &str, subtask: usize) -> Result<Option<StateBlob>> {
    let first = rc.state(uid, 0).and_then(|s| s.operator.clone());
    let blobs = rc.operator_blobs(uid);
    if blobs.iter().all(|(s, _)| *s == 0) {
        return Ok(first);
    }
    let old_p = old_parallelism(rc, uid, &blobs);
    let mut old: Vec<Option<Arc<Vec<u8>>>> = vec![None; old_p];
    for (s, blob) in &blobs {
        old[*s as usize] = Some(blob.to_bytes()?);
    }
    let views: Vec<Option<&[u8]>> = old
        .iter()
        .map(|b| b.as_deref().map(|v| v.as_slice()))
        .collect();
    if let Ok(all) = union_entries(&views) {
        return Ok(Some(StateBlob::Bytes(Arc::new(encode_entries(&all)))));
    }
    let source = subtask % old_p;
    Ok(rc
        .state(uid, source as u32)
        .and_then(|s| s.operator.clone())
        .or(first))
}

/// The old subtask (of `old_p`) whose broadcast copy new subtask `subtask`
/// of `node` restores, and so whose broadcast rows in flight it replays
/// (`runtime/spawn.rs` `restored_channels`; docs/DESIGN.md "Unaligned
/// checkpoints"): `subtask mod` the old parallelism when that old subtask
/// wrote a copy of its own; old subtask 0 when subtask 0 alone wrote the
/// broadcast state (checkpoints written before every subtask wrote its
/// copy) or the subtasks wrote entry lists (subtask 0's entries carry the
/// broadcast state, see [`broadcast_for`]). An operator without broadcast
/// state keeps what it wrote, so it replays the rows its own old subtask
/// captured.
pub(crate) fn broadcast_source(
    rc: &RestoredCheckpoint,
    node: &Node,
    subtask: usize,
    old_p: usize,
) -> Result<usize> {
    let uid = node.uid.as_str();
    let blobs = rc.operator_blobs(uid);
    let source = subtask % old_p.max(1);
    if redistribution_of(node) != Redistribution::Broadcast {
        return Ok(source);
    }
    if blobs.iter().all(|(s, _)| *s == 0) {
        return Ok(0);
    }
    for (_, blob) in &blobs {
        if !blob.to_bytes()?.starts_with(&ENTRY_LIST_MAGIC) {
            let own = blobs.iter().any(|(s, _)| *s as usize == source);
            return Ok(if own { source } else { 0 });
        }
    }
    Ok(0)
}

/// The parallelism operator `uid` had in `rc`: its manifest entry's
/// subtasks, or more if its state blobs (`blobs`) say so.
fn old_parallelism(rc: &RestoredCheckpoint, uid: &str, blobs: &[(u32, StateBlob)]) -> usize {
    rc.manifest()
        .operator(uid)
        .map_or(0, |e| e.subtasks.len())
        .max(
            blobs
                .iter()
                .map(|(s, _)| *s as usize + 1)
                .max()
                .unwrap_or(0),
        )
}

/// The feedback state new subtask `subtask` of `parallelism` of loop head
/// `node` restores from the `old_p` subtasks that wrote it
/// ([`crate::checkpoint::feedback_rescale`]).
fn feedback_for(
    rc: &RestoredCheckpoint,
    node: &Node,
    old_p: usize,
    subtask: usize,
    parallelism: usize,
) -> Result<Option<StateBlob>> {
    let mut old = Vec::with_capacity(old_p);
    for s in 0..old_p {
        let blob = rc
            .state(&node.uid, s as u32)
            .and_then(|st| st.operator.as_ref())
            .map(StateBlob::to_bytes)
            .transpose()?;
        old.push(blob);
    }
    let views: Vec<Option<&[u8]>> = old
        .iter()
        .map(|b| b.as_deref().map(|v| v.as_slice()))
        .collect();
    let mine = crate::checkpoint::feedback_rescale::redistribute_feedback(
        &node.name,
        &views,
        subtask,
        parallelism,
    )
    .map_err(|e| match e {
        Error::Checkpoint {
            path: None,
            message,
        } => Error::checkpoint(Some(rc.dir().to_path_buf()), message),
        other => other,
    })?;
    Ok(mine.map(|b| StateBlob::Bytes(Arc::new(b))))
}

/// Whether `node` recomputed its state in `rc` (whose entry for it is
/// `entry`; FLINK-4120; sources record where they rewind to, they do not
/// recompute): a restore rebuilds that state by replay and loads none. The
/// final checkpoint of a bounded job is the exception: it stores that state
/// (`coordinator.rs`) and its restore loads it, replaying nothing
/// (`ReplayPlan::for_restore`).
fn recomputed_in(
    rc: &RestoredCheckpoint,
    entry: &crate::checkpoint::OperatorEntry,
    node: &Node,
) -> bool {
    !rc.manifest().final_state
        && entry.null_state_checkpoint.is_some()
        && matches!(node.kind, NodeKind::Operator(_))
}

/// What the factory of `node` says of its non-keyed state.
fn redistribution_of(node: &Node) -> Redistribution {
    match &node.kind {
        NodeKind::Source(f) => f.redistribution(),
        NodeKind::Operator(f) => f.redistribution(),
    }
}

fn redistributes(node: &Node) -> bool {
    matches!(
        redistribution_of(node),
        Redistribution::EvenSplit | Redistribution::Union | Redistribution::Broadcast
    )
}

/// The entry list of new subtask `subtask` of `parallelism`: its share of
/// the entries of the `old_p` subtasks of `node` in `rc`.
fn redistributed(
    rc: &RestoredCheckpoint,
    node: &Node,
    old_p: usize,
    subtask: usize,
    parallelism: usize,
) -> Result<Vec<u8>> {
    let (uid, name) = (node.uid.as_str(), node.name.as_str());
    let refuse = |why: String| {
        Error::checkpoint(
            Some(rc.dir().to_path_buf()),
            format!(
                "operator '{name}' (uid '{uid}') has non-keyed state taken at parallelism \
                 {old_p}; restoring it at parallelism {parallelism} is not supported: {why}; \
                 restore it at parallelism {old_p}"
            ),
        )
    };
    let how = redistribution_of(node);
    if let Redistribution::Unsupported(why) = how {
        return Err(refuse(why));
    }
    let mut old = Vec::with_capacity(old_p);
    for s in 0..old_p {
        let blob = rc
            .state(uid, s as u32)
            .and_then(|st| st.operator.as_ref())
            .map(StateBlob::to_bytes)
            .transpose()?;
        old.push(blob);
    }
    let views: Vec<Option<&[u8]>> = old
        .iter()
        .map(|b| b.as_deref().map(|v| v.as_slice()))
        .collect();
    let not_entries = |s: usize| {
        refuse(format!(
            "the state of its subtask {s} is not a list of entries (it was written by a \
             version of eddyline that could not redistribute it)"
        ))
    };
    if how == Redistribution::Union {
        return Ok(encode_entries(&union_entries(&views).map_err(not_entries)?));
    }
    let mut shares = even_split(&views, parallelism).map_err(not_entries)?;
    let mine = shares
        .get_mut(subtask)
        .map(std::mem::take)
        .unwrap_or_default();
    Ok(encode_entries(&mine))
}

/// The key identity of `node` in `graph` (its key columns and number of key
/// groups, as the manifest records it): `None` unless an input is
/// hash-partitioned (a keyed operator: keyed aggregates, windows, keyed
/// process functions and reduces). Key types come
/// from the producers' output schemas where the graph knows them.
pub fn key_identity(graph: &JobGraph, node: &Node) -> Option<KeyIdentity> {
    let mut keyed: Vec<(usize, Vec<KeyColumn>)> = node
        .inputs
        .iter()
        .filter_map(|e| match &e.partitioning {
            Partitioning::Hash { keys } => {
                let schema = graph
                    .nodes
                    .get(e.from)
                    .and_then(|p| p.output_schema.clone());
                let cols = keys
                    .iter()
                    .map(|k| KeyColumn {
                        name: k.clone(),
                        data_type: schema
                            .as_ref()
                            .and_then(|s| s.field_with_name(k).ok())
                            .map(|f| f.data_type().to_string()),
                    })
                    .collect();
                Some((e.input, cols))
            }
            _ => None,
        })
        .collect();
    if keyed.is_empty() {
        return None;
    }
    keyed.sort_by_key(|(input, _)| *input);
    keyed.dedup_by_key(|(input, _)| *input);
    Some(KeyIdentity {
        key_groups: u32::try_from(graph.max_parallelism).unwrap_or(u32::MAX),
        inputs: keyed.into_iter().map(|(_, cols)| cols).collect(),
    })
}

/// Why the keyed state of `node` in `rc` cannot be restored into `graph`
/// (other key columns or types, another number of key groups), or `None`.
/// Operators without state in `rc` always match.
fn key_mismatch(rc: &RestoredCheckpoint, graph: &JobGraph, node: &Node) -> Option<String> {
    let entry = rc.manifest().operator(&node.uid)?;
    if recomputed_in(rc, entry, node) || !rc.subtask_states(&node.uid).any(|(_, s)| !s.is_empty()) {
        return None;
    }
    let new = key_identity(graph, node);
    let new_groups = graph.max_parallelism;
    let Some(old) = &entry.key else {
        // Written before key identities were recorded (manifest version
        // 1): the key groups its state holds still bound the old count.
        let highest = rc
            .subtask_states(&node.uid)
            .flat_map(|(_, s)| s.keyed.iter().map(|(g, _)| *g as usize))
            .max()?;
        return (highest >= new_groups).then(|| {
            format!(
                "its keyed state holds key group {highest}, so it was taken with a \
                 max_parallelism above {highest}, but the job has max_parallelism {new_groups}"
            )
        });
    };
    let Some(new) = new else {
        return Some(format!(
            "its state is keyed by {} but the operator is not keyed in this job",
            old.describe_key()
        ));
    };
    if old.key_groups != new.key_groups {
        return Some(format!(
            "its keyed state was taken with max_parallelism {} ({} key groups) but the job has \
             max_parallelism {}; keys cannot be moved between different numbers of key groups, \
             run the job with max_parallelism={}",
            old.key_groups, old.key_groups, new.key_groups, old.key_groups
        ));
    }
    (!old.same_key(&new)).then(|| {
        format!(
            "its state is keyed by {} but the job keys it by {}",
            old.describe_key(),
            new.describe_key()
        )
    })
}

/// The output schema `node`'s subtasks agreed on in the checkpointed job
/// (DESIGN.md "One schema per operator"), unless the node declares its own
/// or its state is dropped because its key changed (`allow_non_restored_state`:
/// the operator starts afresh, and so does its schema).
pub(crate) fn agreed_schema(
    rc: &RestoredCheckpoint,
    graph: &JobGraph,
    node: &Node,
) -> Option<arrow::datatypes::SchemaRef> {
    if node.output_schema.is_some() || key_mismatch(rc, graph, node).is_some() {
        return None;
    }
    rc.manifest().operator(&node.uid)?.schema.clone()
}

/// Refuses a checkpoint that holds state for operators the graph lacks, or
/// keyed state under another key identity (key columns, key types, number
/// of key groups) than the graph gives the same uid; with
/// `allow_non_restored_state` that state is dropped instead (see
/// [`state_for`]).
pub(crate) fn check_compatible(
    rc: &RestoredCheckpoint,
    graph: &JobGraph,
    allow_non_restored_state: bool,
) -> Result<()> {
    check_finished_predecessors(rc, graph)?;
    if allow_non_restored_state {
        return Ok(());
    }
    let changed: Vec<String> = graph
        .nodes
        .iter()
        .filter_map(|node| {
            key_mismatch(rc, graph, node)
                .map(|why| format!("operator '{}' (uid '{}'): {why}", node.name, node.uid))
        })
        .collect();
    if !changed.is_empty() {
        return Err(Error::checkpoint(
            Some(rc.dir().to_path_buf()),
            format!(
                "the checkpoint's keyed state does not fit this job: {}; restoring it would put \
                 one key's state under another; pass allow_non_restored_state=True to drop that \
                 state",
                changed.join("; ")
            ),
        ));
    }
    let mut unmatched = Vec::new();
    for uid in rc.uids() {
        let owner = crate::checkpoint::channel_state::channel_state_owner(uid).unwrap_or(uid);
        if graph.nodes.iter().any(|n| n.uid == uid || n.uid == owner) {
            continue;
        }
        let has_state = rc.subtask_states(uid).any(|(_, s)| !s.is_empty());
        if has_state {
            let name = rc
                .manifest()
                .operator(uid)
                .map(|o| o.name.clone())
                .unwrap_or_default();
            unmatched.push(format!("'{name}' (uid '{uid}')"));
        }
    }
    if unmatched.is_empty() {
        Ok(())
    } else {
        Err(Error::checkpoint(
            Some(rc.dir().to_path_buf()),
            format!(
                "the checkpoint holds state of operators this job does not have: {}; \
                 give operators stable .uid(...)s that match, or pass \
                 allow_non_restored_state=True to drop that state",
                unmatched.join(", ")
            ),
        ))
    }
}

/// A fully finished operator is skipped on restore (FLIP-147); that is only
/// sound if every operator feeding it finished too. A graph that adds a
/// (running) predecessor to a finished operator is refused.
fn check_finished_predecessors(rc: &RestoredCheckpoint, graph: &JobGraph) -> Result<()> {
    for node in &graph.nodes {
        let finished = rc
            .manifest()
            .operator(&node.uid)
            .is_some_and(|o| o.finished);
        if !finished {
            continue;
        }
        for e in &node.inputs {
            let pred = &graph.nodes[e.from];
            let pred_finished = rc
                .manifest()
                .operator(&pred.uid)
                .is_some_and(|o| o.finished);
            if !pred_finished {
                return Err(Error::checkpoint(
                    Some(rc.dir().to_path_buf()),
                    format!(
                        "operator '{}' (uid '{}') had finished when the checkpoint was taken, \
                         but its input '{}' (uid '{}') {}; a finished operator cannot get a new \
                         or running predecessor",
                        node.name,
                        node.uid,
                        pred.name,
                        pred.uid,
                        if rc.manifest().operator(&pred.uid).is_some() {
                            "had not finished"
                        } else {
                            "is new"
                        }
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// Whether every operator of `nodes` finished in `rc` (the task is skipped).
pub(crate) fn all_finished(rc: &RestoredCheckpoint, graph: &JobGraph, nodes: &[usize]) -> bool {
    nodes.iter().all(|n| {
        rc.manifest()
            .operator(&graph.nodes[*n].uid)
            .is_some_and(|o| o.finished)
    })
}
