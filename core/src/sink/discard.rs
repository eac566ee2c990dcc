//! `DiscardSink()`: drops every batch (Flink's `DiscardingSink`, Spark's
//! `noop` format). The task loop counts its rows in like any operator's,
//! so a job's metrics show what reached it; for measuring a pipeline
//! without the cost of keeping or writing its output.

use arrow::record_batch::RecordBatch;

use crate::error::Result;
use crate::operator::{Collector, Operator, OperatorContext, OperatorFactory, Recompute};

/// Factory of [`DiscardSink`] operators.
#[derive(Debug, Default, Clone, Copy)]
pub struct DiscardSinkFactory;

impl OperatorFactory for DiscardSinkFactory {
    fn create(&self, _ctx: &OperatorContext) -> Result<Box<dyn Operator>> {
        Ok(Box::new(DiscardSink))
    }

    /// Stateless: a replay (`recovery="recompute"`) only drops rows again.
    fn recomputable(&self) -> bool {
        true
    }

    fn replayable_from_earlier(&self) -> bool {
        true
    }
}

/// Drops its input; holds no state.
#[derive(Debug)]
pub struct DiscardSink;

impl Operator for DiscardSink {
    fn process_batch(
        &mut self,
        _input: usize,
        _batch: RecordBatch,
        _out: &mut dyn Collector,
    ) -> Result<()> {
        Ok(())
    }

    fn recompute(&mut self) -> Option<&mut dyn Recompute> {
        Some(self)
    }
}

impl Recompute for DiscardSink {
    /// Stateless: its (empty) state is that of the current checkpoint.
    fn null_state_watermark(&self, checkpoint_id: u64) -> Result<Option<u64>> {
        Ok(Some(checkpoint_id))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::operator::testing::Recorder;
    use arrow::array::{ArrayRef, Int64Array};
    use std::sync::Arc;

    #[test]
    fn test_it_emits_nothing_and_holds_no_state() {
        let ctx = OperatorContext {
            name: "discard".into(),
            uid: "discard".into(),
            subtask_index: 0,
            parallelism: 1,
            max_parallelism: 128,
            key_groups: 0..128,
            attempt: 0,
        };
        let mut sink = DiscardSinkFactory.create(&ctx).unwrap();
        let v: ArrayRef = Arc::new(Int64Array::from_iter_values(0..10));
        let batch = RecordBatch::try_from_iter([("v", v)]).unwrap();
        let mut out = Recorder::default();
        sink.process_batch(0, batch, &mut out).unwrap();
        assert!(out.batches.is_empty());
        let recompute = sink.recompute().expect("recomputable");
        assert_eq!(recompute.null_state_watermark(3).unwrap(), Some(3));
    }
}
