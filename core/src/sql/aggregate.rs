//! The aggregates a `GROUP BY` may call (docs/DESIGN.md "SQL"): exactly
//! eddyline's aggregate library (`F.sum`, `F.avg`, `F.approx_percentile`...)
//! under Spark's SQL names, and the lowering of one DataFusion aggregate
//! call to an [`AggregateCall`] of that library.
//!
//! DataFusion plans an aggregate through its `AggregateUDF`, whose name it
//! keeps in the plan; for the lowering to know which of Spark's names was
//! written (`collect_list` and `collect_set` are both DataFusion's
//! `array_agg`), each name is registered as a [`SqlAggregate`] that takes
//! the library function's name and delegates typing to DataFusion's
//! aggregate. It is never executed: the stream runs the library's own
//! accumulators.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::datatypes::{DataType, FieldRef};
use datafusion_common::{not_impl_err, Result as DfResult, ScalarValue as DfScalar};
use datafusion_expr::expr::AggregateFunction;
use datafusion_expr::function::AccumulatorArgs;
use datafusion_expr::{Accumulator, AggregateUDF, AggregateUDFImpl, Expr as DfExpr, Signature};

use super::convert::{to_expr, Columns};
use super::{AggregateCall, SqlError};
use crate::expr::{Expr, ScalarValue};

/// An aggregate as SQL names it, typed by DataFusion's `inner`.
#[derive(Debug, PartialEq, Eq, Hash)]
struct SqlAggregate {
    /// The library's function (`F`'s spelling).
    name: String,
    inner: Arc<AggregateUDF>,
}

impl AggregateUDFImpl for SqlAggregate {
    fn name(&self) -> &str {
        &self.name
    }

    fn signature(&self) -> &Signature {
        self.inner.signature()
    }

    fn return_type(&self, arg_types: &[DataType]) -> DfResult<DataType> {
        self.inner.return_type(arg_types)
    }

    fn return_field(&self, arg_fields: &[FieldRef]) -> DfResult<FieldRef> {
        self.inner.return_field(arg_fields)
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> DfResult<Vec<DataType>> {
        self.inner.coerce_types(arg_types)
    }

    fn is_nullable(&self) -> bool {
        self.inner.is_nullable()
    }

    fn default_value(&self, data_type: &DataType) -> DfResult<DfScalar> {
        self.inner.default_value(data_type)
    }

    fn accumulator(&self, _args: AccumulatorArgs) -> DfResult<Box<dyn Accumulator>> {
        not_impl_err!("SQL aggregate '{}' is only planned, never run", self.name)
    }
}

/// SQL's names of the library's aggregates: `(SQL name, F's function,
/// DataFusion's aggregate that types it)`.
const NAMES: [(&str, &str, &str); 23] = [
    ("sum", "sum", "sum"),
    ("count", "count", "count"),
    ("min", "min", "min"),
    ("max", "max", "max"),
    ("avg", "avg", "avg"),
    ("mean", "avg", "avg"),
    ("first", "first", "first_value"),
    ("first_value", "first", "first_value"),
    ("last", "last", "last_value"),
    ("last_value", "last", "last_value"),
    ("collect_list", "collect_list", "array_agg"),
    ("array_agg", "collect_list", "array_agg"),
    ("collect_set", "collect_set", "array_agg"),
    ("stddev", "stddev", "stddev"),
    ("std", "stddev", "stddev"),
    ("stddev_samp", "stddev_samp", "stddev"),
    ("stddev_pop", "stddev_pop", "stddev_pop"),
    ("variance", "variance", "var_samp"),
    ("var_samp", "var_samp", "var_samp"),
    ("var_pop", "var_pop", "var_pop"),
    (
        "approx_count_distinct",
        "approx_count_distinct",
        "approx_distinct",
    ),
    (
        "approx_percentile",
        "approx_percentile",
        "approx_percentile_cont",
    ),
    (
        "percentile_approx",
        "percentile_approx",
        "approx_percentile_cont",
    ),
];

/// The aggregates SQL may call, by lower-case name.
pub(crate) fn catalog() -> HashMap<String, Arc<AggregateUDF>> {
    // By name and by alias: DataFusion names some aggregates other than
    // SQL does (`var_samp` is its `var`, with `var_samp` an alias).
    let library: HashMap<String, Arc<AggregateUDF>> =
        datafusion_functions_aggregate::all_default_aggregate_functions()
            .into_iter()
            .flat_map(|udaf| {
                let names: Vec<String> = std::iter::once(udaf.name().to_string())
                    .chain(udaf.aliases().iter().cloned())
                    .collect();
                names.into_iter().map(move |n| (n, Arc::clone(&udaf)))
            })
            .collect();
    NAMES
        .iter()
        .filter_map(|(sql, function, typed_by)| {
            let inner = Arc::clone(library.get(*typed_by)?);
            let udaf = AggregateUDF::new_from_impl(SqlAggregate {
                name: (*function).to_string(),
                inner,
            });
            Some((sql.to_string(), Arc::new(udaf)))
        })
        .collect()
}

fn refused(construct: &str, why: String) -> SqlError {
    SqlError::new(construct, why)
}

/// How Spark writes an argument in a default column name: a column by its
/// name, anything else as DataFusion displays it.
fn shown(arg: &DfExpr, columns: &Columns<'_>) -> Result<String, SqlError> {
    Ok(match arg {
        DfExpr::Column(c) => columns.name_of(c)?,
        other => other.human_display().to_string(),
    })
}

/// The number of a literal argument (`approx_percentile`'s percentage and
/// accuracy).
fn number(arg: &DfExpr) -> Option<f64> {
    let DfExpr::Literal(value, _) = arg else {
        return None;
    };
    match value {
        DfScalar::Float64(Some(v)) => Some(*v),
        DfScalar::Float32(Some(v)) => Some(f64::from(*v)),
        DfScalar::Int64(Some(v)) => Some(*v as f64),
        DfScalar::Int32(Some(v)) => Some(f64::from(*v)),
        _ => None,
    }
}

/// `approx_percentile(arg, percentage[, accuracy])`: the library's
/// arguments (the column and the percentage) and Spark's default name (the
/// accuracy only shows there).
fn percentile(
    function: &str,
    arg: &DfExpr,
    rest: &[DfExpr],
    columns: &Columns<'_>,
) -> Result<(Vec<Expr>, String), SqlError> {
    let percentage = number(&rest[0]).filter(|p| (0.0..=1.0).contains(p));
    let Some(percentage) = percentage else {
        return Err(refused(
            "aggregate",
            format!(
                "{function}: the percentage {} is not a number in [0, 1]; one percentage \
                 per aggregate",
                rest[0]
            ),
        ));
    };
    let accuracy = match rest.get(1) {
        None => 10_000,
        Some(a) => match number(a) {
            Some(n) if n >= 1.0 && n.fract() == 0.0 => n as i64,
            _ => {
                return Err(refused(
                    "aggregate",
                    format!("{function}: the accuracy {a} is not a positive integer"),
                ))
            }
        },
    };
    Ok((
        vec![
            to_expr(arg, columns)?,
            Expr::lit(ScalarValue::Float64(percentage)),
        ],
        format!(
            "{function}({}, {percentage:?}, {accuracy})",
            shown(arg, columns)?
        ),
    ))
}

/// The aggregate call `e` (an aggregate function, possibly aliased) of a
/// `GROUP BY` over `columns`, with its default name (Spark's: `avg(v)`,
/// `count(1)`, `count(DISTINCT u)`, `approx_percentile(v, 0.5, 10000)`).
// `Expr::Wildcard` is deprecated for plans that went through the analyzer;
// the planner's raw `count(*)` still holds it.
#[allow(deprecated)]
pub(crate) fn call(e: &DfExpr, columns: &Columns<'_>) -> Result<AggregateCall, SqlError> {
    let inner = match e {
        DfExpr::Alias(alias) => alias.expr.as_ref(),
        other => other,
    };
    let DfExpr::AggregateFunction(AggregateFunction { func, params }) = inner else {
        return Err(refused("aggregate", format!("{e} is not an aggregate")));
    };
    let written = func.name().to_string();
    if params.filter.is_some() || !params.order_by.is_empty() || params.null_treatment.is_some() {
        return Err(refused(
            "aggregate FILTER / ORDER BY",
            format!(
                "{written}() with FILTER, ORDER BY or IGNORE/RESPECT NULLS is not supported yet"
            ),
        ));
    }
    let mut function = written.clone();
    if params.distinct {
        // Spark: count(DISTINCT x) is its own aggregate; collect_set is the
        // distinct collect_list; the others are not in the library.
        function = match written.as_str() {
            "count" => "count_distinct".into(),
            "collect_list" | "collect_set" => "collect_set".into(),
            _ => {
                return Err(refused(
                    "DISTINCT aggregate",
                    format!(
                        "{written}(DISTINCT ...) is not supported; count(DISTINCT x) and \
                         collect_set(x) are"
                    ),
                ))
            }
        };
    }
    let one = || Expr::lit(ScalarValue::Int64(1));
    let (args, name) = match (function.as_str(), params.args.as_slice()) {
        ("count", [] | [DfExpr::Wildcard { .. }]) => (vec![one()], "count(1)".to_string()),
        ("count", [DfExpr::Literal(v, _)]) if !v.is_null() => (vec![one()], "count(1)".into()),
        ("count_distinct", [arg]) => (
            vec![to_expr(arg, columns)?],
            format!("count(DISTINCT {})", shown(arg, columns)?),
        ),
        ("approx_percentile" | "percentile_approx", [arg, rest @ ..])
            if (1..=2).contains(&rest.len()) =>
        {
            percentile(&function, arg, rest, columns)?
        }
        (_, [arg]) => (
            vec![to_expr(arg, columns)?],
            format!("{function}({})", shown(arg, columns)?),
        ),
        _ => {
            return Err(refused(
                "aggregate",
                format!(
                    "{e}: {written} takes one argument (approx_percentile: a column, a \
                     percentage and an optional accuracy)"
                ),
            ))
        }
    };
    let column = match params.args.as_slice() {
        [DfExpr::Column(c)] => Some(columns.name_of(c)?),
        _ => None,
    };
    Ok(AggregateCall {
        function,
        args,
        column,
        name,
    })
}

/// The `GROUP BY`'s aggregates, named: a single `sum/min/max(column)` by its
/// column and a single `count(*)` as `count`, as the DSL's `.sum(column)` and
/// `.count()` name them (the job they lower to); otherwise each by Spark's
/// default name, as `keyed.agg(...)` names `F`'s aggregates.
pub(crate) fn calls(
    exprs: &[DfExpr],
    columns: &Columns<'_>,
) -> Result<Vec<AggregateCall>, SqlError> {
    let mut calls = exprs
        .iter()
        .map(|e| call(e, columns))
        .collect::<Result<Vec<_>, _>>()?;
    if let [single] = calls.as_mut_slice() {
        match (single.function.as_str(), &single.column) {
            ("sum" | "min" | "max", Some(c)) => single.name = c.clone(),
            ("count", _) if single.name == "count(1)" => single.name = "count".into(),
            _ => {}
        }
    }
    Ok(calls)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_sql_name_is_in_the_catalog() {
        let catalog = catalog();
        for (sql, function, _) in NAMES {
            let udaf = catalog
                .get(sql)
                .unwrap_or_else(|| panic!("{sql} is missing"));
            assert_eq!(udaf.name(), function);
        }
    }
}
