//! The logical job graph the DSL builds: nodes (sources, operators, sinks)
//! and the edges between them, each edge with its partitioning. The runtime
//! expands it into chains and subtasks (see `runtime::plan`).

use std::sync::Arc;

use arrow::datatypes::SchemaRef;

use crate::error::{Error, Result};
use crate::operator::OperatorFactory;
use crate::partition::Partitioning;
use crate::scope::{check_same_scope, StreamScope};
use crate::source::SourceFactory;

/// An edge into a node.
#[derive(Debug, Clone)]
pub struct Edge {
    /// The producing node.
    pub from: usize,
    pub partitioning: Partitioning,
    /// Which logical input of the consumer this edge feeds.
    pub input: usize,
    /// The producer's output port this edge reads: 0 for every ordinary
    /// node; a co-loop head (`iterate_with_feedback`) emits loop input on
    /// port 0 and feedback on port 1.
    pub port: u8,
}

impl Edge {
    /// An edge from `from` into logical input `input`, reading port 0.
    pub fn new(from: usize, partitioning: Partitioning, input: usize) -> Self {
        Edge {
            from,
            partitioning,
            input,
            port: 0,
        }
    }
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
    /// The loop scope the node runs in (root outside every loop).
    pub scope: StreamScope,
}

/// Which input a loop head reads first (FLIP-15, "Cyclic Flow Control").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoopPriority {
    /// Feedback whenever there is any.
    FeedbackFirst,
    /// Feedback first only while a feedback queue is above its memory
    /// threshold; otherwise the loop input and the feedback take turns.
    Adaptive,
}

/// `schema` with every field nullable: what a loop head emits, since its
/// loop input and its feedback may differ in nullability.
pub fn all_nullable(schema: &SchemaRef) -> SchemaRef {
    Arc::new(arrow::datatypes::Schema::new_with_metadata(
        schema
            .fields()
            .iter()
            .map(|f| f.as_ref().clone().with_nullable(true))
            .collect::<Vec<_>>(),
        schema.metadata().clone(),
    ))
}

/// One loop of the graph: its head (the node the loop input and the
/// feedback enter through) and its tail (the node whose output is fed
/// back). The feedback edge is not an [`Edge`]: the runtime replaces it with
/// spilling feedback queues, one per (tail subtask, head subtask) pair.
#[derive(Debug, Clone)]
pub struct LoopSpec {
    pub id: u32,
    pub head: usize,
    pub tail: usize,
    /// Memory budget in bytes of the feedback buffered for one head subtask.
    pub feedback_memory: usize,
    pub priority: LoopPriority,
    /// Feedback leaves the head on port 1 (`iterate_with_feedback`) instead
    /// of joining the loop input on port 0.
    pub co: bool,
    /// Where feedback spill files go (a temporary directory by default).
    pub spill_dir: Option<std::path::PathBuf>,
}

/// A job graph.
#[derive(Clone)]
pub struct JobGraph {
    pub nodes: Vec<Node>,
    pub max_parallelism: usize,
    pub loops: Vec<LoopSpec>,
}

impl JobGraph {
    /// Checks structural invariants: ids in order, inputs refer to earlier
    /// nodes, sources have no inputs, operators have some, forward edges join
    /// equal parallelisms, parallelism within `1..=max_parallelism`.
    pub fn validate(&self) -> Result<()> {
        if self.max_parallelism == 0 || self.max_parallelism > u16::MAX as usize {
            return Err(Error::job_graph(format!(
                "max_parallelism must be in 1..=65535, got {}",
                self.max_parallelism
            )));
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
        self.validate_loops()
    }

    /// Scope rules (FLIP-15 "API Restrictions") and loop specs: the inputs of
    /// a node are all of one scope; that is the node's scope, except for a
    /// loop head (one level deeper: its loop's scope) and a node reading a
    /// loop's output (one level shallower); a loop's tail is in its scope.
    fn validate_loops(&self) -> Result<()> {
        let head_of: std::collections::HashMap<usize, &LoopSpec> =
            self.loops.iter().map(|l| (l.head, l)).collect();
        for l in &self.loops {
            let (Some(head), Some(tail)) = (self.nodes.get(l.head), self.nodes.get(l.tail)) else {
                return Err(Error::job_graph(format!(
                    "loop {} names a head or tail that is not a node",
                    l.id
                )));
            };
            if !matches!(head.kind, NodeKind::Operator(_)) || head.inputs.is_empty() {
                return Err(Error::graph(&head.name, "a loop head needs an input"));
            }
            if head.scope.loop_id() != Some(l.id) {
                return Err(Error::scope(
                    &head.name,
                    format!("the head of loop {} is in scope {}", l.id, head.scope),
                ));
            }
            if tail.scope != head.scope {
                return Err(Error::scope(
                    &tail.name,
                    format!(
                        "the feedback of loop {} comes from scope {}, but the loop's scope is {}",
                        l.id, tail.scope, head.scope
                    ),
                ));
            }
            if tail.role == Role::Sink {
                return Err(Error::graph(
                    &tail.name,
                    "a sink has no output to feed back into a loop",
                ));
            }
            if l.feedback_memory == 0 {
                return Err(Error::graph(&head.name, "feedback_memory must be positive"));
            }
        }
        for n in &self.nodes {
            let scopes: Vec<&StreamScope> =
                n.inputs.iter().map(|e| &self.nodes[e.from].scope).collect();
            if scopes.is_empty() {
                continue;
            }
            check_same_scope(&n.name, &scopes)?;
            let input_scope = scopes[0];
            let ok = if head_of.contains_key(&n.id) {
                n.scope.unnest().as_ref() == Some(input_scope)
            } else {
                &n.scope == input_scope || input_scope.unnest().as_ref() == Some(&n.scope)
            };
            if !ok {
                return Err(Error::scope(
                    &n.name,
                    format!(
                        "an operator in scope {} cannot read a stream of scope {}",
                        n.scope, input_scope
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The loop whose head is `node`.
    pub fn loop_with_head(&self, node: usize) -> Option<&LoopSpec> {
        self.loops.iter().find(|l| l.head == node)
    }

    /// Whether `node` is the tail of a loop (its output is fed back).
    pub fn is_loop_tail(&self, node: usize) -> bool {
        self.loops.iter().any(|l| l.tail == node)
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
