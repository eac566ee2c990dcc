//! Spark's ANSI `sum` of longs (`spark.sql.ansi.enabled=true`; docs/API.md
//! "Functions and aggregates").
//!
//! Spark sums integers in a `bigint` and adds each value to the running sum
//! with `Math.addExact`: in ANSI mode a sum that leaves `bigint`'s range
//! fails the query (`ARITHMETIC_OVERFLOW`), also when a later value would
//! bring it back into range; without ANSI mode it wraps around, as
//! DataFusion's `sum` does. [`AnsiSum`] is DataFusion's `sum` accumulator
//! with checked additions, in arrival order as Spark adds the rows of one
//! partition. Its state is the same one `bigint` column (`sum`) as
//! DataFusion's, so a checkpoint taken with or without ANSI mode restores
//! into either.

use arrow::array::{Array, ArrayRef, AsArray};
use arrow::datatypes::Int64Type;
use datafusion_common::{exec_err, Result, ScalarValue};
use datafusion_expr::Accumulator;

/// The running `bigint` sum of one slot, failing on overflow.
#[derive(Debug)]
pub(super) struct AnsiSum {
    sum: Option<i64>,
    /// What is summed, for the error (`'x'`, or the expression's columns).
    what: String,
}

impl AnsiSum {
    /// An empty sum (null until a non-null value arrives) of `what`.
    pub(super) fn new(what: String) -> Self {
        AnsiSum { sum: None, what }
    }

    fn add(&mut self, values: &ArrayRef) -> Result<()> {
        let Some(values) = values.as_primitive_opt::<Int64Type>() else {
            return exec_err!(
                "sum in ANSI mode takes bigint values, got {}",
                values.data_type()
            );
        };
        if values.null_count() == values.len() {
            return Ok(());
        }
        let mut sum = self.sum.unwrap_or(0);
        for v in values.iter().flatten() {
            sum = match sum.checked_add(v) {
                Some(s) => s,
                None => {
                    return exec_err!(
                        "[ARITHMETIC_OVERFLOW] long overflow: the sum of {} leaves bigint's \
                         range at {sum} + {v} (ANSI mode, spark.sql.ansi.enabled; without it \
                         the sum wraps around)",
                        self.what
                    )
                }
            };
        }
        self.sum = Some(sum);
        Ok(())
    }
}

impl Accumulator for AnsiSum {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        match values.first() {
            Some(v) => self.add(v),
            None => exec_err!("sum takes one argument"),
        }
    }

    /// Partial sums (another subtask's, a merged session's) are added with
    /// the same check, as Spark merges partial aggregates.
    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        self.update_batch(states)
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        Ok(vec![ScalarValue::Int64(self.sum)])
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        Ok(ScalarValue::Int64(self.sum))
    }

    fn size(&self) -> usize {
        size_of_val(self) + self.what.capacity()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::Int64Array;

    use super::*;

    fn column(values: &[Option<i64>]) -> ArrayRef {
        Arc::new(Int64Array::from(values.to_vec()))
    }

    #[test]
    fn test_sum_in_range_equals_the_plain_sum_and_skips_nulls() {
        let mut sum = AnsiSum::new("'x'".into());
        assert_eq!(sum.evaluate().expect("value"), ScalarValue::Int64(None));
        sum.update_batch(&[column(&[None, None])]).expect("nulls");
        assert_eq!(sum.evaluate().expect("value"), ScalarValue::Int64(None));
        sum.update_batch(&[column(&[Some(i64::MAX - 1), None, Some(1)])])
            .expect("in range");
        assert_eq!(
            sum.evaluate().expect("value"),
            ScalarValue::Int64(Some(i64::MAX))
        );
    }

    #[test]
    fn test_overflow_fails_naming_the_values_even_if_a_later_value_returns() {
        let mut sum = AnsiSum::new("'x'".into());
        sum.update_batch(&[column(&[Some(i64::MAX)])])
            .expect("in range");
        let err = sum
            .update_batch(&[column(&[Some(1), Some(-5)])])
            .expect_err("MAX + 1 overflows, as Math.addExact does");
        let message = err.to_string();
        assert!(message.contains("ARITHMETIC_OVERFLOW"), "{message}");
        assert!(
            message.contains(&format!(
                "the sum of 'x' leaves bigint's range at {} + 1",
                i64::MAX
            )),
            "{message}"
        );
    }

    #[test]
    fn test_merging_partial_sums_is_checked() {
        let mut sum = AnsiSum::new("'x'".into());
        sum.update_batch(&[column(&[Some(i64::MIN + 3)])])
            .expect("in range");
        sum.merge_batch(&[column(&[None, Some(-3)])])
            .expect("in range");
        assert_eq!(
            sum.state().expect("state"),
            vec![ScalarValue::Int64(Some(i64::MIN))]
        );
        sum.merge_batch(&[column(&[Some(-1)])])
            .expect_err("below bigint's range");
    }
}
