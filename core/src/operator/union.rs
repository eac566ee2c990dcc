//! The union operator: merges several inputs of one schema into one stream
//! (DESIGN.md "Runtime": batches are shared by `Arc` and never copied).
//!
//! Batches are forwarded zero-copy, in the order they arrive on any input.
//! [`output_schema`] checks at build time that all inputs have the same field
//! names and types (metadata is ignored); the output field is nullable when
//! the field is nullable in any input. A batch whose schema is not the
//! output's (a non-null field the output has nullable, or other metadata)
//! goes out under the output schema, its columns shared: the batches of one
//! stream have one schema, so sinks can put them in one file or table.

use std::sync::Arc;

use arrow::datatypes::{Field, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;

use crate::error::{Error, Result};
use crate::operator::{Collector, Operator, OperatorContext, OperatorFactory, Recompute};

/// Whether `batch` already has the `output` schema (one pointer compare for
/// the batches of an input whose schema is the output's).
fn same_schema(output: &SchemaRef, batch: &SchemaRef) -> bool {
    Arc::ptr_eq(output, batch) || output.fields() == batch.fields()
}

/// Forwards every batch of every input, under the output schema when known.
#[derive(Debug, Clone, Default)]
pub struct UnionOperator {
    schema: Option<SchemaRef>,
}

/// Builds [`UnionOperator`]s; `schema` is the union's [`output_schema`]
/// (`None`: batches go out with their own schema, as a loop exit's do).
#[derive(Debug, Clone, Default)]
pub struct UnionFactory {
    pub schema: Option<SchemaRef>,
}

impl UnionFactory {
    /// The schema of the union of `inputs`; see [`output_schema`].
    pub fn output_schema(operator: &str, inputs: &[SchemaRef]) -> Result<SchemaRef> {
        output_schema(operator, inputs)
    }
}

impl OperatorFactory for UnionFactory {
    /// Stateless: nothing to rebuild (FLINK-4120).
    fn recomputable(&self) -> bool {
        true
    }

    fn replayable_from_earlier(&self) -> bool {
        true
    }

    fn create(&self, _ctx: &OperatorContext) -> Result<Box<dyn Operator>> {
        Ok(Box::new(UnionOperator {
            schema: self.schema.clone(),
        }))
    }
}

fn describe(schema: &Schema) -> String {
    let fields = schema
        .fields()
        .iter()
        .map(|f| format!("{}: {}", f.name(), f.data_type()))
        .collect::<Vec<_>>()
        .join(", ");
    format!("({fields})")
}

/// The schema of the union of `inputs`: errors with [`Error::schema`] naming
/// both schemas when two inputs differ in field names or types.
pub fn output_schema(operator: &str, inputs: &[SchemaRef]) -> Result<SchemaRef> {
    let Some(first) = inputs.first() else {
        return Err(Error::graph(operator, "union needs at least one input"));
    };
    let mut nullable: Vec<bool> = first.fields().iter().map(|f| f.is_nullable()).collect();
    for (i, other) in inputs.iter().enumerate().skip(1) {
        let same = first.fields().len() == other.fields().len()
            && first
                .fields()
                .iter()
                .zip(other.fields().iter())
                .all(|(a, b)| a.name() == b.name() && a.data_type() == b.data_type());
        if !same {
            return Err(Error::schema(
                operator,
                format!(
                    "union inputs must have the same schema, but input 0 has {} and input {i} has {}",
                    describe(first),
                    describe(other)
                ),
            ));
        }
        for (n, f) in nullable.iter_mut().zip(other.fields().iter()) {
            *n |= f.is_nullable();
        }
    }
    let fields: Vec<Field> = first
        .fields()
        .iter()
        .zip(nullable)
        .map(|(f, n)| Field::new(f.name(), f.data_type().clone(), n))
        .collect();
    Ok(Arc::new(Schema::new(fields)))
}

impl Operator for UnionOperator {
    fn process_batch(
        &mut self,
        _input: usize,
        batch: RecordBatch,
        out: &mut dyn Collector,
    ) -> Result<()> {
        match &self.schema {
            Some(schema) if !same_schema(schema, &batch.schema()) => {
                // Only nullability or metadata differ (output_schema): the
                // columns go out as they are, under the output schema.
                let columns = batch.columns().to_vec();
                let relabelled = RecordBatch::try_new(schema.clone(), columns)
                    .map_err(|e| Error::runtime(format!("union: {e}")))?;
                out.emit(relabelled)
            }
            _ => out.emit(batch),
        }
    }

    fn recompute(&mut self) -> Option<&mut dyn Recompute> {
        Some(self)
    }
}

stateless_recompute!(UnionOperator);

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::operator::testing::Recorder;
    use arrow::array::{ArrayRef, Int64Array};
    use arrow::datatypes::DataType;

    fn schema(fields: &[(&str, DataType, bool)]) -> SchemaRef {
        Arc::new(Schema::new(
            fields
                .iter()
                .map(|(n, t, null)| Field::new(*n, t.clone(), *null))
                .collect::<Vec<_>>(),
        ))
    }

    #[test]
    fn test_output_schema_same_inputs_ignores_metadata_and_merges_nullability() {
        let a = schema(&[("k", DataType::Int64, false), ("v", DataType::Utf8, false)]);
        let b = Arc::new(
            Schema::new(vec![
                Field::new("k", DataType::Int64, true),
                Field::new("v", DataType::Utf8, false),
            ])
            .with_metadata(std::collections::HashMap::from([(
                "x".to_string(),
                "y".to_string(),
            )])),
        );
        let out = output_schema("u", &[a, b]).unwrap();
        assert!(out.field(0).is_nullable());
        assert!(!out.field(1).is_nullable());
        assert!(out.metadata().is_empty());
    }

    #[test]
    fn test_output_schema_different_inputs_names_both_schemas() {
        let a = schema(&[("k", DataType::Int64, false)]);
        let b = schema(&[("k", DataType::Utf8, false)]);
        let err = UnionFactory::output_schema("u", &[a, b]).unwrap_err();
        assert!(matches!(err, Error::Schema { .. }));
        let msg = err.to_string();
        assert!(msg.contains("(k: Int64)"), "{msg}");
        assert!(msg.contains("(k: Utf8)"), "{msg}");
        let c = schema(&[("j", DataType::Int64, false)]);
        let d = schema(&[("k", DataType::Int64, false)]);
        assert!(output_schema("u", &[c, d]).is_err());
        assert!(output_schema("u", &[]).is_err());
    }

    #[test]
    fn test_union_forwards_batches_zero_copy() {
        let s = schema(&[("k", DataType::Int64, false)]);
        let col: ArrayRef = Arc::new(Int64Array::from(vec![1, 2, 3]));
        let batch = RecordBatch::try_new(s.clone(), vec![col.clone()]).unwrap();
        let mut op = UnionOperator {
            schema: Some(s.clone()),
        };
        let mut out = Recorder::default();
        op.process_batch(0, batch.clone(), &mut out).unwrap();
        op.process_batch(1, batch, &mut out).unwrap();
        assert_eq!(out.batches.len(), 2);
        for b in &out.batches {
            assert_eq!(
                b.column(0).to_data().buffers()[0].as_ptr(),
                col.to_data().buffers()[0].as_ptr()
            );
        }
    }

    #[test]
    fn test_union_puts_a_non_null_inputs_batches_under_the_nullable_output_schema() {
        let strict = schema(&[("k", DataType::Int64, false)]);
        let loose = schema(&[("k", DataType::Int64, true)]);
        let output = output_schema("u", &[strict.clone(), loose.clone()]).unwrap();
        let col: ArrayRef = Arc::new(Int64Array::from(vec![1, 2]));
        let mut op = UnionOperator {
            schema: Some(output.clone()),
        };
        let mut out = Recorder::default();
        op.process_batch(
            0,
            RecordBatch::try_new(strict, vec![col.clone()]).unwrap(),
            &mut out,
        )
        .unwrap();
        op.process_batch(
            1,
            RecordBatch::try_new(loose, vec![col.clone()]).unwrap(),
            &mut out,
        )
        .unwrap();
        for b in &out.batches {
            assert_eq!(b.schema().fields(), output.fields());
            // the column is shared, not copied
            assert_eq!(
                b.column(0).to_data().buffers()[0].as_ptr(),
                col.to_data().buffers()[0].as_ptr()
            );
        }
    }
}
