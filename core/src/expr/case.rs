//! `CASE WHEN ... THEN ... ELSE ... END` ([`Expr::Case`], Spark's
//! `when(...).otherwise(...)`), evaluated lazily as Spark does (DESIGN.md
//! "Expressions"): each condition is evaluated only on the rows no earlier
//! branch took and each value only on the rows its condition selected, so
//! `when(col("d") != 0, col("n") // col("d"))` never divides by zero. A null
//! condition counts as false.
//!
//! Evaluation is per batch: the rows still open are filtered into a smaller
//! batch for the next condition, and the branch results are stitched back
//! into row order with one `interleave` at the end.

use std::sync::Arc;

use arrow::array::{new_null_array, Array, ArrayRef, AsArray, UInt32Array};
use arrow::compute::kernels::boolean;
use arrow::compute::{filter, filter_record_batch, interleave, prep_null_mask_filter};
use arrow::datatypes::{DataType, Schema, UInt32Type};
use arrow::error::ArrowError;
use arrow::record_batch::RecordBatch;

use super::type_class::{is_string, numeric_class};
use super::value::Value;
use super::{Expr, ExprError, ExprResult};

/// The type of a `CASE` whose branch values (and `otherwise`) have types
/// `values`: their common type, ignoring null literals. Numbers of
/// different types promote like arithmetic (to `Int64` or `Float64`),
/// strings of different encodings to one string type.
fn common_type(values: &[DataType], case: &Expr) -> ExprResult<DataType> {
    let typed: Vec<&DataType> = values
        .iter()
        .filter(|t| !matches!(t, DataType::Null))
        .collect();
    let Some(first) = typed.first() else {
        return Ok(DataType::Null);
    };
    if typed.iter().all(|t| t == first) {
        return Ok((*first).clone());
    }
    let classes: Option<Vec<_>> = typed.iter().map(|t| numeric_class(t)).collect();
    if let Some(classes) = classes {
        if !typed.iter().any(|t| matches!(t, DataType::UInt64)) {
            let class = classes
                .iter()
                .copied()
                .reduce(|a, b| a.common(b))
                .ok_or_else(|| ExprError::schema("internal error: no branch type"))?;
            return Ok(class.data_type());
        }
    }
    if typed.iter().all(|t| is_string(t)) {
        return Ok(if typed.iter().any(|t| matches!(t, DataType::LargeUtf8)) {
            DataType::LargeUtf8
        } else {
            DataType::Utf8
        });
    }
    let listed: Vec<String> = typed.iter().map(|t| t.to_string()).collect();
    Err(ExprError::schema(format!(
        "the values of {case} have incompatible types ({}); cast them to one type",
        listed.join(", ")
    )))
}

fn check_condition(t: &DataType, when: &Expr, case: &Expr) -> ExprResult<()> {
    if matches!(t, DataType::Boolean | DataType::Null) {
        Ok(())
    } else {
        Err(ExprError::schema(format!(
            "the condition {when} of {case} is {t}, not boolean"
        )))
    }
}

/// The result type of `case` over `schema`.
pub(super) fn data_type(
    branches: &[(Expr, Expr)],
    otherwise: Option<&Expr>,
    schema: &Schema,
    case: &Expr,
) -> ExprResult<DataType> {
    let mut values = Vec::with_capacity(branches.len() + 1);
    for (when, then) in branches {
        check_condition(&when.data_type(schema)?, when, case)?;
        values.push(then.data_type(schema)?);
    }
    if let Some(otherwise) = otherwise {
        values.push(otherwise.data_type(schema)?);
    }
    common_type(&values, case)
}

/// Evaluates `case` over `batch`.
pub(super) fn eval(
    branches: &[(Expr, Expr)],
    otherwise: Option<&Expr>,
    batch: &RecordBatch,
    case: &Expr,
) -> ExprResult<Value> {
    let out_type = data_type(branches, otherwise, batch.schema_ref(), case)?;
    let failed = |e: ArrowError| ExprError::operator(format!("failed to evaluate {case}: {e}"));
    let n = batch.num_rows();
    let row_count = u32::try_from(n)
        .map_err(|_| ExprError::operator(format!("a batch of {n} rows is too large for {case}")))?;
    // The rows no branch has taken yet: their original positions and the
    // batch of just those rows, with just the columns the branches read.
    let mut open_rows = UInt32Array::from_iter_values(0..row_count);
    let mut open = read_columns(batch, case);
    // Each branch's result over the rows it took, with those rows.
    let mut parts: Vec<(UInt32Array, ArrayRef)> = Vec::with_capacity(branches.len() + 1);
    for (when, then) in branches {
        if open.num_rows() == 0 {
            break;
        }
        let condition = when.evaluate(&open)?;
        check_condition(condition.data_type(), when, case)?;
        let taken = match condition.as_boolean_opt() {
            Some(c) if c.null_count() > 0 => prep_null_mask_filter(c),
            Some(c) => c.clone(),
            // A null condition takes no row.
            None => continue,
        };
        if taken.true_count() == 0 {
            continue;
        }
        let rest = boolean::not(&taken).map_err(failed)?;
        let chosen = filter_record_batch(&open, &taken).map_err(failed)?;
        let value = cast_value(then.evaluate(&chosen)?, &out_type).map_err(failed)?;
        let chosen_rows = filter(&open_rows, &taken).map_err(failed)?;
        parts.push((chosen_rows.as_primitive::<UInt32Type>().clone(), value));
        open = filter_record_batch(&open, &rest).map_err(failed)?;
        open_rows = filter(&open_rows, &rest)
            .map_err(failed)?
            .as_primitive::<UInt32Type>()
            .clone();
    }
    if open.num_rows() > 0 {
        let value = match otherwise {
            Some(otherwise) => cast_value(otherwise.evaluate(&open)?, &out_type).map_err(failed)?,
            None => new_null_array(&out_type, open.num_rows()),
        };
        parts.push((open_rows, value));
    }
    // One part (every row took the same branch) needs no stitching.
    if let [(rows, value)] = parts.as_slice() {
        if rows.len() == n {
            return Ok(Value::Array(Arc::clone(value)));
        }
    }
    let mut order = vec![(0usize, 0usize); n];
    for (part, (rows, _)) in parts.iter().enumerate() {
        for (i, row) in rows.values().iter().enumerate() {
            order[*row as usize] = (part, i);
        }
    }
    let values: Vec<&dyn Array> = parts.iter().map(|(_, v)| v.as_ref()).collect();
    if values.is_empty() {
        return Ok(Value::Array(new_null_array(&out_type, n)));
    }
    interleave(&values, &order)
        .map(Value::Array)
        .map_err(failed)
}

/// `batch` cut to the columns `case` reads, so that the filters between
/// branches copy only those (a wide string column the `CASE` does not read
/// would be copied once per branch). The whole batch where a column is
/// missing (evaluation then names it) or none is read.
fn read_columns(batch: &RecordBatch, case: &Expr) -> RecordBatch {
    let schema = batch.schema_ref();
    let indices: Option<Vec<usize>> = case
        .columns()
        .iter()
        .map(|name| schema.index_of(name).ok())
        .collect();
    match indices {
        Some(indices) if !indices.is_empty() && indices.len() < batch.num_columns() => {
            batch.project(&indices).unwrap_or_else(|_| batch.clone())
        }
        _ => batch.clone(),
    }
}

fn cast_value(array: ArrayRef, to: &DataType) -> Result<ArrayRef, ArrowError> {
    if array.data_type() == to {
        Ok(array)
    } else {
        arrow::compute::cast(&array, to)
    }
}
