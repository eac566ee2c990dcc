//! What DataFusion's SQL planner may name (docs/DESIGN.md "SQL"): the
//! registered views and the synthetic tables of windowing table functions,
//! with their Arrow schemas; the scalar functions eddyline's function library
//! resolves (so a query can call exactly what `F` offers); the aggregates
//! of `F` (`aggregate.rs`).

use std::collections::HashMap;
use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion_common::config::ConfigOptions;
use datafusion_common::{
    plan_err, Column, Result as DfResult, ScalarValue as DfScalar, TableReference,
};
use datafusion_expr::expr::ScalarFunction;
use datafusion_expr::logical_plan::builder::LogicalTableSource;
use datafusion_expr::planner::ContextProvider;
use datafusion_expr::planner::{ExprPlanner, PlannerResult};
use datafusion_expr::{
    AggregateUDF, Expr as DfExpr, HigherOrderUDF, LogicalPlan, ScalarUDF, TableSource, WindowUDF,
};
use datafusion_sql::planner::{ParserOptions, SqlToRel};
use datafusion_sql::sqlparser::ast::Statement;

use super::spark_window;
use super::tvf::WindowTable;
use super::{SqlError, View};
use crate::expr::library_function;

/// The catalog of one query.
pub(crate) struct Provider {
    tables: HashMap<String, SchemaRef>,
    aggregates: HashMap<String, Arc<AggregateUDF>>,
    planners: Vec<Arc<dyn ExprPlanner>>,
    options: ConfigOptions,
}

/// `s.field` of a struct column `s` (Spark's `window.start`) as the
/// library's `get_field`.
#[derive(Debug)]
struct FieldAccess;

impl ExprPlanner for FieldAccess {
    fn plan_compound_identifier(
        &self,
        field: &Field,
        qualifier: Option<&TableReference>,
        nested_names: &[String],
    ) -> DfResult<PlannerResult<Vec<DfExpr>>> {
        let Some(get_field) = library_function("get_field") else {
            return plan_err!("no get_field function");
        };
        let mut expr = DfExpr::Column(Column::from((qualifier, field)));
        for name in nested_names {
            let name = DfExpr::Literal(DfScalar::Utf8(Some(name.clone())), None);
            expr = DfExpr::ScalarFunction(ScalarFunction::new_udf(
                Arc::clone(&get_field),
                vec![expr, name],
            ));
        }
        Ok(PlannerResult::Planned(expr))
    }
}

impl Provider {
    pub(crate) fn new(views: &[View], windows: &[WindowTable]) -> Self {
        let mut tables: HashMap<String, SchemaRef> = views
            .iter()
            .map(|v| (v.name.clone(), Arc::clone(&v.schema)))
            .collect();
        for window in windows {
            if let Some(schema) = tables.get(&window.view).cloned() {
                tables.insert(
                    window.name.clone(),
                    window_schema(&schema, &window.time_column),
                );
            }
        }
        let aggregates = super::aggregate::catalog();
        let mut options = ConfigOptions::new();
        options.execution.time_zone = Some("UTC".to_string());
        Provider {
            tables,
            aggregates,
            planners: vec![Arc::new(FieldAccess)],
            options,
        }
    }

    /// DataFusion's logical plan of the statement.
    pub(crate) fn plan(&self, statement: &Statement) -> Result<LogicalPlan, SqlError> {
        let mut options = ParserOptions::new();
        // Column names are matched as written (stream schemas are often
        // camelCase); function names are looked up case-insensitively below.
        options.enable_ident_normalization = false;
        options.map_string_types_to_utf8view = false;
        SqlToRel::new_with_options(self, options)
            .sql_statement_to_plan(statement.clone())
            .map_err(|e| planning_error(&e.strip_backtrace()))
    }
}

/// A view's schema with the window bounds a windowing table function adds,
/// of the time column's type.
fn window_schema(schema: &SchemaRef, time_column: &str) -> SchemaRef {
    let time_type = schema
        .field_with_name(time_column)
        .map(|f| f.data_type().clone())
        .unwrap_or(DataType::Int64);
    let mut fields: Vec<Field> = schema.fields().iter().map(|f| f.as_ref().clone()).collect();
    fields.push(Field::new("window_start", time_type.clone(), false));
    fields.push(Field::new("window_end", time_type, false));
    Arc::new(Schema::new(fields))
}

/// DataFusion's planning error as a [`SqlError`] naming what was wrong.
fn planning_error(message: &str) -> SqlError {
    let message = message
        .trim_start_matches("Error during planning: ")
        .trim_start_matches("Schema error: ")
        .trim_start_matches("This feature is not implemented: ")
        .to_string();
    if let Some(error) = super::over::window_function_error(&message) {
        return error;
    }
    let construct = if message.contains("No field named") || message.contains("column") {
        "column"
    } else if message.contains("table") {
        "table"
    } else if message.contains("function") {
        "function"
    } else {
        "query"
    };
    SqlError::new(construct, message)
}

impl ContextProvider for Provider {
    fn get_table_source(&self, name: TableReference) -> DfResult<Arc<dyn TableSource>> {
        match self.tables.get(name.table()) {
            Some(schema) => Ok(Arc::new(LogicalTableSource::new(Arc::clone(schema)))),
            None => plan_err!(
                "unknown table '{}': register a stream with create_temporary_view first",
                name.table()
            ),
        }
    }

    fn get_function_meta(&self, name: &str) -> Option<Arc<ScalarUDF>> {
        if name == spark_window::FUNCTION {
            return Some(spark_window::SparkWindowFunction::udf());
        }
        library_function(name)
    }

    fn get_expr_planners(&self) -> &[Arc<dyn ExprPlanner>] {
        &self.planners
    }

    fn get_higher_order_meta(&self, _name: &str) -> Option<Arc<HigherOrderUDF>> {
        None
    }

    fn get_aggregate_meta(&self, name: &str) -> Option<Arc<AggregateUDF>> {
        self.aggregates.get(&name.to_ascii_lowercase()).cloned()
    }

    fn get_window_meta(&self, _name: &str) -> Option<Arc<WindowUDF>> {
        None
    }

    fn get_variable_type(&self, _variable_names: &[String]) -> Option<DataType> {
        None
    }

    fn options(&self) -> &ConfigOptions {
        &self.options
    }

    fn udf_names(&self) -> Vec<String> {
        Vec::new()
    }

    fn higher_order_function_names(&self) -> Vec<String> {
        Vec::new()
    }

    fn udaf_names(&self) -> Vec<String> {
        self.aggregates.keys().cloned().collect()
    }

    fn udwf_names(&self) -> Vec<String> {
        Vec::new()
    }
}
