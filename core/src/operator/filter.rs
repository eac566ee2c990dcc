//! The native `filter` operator: keeps the rows for which a boolean
//! [`Expr`] is true (null counts as false), without the GIL (DESIGN.md
//! "Runtime", native operators).
//!
//! A batch whose rows all pass is re-emitted as is (same buffers, no copy);
//! a batch with no passing row emits nothing.

use std::sync::Arc;

use arrow::array::{Array, AsArray};
use arrow::compute::filter_record_batch;
use arrow::datatypes::{DataType, SchemaRef};
use arrow::record_batch::RecordBatch;

use super::{Collector, Operator, OperatorContext, OperatorFactory, Recompute};
use crate::error::{Error, ForOperator, Result};
use crate::expr::{Expr, Value};

fn not_boolean(operator: &str, predicate: &Expr, found: &DataType) -> Error {
    Error::schema(
        operator,
        format!("the filter predicate {predicate} must be boolean, but it is {found}"),
    )
}

/// Keeps the rows where `predicate` is true.
#[derive(Debug, Clone)]
pub struct FilterOperator {
    /// The operator's name, for errors.
    name: String,
    predicate: Expr,
}

impl FilterOperator {
    /// Filter `name` on `predicate`.
    pub fn new(name: &str, predicate: Expr) -> Self {
        Self {
            name: name.to_string(),
            predicate,
        }
    }

    /// The rows of `batch` where the predicate is true, or `None` if there
    /// are none. When every row passes, the result is `batch` itself.
    pub fn filter(&self, batch: RecordBatch) -> Result<Option<RecordBatch>> {
        let rows = batch.num_rows();
        if rows == 0 {
            return Ok(None);
        }
        let mask = match self.predicate.eval(&batch).map_err(|e| e.at(&self.name))? {
            Value::Array(mask) => mask,
            // A predicate of literals only: all rows or none.
            Value::Scalar(value) => {
                return match value.as_boolean_opt() {
                    Some(b) if b.is_valid(0) && b.value(0) => Ok(Some(batch)),
                    Some(_) => Ok(None),
                    None if value.data_type() == &DataType::Null => Ok(None),
                    None => Err(not_boolean(&self.name, &self.predicate, value.data_type())),
                };
            }
        };
        let Some(mask) = mask.as_boolean_opt() else {
            return Err(not_boolean(&self.name, &self.predicate, mask.data_type()));
        };
        let kept = mask.true_count();
        if kept == rows {
            Ok(Some(batch))
        } else if kept == 0 {
            Ok(None)
        } else {
            Ok(Some(
                filter_record_batch(&batch, mask).for_operator(&self.name)?,
            ))
        }
    }
}

impl Operator for FilterOperator {
    fn process_batch(
        &mut self,
        _input: usize,
        batch: RecordBatch,
        out: &mut dyn Collector,
    ) -> Result<()> {
        match self.filter(batch)? {
            Some(kept) => out.emit(kept),
            None => Ok(()),
        }
    }

    forward_source_progress!();

    fn recompute(&mut self) -> Option<&mut dyn Recompute> {
        Some(self)
    }
}

stateless_recompute!(FilterOperator);

/// Builds a [`FilterOperator`] per subtask.
#[derive(Debug, Clone)]
pub struct FilterFactory {
    expr: Expr,
}

impl FilterFactory {
    /// A factory for filters on `expr`.
    pub fn new(expr: Expr) -> Self {
        Self { expr }
    }

    /// The predicate.
    pub fn expr(&self) -> &Expr {
        &self.expr
    }

    /// Type-checks the predicate against `input` (at graph build time) and
    /// returns the output schema, which is `input`. An unknown column is an
    /// [`Error::Graph`]; a predicate that is not boolean an
    /// [`Error::Schema`].
    /// Errors name `operator`.
    pub fn output_schema(&self, operator: &str, input: &SchemaRef) -> Result<SchemaRef> {
        let data_type = self.expr.data_type(input).map_err(|e| e.at(operator))?;
        if data_type != DataType::Boolean {
            return Err(not_boolean(operator, &self.expr, &data_type));
        }
        Ok(Arc::clone(input))
    }
}

impl OperatorFactory for FilterFactory {
    /// Stateless: nothing to rebuild (FLINK-4120).
    fn recomputable(&self) -> bool {
        true
    }

    fn replayable_from_earlier(&self) -> bool {
        true
    }

    fn create(&self, ctx: &OperatorContext) -> Result<Box<dyn Operator>> {
        Ok(Box::new(FilterOperator::new(&ctx.name, self.expr.clone())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expr::{BinaryOp, ScalarValue};
    use arrow::array::{Int64Array, StringArray};
    use arrow::datatypes::{Field, Int64Type, Schema};

    #[derive(Default)]
    struct Sink(Vec<RecordBatch>);

    impl Collector for Sink {
        fn emit(&mut self, batch: RecordBatch) -> Result<()> {
            self.0.push(batch);
            Ok(())
        }
        fn emit_watermark(&mut self, _watermark: i64) -> Result<()> {
            Ok(())
        }
    }

    fn ctx() -> OperatorContext {
        crate::operator::testing::context("f", 0..128, 128)
    }

    fn batch(values: Vec<Option<i64>>) -> RecordBatch {
        let n = values.len();
        let schema = Schema::new(vec![
            Field::new("value", DataType::Int64, true),
            Field::new("s", DataType::Utf8, false),
        ]);
        RecordBatch::try_new(
            Arc::new(schema),
            vec![
                Arc::new(Int64Array::from(values)),
                Arc::new(StringArray::from_iter_values((0..n).map(|i| i.to_string()))),
            ],
        )
        .expect("valid batch")
    }

    fn predicate(op: BinaryOp, v: i64) -> Expr {
        Expr::binary(op, Expr::col("value"), Expr::lit(ScalarValue::Int64(v)))
    }

    fn run(expr: Expr, input: RecordBatch) -> Vec<RecordBatch> {
        let mut op = FilterFactory::new(expr).create(&ctx()).expect("create");
        let mut sink = Sink::default();
        op.process_batch(0, input, &mut sink).expect("process");
        sink.0
    }

    #[test]
    fn test_filter_all_pass_reemits_same_batch() {
        let input = batch(vec![Some(1), Some(2), Some(3)]);
        let out = run(predicate(BinaryOp::Gt, 0), input.clone());
        assert_eq!(out.len(), 1);
        assert!(Arc::ptr_eq(out[0].column(0), input.column(0)));
        assert!(Arc::ptr_eq(out[0].column(1), input.column(1)));
    }

    #[test]
    fn test_filter_none_pass_emits_nothing() {
        let out = run(
            predicate(BinaryOp::Gt, 10),
            batch(vec![Some(1), None, Some(3)]),
        );
        assert!(out.is_empty());
    }

    #[test]
    fn test_filter_drops_nulls_and_false() {
        let out = run(
            predicate(BinaryOp::NotEq, 2),
            batch(vec![Some(1), None, Some(2), Some(3)]),
        );
        assert_eq!(out.len(), 1);
        let kept: Vec<Option<i64>> = out[0]
            .column(0)
            .as_primitive::<Int64Type>()
            .iter()
            .collect();
        assert_eq!(kept, vec![Some(1), Some(3)]);
        let s: Vec<Option<&str>> = out[0].column(1).as_string::<i32>().iter().collect();
        assert_eq!(s, vec![Some("0"), Some("3")]);
    }

    #[test]
    fn test_filter_literal_predicate() {
        let t = Expr::lit(ScalarValue::Boolean(true));
        let input = batch(vec![Some(1), Some(2)]);
        let out = run(t, input.clone());
        assert!(Arc::ptr_eq(out[0].column(0), input.column(0)));
        assert!(run(Expr::lit(ScalarValue::Boolean(false)), input).is_empty());
    }

    #[test]
    fn test_filter_output_schema_checks_predicate() {
        let schema = batch(vec![]).schema();
        let f = FilterFactory::new(predicate(BinaryOp::Lt, 3));
        assert!(Arc::ptr_eq(
            &f.output_schema("f", &schema).expect("typed"),
            &schema
        ));
        let err = FilterFactory::new(Expr::col("value"))
            .output_schema("f", &schema)
            .expect_err("not boolean");
        assert!(matches!(err, Error::Schema { .. }), "{err}");
        assert!(err.to_string().contains("must be boolean"), "{err}");
        let err = FilterFactory::new(Expr::col("nope"))
            .output_schema("f", &schema)
            .expect_err("unknown column");
        assert!(matches!(err, Error::Graph { .. }), "{err}");
        // The same check at run time.
        let mut op = FilterOperator::new("f", Expr::col("value"));
        let err = op
            .process_batch(0, batch(vec![Some(1)]), &mut Sink::default())
            .expect_err("not boolean");
        assert!(matches!(err, Error::Schema { .. }), "{err}");
    }
}
