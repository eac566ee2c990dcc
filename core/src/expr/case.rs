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
//!
//! Laziness only matters where evaluating a branch on a row it does not
//! take could fail: a `CASE` whose conditions and values are only columns,
//! literals, comparisons, `& | ~`, null tests and Spark's `/` out of ANSI
//! mode (such as
//! `when(col("x") < 10, "low").otherwise("high")`) cannot fail on any row,
//! so it is evaluated over the whole batch instead, with no filtering: with
//! literal values, each row's branch number picks its value with one `take`;
//! otherwise the branches are combined with one `zip` each, from the last.

use std::sync::Arc;

use arrow::array::{new_null_array, Array, ArrayRef, AsArray, BooleanArray, Scalar, UInt32Array};
use arrow::compute::kernels::boolean;
use arrow::compute::kernels::zip::zip;
use arrow::compute::{
    concat, filter, filter_record_batch, interleave, prep_null_mask_filter, take,
};
use arrow::datatypes::{DataType, Schema, UInt32Type};
use arrow::error::ArrowError;
use arrow::record_batch::RecordBatch;

use super::type_class::{is_string, numeric_class};
use super::value::Value;
use super::{kernels, BinaryOp, Expr, ExprError, ExprResult, UnaryOp};

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
    let total = branches
        .iter()
        .all(|(when, then)| cannot_fail(when) && cannot_fail(then))
        && otherwise.is_none_or(cannot_fail);
    if total {
        eval_whole(branches, otherwise, batch, &out_type, case)
    } else {
        eval_lazy(branches, otherwise, batch, &out_type, case)
    }
}

/// Evaluates `case` branch by branch, each on the rows still open.
fn eval_lazy(
    branches: &[(Expr, Expr)],
    otherwise: Option<&Expr>,
    batch: &RecordBatch,
    out_type: &DataType,
    case: &Expr,
) -> ExprResult<Value> {
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
        let value = cast_value(then.evaluate(&chosen)?, out_type).map_err(failed)?;
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
            Some(otherwise) => cast_value(otherwise.evaluate(&open)?, out_type).map_err(failed)?,
            None => new_null_array(out_type, open.num_rows()),
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
        return Ok(Value::Array(new_null_array(out_type, n)));
    }
    interleave(&values, &order)
        .map(Value::Array)
        .map_err(failed)
}

/// Whether evaluating `expr` can fail on no row (type errors aside, which
/// [`data_type`] reports for every branch): only columns, literals,
/// comparisons (whose operand casts are safe), `& | ~`, null tests and
/// Spark's `/` out of ANSI mode (a double quotient, null for a zero
/// divisor). A conservative check: other arithmetic can overflow or divide
/// by zero, Spark's `/` fails on a zero divisor in ANSI mode, functions and
/// casts can fail in ANSI mode.
fn cannot_fail(expr: &Expr) -> bool {
    match expr {
        Expr::Column(_) | Expr::Literal(_) => true,
        Expr::Binary { op, left, right } => {
            let total =
                op.is_comparison() || op.is_logical() || *op == BinaryOp::SparkDiv { ansi: false };
            total && cannot_fail(left) && cannot_fail(right)
        }
        Expr::Unary { op, expr } => {
            matches!(op, UnaryOp::Not | UnaryOp::IsNull | UnaryOp::IsNotNull) && cannot_fail(expr)
        }
        Expr::Call { .. } | Expr::Cast { .. } | Expr::Case { .. } => false,
    }
}

/// Evaluates a `CASE` whose branches [`cannot_fail`] over the whole batch:
/// every condition over every row, each row taking the value of its first
/// true condition (a null one is false), or `otherwise`.
fn eval_whole(
    branches: &[(Expr, Expr)],
    otherwise: Option<&Expr>,
    batch: &RecordBatch,
    out_type: &DataType,
    case: &Expr,
) -> ExprResult<Value> {
    let failed = |e: ArrowError| ExprError::operator(format!("failed to evaluate {case}: {e}"));
    let n = batch.num_rows();
    let mut taken = Vec::with_capacity(branches.len());
    let mut values = Vec::with_capacity(branches.len() + 1);
    for (when, then) in branches {
        let condition = when.eval(batch)?;
        check_condition(condition.data_type(), when, case)?;
        taken.push(match condition {
            Value::Array(c) => c.as_boolean_opt().map(|c| match c.null_count() {
                0 => c.clone(),
                _ => prep_null_mask_filter(c),
            }),
            // One value for every row: a null or false condition takes none.
            Value::Scalar(c) => c
                .as_boolean_opt()
                .filter(|c| c.is_valid(0) && c.value(0))
                .map(|_| BooleanArray::from(vec![true; n])),
        });
        values.push(cast_value_of(then.eval(batch)?, out_type).map_err(failed)?);
    }
    let last = match otherwise {
        Some(otherwise) => cast_value_of(otherwise.eval(batch)?, out_type).map_err(failed)?,
        None => Value::Scalar(new_null_array(out_type, 1)),
    };
    values.push(last);
    if values.iter().all(Value::is_scalar) {
        // Each row's branch number (the last for `otherwise`), then its value.
        let otherwise_index = u32::try_from(branches.len())
            .map_err(|_| ExprError::operator(format!("too many branches in {case}")))?;
        let mut chosen = vec![otherwise_index; n];
        for (index, taken) in (0..otherwise_index).zip(&taken).rev() {
            if let Some(taken) = taken {
                for row in taken.values().set_indices() {
                    chosen[row] = index;
                }
            }
        }
        let scalars: Vec<&dyn Array> = values
            .iter()
            .map(|v| match v {
                Value::Array(a) | Value::Scalar(a) => a.as_ref(),
            })
            .collect();
        let choices = concat(&scalars).map_err(failed)?;
        let chosen = take(&choices, &UInt32Array::from(chosen), None).map_err(failed)?;
        return Ok(Value::Array(chosen));
    }
    let mut values = values.into_iter().rev();
    let mut result = values
        .next()
        .unwrap_or(Value::Scalar(new_null_array(out_type, 1)));
    for (taken, value) in taken.iter().rev().zip(values) {
        let Some(taken) = taken else {
            continue;
        };
        let zipped = match (&value, &result) {
            (Value::Array(a), Value::Array(b)) => zip(taken, a, b),
            (Value::Array(a), Value::Scalar(b)) => zip(taken, a, &Scalar::new(Arc::clone(b))),
            (Value::Scalar(a), Value::Array(b)) => zip(taken, &Scalar::new(Arc::clone(a)), b),
            (Value::Scalar(a), Value::Scalar(b)) => zip(
                taken,
                &Scalar::new(Arc::clone(a)),
                &Scalar::new(Arc::clone(b)),
            ),
        };
        result = Value::Array(zipped.map_err(failed)?);
    }
    Ok(match result {
        Value::Array(a) => Value::Array(a),
        Value::Scalar(a) => Value::Array(kernels::broadcast(&a, n).map_err(failed)?),
    })
}

fn cast_value_of(value: Value, to: &DataType) -> Result<Value, ArrowError> {
    Ok(match value {
        Value::Array(a) => Value::Array(cast_value(a, to)?),
        Value::Scalar(a) => Value::Scalar(cast_value(a, to)?),
    })
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

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Float64Array, Int64Array, StringArray};
    use arrow::datatypes::Field;

    use crate::expr::ScalarValue;

    fn batch() -> RecordBatch {
        let schema = Schema::new(vec![
            Field::new("i", DataType::Int64, true),
            Field::new("f", DataType::Float64, true),
            Field::new("s", DataType::Utf8, true),
            Field::new("b", DataType::Boolean, true),
        ]);
        RecordBatch::try_new(
            Arc::new(schema),
            vec![
                Arc::new(Int64Array::from(vec![
                    Some(5),
                    None,
                    Some(20_000),
                    Some(-1),
                    Some(60_000),
                    Some(10_000),
                ])),
                Arc::new(Float64Array::from(vec![
                    Some(0.5),
                    Some(f64::NAN),
                    None,
                    Some(-0.0),
                    Some(2.0),
                    Some(1.0),
                ])),
                Arc::new(StringArray::from(vec![
                    Some("a"),
                    Some(""),
                    None,
                    Some("ü"),
                    Some("b"),
                    Some("a"),
                ])),
                Arc::new(BooleanArray::from(vec![
                    Some(true),
                    None,
                    Some(false),
                    Some(true),
                    None,
                    Some(false),
                ])),
            ],
        )
        .unwrap()
    }

    fn lit(v: ScalarValue) -> Expr {
        Expr::lit(v)
    }

    fn lt(column: &str, v: Expr) -> Expr {
        Expr::binary(BinaryOp::Lt, Expr::col(column), v)
    }

    /// `CASE`s that cannot fail: literal values (the `take`), columns and
    /// literals mixed (the `zip`), null and constant conditions, no
    /// `otherwise`, values of types that promote.
    fn total_cases() -> Vec<Expr> {
        let s = |v: &str| lit(ScalarValue::Utf8(v.to_string()));
        let i = |v: i64| lit(ScalarValue::Int64(v));
        vec![
            // W8's bucket.
            Expr::case(
                vec![
                    (lt("i", i(10_000)), s("low")),
                    (lt("i", i(50_000)), s("mid")),
                ],
                Some(s("high")),
            ),
            Expr::case(vec![(lt("i", i(10_000)), s("low"))], None),
            Expr::case(
                vec![
                    (Expr::col("b"), Expr::col("s")),
                    (lt("f", lit(ScalarValue::Float64(1.0))), s("small")),
                ],
                Some(Expr::col("s")),
            ),
            Expr::case(
                vec![
                    (Expr::unary(UnaryOp::IsNull, Expr::col("i")), i(0)),
                    (lit(ScalarValue::Boolean(true)), Expr::col("f")),
                ],
                None,
            ),
            Expr::case(
                vec![
                    (lit(ScalarValue::Null), i(1)),
                    (lit(ScalarValue::Boolean(false)), i(2)),
                ],
                Some(Expr::col("i")),
            ),
            Expr::case(
                vec![(
                    Expr::binary(
                        BinaryOp::Or,
                        Expr::unary(UnaryOp::Not, Expr::col("b")),
                        Expr::binary(BinaryOp::Eq, Expr::col("s"), s("a")),
                    ),
                    Expr::col("i"),
                )],
                Some(lit(ScalarValue::Null)),
            ),
            // Spark's `/` out of ANSI mode: null for the zero divisors.
            Expr::case(
                vec![(
                    Expr::col("b"),
                    Expr::binary(
                        BinaryOp::SparkDiv { ansi: false },
                        Expr::col("f"),
                        lit(ScalarValue::Int64(0)),
                    ),
                )],
                Some(Expr::binary(
                    BinaryOp::SparkDiv { ansi: false },
                    Expr::col("i"),
                    Expr::col("f"),
                )),
            ),
        ]
    }

    fn parts(case: &Expr) -> (&[(Expr, Expr)], Option<&Expr>) {
        match case {
            Expr::Case {
                branches,
                otherwise,
            } => (branches, otherwise.as_deref()),
            _ => panic!("not a CASE: {case}"),
        }
    }

    fn array(value: Value) -> ArrayRef {
        match value {
            Value::Array(a) => a,
            Value::Scalar(a) => a,
        }
    }

    #[test]
    fn a_case_that_cannot_fail_is_evaluated_whole_as_lazily() {
        let batch = batch();
        for case in total_cases() {
            let (branches, otherwise) = parts(&case);
            assert!(
                branches
                    .iter()
                    .all(|(w, t)| cannot_fail(w) && cannot_fail(t))
                    && otherwise.is_none_or(cannot_fail),
                "{case}"
            );
            let out_type = data_type(branches, otherwise, batch.schema_ref(), &case).unwrap();
            let whole = array(eval_whole(branches, otherwise, &batch, &out_type, &case).unwrap());
            let lazy = array(eval_lazy(branches, otherwise, &batch, &out_type, &case).unwrap());
            assert_eq!(whole.as_ref(), lazy.as_ref(), "{case}");
            assert_eq!(whole.len(), batch.num_rows(), "{case}");
            // And over no rows.
            let empty = batch.slice(0, 0);
            let whole = array(eval_whole(branches, otherwise, &empty, &out_type, &case).unwrap());
            assert_eq!(whole.len(), 0, "{case}");
        }
    }

    #[test]
    fn a_case_that_can_fail_stays_lazy() {
        let batch = batch();
        // `10 // (i - i)` divides by zero wherever `i` is not null, and is
        // taken only where it is.
        let zero = Expr::binary(BinaryOp::Sub, Expr::col("i"), Expr::col("i"));
        let divide = Expr::binary(BinaryOp::FloorDiv, lit(ScalarValue::Int64(10)), zero);
        let case = Expr::case(
            vec![(Expr::unary(UnaryOp::IsNull, Expr::col("i")), divide.clone())],
            Some(lit(ScalarValue::Int64(7))),
        );
        assert!(!cannot_fail(&divide));
        let out = case.evaluate(&batch).unwrap();
        let out = out.as_primitive::<arrow::datatypes::Int64Type>();
        assert_eq!(
            out.iter().collect::<Vec<_>>(),
            vec![Some(7), None, Some(7), Some(7), Some(7), Some(7)]
        );
        for fallible in [
            Expr::binary(
                BinaryOp::SparkDiv { ansi: true },
                Expr::col("i"),
                Expr::col("f"),
            ),
            Expr::binary(BinaryOp::Div, Expr::col("f"), Expr::col("f")),
            Expr::cast(Expr::col("s"), "int").unwrap(),
            Expr::call("lower", vec![Expr::col("s")]).unwrap(),
            Expr::unary(UnaryOp::Neg, Expr::col("i")),
            Expr::case(vec![], Some(Expr::col("i"))),
        ] {
            assert!(!cannot_fail(&fallible), "{fallible}");
        }
    }

    #[test]
    fn a_case_guards_sparks_division_in_ansi_mode() {
        let batch = batch();
        // `f / (i - i)` divides by zero wherever `i` is not null; in ANSI
        // mode that fails, unless the `CASE` keeps those rows away.
        let zero = Expr::binary(BinaryOp::Sub, Expr::col("i"), Expr::col("i"));
        let divide = Expr::binary(BinaryOp::SparkDiv { ansi: false }, Expr::col("f"), zero);
        let guarded = Expr::case(
            vec![(Expr::unary(UnaryOp::IsNull, Expr::col("i")), divide.clone())],
            Some(lit(ScalarValue::Float64(-1.0))),
        );
        let ansi = guarded.clone().with_ansi(true);
        let out = ansi.evaluate(&batch).unwrap();
        let out = out.as_primitive::<arrow::datatypes::Float64Type>();
        assert_eq!(
            out.iter().collect::<Vec<_>>(),
            vec![
                Some(-1.0),
                None,
                Some(-1.0),
                Some(-1.0),
                Some(-1.0),
                Some(-1.0)
            ]
        );
        // Without ANSI mode the division is null for zero divisors anyway.
        let plain = guarded.evaluate(&batch).unwrap();
        assert_eq!(plain.as_ref(), ansi.evaluate(&batch).unwrap().as_ref());
        let err = divide.with_ansi(true).evaluate(&batch).unwrap_err();
        assert!(err.to_string().contains("DIVIDE_BY_ZERO"), "{err}");
    }
}
