//! Helpers shared by the integration tests: graph building and an operator
//! that fails once on purpose.
#![allow(dead_code)] // each test crate uses a part

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arrow::array::{AsArray, RecordBatch};
use arrow::datatypes::Int64Type;
use eddyline_core::error::{Error, Result};
use eddyline_core::expr::{BinaryOp, Expr, ScalarValue};
use eddyline_core::graph::{Edge, Node, NodeKind, Role};
use eddyline_core::operator::keyed_agg::KeyedAggFactory;
use eddyline_core::operator::project::ProjectFactory;
use eddyline_core::operator::{
    CheckpointedState, Collector, Operator, OperatorContext, OperatorFactory, Recompute,
};
use eddyline_core::partition::Partitioning;
use eddyline_core::scope::StreamScope;
use eddyline_core::sink::collect::CollectStore;
use eddyline_core::source::sequence::SequenceSource;
use eddyline_core::state::keyed::AggKind;

/// A node outside every loop, its uid equal to its name.
pub fn node(
    id: usize,
    name: &str,
    p: usize,
    inputs: Vec<Edge>,
    kind: NodeKind,
    role: Role,
) -> Node {
    Node {
        id,
        name: name.into(),
        uid: name.into(),
        parallelism: p,
        inputs,
        kind,
        role,
        output_schema: None,
        scope: StreamScope::root(),
    }
}

/// Source `seq`: the int64 column `value` over `0..end`.
pub fn seq_node(id: usize, p: usize, end: i64) -> Node {
    node(
        id,
        "seq",
        p,
        vec![],
        NodeKind::Source(Arc::new(SequenceSource::new(0, end))),
        Role::Source,
    )
}

/// A forward edge from `from`.
pub fn fwd(from: usize) -> Edge {
    Edge::new(from, Partitioning::Forward, 0)
}

/// An edge from `from` hash-partitioned on column `key`.
pub fn by_key(from: usize) -> Edge {
    Edge::new(
        from,
        Partitioning::Hash {
            keys: vec!["key".into()],
        },
        0,
    )
}

/// Passes batches through slowly. With `fail_after = Some(n)` it fails once
/// (over all subtasks; `fired` records it), on attempt 0, on the first batch
/// after `n` checkpoints completed; until then it goes slower still, so a
/// busy machine cannot finish the input before those checkpoints complete.
/// `recomputable`: stateless, its state rebuilt by any replay.
pub struct FlakyFactory {
    pub fired: Arc<AtomicBool>,
    pub fail_after: Option<usize>,
    pub recomputable: bool,
}

impl FlakyFactory {
    /// Fails once after `fail_after` checkpoints (never with `None`).
    pub fn new(fail_after: Option<usize>) -> Self {
        FlakyFactory {
            fired: Arc::new(AtomicBool::new(false)),
            fail_after,
            recomputable: false,
        }
    }
}

impl OperatorFactory for FlakyFactory {
    fn recomputable(&self) -> bool {
        self.recomputable
    }
    fn replayable_from_earlier(&self) -> bool {
        self.recomputable
    }
    fn create(&self, _ctx: &OperatorContext) -> Result<Box<dyn Operator>> {
        Ok(Box::new(Flaky {
            fired: self.fired.clone(),
            fail_after: self.fail_after,
            recomputable: self.recomputable,
            attempt: 0,
            completed: 0,
        }))
    }
}

struct Flaky {
    fired: Arc<AtomicBool>,
    fail_after: Option<usize>,
    recomputable: bool,
    attempt: u32,
    completed: usize,
}

impl Operator for Flaky {
    fn open(&mut self, ctx: &OperatorContext) -> Result<()> {
        self.attempt = ctx.attempt;
        Ok(())
    }
    fn process_batch(&mut self, _i: usize, b: RecordBatch, out: &mut dyn Collector) -> Result<()> {
        let pending =
            self.attempt == 0 && self.fail_after.is_some() && !self.fired.load(Ordering::SeqCst);
        std::thread::sleep(Duration::from_micros(if pending { 2500 } else { 200 }));
        if let Some(after) = self.fail_after {
            if pending && self.completed >= after && !self.fired.swap(true, Ordering::SeqCst) {
                return Err(Error::operator(
                    "flaky",
                    "injected failure after a checkpoint",
                ));
            }
        }
        out.emit(b)
    }

    fn state(&mut self) -> Option<&mut dyn CheckpointedState> {
        Some(self)
    }

    fn recompute(&mut self) -> Option<&mut dyn Recompute> {
        Some(self)
    }
}

impl CheckpointedState for Flaky {
    fn notify_checkpoint_complete(&mut self, _id: u64) -> Result<()> {
        self.completed += 1;
        Ok(())
    }
}

impl Recompute for Flaky {
    fn null_state_watermark(&self, checkpoint_id: u64) -> Result<Option<u64>> {
        Ok(self.recomputable.then_some(checkpoint_id))
    }
}

/// The newest running sum per key in a collect store's committed batches
/// (columns `key` and `value`), in commit order (checkpoint, subtask).
pub fn final_sums(store: &CollectStore) -> BTreeMap<i64, i64> {
    let mut out = BTreeMap::new();
    for b in store.committed() {
        let k = b
            .column_by_name("key")
            .expect("a key column")
            .as_primitive::<Int64Type>();
        let v = b
            .column_by_name("value")
            .expect("a value column")
            .as_primitive::<Int64Type>();
        for i in 0..b.num_rows() {
            out.insert(k.value(i), v.value(i));
        }
    }
    out
}

/// The sum of `values` per `value % 13`.
pub fn expected_sums(values: impl Iterator<Item = i64>) -> BTreeMap<i64, i64> {
    let mut out = BTreeMap::new();
    for v in values {
        *out.entry(v % 13).or_insert(0) += v;
    }
    out
}

/// `key = value % modulus`, fed forward from `from`.
pub fn key_mod_node(id: usize, p: usize, from: usize, modulus: i64) -> Node {
    let key = Expr::binary(
        BinaryOp::Mod,
        Expr::col("value"),
        Expr::lit(ScalarValue::Int64(modulus)),
    );
    node(
        id,
        "key",
        p,
        vec![fwd(from)],
        NodeKind::Operator(Arc::new(ProjectFactory::with_columns(vec![(
            "key".into(),
            key,
        )]))),
        Role::Operator,
    )
}

/// The running sum of `value` per `key`, hash-partitioned from `from`.
pub fn sum_by_key_node(id: usize, p: usize, from: usize) -> Node {
    node(
        id,
        "sum",
        p,
        vec![by_key(from)],
        NodeKind::Operator(Arc::new(KeyedAggFactory::new(
            vec!["key".into()],
            AggKind::Sum,
            Some("value".into()),
        ))),
        Role::Operator,
    )
}
