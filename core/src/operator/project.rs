//! The native projection operator behind the DSL's `with_columns(...)` and
//! `select(...)`: computes named [`Expr`]s over each batch without the GIL
//! (DESIGN.md "Runtime", native operators).
//!
//! * `with_columns` adds or replaces columns: a replaced column keeps its
//!   position, new columns are appended in the order given, and every
//!   expression sees the input columns (not each other's results).
//! * `select` outputs exactly the listed columns in the listed order.
//!
//! A plain column reference is passed through zero-copy (the same
//! `ArrayRef`) and keeps its input field's type and nullability; computed
//! columns are declared nullable. The output schema is planned once, from
//! the input schema when it is known up front or else from the first batch,
//! and the one `SchemaRef` is reused for every output batch.

use std::collections::HashSet;
use std::sync::Arc;

use arrow::array::ArrayRef;
use arrow::datatypes::{Field, FieldRef, Schema, SchemaRef};
use arrow::record_batch::{RecordBatch, RecordBatchOptions};

use super::{Collector, Operator, OperatorContext, OperatorFactory, Recompute};
use crate::error::{Error, Result};
use crate::expr::Expr;

/// Which projection the operator performs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProjectMode {
    /// Add or replace columns, keep the others.
    WithColumns,
    /// Output exactly the given columns.
    Select,
}

impl ProjectMode {
    fn name(self) -> &'static str {
        match self {
            ProjectMode::WithColumns => "with_columns",
            ProjectMode::Select => "select",
        }
    }
}

/// How one output column is produced.
#[derive(Debug, Clone)]
enum OutputColumn {
    /// The input column at this index, passed through.
    Input(usize),
    /// A computed expression.
    Computed(Expr),
}

/// The projection planned against one input schema.
#[derive(Debug, Clone)]
struct Plan {
    input: SchemaRef,
    output: SchemaRef,
    columns: Vec<OutputColumn>,
}

impl Plan {
    /// Errors name `operator`.
    fn new(
        operator: &str,
        mode: ProjectMode,
        exprs: &[(String, Expr)],
        input: &SchemaRef,
    ) -> Result<Plan> {
        let mut seen = HashSet::with_capacity(exprs.len());
        for (name, _) in exprs {
            if !seen.insert(name.as_str()) {
                return Err(Error::graph(
                    operator,
                    format!(
                        "column '{name}' is assigned more than once in {}",
                        mode.name()
                    ),
                ));
            }
        }
        let mut fields: Vec<FieldRef> = Vec::new();
        let mut columns = Vec::new();
        if mode == ProjectMode::WithColumns {
            fields.extend(input.fields().iter().cloned());
            columns.extend((0..input.fields().len()).map(OutputColumn::Input));
        }
        for (name, expr) in exprs {
            let data_type = expr.data_type(input).map_err(|e| e.at(operator))?;
            let (field, column) = match expr {
                Expr::Column(source) => {
                    let (index, field) = input.column_with_name(source).ok_or_else(|| {
                        Error::graph(operator, format!("column '{source}' does not exist"))
                    })?;
                    let field = if field.name() == name {
                        Arc::clone(&input.fields()[index])
                    } else {
                        Arc::new(field.clone().with_name(name.as_str()))
                    };
                    (field, OutputColumn::Input(index))
                }
                computed => (
                    Arc::new(Field::new(name.as_str(), data_type, true)),
                    OutputColumn::Computed(computed.clone()),
                ),
            };
            let existing = match mode {
                ProjectMode::WithColumns => input.index_of(name).ok(),
                ProjectMode::Select => None,
            };
            match existing {
                Some(position) => {
                    fields[position] = field;
                    columns[position] = column;
                }
                None => {
                    fields.push(field);
                    columns.push(column);
                }
            }
        }
        let output = Schema::new_with_metadata(fields, input.metadata().clone());
        Ok(Plan {
            input: Arc::clone(input),
            output: Arc::new(output),
            columns,
        })
    }

    /// Whether batches of `schema` fit this plan (same column names and
    /// types, in the same order).
    fn accepts(&self, schema: &SchemaRef) -> bool {
        Arc::ptr_eq(schema, &self.input)
            || (schema.fields().len() == self.input.fields().len()
                && schema
                    .fields()
                    .iter()
                    .zip(self.input.fields().iter())
                    .all(|(a, b)| a.name() == b.name() && a.data_type() == b.data_type()))
    }

    fn project(&self, operator: &str, batch: &RecordBatch) -> Result<RecordBatch> {
        let mut arrays: Vec<ArrayRef> = Vec::with_capacity(self.columns.len());
        for column in &self.columns {
            arrays.push(match column {
                OutputColumn::Input(index) => Arc::clone(batch.column(*index)),
                OutputColumn::Computed(expr) => expr.evaluate(batch).map_err(|e| e.at(operator))?,
            });
        }
        let options = RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
        RecordBatch::try_new_with_options(Arc::clone(&self.output), arrays, &options).map_err(|e| {
            Error::schema(
                operator,
                format!("the projected batch does not fit its schema: {e}"),
            )
        })
    }
}

fn describe(schema: &Schema) -> String {
    let columns: Vec<String> = schema
        .fields()
        .iter()
        .map(|f| format!("{}: {}", f.name(), f.data_type()))
        .collect();
    columns.join(", ")
}

/// Computes `with_columns` or `select` over each batch.
#[derive(Debug, Clone)]
pub struct ProjectOperator {
    /// The operator's name, for errors.
    name: String,
    mode: ProjectMode,
    exprs: Vec<(String, Expr)>,
    plan: Option<Plan>,
    /// The last batch schema found compatible with the plan, so a schema
    /// that is equal but not the same `Arc` is compared only once.
    accepted: Option<SchemaRef>,
}

impl ProjectOperator {
    /// A projection in `mode`; planned now if `input` is known, else on the
    /// first batch.
    pub fn new(
        name: &str,
        mode: ProjectMode,
        exprs: Vec<(String, Expr)>,
        input: Option<&SchemaRef>,
    ) -> Result<Self> {
        let plan = input
            .map(|s| Plan::new(name, mode, &exprs, s))
            .transpose()?;
        Ok(Self {
            name: name.to_string(),
            mode,
            exprs,
            plan,
            accepted: None,
        })
    }

    /// `with_columns(name=expr, ...)`.
    pub fn with_columns(
        name: &str,
        exprs: Vec<(String, Expr)>,
        input: Option<&SchemaRef>,
    ) -> Result<Self> {
        Self::new(name, ProjectMode::WithColumns, exprs, input)
    }

    /// `select(name=expr, ...)`.
    pub fn select(
        name: &str,
        exprs: Vec<(String, Expr)>,
        input: Option<&SchemaRef>,
    ) -> Result<Self> {
        Self::new(name, ProjectMode::Select, exprs, input)
    }

    /// The output schema, once planned.
    pub fn output_schema(&self) -> Option<&SchemaRef> {
        self.plan.as_ref().map(|p| &p.output)
    }

    /// Projects one batch.
    pub fn project(&mut self, batch: &RecordBatch) -> Result<RecordBatch> {
        let schema = batch.schema_ref();
        let plan = match &self.plan {
            Some(plan) => plan,
            None => self
                .plan
                .insert(Plan::new(&self.name, self.mode, &self.exprs, schema)?),
        };
        let known = self
            .accepted
            .as_ref()
            .is_some_and(|s| Arc::ptr_eq(s, schema));
        if !known {
            if !plan.accepts(schema) {
                return Err(Error::schema(
                    &self.name,
                    format!(
                        "{} expects input columns ({}), but a batch has ({})",
                        self.mode.name(),
                        describe(&plan.input),
                        describe(schema)
                    ),
                ));
            }
            self.accepted = Some(Arc::clone(schema));
        }
        plan.project(&self.name, batch)
    }
}

impl Operator for ProjectOperator {
    fn process_batch(
        &mut self,
        _input: usize,
        batch: RecordBatch,
        out: &mut dyn Collector,
    ) -> Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        let projected = self.project(&batch)?;
        out.emit(projected)
    }

    forward_source_progress!();

    fn recompute(&mut self) -> Option<&mut dyn Recompute> {
        Some(self)
    }
}

stateless_recompute!(ProjectOperator);

/// Builds a [`ProjectOperator`] per subtask.
#[derive(Debug, Clone)]
pub struct ProjectFactory {
    mode: ProjectMode,
    exprs: Vec<(String, Expr)>,
    /// Planned once when the input schema is known, shared by all subtasks.
    plan: Option<Plan>,
}

impl ProjectFactory {
    /// A factory for `with_columns(name=expr, ...)`.
    pub fn with_columns(exprs: Vec<(String, Expr)>) -> Self {
        Self {
            mode: ProjectMode::WithColumns,
            exprs,
            plan: None,
        }
    }

    /// A factory for `select(name=expr, ...)`.
    pub fn select(exprs: Vec<(String, Expr)>) -> Self {
        Self {
            mode: ProjectMode::Select,
            exprs,
            plan: None,
        }
    }

    /// Declares the input schema: the projection is type-checked and
    /// planned now, once, for every subtask.
    /// Errors name `operator`.
    pub fn with_input_schema(mut self, operator: &str, input: &SchemaRef) -> Result<Self> {
        self.plan = Some(Plan::new(operator, self.mode, &self.exprs, input)?);
        Ok(self)
    }

    /// The projection mode.
    pub fn mode(&self) -> ProjectMode {
        self.mode
    }

    /// The named expressions, in order.
    pub fn exprs(&self) -> &[(String, Expr)] {
        &self.exprs
    }

    /// Type-checks the expressions against `input` (at graph build time) and
    /// returns the output schema. An unknown column or a name assigned twice
    /// is an [`Error::Graph`]; operands of the wrong type an
    /// [`Error::Schema`].
    /// Errors name `operator`.
    pub fn output_schema(&self, operator: &str, input: &SchemaRef) -> Result<SchemaRef> {
        match &self.plan {
            Some(plan) if Arc::ptr_eq(&plan.input, input) => Ok(Arc::clone(&plan.output)),
            _ => Ok(Plan::new(operator, self.mode, &self.exprs, input)?.output),
        }
    }
}

impl OperatorFactory for ProjectFactory {
    /// Stateless: nothing to rebuild (FLINK-4120).
    fn recomputable(&self) -> bool {
        true
    }

    fn replayable_from_earlier(&self) -> bool {
        true
    }

    fn create(&self, ctx: &OperatorContext) -> Result<Box<dyn Operator>> {
        Ok(Box::new(ProjectOperator {
            name: ctx.name.clone(),
            mode: self.mode,
            exprs: self.exprs.clone(),
            plan: self.plan.clone(),
            accepted: None,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expr::{BinaryOp, ScalarValue};
    use arrow::array::{Array, AsArray, Int32Array, Int64Array, StringArray};
    use arrow::datatypes::{DataType, Int64Type};

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
        crate::operator::testing::context("p", 0..128, 128)
    }

    fn batch() -> RecordBatch {
        let schema = Schema::new(vec![
            Field::new("value", DataType::Int64, false),
            Field::new("n", DataType::Int32, true),
            Field::new("s", DataType::Utf8, true),
        ]);
        RecordBatch::try_new(
            Arc::new(schema),
            vec![
                Arc::new(Int64Array::from(vec![1, 2, 3])),
                Arc::new(Int32Array::from(vec![Some(10), None, Some(30)])),
                Arc::new(StringArray::from(vec!["a", "b", "c"])),
            ],
        )
        .expect("valid batch")
    }

    fn times(name: &str, k: i64) -> Expr {
        Expr::binary(
            BinaryOp::Mul,
            Expr::col(name),
            Expr::lit(ScalarValue::Int64(k)),
        )
    }

    fn names(schema: &Schema) -> Vec<&str> {
        schema.fields().iter().map(|f| f.name().as_str()).collect()
    }

    fn ints(a: &ArrayRef) -> Vec<Option<i64>> {
        a.as_primitive::<Int64Type>().iter().collect()
    }

    fn run(factory: ProjectFactory, batches: Vec<RecordBatch>) -> Vec<RecordBatch> {
        let mut op = factory.create(&ctx()).expect("create");
        let mut sink = Sink::default();
        for b in batches {
            op.process_batch(0, b, &mut sink).expect("process");
        }
        sink.0
    }

    #[test]
    fn test_with_columns_replaces_in_place_and_appends() {
        let input = batch();
        let f = ProjectFactory::with_columns(vec![
            ("double".into(), times("value", 2)),
            ("value".into(), times("value", 10)),
        ]);
        let out = run(f, vec![input.clone(), input.clone()]);
        assert_eq!(out.len(), 2);
        assert_eq!(
            names(out[0].schema_ref()),
            vec!["value", "n", "s", "double"]
        );
        assert_eq!(ints(out[0].column(0)), vec![Some(10), Some(20), Some(30)]);
        assert_eq!(ints(out[0].column(3)), vec![Some(2), Some(4), Some(6)]);
        // Untouched columns are the same arrays; replaced ones are nullable.
        assert!(Arc::ptr_eq(out[0].column(1), input.column(1)));
        assert!(out[0].schema().field(0).is_nullable());
        // One cached schema for every batch.
        assert!(Arc::ptr_eq(out[0].schema_ref(), out[1].schema_ref()));
    }

    #[test]
    fn test_select_orders_and_passes_through() {
        let input = batch();
        let f = ProjectFactory::select(vec![
            ("s".into(), Expr::col("s")),
            ("v".into(), Expr::col("value")),
            ("n2".into(), times("n", 2)),
        ])
        .with_input_schema("p", &input.schema())
        .expect("plan");
        let schema = f.output_schema("p", &input.schema()).expect("schema");
        assert_eq!(names(&schema), vec!["s", "v", "n2"]);
        // Pass-through keeps the input's nullability, computed is nullable.
        assert!(!schema.field(1).is_nullable());
        assert_eq!(schema.field(2).data_type(), &DataType::Int64);
        assert!(schema.field(2).is_nullable());
        let out = run(f, vec![input.clone()]);
        assert!(Arc::ptr_eq(out[0].column(0), input.column(2)));
        assert!(Arc::ptr_eq(out[0].column(1), input.column(0)));
        assert!(Arc::ptr_eq(out[0].schema_ref(), &schema) || *out[0].schema_ref() == schema);
        assert_eq!(ints(out[0].column(2)), vec![Some(20), None, Some(60)]);
    }

    #[test]
    fn test_project_plans_schema_once_from_known_input() {
        let input = batch();
        let schema = input.schema();
        let mut op = ProjectOperator::with_columns(
            "p",
            vec![("d".into(), times("value", 2))],
            Some(&schema),
        )
        .expect("plan");
        let planned = Arc::clone(op.output_schema().expect("planned"));
        let a = op.project(&input).expect("project");
        // An equal schema in a different Arc is accepted.
        let copy =
            RecordBatch::try_new(Arc::new(schema.as_ref().clone()), input.columns().to_vec())
                .expect("copy");
        let b = op.project(&copy).expect("project");
        assert!(Arc::ptr_eq(a.schema_ref(), &planned));
        assert!(Arc::ptr_eq(b.schema_ref(), &planned));
    }

    #[test]
    fn test_project_errors() {
        let input = batch();
        let schema = input.schema();
        let err = ProjectFactory::select(vec![("x".into(), Expr::col("missing"))])
            .output_schema("p", &schema)
            .expect_err("unknown column");
        assert!(matches!(err, Error::Graph { .. }), "{err}");
        assert!(
            err.to_string().contains("available columns: value, n, s"),
            "{err}"
        );
        let err = ProjectFactory::with_columns(vec![
            ("x".into(), Expr::col("value")),
            ("x".into(), Expr::col("n")),
        ])
        .output_schema("p", &schema)
        .expect_err("duplicate");
        assert!(matches!(err, Error::Graph { .. }), "{err}");
        let bad = Expr::binary(
            BinaryOp::Add,
            Expr::col("s"),
            Expr::lit(ScalarValue::Int64(1)),
        );
        let err = ProjectFactory::with_columns(vec![("x".into(), bad)])
            .output_schema("p", &schema)
            .expect_err("type");
        assert!(matches!(err, Error::Schema { .. }), "{err}");
        // A batch of another schema than the planned one.
        let mut op =
            ProjectOperator::select("p", vec![("v".into(), Expr::col("value"))], Some(&schema))
                .expect("plan");
        let other = RecordBatch::try_new(
            Arc::new(Schema::new(vec![Field::new("value", DataType::Utf8, true)])),
            vec![Arc::new(StringArray::from(vec!["x"]))],
        )
        .expect("batch");
        let err = op.project(&other).expect_err("schema mismatch");
        assert!(matches!(err, Error::Schema { .. }), "{err}");
    }

    #[test]
    fn test_select_literal_broadcast_and_empty_select() {
        let input = batch();
        let f = ProjectFactory::select(vec![("one".into(), Expr::lit(ScalarValue::Int64(1)))]);
        let out = run(f, vec![input.clone()]);
        assert_eq!(ints(out[0].column(0)), vec![Some(1); 3]);
        let out = run(ProjectFactory::select(vec![]), vec![input]);
        assert_eq!((out[0].num_columns(), out[0].num_rows()), (0, 3));
        assert_eq!(out[0].column_by_name("x").map(|a| a.len()), None);
    }
}
