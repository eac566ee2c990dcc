//! The logical job graph the DSL builds: nodes (sources, operators, sinks)
//! and the edges between them, each edge with its partitioning. The runtime
//! expands it into chains and subtasks (see `runtime::plan`).

use std::sync::Arc;

use arrow::datatypes::SchemaRef;

use crate::error::{Error, Result};
use crate::operator::OperatorFactory;
use crate::partition::Partitioning;
use crate::source::SourceFactory;

/// An edge into a node.
#[derive(Debug, Clone)]
pub struct Edge {
    /// The producing node.
    pub from: usize,
    pub partitioning: Partitioning,
    /// Which logical input of the consumer this edge feeds.
    pub input: usize,
}

/// What a node runs.
#[derive(Clone)]
pub enum NodeKind {
    Source(Arc<dyn SourceFactory>),
    Operator(Arc<dyn OperatorFactory>),
}

/// Whether a node reads, transforms or writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Source,
    Operator,
    Sink,
}

/// One node of the graph.
#[derive(Clone)]
pub struct Node {
    pub id: usize,
    pub name: String,
    /// Stable id matching state on restore.
    pub uid: String,
    pub parallelism: usize,
    pub inputs: Vec<Edge>,
    pub kind: NodeKind,
    pub role: Role,
    /// The schema of every batch the node emits, when known before running.
    /// When `None`, the first batch fixes it and later ones must match.
    pub output_schema: Option<SchemaRef>,
}

/// A job graph.
#[derive(Clone)]
pub struct JobGraph {
    pub nodes: Vec<Node>,
    pub max_parallelism: usize,
}

impl JobGraph {
    /// Checks structural invariants: ids in order, inputs refer to earlier
    /// nodes, sources have no inputs, operators have some, forward edges join
    /// equal parallelisms, parallelism within `1..=max_parallelism`.
    pub fn validate(&self) -> Result<()> {
        if self.max_parallelism == 0 || self.max_parallelism > u16::MAX as usize {
            return Err(Error::graph(
                "",
                format!(
                    "max_parallelism must be in 1..=65535, got {}",
                    self.max_parallelism
                ),
            ));
        }
        for (i, n) in self.nodes.iter().enumerate() {
            if n.id != i {
                return Err(Error::graph(
                    &n.name,
                    format!("node id {} is not its position {i}", n.id),
                ));
            }
            if n.parallelism == 0 || n.parallelism > self.max_parallelism {
                return Err(Error::graph(
                    &n.name,
                    format!(
                        "parallelism {} is outside 1..={} (max_parallelism)",
                        n.parallelism, self.max_parallelism
                    ),
                ));
            }
            match (&n.kind, n.inputs.is_empty()) {
                (NodeKind::Source(_), false) => {
                    return Err(Error::graph(&n.name, "a source cannot have inputs"))
                }
                (NodeKind::Operator(_), true) => {
                    return Err(Error::graph(
                        &n.name,
                        "an operator needs at least one input",
                    ))
                }
                _ => {}
            }
            for e in &n.inputs {
                let Some(from) = self.nodes.get(e.from).filter(|_| e.from < i) else {
                    return Err(Error::graph(
                        &n.name,
                        format!("input {} is not an earlier node", e.from),
                    ));
                };
                if from.role == Role::Sink {
                    return Err(Error::graph(
                        &n.name,
                        format!("'{}' is a sink and has no output", from.name),
                    ));
                }
                if e.partitioning == Partitioning::Forward && from.parallelism != n.parallelism {
                    return Err(Error::graph(
                        &n.name,
                        format!(
                            "a forward edge from '{}' (parallelism {}) needs equal parallelism, got {}",
                            from.name, from.parallelism, n.parallelism
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// The nodes consuming `id`'s output.
    pub fn consumers(&self, id: usize) -> Vec<usize> {
        self.nodes
            .iter()
            .filter(|n| n.inputs.iter().any(|e| e.from == id))
            .map(|n| n.id)
            .collect()
    }

    /// Number of logical inputs of a node.
    pub fn num_inputs(&self, id: usize) -> usize {
        self.nodes[id]
            .inputs
            .iter()
            .map(|e| e.input + 1)
            .max()
            .unwrap_or(0)
    }
}
