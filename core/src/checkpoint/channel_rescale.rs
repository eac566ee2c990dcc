//! Restoring the channel state of an unaligned checkpoint at another
//! parallelism (FLIP-76, "rescaling of channel state"; DESIGN.md
//! "Unaligned checkpoints").
//!
//! The channel state of a subtask is one list of batches per input channel
//! of the chain head, in the order the runtime wires them
//! ([`channel_layout`]): per input edge, one channel per connected producer
//! subtask. When the consumer or a producer runs at another parallelism the
//! channels differ, so the captured data is dealt out again by each edge's
//! partitioning, as Flink's rescaling of in-flight data does:
//!
//! * **hash** (a keyed exchange): every row goes to the new subtask owning
//!   its key group at the new parallelism, where its keyed state went too;
//! * **forward** and **rebalance**: whole old channels go round-robin over
//!   the new subtasks (forward: old subtask `d` to new subtask `d % p`);
//! * **broadcast**: every new subtask gets the broadcast channels of one
//!   old subtask, the one whose copy of the broadcast state it restores
//!   (`restore.rs` `broadcast_source`: old subtask `i mod` the old
//!   parallelism, or old subtask 0 for checkpoints in which subtask 0 alone
//!   wrote the broadcast state), so state and in-flight data stay
//!   consistent. A chain reading a broadcast edge is always dealt out here
//!   (`spawn.rs`, `restored_channels`).
//!
//! A new subtask keeps each row on the edge (so the logical input of a
//! union or connect) it came on, in the channel of producer `u % p_up` for
//! old producer `u`; old channels are appended in order (old subtask, then
//! channel), so the rows of one old channel, and with them every key's
//! rows, keep their order. The task replays all of it before it reads any
//! new data (`task/channel_replay.rs`).

use arrow::record_batch::RecordBatch;

use crate::error::{Error, Result};
use crate::partition::{Partitioner, Partitioning};

/// One input edge of a chain head: how it partitions and the parallelism
/// of its producer when the checkpoint was taken and now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EdgeShape {
    pub partitioning: Partitioning,
    pub old_producers: usize,
    pub new_producers: usize,
}

/// Per subtask, per input channel: its batches.
pub type SubtaskChannels = Vec<Vec<RecordBatch>>;

/// The input channels of consumer subtask `down`, as `(edge, producer)`
/// pairs in the order the runtime wires them (`spawn.rs`
/// `wire_channels`): per edge, forward connects producer `down` only,
/// every other partitioning every producer.
pub fn channel_layout(
    edges: impl IntoIterator<Item = (Partitioning, usize)>,
    down: usize,
) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    for (e, (partitioning, producers)) in edges.into_iter().enumerate() {
        if partitioning == Partitioning::Forward {
            out.push((e, down));
        } else {
            out.extend((0..producers).map(|u| (e, u)));
        }
    }
    out
}

/// Deals the channel state `old` (per old subtask, `None` when it captured
/// nothing) of the consumer `consumer` out to `new_p` subtasks (see the
/// module docs); new subtask `n` gets the broadcast channels of old subtask
/// `broadcast_from[n]`. Returns per new subtask its channels, `None` when
/// it gets no row.
pub fn redistribute(
    consumer: &str,
    edges: &[EdgeShape],
    old: Vec<Option<SubtaskChannels>>,
    new_p: usize,
    max_parallelism: usize,
    broadcast_from: &[usize],
) -> Result<Vec<Option<SubtaskChannels>>> {
    let new_layouts: Vec<Vec<(usize, usize)>> = (0..new_p)
        .map(|n| {
            channel_layout(
                edges
                    .iter()
                    .map(|s| (s.partitioning.clone(), s.new_producers)),
                n,
            )
        })
        .collect();
    let mut out: Vec<SubtaskChannels> = new_layouts
        .iter()
        .map(|l| vec![Vec::new(); l.len()])
        .collect();
    let slot = |n: usize, e: usize, u: usize| -> Result<usize> {
        let up = u % edges[e].new_producers.max(1);
        new_layouts[n]
            .iter()
            .position(|&(ee, uu)| ee == e && uu == up)
            .ok_or_else(|| {
                Error::checkpoint(
                    None,
                    format!(
                        "the channel state of operator '{consumer}' cannot be restored at \
                         parallelism {new_p}: its input {e} ({:?}) has no channel from producer \
                         {up} at subtask {n}",
                        edges[e].partitioning
                    ),
                )
            })
    };
    let captured = old.iter().flatten().map(Vec::len).next();
    let old_parts = old_partitionings(edges, old.len(), captured);
    let mut dealt = vec![0usize; edges.len()];
    for (d, channels) in old.into_iter().enumerate() {
        let Some(channels) = channels else { continue };
        let layout = channel_layout(
            old_parts
                .iter()
                .cloned()
                .zip(edges.iter().map(|s| s.old_producers)),
            d,
        );
        if layout.len() != channels.len() {
            return Err(Error::checkpoint(
                None,
                format!(
                    "the channel state of subtask {d} of operator '{consumer}' holds {} input \
                     channels, but its inputs had {} at the checkpoint's parallelism: the job's \
                     inputs changed since (restore it with the job that took it)",
                    channels.len(),
                    layout.len()
                ),
            ));
        }
        for ((e, u), batches) in layout.into_iter().zip(channels) {
            if batches.is_empty() {
                continue;
            }
            match &old_parts[e] {
                Partitioning::Forward => {
                    let n = d % new_p;
                    let c = slot(n, e, n)?;
                    out[n][c].extend(batches);
                }
                Partitioning::Rebalance => {
                    let n = dealt[e] % new_p;
                    dealt[e] += 1;
                    // Forwarded now: new subtask `n` reads producer `n` only.
                    let up = if edges[e].partitioning == Partitioning::Forward {
                        n
                    } else {
                        u
                    };
                    let c = slot(n, e, up)?;
                    out[n][c].extend(batches);
                }
                Partitioning::Broadcast => {
                    let takers = (0..new_p).filter(|n| broadcast_from.get(*n) == Some(&d));
                    for n in takers {
                        out[n][slot(n, e, u)?].extend(batches.iter().cloned());
                    }
                }
                Partitioning::Hash { .. } => {
                    let mut router = Partitioner::new(
                        consumer,
                        edges[e].partitioning.clone(),
                        new_p,
                        max_parallelism,
                        0,
                    );
                    for batch in batches {
                        let mut err = None;
                        router.route(batch, |n, part| {
                            match slot(n, e, u) {
                                Ok(c) => out[n][c].push(part),
                                Err(x) => err = Some(x),
                            }
                            Ok(())
                        })?;
                        if let Some(x) = err {
                            return Err(x);
                        }
                    }
                }
            }
        }
    }
    Ok(out
        .into_iter()
        .map(|s| s.iter().any(|c| !c.is_empty()).then_some(s))
        .collect())
}

/// How each edge partitioned when the checkpoint was taken by `old_p`
/// consumer subtasks that captured `captured` channels each. A graph built by
/// the Python DSL forwards an edge at equal parallelisms and rebalances it
/// otherwise, so a rescale can turn one into the other: an edge forwarded
/// now was rebalanced if its parallelisms differed then, and an edge
/// rebalanced now was forwarded if they were equal then and only that fits
/// the captured channel count. Hash and broadcast edges do not change.
fn old_partitionings(
    edges: &[EdgeShape],
    old_p: usize,
    captured: Option<usize>,
) -> Vec<Partitioning> {
    let mut parts: Vec<Partitioning> = edges
        .iter()
        .map(|s| match &s.partitioning {
            Partitioning::Forward if s.old_producers != old_p => Partitioning::Rebalance,
            p => p.clone(),
        })
        .collect();
    let count = |parts: &[Partitioning]| {
        let producers = edges.iter().map(|s| s.old_producers);
        channel_layout(parts.iter().cloned().zip(producers), 0).len()
    };
    if let Some(n) = captured {
        let forwarded: Vec<Partitioning> = parts
            .iter()
            .zip(edges)
            .map(|(p, s)| match p {
                Partitioning::Rebalance if s.old_producers == old_p => Partitioning::Forward,
                p => p.clone(),
            })
            .collect();
        if count(&parts) != n && count(&forwarded) == n {
            parts = forwarded;
        }
    }
    parts
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::collections::HashMap;
    use std::sync::Arc;

    use arrow::array::{AsArray, Int64Array};
    use arrow::datatypes::{DataType, Field, Int64Type, Schema};
    use proptest::prelude::*;

    use super::*;
    use crate::keygroup::{hash_keys, key_group, subtask_for_key_group};

    const MAX_P: usize = 128;

    fn batch(rows: &[(i64, i64)]) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("k", DataType::Int64, false),
        ]));
        let ids = Int64Array::from(rows.iter().map(|r| r.0).collect::<Vec<_>>());
        let ks = Int64Array::from(rows.iter().map(|r| r.1).collect::<Vec<_>>());
        RecordBatch::try_new(schema, vec![Arc::new(ids), Arc::new(ks)]).unwrap()
    }

    fn rows(batches: &[RecordBatch]) -> Vec<(i64, i64)> {
        batches
            .iter()
            .flat_map(|b| {
                let ids = b.column(0).as_primitive::<Int64Type>().clone();
                let ks = b.column(1).as_primitive::<Int64Type>().clone();
                (0..b.num_rows()).map(move |r| (ids.value(r), ks.value(r)))
            })
            .collect()
    }

    fn owner(k: i64, p: usize) -> usize {
        let mut h = Vec::new();
        hash_keys(&[Arc::new(Int64Array::from(vec![k]))], &mut h).unwrap();
        subtask_for_key_group(key_group(h[0], MAX_P), p, MAX_P)
    }

    fn hash() -> Partitioning {
        Partitioning::Hash {
            keys: vec!["k".into()],
        }
    }

    #[test]
    fn test_layout_follows_the_wiring_order() {
        let edges = [
            (hash(), 3),
            (Partitioning::Forward, 2),
            (Partitioning::Broadcast, 1),
        ];
        assert_eq!(
            channel_layout(edges.iter().cloned(), 1),
            vec![(0, 0), (0, 1), (0, 2), (1, 1), (2, 0)]
        );
    }

    #[test]
    fn test_a_changed_input_count_is_refused_naming_the_operator() {
        let edges = [EdgeShape {
            partitioning: hash(),
            old_producers: 2,
            new_producers: 2,
        }];
        let old = vec![Some(vec![vec![batch(&[(1, 1)])]])]; // 1 channel, 2 expected
        let err = redistribute("agg", &edges, old, 3, MAX_P, &[0; 3]).unwrap_err();
        assert!(err.to_string().contains("operator 'agg'"), "{err}");
    }

    #[test]
    fn test_an_edge_rebalanced_then_and_forwarded_now_and_back_is_dealt() {
        // Checkpoint at 2 from 3 producers (rebalance, 3 channels each),
        // restored at 3 (forward: 1 channel each), and back.
        let edges = [EdgeShape {
            partitioning: Partitioning::Forward,
            old_producers: 3,
            new_producers: 3,
        }];
        let rows = |d: i64| -> Vec<Vec<RecordBatch>> {
            (0..3).map(|c| vec![batch(&[(d * 10 + c, 0)])]).collect()
        };
        let old = vec![Some(rows(0)), Some(rows(1))];
        let out = redistribute("m", &edges, old, 3, MAX_P, &[0; 3]).unwrap();
        let mut ids: Vec<i64> = out
            .iter()
            .flatten()
            .flatten()
            .flatten()
            .flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().to_vec())
            .collect();
        ids.sort_unstable();
        assert_eq!(ids, vec![0, 1, 2, 10, 11, 12]);
        assert!(out.iter().all(|s| s.as_ref().is_some_and(|c| c.len() == 1)));
        let edges = [EdgeShape {
            partitioning: Partitioning::Rebalance,
            old_producers: 3,
            new_producers: 3,
        }];
        let old = (0..3).map(|d| Some(vec![vec![batch(&[(d, 0)])]])).collect();
        let out = redistribute("m", &edges, old, 2, MAX_P, &[0; 2]).unwrap();
        let total: usize = out
            .iter()
            .flatten()
            .flatten()
            .flatten()
            .map(RecordBatch::num_rows)
            .sum();
        assert_eq!(total, 3);
        assert!(out.iter().flatten().all(|c| c.len() == 3));
    }

    /// One edge's shape and the parallelisms, forward needing equal ones.
    fn shapes() -> impl Strategy<Value = (Vec<EdgeShape>, usize, usize)> {
        (1usize..5, 1usize..5).prop_flat_map(|(old_p, new_p)| {
            let edge = (0u8..4, 1usize..5, 1usize..5).prop_map(move |(kind, op, np)| {
                let partitioning = match kind {
                    0 => hash(),
                    1 => Partitioning::Rebalance,
                    2 => Partitioning::Broadcast,
                    _ => Partitioning::Forward,
                };
                let forward = partitioning == Partitioning::Forward;
                EdgeShape {
                    partitioning,
                    old_producers: if forward { old_p } else { op },
                    new_producers: if forward { new_p } else { np },
                }
            });
            (prop::collection::vec(edge, 1..4), Just(old_p), Just(new_p))
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]
        /// Every row is replayed exactly once (broadcast: once per new
        /// subtask that takes the copy of its old subtask), on the edge it came on; keyed rows
        /// at the owner of their key group; every old channel's rows in
        /// their order.
        #[test]
        fn prop_redistribution_keeps_rows_edges_keys_and_order(
            (edges, old_p, new_p) in shapes(),
            sizes in prop::collection::vec(0usize..4, 64),
            keys in prop::collection::vec(0i64..50, 64),
        ) {
            // id -> (edge, old subtask, old channel, position in it)
            let mut origin = HashMap::new();
            let mut next = 0i64;
            let mut old = Vec::new();
            for d in 0..old_p {
                let layout = channel_layout(
                    edges.iter().map(|s| (s.partitioning.clone(), s.old_producers)), d);
                let mut channels = Vec::new();
                for (c, &(e, _)) in layout.iter().enumerate() {
                    let mut batches = Vec::new();
                    let mut pos = 0;
                    for b in 0..sizes[(d * 7 + c * 3) % 64] {
                        let n = sizes[(d + c + b) % 64] + 1;
                        let rows: Vec<(i64, i64)> = (0..n)
                            .map(|_| {
                                next += 1;
                                origin.insert(next, (e, d, c, pos));
                                pos += 1;
                                (next, keys[next as usize % 64])
                            })
                            .collect();
                        batches.push(batch(&rows));
                    }
                    channels.push(batches);
                }
                old.push((d % 3 != 2 || channels.iter().any(|c| !c.is_empty())).then_some(channels));
            }
            // New subtask `n` restores the broadcast copy of old subtask
            // `n mod old_p` (`restore.rs` `broadcast_source`).
            let from: Vec<usize> = (0..new_p).map(|n| n % old_p).collect();
            let dealt = redistribute("op", &edges, old, new_p, MAX_P, &from).unwrap();
            prop_assert_eq!(dealt.len(), new_p);
            let mut seen: HashMap<i64, usize> = HashMap::new();
            for (n, sub) in dealt.iter().enumerate() {
                let Some(sub) = sub else { continue };
                let layout = channel_layout(
                    edges.iter().map(|s| (s.partitioning.clone(), s.new_producers)), n);
                prop_assert_eq!(sub.len(), layout.len());
                for (c, batches) in sub.iter().enumerate() {
                    let mut last: HashMap<(usize, usize), usize> = HashMap::new();
                    for (id, k) in rows(batches) {
                        let (e, d, oc, pos) = origin[&id];
                        prop_assert_eq!(layout[c].0, e, "row {} changed its input", id);
                        match &edges[e].partitioning {
                            Partitioning::Hash { .. } => prop_assert_eq!(owner(k, new_p), n),
                            Partitioning::Broadcast => prop_assert_eq!(d, n % old_p),
                            Partitioning::Forward => prop_assert_eq!(d % new_p, n),
                            Partitioning::Rebalance => {}
                        }
                        if let Some(&p) = last.get(&(d, oc)) {
                            prop_assert!(p < pos, "row {} overtook an earlier one", id);
                        }
                        last.insert((d, oc), pos);
                        *seen.entry(id).or_default() += 1;
                    }
                }
            }
            for (id, (e, d, _, _)) in &origin {
                let want = match edges[*e].partitioning {
                    Partitioning::Broadcast => (0..new_p).filter(|n| n % old_p == *d).count(),
                    _ => 1,
                };
                prop_assert_eq!(seen.get(id).copied().unwrap_or(0), want, "row {}", id);
            }
        }
    }
}
