//! The native flat-map behind `stream.explode(...)` and `F.explode` in
//! `select` (DESIGN.md "Runtime", native operators): one output row per
//! element of an array-valued expression, the other columns repeated.
//!
//! * `explode` drops rows whose array is null or empty; `explode_outer`
//!   keeps each as one row with a null element (Spark).
//! * `posexplode` adds the element's 0-based position in its array as an
//!   `int` column (Spark's `pos`) just before the elements; an outer row's
//!   position is null.
//! * In `select` mode the output is exactly the listed columns, the
//!   generator's elements at its position; in `with_column` mode
//!   (`stream.explode(col, alias)`) the input columns are kept and the
//!   elements replace the column named `alias` in place, or are appended.
//!
//! Per batch: the array is evaluated once, one index vector of input rows
//! is built, and each repeated column is gathered with one `take`. The
//! elements are the list's values sliced zero-copy when every row
//! contributes its elements as they lie (no outer padding); otherwise one
//! `take` too. Nothing is done or allocated per record. Stateless, like a
//! projection: checkpoint-neutral and recomputable.

use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, GenericListArray, Int32Array, OffsetSizeTrait, UInt64Array,
};
use arrow::compute::{cast, take};
use arrow::datatypes::{DataType, Field, FieldRef, Schema, SchemaRef};
use arrow::record_batch::{RecordBatch, RecordBatchOptions};

use super::{Collector, Operator, OperatorContext, OperatorFactory, Recompute};
use crate::error::{Error, Result};
use crate::expr::Expr;

/// How the output relates to the input columns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExplodeMode {
    /// Output exactly the listed columns (`select(..., F.explode(c), ...)`).
    Select,
    /// Keep the input columns; the generator's column replaces or is
    /// appended (`stream.explode(c, alias=...)`).
    WithColumn,
}

/// One output column.
#[derive(Debug, Clone)]
enum OutputColumn {
    /// The input column at this index, repeated per element.
    Input(usize),
    /// A computed expression, repeated per element.
    Computed(Expr),
    /// The generator's elements.
    Elements,
    /// The elements' positions in their arrays (`posexplode`).
    Positions,
}

/// The explode planned against one input schema.
#[derive(Debug, Clone)]
struct Plan {
    input: SchemaRef,
    output: SchemaRef,
    columns: Vec<OutputColumn>,
}

/// Configuration shared by the factory and its operators.
#[derive(Debug, Clone)]
struct Config {
    mode: ExplodeMode,
    /// The listed columns: `(name, expr)`; the generator's entry holds the
    /// array expression.
    columns: Vec<(String, Expr)>,
    /// The index in `columns` of the generator.
    generator: usize,
    /// `explode_outer`: keep null and empty arrays as a null element.
    outer: bool,
    /// `posexplode`: the name of the positions' column.
    position: Option<String>,
}

impl Config {
    fn generator(&self) -> &(String, Expr) {
        &self.columns[self.generator]
    }

    fn plan(&self, operator: &str, input: &SchemaRef) -> Result<Plan> {
        let (alias, array) = self.generator();
        let array_type = array.data_type(input).map_err(|e| e.at(operator))?;
        let element = match &array_type {
            DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) => {
                f.data_type().clone()
            }
            other => {
                return Err(Error::schema(
                    operator,
                    format!("explode needs an array, but {array} is {other}"),
                ))
            }
        };
        let element_field: FieldRef = Arc::new(Field::new(alias.as_str(), element, true));
        let mut generated = vec![(element_field, OutputColumn::Elements)];
        if let Some(name) = &self.position {
            if name == alias {
                return Err(Error::graph(
                    operator,
                    format!("posexplode names its position and its element both '{name}'"),
                ));
            }
            let field = Arc::new(Field::new(name.as_str(), DataType::Int32, true));
            generated.insert(0, (field, OutputColumn::Positions));
        }
        let mut fields: Vec<FieldRef> = Vec::new();
        let mut columns = Vec::new();
        if self.mode == ExplodeMode::WithColumn {
            fields.extend(input.fields().iter().cloned());
            columns.extend((0..input.fields().len()).map(OutputColumn::Input));
            for (field, column) in generated {
                match input.index_of(field.name()) {
                    Ok(position) => {
                        fields[position] = field;
                        columns[position] = column;
                    }
                    Err(_) => {
                        fields.push(field);
                        columns.push(column);
                    }
                }
            }
        } else {
            for (i, (name, expr)) in self.columns.iter().enumerate() {
                if fields.iter().any(|f| f.name() == name) {
                    return Err(Error::graph(
                        operator,
                        format!("column '{name}' is selected twice"),
                    ));
                }
                if i == self.generator {
                    for (field, column) in &generated {
                        if fields.iter().any(|f| f.name() == field.name()) {
                            return Err(Error::graph(
                                operator,
                                format!("column '{}' is selected twice", field.name()),
                            ));
                        }
                        fields.push(Arc::clone(field));
                        columns.push(column.clone());
                    }
                    continue;
                }
                let data_type = expr.data_type(input).map_err(|e| e.at(operator))?;
                match expr {
                    Expr::Column(source) => {
                        let (index, field) = input.column_with_name(source).ok_or_else(|| {
                            Error::graph(operator, format!("column '{source}' does not exist"))
                        })?;
                        fields.push(Arc::new(field.clone().with_name(name.as_str())));
                        columns.push(OutputColumn::Input(index));
                    }
                    computed => {
                        fields.push(Arc::new(Field::new(name.as_str(), data_type, true)));
                        columns.push(OutputColumn::Computed(computed.clone()));
                    }
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
}

/// Which input row each output row repeats, and where its element is.
struct Layout {
    /// The input row of each output row.
    rows: UInt64Array,
    /// The elements: a zero-copy slice of the list's values, or gathered
    /// by these indices (null for an outer row without an element).
    elements: Elements,
    /// Each element's position in its array (null for an outer row), when
    /// asked for.
    positions: Option<Int32Array>,
}

enum Elements {
    Slice { offset: usize, length: usize },
    Take(UInt64Array),
}

fn layout<O: OffsetSizeTrait>(list: &GenericListArray<O>, outer: bool, positions: bool) -> Layout {
    let offsets = list.value_offsets();
    let first = offsets[0].as_usize();
    let last = offsets[list.len()].as_usize();
    // Null rows with a (meaningless) non-empty range, and outer rows
    // without elements, break the values' contiguity.
    let mut contiguous = true;
    let mut output_rows = 0usize;
    for row in 0..list.len() {
        let length = offsets[row + 1].as_usize() - offsets[row].as_usize();
        let null = list.is_null(row);
        if null && length > 0 {
            contiguous = false;
        }
        let count = if null { 0 } else { length };
        if outer && count == 0 {
            contiguous = false;
            output_rows += 1;
        } else {
            output_rows += count;
        }
    }
    let mut rows = Vec::with_capacity(output_rows);
    let mut elements: Vec<Option<u64>> = if contiguous {
        Vec::new()
    } else {
        Vec::with_capacity(output_rows)
    };
    let mut position: Vec<Option<i32>> =
        Vec::with_capacity(if positions { output_rows } else { 0 });
    for row in 0..list.len() {
        let (start, end) = (offsets[row].as_usize(), offsets[row + 1].as_usize());
        let count = if list.is_null(row) { 0 } else { end - start };
        if count == 0 {
            if outer {
                rows.push(row as u64);
                elements.push(None);
                if positions {
                    position.push(None);
                }
            }
            continue;
        }
        rows.extend(std::iter::repeat_n(row as u64, count));
        if positions {
            // Arrow lists hold at most i32::MAX elements (List) and Spark's
            // arrays as many: a LargeList beyond that saturates.
            position.extend((0..count).map(|i| Some(i32::try_from(i).unwrap_or(i32::MAX))));
        }
        if !contiguous {
            elements.extend((start..end).map(|i| Some(i as u64)));
        }
    }
    Layout {
        rows: UInt64Array::from(rows),
        elements: if contiguous {
            Elements::Slice {
                offset: first,
                length: last - first,
            }
        } else {
            Elements::Take(UInt64Array::from(elements))
        },
        positions: positions.then(|| Int32Array::from(position)),
    }
}

impl Plan {
    fn explode(&self, config: &Config, operator: &str, batch: &RecordBatch) -> Result<RecordBatch> {
        let failed = |e: &dyn std::fmt::Display| {
            Error::operator(operator, format!("explode failed on a batch: {e}"))
        };
        let array = config
            .generator()
            .1
            .evaluate(batch)
            .map_err(|e| e.at(operator))?;
        let array = match array.data_type() {
            DataType::FixedSizeList(f, _) => {
                cast(&array, &DataType::List(Arc::clone(f))).map_err(|e| failed(&e))?
            }
            _ => array,
        };
        let positions = config.position.is_some();
        let (layout, values) = match array.data_type() {
            DataType::List(_) => {
                let list = array.as_list::<i32>();
                (layout(list, config.outer, positions), list.values())
            }
            DataType::LargeList(_) => {
                let list = array.as_list::<i64>();
                (layout(list, config.outer, positions), list.values())
            }
            other => {
                return Err(Error::schema(
                    operator,
                    format!("explode needs an array, but a batch has {other}"),
                ))
            }
        };
        let mut arrays: Vec<ArrayRef> = Vec::with_capacity(self.columns.len());
        for column in &self.columns {
            let repeated = |a: &ArrayRef| take(a.as_ref(), &layout.rows, None);
            arrays.push(match column {
                OutputColumn::Input(index) => {
                    repeated(batch.column(*index)).map_err(|e| failed(&e))?
                }
                OutputColumn::Computed(expr) => {
                    let value = expr.evaluate(batch).map_err(|e| e.at(operator))?;
                    repeated(&value).map_err(|e| failed(&e))?
                }
                OutputColumn::Positions => match &layout.positions {
                    Some(p) => Arc::new(p.clone()) as ArrayRef,
                    None => {
                        return Err(Error::operator(
                            operator,
                            "posexplode computed no positions",
                        ))
                    }
                },
                OutputColumn::Elements => match &layout.elements {
                    Elements::Slice { offset, length } => values.slice(*offset, *length),
                    Elements::Take(indices) => {
                        take(values.as_ref(), indices, None).map_err(|e| failed(&e))?
                    }
                },
            });
        }
        let options = RecordBatchOptions::new().with_row_count(Some(layout.rows.len()));
        RecordBatch::try_new_with_options(Arc::clone(&self.output), arrays, &options).map_err(|e| {
            Error::schema(
                operator,
                format!("the exploded batch does not fit its schema: {e}"),
            )
        })
    }
}

/// Flattens an array column per batch.
#[derive(Debug, Clone)]
pub struct ExplodeOperator {
    name: String,
    config: Config,
    plan: Option<Plan>,
}

impl ExplodeOperator {
    /// Explodes one batch (None where no row has an element).
    pub fn explode(&mut self, batch: &RecordBatch) -> Result<Option<RecordBatch>> {
        let schema = batch.schema_ref();
        let stale = self
            .plan
            .as_ref()
            .is_none_or(|p| !Arc::ptr_eq(&p.input, schema) && p.input.fields() != schema.fields());
        if stale {
            self.plan = Some(self.config.plan(&self.name, schema)?);
        }
        let Some(plan) = &self.plan else {
            return Ok(None);
        };
        let out = plan.explode(&self.config, &self.name, batch)?;
        Ok((out.num_rows() > 0).then_some(out))
    }
}

impl Operator for ExplodeOperator {
    fn process_batch(
        &mut self,
        _input: usize,
        batch: RecordBatch,
        out: &mut dyn Collector,
    ) -> Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        match self.explode(&batch)? {
            Some(exploded) => out.emit(exploded),
            None => Ok(()),
        }
    }

    forward_source_progress!();

    fn recompute(&mut self) -> Option<&mut dyn Recompute> {
        Some(self)
    }
}

stateless_recompute!(ExplodeOperator);

/// Builds an [`ExplodeOperator`] per subtask.
#[derive(Debug, Clone)]
pub struct ExplodeFactory {
    config: Config,
    plan: Option<Plan>,
}

impl ExplodeFactory {
    /// Explodes `columns[generator]` (an array expression) in `mode`;
    /// `outer` keeps rows with null or empty arrays.
    pub fn new(
        mode: ExplodeMode,
        columns: Vec<(String, Expr)>,
        generator: usize,
        outer: bool,
    ) -> Result<Self> {
        if generator >= columns.len() {
            return Err(Error::graph(
                "explode",
                "the generator column is not among the columns",
            ));
        }
        Ok(Self {
            config: Config {
                mode,
                columns,
                generator,
                outer,
                position: None,
            },
            plan: None,
        })
    }

    /// `posexplode`: the elements' positions in their arrays (0-based,
    /// `int`) in a column `name` before the elements (in `select` mode; in
    /// `with_column` mode it replaces a column of that name in place or is
    /// appended).
    pub fn with_position(mut self, name: String) -> Self {
        self.config.position = Some(name);
        self.plan = None;
        self
    }

    /// Type-checks against `input` (at graph build time) and returns the
    /// output schema; planned once for every subtask. Errors name
    /// `operator`.
    pub fn with_input_schema(mut self, operator: &str, input: &SchemaRef) -> Result<Self> {
        self.plan = Some(self.config.plan(operator, input)?);
        Ok(self)
    }

    /// The output schema for `input`. Errors name `operator`.
    pub fn output_schema(&self, operator: &str, input: &SchemaRef) -> Result<SchemaRef> {
        match &self.plan {
            Some(plan) if Arc::ptr_eq(&plan.input, input) => Ok(Arc::clone(&plan.output)),
            _ => Ok(self.config.plan(operator, input)?.output),
        }
    }
}

impl OperatorFactory for ExplodeFactory {
    /// Stateless: nothing to rebuild (FLINK-4120).
    fn recomputable(&self) -> bool {
        true
    }

    fn replayable_from_earlier(&self) -> bool {
        true
    }

    fn create(&self, ctx: &OperatorContext) -> Result<Box<dyn Operator>> {
        Ok(Box::new(ExplodeOperator {
            name: ctx.name.clone(),
            config: self.config.clone(),
            plan: self.plan.clone(),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int64Array, ListArray};
    use arrow::datatypes::Int64Type;

    fn batch() -> RecordBatch {
        let lists = ListArray::from_iter_primitive::<Int64Type, _, _>(vec![
            Some(vec![Some(1), Some(2)]),
            None,
            Some(vec![]),
            Some(vec![Some(3), None]),
        ]);
        let ids = Int64Array::from(vec![10, 11, 12, 13]);
        RecordBatch::try_from_iter(vec![
            ("id", Arc::new(ids) as ArrayRef),
            ("xs", Arc::new(lists) as ArrayRef),
        ])
        .expect("batch")
    }

    fn run(outer: bool, mode: ExplodeMode) -> RecordBatch {
        let columns = match mode {
            ExplodeMode::Select => vec![
                ("x".to_string(), Expr::col("xs")),
                ("id".to_string(), Expr::col("id")),
            ],
            ExplodeMode::WithColumn => vec![("xs".to_string(), Expr::col("xs"))],
        };
        let mut op = ExplodeOperator {
            name: "e".into(),
            config: ExplodeFactory::new(mode, columns, 0, outer)
                .expect("factory")
                .config,
            plan: None,
        };
        op.explode(&batch()).expect("explode").expect("rows")
    }

    fn ints(a: &ArrayRef) -> Vec<Option<i64>> {
        a.as_primitive::<Int64Type>().iter().collect()
    }

    #[test]
    fn test_explode_repeats_other_columns() {
        let out = run(false, ExplodeMode::Select);
        assert_eq!(out.schema().field(0).name(), "x");
        assert_eq!(ints(out.column(0)), vec![Some(1), Some(2), Some(3), None]);
        assert_eq!(
            ints(out.column(1)),
            vec![Some(10), Some(10), Some(13), Some(13)]
        );
    }

    #[test]
    fn test_explode_outer_keeps_null_and_empty() {
        let out = run(true, ExplodeMode::WithColumn);
        assert_eq!(out.schema().field(1).name(), "xs");
        assert_eq!(
            ints(out.column(0)),
            vec![Some(10), Some(10), Some(11), Some(12), Some(13), Some(13)]
        );
        assert_eq!(
            ints(out.column(1)),
            vec![Some(1), Some(2), None, None, Some(3), None]
        );
    }

    fn posexplode(outer: bool, mode: ExplodeMode) -> RecordBatch {
        let columns = match mode {
            ExplodeMode::Select => vec![
                ("id".to_string(), Expr::col("id")),
                ("x".to_string(), Expr::col("xs")),
            ],
            ExplodeMode::WithColumn => vec![("xs".to_string(), Expr::col("xs"))],
        };
        let generator = usize::from(mode == ExplodeMode::Select);
        let factory = ExplodeFactory::new(mode, columns, generator, outer)
            .expect("factory")
            .with_position("pos".into());
        let mut op = ExplodeOperator {
            name: "e".into(),
            config: factory.config,
            plan: None,
        };
        op.explode(&batch()).expect("explode").expect("rows")
    }

    fn positions(a: &ArrayRef) -> Vec<Option<i32>> {
        a.as_primitive::<arrow::datatypes::Int32Type>()
            .iter()
            .collect()
    }

    #[test]
    fn test_posexplode_puts_positions_before_the_elements() {
        let out = posexplode(false, ExplodeMode::Select);
        let names: Vec<&String> = out.schema_ref().fields().iter().map(|f| f.name()).collect();
        assert_eq!(names, ["id", "pos", "x"]);
        assert_eq!(out.schema().field(1).data_type(), &DataType::Int32);
        assert_eq!(
            ints(out.column(0)),
            vec![Some(10), Some(10), Some(13), Some(13)]
        );
        assert_eq!(
            positions(out.column(1)),
            vec![Some(0), Some(1), Some(0), Some(1)]
        );
        assert_eq!(ints(out.column(2)), vec![Some(1), Some(2), Some(3), None]);
    }

    #[test]
    fn test_posexplode_outer_has_null_positions_and_appends_in_with_column_mode() {
        let out = posexplode(true, ExplodeMode::WithColumn);
        let names: Vec<&String> = out.schema_ref().fields().iter().map(|f| f.name()).collect();
        assert_eq!(names, ["id", "xs", "pos"]);
        assert_eq!(
            positions(out.column(2)),
            vec![Some(0), Some(1), None, None, Some(0), Some(1)]
        );
        assert_eq!(
            ints(out.column(1)),
            vec![Some(1), Some(2), None, None, Some(3), None]
        );
    }

    #[test]
    fn test_explode_of_a_non_array_is_a_schema_error() {
        let factory = ExplodeFactory::new(
            ExplodeMode::WithColumn,
            vec![("id".into(), Expr::col("id"))],
            0,
            false,
        )
        .expect("factory");
        let err = factory
            .output_schema("e", &batch().schema())
            .expect_err("not an array");
        assert!(err.to_string().contains("explode needs an array"), "{err}");
    }
}
