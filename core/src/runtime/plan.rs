//! Operator chaining: consecutive nodes joined by a forward edge, with equal
//! parallelism and no other consumer, run in one thread and hand batches to
//! each other by a function call instead of a channel.

use crate::checkpoint::channel_state::channel_state_uid;
use crate::checkpoint::RestoredCheckpoint;
use crate::graph::{JobGraph, NodeKind};
use crate::partition::Partitioning;

/// A chain of nodes run by one task per parallel subtask; `nodes[0]` is the
/// head (a source or the node that reads the task's input channels).
#[derive(Debug, Clone)]
pub struct Chain {
    pub nodes: Vec<usize>,
    pub parallelism: usize,
}

/// The chains of a graph.
#[derive(Debug, Clone)]
pub struct Plan {
    pub chains: Vec<Chain>,
    /// For every node, the chain that runs it.
    pub chain_of: Vec<usize>,
}

impl Plan {
    /// Chains the nodes of `graph`.
    pub fn new(graph: &JobGraph) -> Plan {
        Self::chaining(graph, |_| true)
    }

    /// Chains the nodes of `graph` for a run restoring `restored`: like
    /// [`Plan::new`], except that an operator whose in-flight input data
    /// (channel state, docs/DESIGN.md "Unaligned checkpoints") the
    /// checkpoint holds is never chained behind its upstream. After a
    /// rescale a rebalance edge can turn into a forward edge at equal
    /// parallelism; the operator then keeps its input channels for this run,
    /// so its restored records are replayed into it (not into the chain
    /// head), in order and before any new record reaches it. The rule reads
    /// only the checkpoint, so the driver and every worker of a distributed
    /// run that restore the same checkpoint build the same chains.
    pub fn for_restore(graph: &JobGraph, restored: Option<&RestoredCheckpoint>) -> Plan {
        let Some(rc) = restored else {
            return Self::new(graph);
        };
        Self::chaining(graph, |n| {
            let uid = channel_state_uid(&graph.nodes[n].uid);
            !rc.subtask_states(&uid).any(|(_, s)| !s.is_empty())
        })
    }

    /// Chains the nodes of `graph`; node `n` may join its predecessor's
    /// chain only if `may_chain(n)`.
    fn chaining(graph: &JobGraph, may_chain: impl Fn(usize) -> bool) -> Plan {
        let mut chains: Vec<Chain> = Vec::new();
        let mut chain_of = vec![usize::MAX; graph.nodes.len()];
        for node in &graph.nodes {
            let chain_into = match (&node.kind, node.inputs.as_slice()) {
                (NodeKind::Operator(_), [edge]) if edge.partitioning == Partitioning::Forward => {
                    let pred = &graph.nodes[edge.from];
                    let pred_chain = chain_of[edge.from];
                    let single_consumer = graph.consumers(edge.from).len() == 1;
                    let pred_is_tail = chains[pred_chain].nodes.last() == Some(&edge.from);
                    // Operators of different scopes are never chained; a
                    // loop tail ends its chain (its output is the feedback);
                    // a co-loop head routes by port, so it runs alone.
                    let same_scope = pred.scope == node.scope;
                    let feeds_back = graph.is_loop_tail(edge.from);
                    let co_head = graph.loop_with_head(edge.from).is_some_and(|l| l.co);
                    (pred.parallelism == node.parallelism
                        && single_consumer
                        && pred_is_tail
                        && same_scope
                        && !feeds_back
                        && !co_head
                        && edge.port == 0
                        && may_chain(node.id))
                    .then_some(pred_chain)
                }
                _ => None,
            };
            match chain_into {
                Some(c) => {
                    chains[c].nodes.push(node.id);
                    chain_of[node.id] = c;
                }
                None => {
                    chain_of[node.id] = chains.len();
                    chains.push(Chain {
                        nodes: vec![node.id],
                        parallelism: node.parallelism,
                    });
                }
            }
        }
        Plan { chains, chain_of }
    }
}
