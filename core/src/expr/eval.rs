//! Vectorized evaluation of an [`Expr`] over a record batch.
//!
//! Sub-expressions evaluate to a [`Value`]: a column, or a single value for
//! anything computed from literals only. Arrow kernels take the single value
//! as a [`Scalar`] datum, so a literal is never expanded to a column; only the
//! final result of a pure-literal expression is broadcast, in
//! [`Expr::evaluate`]. Operands are cast only when their type differs from
//! the one the operator needs (see `types.rs` for the rules).

use std::sync::Arc;

use arrow::array::{
    new_null_array, Array, ArrayRef, AsArray, BooleanArray, Float64Array, Int64Array, NullArray,
    StringArray,
};
use arrow::compute::kernels::{boolean, cmp, numeric};
use arrow::datatypes::DataType;
use arrow::error::ArrowError;
use arrow::record_batch::RecordBatch;

use super::function::Function;
use super::kernels::{self, OnZero};
use super::types::{binary_type, column_not_found, is_string, numeric_class, unary_type, NumClass};
use super::value::{with_datums, Value};
use super::{BinaryOp, Expr, ScalarValue, UnaryOp};
use super::{ExprError, ExprResult};

/// A literal as a one-element array.
fn literal_array(value: &ScalarValue) -> ArrayRef {
    match value {
        ScalarValue::Null => Arc::new(NullArray::new(1)),
        ScalarValue::Boolean(v) => Arc::new(BooleanArray::from(vec![*v])),
        ScalarValue::Int64(v) => Arc::new(Int64Array::from_value(*v, 1)),
        ScalarValue::Float64(v) => Arc::new(Float64Array::from_value(*v, 1)),
        ScalarValue::Utf8(v) => Arc::new(StringArray::from(vec![v.as_str()])),
    }
}

fn null_scalar(data_type: &DataType) -> Value {
    Value::Scalar(new_null_array(data_type, 1))
}

/// Maps an error of an Arrow kernel evaluating `expr` to the engine's error.
fn kernel_error(err: ArrowError, expr: &Expr) -> ExprError {
    match err {
        ArrowError::DivideByZero
            if matches!(
                expr,
                Expr::Binary {
                    op: BinaryOp::SparkDiv { ansi: true },
                    ..
                }
            ) =>
        {
            // Spark's error class, so a job written for Spark's ANSI mode
            // recognises it (docs/API.md "Functions").
            ExprError::operator(format!(
                "[DIVIDE_BY_ZERO] division by zero in expression {expr} under ANSI mode \
                 (spark.sql.ansi.enabled); without it the value would be null"
            ))
        }
        ArrowError::DivideByZero => {
            ExprError::operator(format!("division by zero in expression {expr}"))
        }
        ArrowError::ArithmeticOverflow(detail) => {
            ExprError::operator(format!("integer overflow in expression {expr} ({detail})"))
        }
        other => ExprError::operator(format!("failed to evaluate {expr}: {other}")),
    }
}

impl Expr {
    /// Evaluates the expression over `batch`: an array of
    /// `batch.num_rows()` values.
    ///
    /// Errors: an unknown column ([`ExprError::Graph`]), operands of the
    /// wrong type ([`ExprError::Schema`]), division by zero (but for
    /// Spark's `/` out of ANSI mode) or integer overflow in a row whose
    /// inputs are not null
    /// ([`ExprError::Operator`]); the calling operator names itself with
    /// [`ExprError::at`].
    pub fn evaluate(&self, batch: &RecordBatch) -> ExprResult<ArrayRef> {
        match self.eval(batch)? {
            Value::Array(array) => Ok(array),
            Value::Scalar(scalar) => {
                kernels::broadcast(&scalar, batch.num_rows()).map_err(|e| kernel_error(e, self))
            }
        }
    }

    /// Evaluates the expression, keeping results computed from literals
    /// only as single values.
    pub(crate) fn eval(&self, batch: &RecordBatch) -> ExprResult<Value> {
        match self {
            Expr::Column(name) => match batch.column_by_name(name) {
                Some(column) => Ok(Value::Array(Arc::clone(column))),
                None => Err(column_not_found(
                    name,
                    batch
                        .schema_ref()
                        .fields()
                        .iter()
                        .map(|f| f.name().as_str()),
                )),
            },
            Expr::Literal(value) => Ok(Value::Scalar(literal_array(value))),
            Expr::Binary { op, left, right } => {
                let l = left.eval(batch)?;
                let r = right.eval(batch)?;
                self.eval_binary(*op, &l, &r)
            }
            Expr::Unary { op, expr } => {
                let v = expr.eval(batch)?;
                self.eval_unary(*op, &v)
            }
            Expr::Call { function, args } => self.eval_call(function, args, batch),
            Expr::Cast { expr, to } => super::cast::eval(expr.eval(batch)?, to, self),
            Expr::Case {
                branches,
                otherwise,
            } => super::case::eval(branches, otherwise.as_deref(), batch, self),
        }
    }

    /// A library call; Spark's `floor(a / b)` of integers `a` and `b` runs
    /// as one integer kernel instead of a double division, a floor and a
    /// cast, with the same result for every input, a zero divisor included
    /// (docs/DESIGN.md "Expressions"; the proof is at
    /// `kernels::spark_floor_quotient`).
    fn eval_call(
        &self,
        function: &Function,
        args: &[Expr],
        batch: &RecordBatch,
    ) -> ExprResult<Value> {
        let [division @ Expr::Binary { op, left, right }] = args else {
            return function.eval(args, batch, self);
        };
        let on_zero = match op {
            BinaryOp::Div => OnZero::Fail,
            BinaryOp::SparkDiv { ansi } => OnZero::spark(*ansi),
            _ => return function.eval(args, batch, self),
        };
        if function.name() != "floor" {
            return function.eval(args, batch, self);
        }
        let (l, r) = (left.eval(batch)?, right.eval(batch)?);
        let int = |v: &Value| numeric_class(v.data_type()) == Some(NumClass::Int);
        if int(&l) && int(&r) {
            return l
                .cast_to(&DataType::Int64)
                .and_then(|l| {
                    kernels::int_floor_of_true_div(&l, &r.cast_to(&DataType::Int64)?, on_zero)
                })
                .map_err(|e| kernel_error(e, division));
        }
        let quotient = division.eval_binary(*op, &l, &r)?;
        function.eval_values(vec![quotient], args, batch, self)
    }

    fn eval_binary(&self, op: BinaryOp, l: &Value, r: &Value) -> ExprResult<Value> {
        let out_type = binary_type(op, l.data_type(), r.data_type(), self)?;
        if op.is_logical() {
            return self.eval_logical(op, l, r);
        }
        if matches!(l.data_type(), DataType::Null) || matches!(r.data_type(), DataType::Null) {
            // A null operand nulls every row.
            return Ok(null_scalar(&out_type));
        }
        let result = if op.is_arithmetic() {
            self.eval_arithmetic(op, l, r)
        } else {
            self.eval_comparison(op, l, r)
        };
        result.map_err(|e| kernel_error(e, self))
    }

    fn eval_arithmetic(
        &self,
        op: BinaryOp,
        l: &Value,
        r: &Value,
    ) -> std::result::Result<Value, ArrowError> {
        let (Some(lc), Some(rc)) = (numeric_class(l.data_type()), numeric_class(r.data_type()))
        else {
            return Err(ArrowError::ComputeError(
                "internal error: non-numeric operands passed the type check".to_string(),
            ));
        };
        let class = lc.common(rc);
        let t = class.data_type();
        let (l, r) = (l.cast_to(&t)?, r.cast_to(&t)?);
        let ints = class == NumClass::Int;
        match op {
            BinaryOp::Add => {
                with_datums(&l, &r, numeric::add).map(|a| Value::from_result(a, &l, &r))
            }
            BinaryOp::Sub => {
                with_datums(&l, &r, numeric::sub).map(|a| Value::from_result(a, &l, &r))
            }
            BinaryOp::Mul => {
                with_datums(&l, &r, numeric::mul).map(|a| Value::from_result(a, &l, &r))
            }
            BinaryOp::Div if ints => kernels::int_true_div(&l, &r, OnZero::Fail),
            BinaryOp::Div => kernels::float_true_div(&l, &r, OnZero::Fail),
            BinaryOp::SparkDiv { ansi } if ints => {
                kernels::int_true_div(&l, &r, OnZero::spark(ansi))
            }
            BinaryOp::SparkDiv { ansi } => kernels::float_true_div(&l, &r, OnZero::spark(ansi)),
            BinaryOp::FloorDiv if ints => kernels::int_floor_div(&l, &r),
            BinaryOp::FloorDiv => kernels::float_floor_div(&l, &r),
            BinaryOp::Mod if ints => kernels::int_mod(&l, &r),
            BinaryOp::Mod => kernels::float_mod(&l, &r),
            other => Err(ArrowError::ComputeError(format!(
                "internal error: '{}' is not arithmetic",
                other.symbol()
            ))),
        }
    }

    fn eval_comparison(
        &self,
        op: BinaryOp,
        l: &Value,
        r: &Value,
    ) -> std::result::Result<Value, ArrowError> {
        let (lt, rt) = (l.data_type(), r.data_type());
        let (l, r) = match (numeric_class(lt), numeric_class(rt)) {
            (Some(NumClass::Float), Some(_)) | (Some(_), Some(NumClass::Float)) => {
                let (l, r) = (
                    l.cast_to(&DataType::Float64)?,
                    r.cast_to(&DataType::Float64)?,
                );
                return kernels::float_compare(op, &l, &r);
            }
            (Some(_), Some(_)) if lt != rt => match narrow_literal(l, r)? {
                Some(pair) => pair,
                None => (l.cast_to(&DataType::Int64)?, r.cast_to(&DataType::Int64)?),
            },
            _ if is_string(lt) && is_string(rt) && lt != rt => match (l, r) {
                (Value::Scalar(_), Value::Array(a)) => (l.cast_to(a.data_type())?, r.clone()),
                (Value::Array(a), Value::Scalar(_)) => (l.clone(), r.cast_to(a.data_type())?),
                _ => (
                    l.cast_to(&DataType::LargeUtf8)?,
                    r.cast_to(&DataType::LargeUtf8)?,
                ),
            },
            _ => (l.clone(), r.clone()),
        };
        let kernel = match op {
            BinaryOp::Eq => cmp::eq,
            BinaryOp::NotEq => cmp::neq,
            BinaryOp::Lt => cmp::lt,
            BinaryOp::LtEq => cmp::lt_eq,
            BinaryOp::Gt => cmp::gt,
            BinaryOp::GtEq => cmp::gt_eq,
            other => {
                return Err(ArrowError::ComputeError(format!(
                    "internal error: '{}' is not a comparison",
                    other.symbol()
                )))
            }
        };
        let result = with_datums(&l, &r, kernel)?;
        Ok(Value::from_result(Arc::new(result), &l, &r))
    }

    fn eval_logical(&self, op: BinaryOp, l: &Value, r: &Value) -> ExprResult<Value> {
        let l = LogicalOperand::of(l);
        let r = LogicalOperand::of(r);
        let result = match (l, r) {
            (LogicalOperand::Column(a), LogicalOperand::Column(b)) => {
                let result = if op == BinaryOp::And {
                    boolean::and_kleene(a, b)
                } else {
                    boolean::or_kleene(a, b)
                };
                result.map_err(|e| kernel_error(e, self))?
            }
            (LogicalOperand::Column(a), LogicalOperand::Literal(s))
            | (LogicalOperand::Literal(s), LogicalOperand::Column(a)) => {
                kernels::kleene_with_scalar(op, a, s)
            }
            (LogicalOperand::Literal(a), LogicalOperand::Literal(b)) => {
                let value = kernels::kleene_scalars(op, a, b);
                return Ok(Value::Scalar(Arc::new(BooleanArray::from(vec![value]))));
            }
        };
        Ok(Value::Array(Arc::new(result)))
    }

    fn eval_unary(&self, op: UnaryOp, v: &Value) -> ExprResult<Value> {
        let out_type = unary_type(op, v.data_type(), self)?;
        let wrap = |array: ArrayRef| match v {
            Value::Array(_) => Value::Array(array),
            Value::Scalar(_) => Value::Scalar(array),
        };
        let array = match v {
            Value::Array(a) | Value::Scalar(a) => a,
        };
        if matches!(array.data_type(), DataType::Null) {
            return Ok(match op {
                UnaryOp::IsNull => Value::Scalar(Arc::new(BooleanArray::from(vec![true]))),
                UnaryOp::IsNotNull => Value::Scalar(Arc::new(BooleanArray::from(vec![false]))),
                UnaryOp::Not | UnaryOp::Neg => null_scalar(&out_type),
            });
        }
        let result: std::result::Result<ArrayRef, ArrowError> = match op {
            UnaryOp::IsNull => boolean::is_null(array).map(|a| Arc::new(a) as ArrayRef),
            UnaryOp::IsNotNull => boolean::is_not_null(array).map(|a| Arc::new(a) as ArrayRef),
            UnaryOp::Not => match array.as_boolean_opt() {
                Some(b) => boolean::not(b).map(|a| Arc::new(a) as ArrayRef),
                None => Err(ArrowError::ComputeError(
                    "internal error: '~' on a non-boolean value".to_string(),
                )),
            },
            UnaryOp::Neg => v.cast_to(&out_type).and_then(|v| match v {
                Value::Array(a) | Value::Scalar(a) => numeric::neg(&a),
            }),
        };
        result.map(wrap).map_err(|e| kernel_error(e, self))
    }
}

/// An operand of `&` or `|`: a boolean column or a literal (`None` for null).
enum LogicalOperand<'a> {
    Column(&'a BooleanArray),
    Literal(Option<bool>),
}

impl<'a> LogicalOperand<'a> {
    fn of(v: &'a Value) -> Self {
        match v {
            // A column of type Null is null in every row, like a null literal.
            Value::Array(a) => match a.as_boolean_opt() {
                Some(b) => LogicalOperand::Column(b),
                None => LogicalOperand::Literal(None),
            },
            Value::Scalar(a) => match a.as_boolean_opt() {
                Some(b) if b.is_valid(0) => LogicalOperand::Literal(Some(b.value(0))),
                _ => LogicalOperand::Literal(None),
            },
        }
    }
}

/// For an integer column compared with an integer literal of another type,
/// the pair with the literal cast to the column's type, if it fits; this
/// spares casting the column.
fn narrow_literal(l: &Value, r: &Value) -> std::result::Result<Option<(Value, Value)>, ArrowError> {
    let narrow =
        |scalar: &Value, column: &ArrayRef| -> std::result::Result<Option<Value>, ArrowError> {
            let cast = scalar.cast_to(column.data_type())?;
            let fits = match (&cast, scalar) {
                (Value::Scalar(c), Value::Scalar(s)) => c.is_valid(0) || s.is_null(0),
                _ => false,
            };
            Ok(fits.then_some(cast))
        };
    Ok(match (l, r) {
        (Value::Array(a), Value::Scalar(_)) => narrow(r, a)?.map(|r| (l.clone(), r)),
        (Value::Scalar(_), Value::Array(b)) => narrow(l, b)?.map(|l| (l, r.clone())),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int32Array, UInt64Array};
    use arrow::datatypes::{Field, Float64Type, Int64Type, Schema};

    fn batch() -> RecordBatch {
        let schema = Schema::new(vec![
            Field::new("i", DataType::Int64, true),
            Field::new("n", DataType::Int32, true),
            Field::new("f", DataType::Float64, true),
            Field::new("s", DataType::Utf8, true),
            Field::new("b", DataType::Boolean, true),
            Field::new("u", DataType::UInt64, true),
        ]);
        RecordBatch::try_new(
            Arc::new(schema),
            vec![
                Arc::new(Int64Array::from(vec![Some(-7), Some(7), None, Some(0)])),
                Arc::new(Int32Array::from(vec![Some(3), Some(-3), Some(1), None])),
                Arc::new(Float64Array::from(vec![
                    Some(-0.0),
                    Some(1.5),
                    Some(f64::NAN),
                    None,
                ])),
                Arc::new(StringArray::from(vec![
                    Some("a"),
                    Some("b"),
                    None,
                    Some("a"),
                ])),
                Arc::new(BooleanArray::from(vec![
                    Some(true),
                    Some(false),
                    None,
                    Some(true),
                ])),
                Arc::new(UInt64Array::from(vec![1, 2, 3, 4])),
            ],
        )
        .expect("valid batch")
    }

    fn c(name: &str) -> Expr {
        Expr::col(name)
    }
    fn i(v: i64) -> Expr {
        Expr::lit(ScalarValue::Int64(v))
    }
    fn f(v: f64) -> Expr {
        Expr::lit(ScalarValue::Float64(v))
    }
    fn null() -> Expr {
        Expr::lit(ScalarValue::Null)
    }
    fn bin(op: BinaryOp, l: Expr, r: Expr) -> Expr {
        Expr::binary(op, l, r)
    }
    fn ints(a: &ArrayRef) -> Vec<Option<i64>> {
        a.as_primitive::<Int64Type>().iter().collect()
    }
    fn floats(a: &ArrayRef) -> Vec<Option<f64>> {
        a.as_primitive::<Float64Type>().iter().collect()
    }
    fn bools(a: &ArrayRef) -> Vec<Option<bool>> {
        a.as_boolean().iter().collect()
    }

    #[test]
    fn test_python_mod_and_floor_div_on_columns() {
        let b = batch();
        let m = bin(BinaryOp::Mod, c("i"), c("n"))
            .evaluate(&b)
            .expect("eval");
        assert_eq!(ints(&m), vec![Some(2), Some(-2), None, None]);
        let m = bin(BinaryOp::Mod, c("i"), i(3)).evaluate(&b).expect("eval");
        assert_eq!(ints(&m), vec![Some(2), Some(1), None, Some(0)]);
        let q = bin(BinaryOp::FloorDiv, c("i"), c("n"))
            .evaluate(&b)
            .expect("eval");
        assert_eq!(ints(&q), vec![Some(-3), Some(-3), None, None]);
        let q = bin(BinaryOp::FloorDiv, i(-7), c("n"))
            .evaluate(&b)
            .expect("eval");
        assert_eq!(ints(&q), vec![Some(-3), Some(2), Some(-7), None]);
        let d = bin(BinaryOp::Div, c("i"), i(2)).evaluate(&b).expect("eval");
        assert_eq!(floats(&d), vec![Some(-3.5), Some(3.5), None, Some(0.0)]);
    }

    #[test]
    fn test_floor_of_an_integer_division_is_sparks_double_floor() {
        let b = batch();
        let floor = |arg: Expr| Expr::call("floor", vec![arg]).expect("floor resolves");
        let double = |e: Expr| Expr::cast(e, "double").expect("cast");
        for (l, r) in [
            (c("i"), i(2)),
            (c("i"), c("n")),
            (i(-7), c("n")),
            (bin(BinaryOp::Mul, c("i"), i(908)), i(-1000)),
            (c("n"), i(1 << 53)),
            (i(i64::MIN), i(-1)),
        ] {
            // The integer kernel against the double division Spark runs.
            let fast = floor(bin(BinaryOp::Div, l.clone(), r.clone()));
            let slow = floor(bin(BinaryOp::Div, double(l), double(r)));
            let got = fast.evaluate(&b).expect("eval");
            assert_eq!(got.data_type(), &DataType::Int64, "{fast}");
            assert_eq!(
                ints(&got),
                ints(&slow.evaluate(&b).expect("eval")),
                "{fast}"
            );
        }
        let q = floor(bin(BinaryOp::Div, c("i"), i(2)))
            .evaluate(&b)
            .expect("eval");
        assert_eq!(ints(&q), vec![Some(-4), Some(3), None, Some(0)]);
        // Other operands take the general path: floats, a null literal.
        let q = floor(bin(BinaryOp::Div, c("f"), i(2)))
            .evaluate(&b)
            .expect("eval");
        assert_eq!(ints(&q)[1], Some(0));
        let q = floor(bin(BinaryOp::Div, c("i"), null()))
            .evaluate(&b)
            .expect("eval");
        assert_eq!(ints(&q), vec![None; 4]);
        let err = floor(bin(BinaryOp::Div, c("i"), i(0)))
            .evaluate(&b)
            .expect_err("division by zero");
        assert!(
            err.to_string().contains("division by zero in expression"),
            "{err}"
        );
    }

    #[test]
    fn test_division_by_zero_is_an_operator_error() {
        let b = batch();
        for op in [BinaryOp::Div, BinaryOp::FloorDiv, BinaryOp::Mod] {
            // Integers, and floats as Python: `1.0 / 0.0` and `1.0 / -0.0`
            // raise ZeroDivisionError too.
            for zero in [i(0), f(0.0), f(-0.0)] {
                for dividend in [c("n"), c("f")] {
                    let e = bin(op, dividend, zero.clone());
                    let err = e.evaluate(&b).expect_err("division by zero");
                    assert!(matches!(err, ExprError::Operator(_)), "{err}");
                    assert!(
                        err.to_string()
                            .contains(&format!("division by zero in expression {e}")),
                        "{err}"
                    );
                }
            }
            // A column divisor with zeros in valid rows fails...
            let e = bin(op, c("n"), bin(BinaryOp::Sub, c("n"), c("n")));
            assert!(e.evaluate(&b).is_err(), "{e}");
            let e = bin(op, c("n"), bin(BinaryOp::Mul, c("f"), f(0.0)));
            assert!(e.evaluate(&b).is_err(), "{e}");
            // ...but a zero in a row whose dividend is null does not.
            let e = bin(op, c("n"), c("i"));
            assert!(e.evaluate(&b).is_ok(), "{e}");
            let e = bin(op, bin(BinaryOp::Add, c("i"), f(1.0)), c("f"));
            assert!(e.evaluate(&b).is_err(), "{e}: row 0 is -7.0 by -0.0");
            let e = bin(op, c("i"), bin(BinaryOp::Mul, c("f"), null()));
            assert!(e.evaluate(&b).is_ok(), "{e}");
        }
        // Divisors that are not zero follow IEEE 754: NaN and infinities.
        let d = bin(BinaryOp::Div, f(1.0), c("f")).evaluate(&b);
        assert!(d.is_err(), "-0.0 in row 0");
        let d = bin(BinaryOp::Div, c("f"), f(f64::INFINITY))
            .evaluate(&b)
            .expect("eval");
        assert_eq!(floats(&d)[1], Some(0.0));
        let d = bin(BinaryOp::Div, f(f64::INFINITY), c("n"))
            .evaluate(&b)
            .expect("eval");
        assert_eq!(floats(&d)[1], Some(f64::NEG_INFINITY));
        let d = bin(BinaryOp::Mod, f(1.0), f(f64::NAN))
            .evaluate(&b)
            .expect("eval");
        assert!(floats(&d)[0].expect("valid").is_nan());
    }

    fn spark_div(l: Expr, r: Expr) -> Expr {
        bin(BinaryOp::SparkDiv { ansi: false }, l, r)
    }

    /// Floats compared by their bits, so NaN equals NaN.
    fn bits(values: &[Option<f64>]) -> Vec<Option<u64>> {
        values.iter().map(|v| v.map(f64::to_bits)).collect()
    }

    #[test]
    fn test_sparks_division_by_zero_is_null_or_an_ansi_error() {
        let b = batch();
        // i: [-7, 7, null, 0], n: [3, -3, 1, null], f: [-0.0, 1.5, NaN, null]
        let zero_n = bin(BinaryOp::Sub, c("n"), c("n"));
        let third = |a: f64, b: f64| Some(a / b);
        for (e, want, zero_met) in [
            (spark_div(c("i"), i(0)), vec![None; 4], true),
            (spark_div(c("f"), f(0.0)), vec![None; 4], true),
            (spark_div(c("f"), f(-0.0)), vec![None; 4], true),
            (spark_div(i(7), i(0)), vec![None; 4], true),
            (spark_div(c("i"), zero_n.clone()), vec![None; 4], true),
            (
                spark_div(c("n"), c("f")),
                vec![None, Some(-2.0), Some(f64::NAN), None],
                true,
            ),
            (
                spark_div(f(1.0), c("f")),
                vec![None, third(1.0, 1.5), Some(f64::NAN), None],
                true,
            ),
            (
                spark_div(c("i"), c("n")),
                vec![third(-7.0, 3.0), third(7.0, -3.0), None, None],
                false,
            ),
            (
                spark_div(i(3), c("i")),
                vec![third(3.0, -7.0), third(3.0, 7.0), None, None],
                true,
            ),
            // A zero divisor only in rows whose dividend is null.
            (
                spark_div(c("n"), c("i")),
                vec![third(3.0, -7.0), third(-3.0, 7.0), None, None],
                false,
            ),
            (spark_div(null(), i(0)), vec![None; 4], false),
            (spark_div(c("i"), null()), vec![None; 4], false),
            (
                spark_div(bin(BinaryOp::Mul, c("f"), null()), f(0.0)),
                vec![None; 4],
                false,
            ),
        ] {
            let got = e
                .evaluate(&b)
                .expect("Spark's / out of ANSI mode never fails");
            assert_eq!(got.data_type(), &DataType::Float64, "{e}");
            assert_eq!(bits(&floats(&got)), bits(&want), "{e}");
            // In ANSI mode the same expression fails where a zero divisor
            // meets a valid dividend, and gives the same values elsewhere.
            let ansi = e.clone().with_ansi(true);
            match ansi.evaluate(&b) {
                Err(err) => {
                    assert!(zero_met, "{ansi}: {err}");
                    assert!(matches!(err, ExprError::Operator(_)), "{err}");
                    let message = err.to_string();
                    assert!(message.starts_with("[DIVIDE_BY_ZERO]"), "{message}");
                    assert!(message.contains(&ansi.to_string()), "{message}");
                    assert!(message.contains("spark.sql.ansi.enabled"), "{message}");
                }
                Ok(got) => {
                    assert!(!zero_met, "{ansi} should fail");
                    assert_eq!(bits(&floats(&got)), bits(&want), "{ansi}");
                }
            }
        }
    }

    #[test]
    fn test_floor_of_sparks_division_by_zero() {
        let b = batch();
        let floor = |arg: Expr| Expr::call("floor", vec![arg]).expect("floor resolves");
        let zero_n = bin(BinaryOp::Sub, c("n"), c("n"));
        // i: [-7, 7, null, 0], n: [3, -3, 1, null], f: [-0.0, 1.5, NaN, null]
        for (e, want, zero_met) in [
            // Integers: the integer kernel.
            (floor(spark_div(c("i"), i(0))), vec![None; 4], true),
            (floor(spark_div(c("i"), zero_n)), vec![None; 4], true),
            (
                floor(spark_div(i(-7), c("i"))),
                vec![Some(1), Some(-1), None, None],
                true,
            ),
            (
                floor(spark_div(c("i"), c("n"))),
                vec![Some(-3), Some(-3), None, None],
                false,
            ),
            (
                floor(spark_div(c("n"), c("i"))),
                vec![Some(-1), Some(-1), None, None],
                false,
            ),
            // Doubles take the general path, with the same rule.
            (floor(spark_div(c("f"), i(0))), vec![None; 4], true),
            (
                floor(spark_div(c("i"), c("f"))),
                vec![None, Some(4), None, None],
                true,
            ),
        ] {
            let got = e.evaluate(&b).expect("null, not an error");
            assert_eq!(got.data_type(), &DataType::Int64, "{e}");
            assert_eq!(ints(&got), want, "{e}");
            let ansi = e.clone().with_ansi(true);
            match ansi.evaluate(&b) {
                Err(err) => {
                    assert!(zero_met, "{ansi}: {err}");
                    assert!(err.to_string().starts_with("[DIVIDE_BY_ZERO]"), "{err}");
                }
                Ok(got) => {
                    assert!(!zero_met, "{ansi} should fail");
                    assert_eq!(ints(&got), want, "{ansi}");
                }
            }
        }
    }

    #[test]
    fn test_overflow_is_an_operator_error() {
        let b = batch();
        let e = bin(BinaryOp::Mul, c("i"), i(i64::MAX));
        let err = e.evaluate(&b).expect_err("overflow");
        assert!(err.to_string().contains("integer overflow"), "{err}");
        let e = Expr::unary(UnaryOp::Neg, i(i64::MIN));
        assert!(e.evaluate(&b).is_err());
    }

    #[test]
    fn test_ieee_float_comparisons() {
        let b = batch();
        let e = bin(BinaryOp::Eq, c("f"), i(0)).evaluate(&b).expect("eval");
        assert_eq!(bools(&e), vec![Some(true), Some(false), Some(false), None]);
        let e = bin(BinaryOp::NotEq, c("f"), c("f"))
            .evaluate(&b)
            .expect("eval");
        assert_eq!(bools(&e), vec![Some(false), Some(false), Some(true), None]);
    }

    #[test]
    fn test_mixed_int_comparison_narrows_literal() {
        let b = batch();
        let e = bin(BinaryOp::Gt, c("n"), i(0)).evaluate(&b).expect("eval");
        assert_eq!(bools(&e), vec![Some(true), Some(false), Some(true), None]);
        let e = bin(BinaryOp::Lt, c("n"), i(i64::MAX))
            .evaluate(&b)
            .expect("eval");
        assert_eq!(bools(&e), vec![Some(true), Some(true), Some(true), None]);
        let e = bin(BinaryOp::Eq, c("i"), c("n"))
            .evaluate(&b)
            .expect("eval");
        assert_eq!(bools(&e), vec![Some(false), Some(false), None, None]);
    }

    #[test]
    fn test_strings_and_booleans() {
        let b = batch();
        let s = Expr::lit(ScalarValue::Utf8("a".into()));
        let e = bin(BinaryOp::Eq, c("s"), s).evaluate(&b).expect("eval");
        assert_eq!(bools(&e), vec![Some(true), Some(false), None, Some(true)]);
        let e = bin(BinaryOp::And, c("b"), null())
            .evaluate(&b)
            .expect("eval");
        assert_eq!(bools(&e), vec![None, Some(false), None, None]);
        let e = bin(BinaryOp::Or, c("b"), Expr::unary(UnaryOp::Not, c("b")))
            .evaluate(&b)
            .expect("eval");
        assert_eq!(bools(&e), vec![Some(true), Some(true), None, Some(true)]);
    }

    #[test]
    fn test_nulls_and_literals() {
        let b = batch();
        let e = bin(BinaryOp::Add, c("i"), null())
            .evaluate(&b)
            .expect("eval");
        assert_eq!(
            (e.data_type(), e.null_count(), e.len()),
            (&DataType::Int64, 4, 4)
        );
        let e = bin(BinaryOp::Add, i(1), f(0.5)).evaluate(&b).expect("eval");
        assert_eq!(floats(&e), vec![Some(1.5); 4]);
        let e = Expr::unary(UnaryOp::IsNull, c("i"))
            .evaluate(&b)
            .expect("eval");
        assert_eq!(
            bools(&e),
            vec![Some(false), Some(false), Some(true), Some(false)]
        );
        let e = Expr::unary(UnaryOp::Neg, c("n"))
            .evaluate(&b)
            .expect("eval");
        assert_eq!(ints(&e), vec![Some(-3), Some(3), Some(-1), None]);
        let e = Expr::unary(UnaryOp::IsNull, null())
            .evaluate(&b)
            .expect("eval");
        assert_eq!(bools(&e), vec![Some(true); 4]);
    }

    #[test]
    fn test_eval_errors() {
        let b = batch();
        let err = c("zzz").evaluate(&b).expect_err("unknown");
        assert!(matches!(err, ExprError::Graph(_)), "{err}");
        let err = bin(BinaryOp::Add, c("u"), i(1))
            .evaluate(&b)
            .expect_err("u64");
        assert!(matches!(err, ExprError::Schema(_)), "{err}");
        let err = bin(BinaryOp::Add, c("s"), i(1))
            .evaluate(&b)
            .expect_err("str + int");
        assert!(matches!(err, ExprError::Schema(_)), "{err}");
    }
}
