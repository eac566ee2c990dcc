//! Library function calls ([`Expr::Call`]): Spark's function names resolved
//! to DataFusion's scalar functions and evaluated over Arrow batches
//! (DESIGN.md "Expressions").
//!
//! The registry holds DataFusion's default functions (`datafusion-functions`)
//! overlaid with Spark's versions (`datafusion-spark`, then eddyline's own in
//! `spark_functions.rs`) wherever both exist, because Spark's semantics
//! decide: `concat` is null when an argument is,
//! `substring` counts from 1 and from the end for negative positions,
//! `round` rounds half up, `floor`/`ceil` give `bigint`. A few Spark names
//! are spelled differently in DataFusion or take another argument there; the
//! table in [`spark_spelling`] maps them. The session time zone is UTC and
//! ANSI mode is off (a value that does not convert is null, not an error)
//! unless the expression was put in ANSI mode ([`Expr::with_ansi`]).
//!
//! A call is resolved when it is built (an unknown name fails then) and its
//! argument types are checked against the input schema with
//! [`Expr::data_type`], using DataFusion's own coercion rules, so the check
//! and the evaluation can never disagree. Evaluation hands whole columns to
//! the function: a literal stays a single value, nothing is done per record.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use arrow::datatypes::{DataType, Field, FieldRef};
use arrow::record_batch::RecordBatch;
use datafusion_common::config::ConfigOptions;
use datafusion_common::ScalarValue as DfScalar;
use datafusion_expr::type_coercion::functions::fields_with_udf;
use datafusion_expr::{ColumnarValue, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, Volatility};

use super::value::Value;
use super::{Expr, ExprError, ExprResult, ScalarValue};

/// A resolved library function: the name it was called by and DataFusion's
/// implementation.
#[derive(Debug, Clone, PartialEq)]
pub struct Function {
    name: String,
    udf: Arc<ScalarUDF>,
    /// Spark's ANSI mode (`spark.sql.ansi.enabled`): the function fails on
    /// input it would otherwise turn into null ([`Expr::with_ansi`]).
    ansi: bool,
}

impl Function {
    /// The function's name as the expression spells it (lower case).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The same function in or out of ANSI mode.
    pub(super) fn with_ansi(self, ansi: bool) -> Self {
        Function { ansi, ..self }
    }
}

/// Every function by lower-case name and alias: DataFusion's defaults, then
/// Spark's versions replacing them.
fn registry() -> &'static HashMap<String, Arc<ScalarUDF>> {
    static REGISTRY: OnceLock<HashMap<String, Arc<ScalarUDF>>> = OnceLock::new();
    REGISTRY.get_or_init(|| {
        let mut map = HashMap::new();
        let all = datafusion_functions::all_default_functions()
            .into_iter()
            .chain(datafusion_spark::all_default_scalar_functions())
            .chain(super::spark_functions::functions())
            .chain(super::spark_remainder::functions())
            .chain(super::spark_nested::functions())
            .chain(super::spark_time::functions())
            .chain(super::spark_window_time::functions())
            .chain(super::spark_json::functions());
        for udf in all {
            for name in std::iter::once(udf.name()).chain(udf.aliases().iter().map(String::as_str))
            {
                map.insert(name.to_ascii_lowercase(), Arc::clone(&udf));
            }
        }
        map
    })
}

/// The library's function called `name` (case-insensitive, Spark's
/// spelling), as the SQL planner looks it up.
pub(crate) fn library_function(name: &str) -> Option<Arc<ScalarUDF>> {
    let lower = name.to_ascii_lowercase();
    let (library_name, _) = spark_spelling(&lower, Vec::new());
    registry().get(library_name).cloned()
}

/// The options every call runs with: the session time zone UTC and
/// Spark's non-ANSI behaviour, or with `ansi` its ANSI mode.
fn config(ansi: bool) -> Arc<ConfigOptions> {
    static CONFIG: OnceLock<[Arc<ConfigOptions>; 2]> = OnceLock::new();
    let configs = CONFIG.get_or_init(|| {
        [false, true].map(|ansi| {
            let mut options = ConfigOptions::new();
            options.execution.time_zone = Some("UTC".to_string());
            options.execution.enable_ansi_mode = ansi;
            Arc::new(options)
        })
    });
    Arc::clone(&configs[usize::from(ansi)])
}

/// Spark's spelling of a call lowered to the library's: the registry name
/// and any argument the library needs that Spark implies.
fn spark_spelling(name: &str, mut args: Vec<Expr>) -> (&str, Vec<Expr>) {
    match (name, args.len()) {
        ("rlike" | "regexp", _) => ("regexp_like", args),
        ("startswith", _) => ("starts_with", args),
        ("endswith", _) => ("ends_with", args),
        // Spark replaces every match; DataFusion's regexp_replace only the
        // first unless given the global flag.
        ("regexp_replace", 3) => {
            args.push(Expr::Literal(ScalarValue::Utf8("g".to_string())));
            ("regexp_replace", args)
        }
        _ => (name, args),
    }
}

/// [`Expr::call`]: resolves `name` (case-insensitive) to a library function.
pub(super) fn resolve(name: &str, args: Vec<Expr>) -> ExprResult<Expr> {
    let lower = name.to_ascii_lowercase();
    if matches!(lower.as_str(), "coalesce" | "nvl" | "ifnull") {
        return coalesce(name, args);
    }
    let (library_name, args) = spark_spelling(&lower, args);
    match registry().get(library_name) {
        Some(udf) => Ok(Expr::Call {
            function: Function {
                name: lower,
                udf: Arc::clone(udf),
                ansi: false,
            },
            args,
        }),
        None => Err(ExprError::graph(format!(
            "unknown function '{name}'; it is not in eddyline's function library"
        ))),
    }
}

/// `coalesce(a, b, ...)`: DataFusion has no evaluation of its own for it
/// (its planner rewrites it into a `CASE`), so it is the `CASE` here, lazy
/// like Spark's: `b` is evaluated only on the rows where `a` is null.
fn coalesce(name: &str, mut args: Vec<Expr>) -> ExprResult<Expr> {
    let Some(last) = args.pop() else {
        return Err(ExprError::schema(format!(
            "function '{name}' needs at least one argument"
        )));
    };
    let branches = args
        .into_iter()
        .map(|a| (Expr::unary(super::UnaryOp::IsNotNull, a.clone()), a))
        .collect();
    Ok(Expr::case(branches, Some(last)))
}

/// A literal as DataFusion's scalar.
pub(super) fn df_scalar(value: &ScalarValue) -> DfScalar {
    match value {
        ScalarValue::Null => DfScalar::Null,
        ScalarValue::Boolean(v) => DfScalar::Boolean(Some(*v)),
        ScalarValue::Int64(v) => DfScalar::Int64(Some(*v)),
        ScalarValue::Float64(v) => DfScalar::Float64(Some(*v)),
        ScalarValue::Utf8(v) => DfScalar::Utf8(Some(v.clone())),
    }
}

/// The types a call's arguments are coerced to and the type it returns.
struct Signature {
    arg_fields: Vec<FieldRef>,
    return_field: FieldRef,
}

impl Function {
    /// Checks argument types `arg_types` of `call` (whose `args` are the
    /// argument expressions) and works out the coerced argument types and
    /// the result type.
    fn signature(
        &self,
        args: &[Expr],
        arg_types: &[DataType],
        call: &Expr,
    ) -> ExprResult<Signature> {
        let fields: Vec<FieldRef> = arg_types
            .iter()
            .enumerate()
            .map(|(i, t)| Arc::new(Field::new(format!("arg{i}"), t.clone(), true)))
            .collect();
        let arg_fields = fields_with_udf(&fields, self.udf.as_ref())
            .map_err(|e| self.argument_error(args, arg_types, call, &e))?;
        // Literal arguments, as the function sees them after coercion (some
        // functions' result type depends on them).
        let literals: Vec<Option<DfScalar>> = args
            .iter()
            .zip(&arg_fields)
            .map(|(arg, field)| match arg {
                Expr::Literal(v) => df_scalar(v).cast_to(field.data_type()).ok(),
                _ => None,
            })
            .collect();
        let scalar_arguments: Vec<Option<&DfScalar>> =
            literals.iter().map(Option::as_ref).collect();
        let return_field = self
            .udf
            .return_field_from_args(ReturnFieldArgs {
                arg_fields: &arg_fields,
                scalar_arguments: &scalar_arguments,
            })
            .map_err(|e| self.argument_error(args, arg_types, call, &e))?;
        Ok(Signature {
            arg_fields,
            return_field,
        })
    }

    /// The error for arguments the function does not take: names the
    /// function, each argument with its columns and type, and the library's
    /// reason.
    fn argument_error(
        &self,
        args: &[Expr],
        arg_types: &[DataType],
        call: &Expr,
        cause: &dyn std::fmt::Display,
    ) -> ExprError {
        let described: Vec<String> = args
            .iter()
            .zip(arg_types)
            .map(|(arg, t)| match arg.columns().as_slice() {
                [] => format!("{arg}: {t}"),
                columns => format!("{arg}: {t} (column {})", quoted(columns)),
            })
            .collect();
        let described = if described.is_empty() {
            "no arguments".to_string()
        } else {
            described.join(", ")
        };
        ExprError::schema(format!(
            "function '{}' does not take these arguments in {call}: {described}; {cause}",
            self.name
        ))
    }

    /// The result type of the call `call` over `schema`.
    pub(super) fn data_type(
        &self,
        args: &[Expr],
        schema: &arrow::datatypes::Schema,
        call: &Expr,
    ) -> ExprResult<DataType> {
        let arg_types = args
            .iter()
            .map(|a| a.data_type(schema))
            .collect::<ExprResult<Vec<_>>>()?;
        Ok(self
            .signature(args, &arg_types, call)?
            .return_field
            .data_type()
            .clone())
    }

    /// Evaluates the call `call` over `batch`.
    pub(super) fn eval(
        &self,
        args: &[Expr],
        batch: &RecordBatch,
        call: &Expr,
    ) -> ExprResult<Value> {
        let values = args
            .iter()
            .map(|a| a.eval(batch))
            .collect::<ExprResult<Vec<_>>>()?;
        self.eval_values(values, args, batch, call)
    }

    /// The call over its arguments `args`, already evaluated to `values`.
    pub(super) fn eval_values(
        &self,
        values: Vec<Value>,
        args: &[Expr],
        batch: &RecordBatch,
        call: &Expr,
    ) -> ExprResult<Value> {
        let arg_types: Vec<DataType> = values.iter().map(|v| v.data_type().clone()).collect();
        let signature = self.signature(args, &arg_types, call)?;
        // A call over single values is one value, unless it is volatile
        // (`rand()` differs per row).
        let single = values.iter().all(Value::is_scalar)
            && self.udf.signature().volatility != Volatility::Volatile;
        let number_rows = if single { 1 } else { batch.num_rows() };
        let failed = |e: &dyn std::fmt::Display| {
            ExprError::operator(format!("function '{}' failed in {call}: {e}", self.name))
        };
        let mut columnar = Vec::with_capacity(values.len());
        for (value, field) in values.iter().zip(&signature.arg_fields) {
            let value = value.cast_to(field.data_type()).map_err(|e| failed(&e))?;
            columnar.push(match value {
                Value::Array(a) => ColumnarValue::Array(a),
                Value::Scalar(a) => {
                    ColumnarValue::Scalar(DfScalar::try_from_array(&a, 0).map_err(|e| failed(&e))?)
                }
            });
        }
        let result = self
            .udf
            .invoke_with_args(ScalarFunctionArgs {
                args: columnar,
                arg_fields: signature.arg_fields,
                number_rows,
                return_field: signature.return_field,
                config_options: config(self.ansi),
            })
            .map_err(|e| failed(&e))?;
        Ok(match result {
            ColumnarValue::Array(a) if single => Value::Scalar(a),
            ColumnarValue::Array(a) => Value::Array(a),
            ColumnarValue::Scalar(s) => Value::Scalar(s.to_array().map_err(|e| failed(&e))?),
        })
    }
}

fn quoted(columns: &[&str]) -> String {
    columns
        .iter()
        .map(|c| format!("'{c}'"))
        .collect::<Vec<_>>()
        .join(", ")
}
