//! The few vectorized kernels expressions need beyond `arrow::compute`:
//! Python floor division and modulo, divisions whose zero divisors fail
//! (Python) or are null (Spark with ANSI mode off; DESIGN.md "Expressions"),
//! IEEE 754 float comparisons (Arrow's compare floats by total order, where
//! `-0.0 < 0.0` and `NaN == NaN`), Kleene logic against a literal, and
//! broadcasting a scalar result to a column.
//!
//! Every kernel takes [`Value`]s, so a literal operand stays a single value:
//! the per-row loop runs inside Arrow's `unary`/`try_binary`/`collect_bool`
//! over the column's value buffer, and a constant divisor is checked once.

use std::sync::Arc;

use arrow::array::{
    new_null_array, Array, ArrayRef, AsArray, BooleanArray, Float64Array, LargeStringArray,
    PrimitiveArray, StringArray, UInt32Array,
};
use arrow::buffer::{BooleanBuffer, NullBuffer};
use arrow::compute::kernels::arity::{binary, try_binary};
use arrow::datatypes::{ArrowPrimitiveType, DataType, Float64Type, Int64Type};
use arrow::error::ArrowError;

use super::value::Value;
use super::BinaryOp;

/// The values of `array` as a primitive array of `T`, or an internal error.
fn primitive<T: ArrowPrimitiveType>(array: &ArrayRef) -> Result<&PrimitiveArray<T>, ArrowError> {
    array.as_primitive_opt::<T>().ok_or_else(|| {
        ArrowError::ComputeError(format!(
            "internal error: expected {} values, found {}",
            T::DATA_TYPE,
            array.data_type()
        ))
    })
}

/// Applies `op` row by row where both operands are valid; a null literal
/// makes the whole result null. `op` may fail (division by zero, overflow).
fn apply<A, B, O, F>(l: &Value, r: &Value, op: F) -> Result<Value, ArrowError>
where
    A: ArrowPrimitiveType,
    B: ArrowPrimitiveType,
    O: ArrowPrimitiveType,
    F: Fn(A::Native, B::Native) -> Result<O::Native, ArrowError>,
{
    let null = || Value::Scalar(new_null_array(&O::DATA_TYPE, 1));
    Ok(match (l, r) {
        (Value::Scalar(a), Value::Scalar(b)) => {
            let (a, b) = (primitive::<A>(a)?, primitive::<B>(b)?);
            if a.is_null(0) || b.is_null(0) {
                null()
            } else {
                let v = op(a.value(0), b.value(0))?;
                Value::Scalar(Arc::new(PrimitiveArray::<O>::from_value(v, 1)))
            }
        }
        (Value::Array(a), Value::Scalar(b)) => {
            let (a, b) = (primitive::<A>(a)?, primitive::<B>(b)?);
            if b.is_null(0) {
                null()
            } else {
                let b = b.value(0);
                Value::Array(Arc::new(a.try_unary::<_, O, _>(|a| op(a, b))?))
            }
        }
        (Value::Scalar(a), Value::Array(b)) => {
            let (a, b) = (primitive::<A>(a)?, primitive::<B>(b)?);
            if a.is_null(0) {
                null()
            } else {
                let a = a.value(0);
                Value::Array(Arc::new(b.try_unary::<_, O, _>(|b| op(a, b))?))
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            let (a, b) = (primitive::<A>(a)?, primitive::<B>(b)?);
            Value::Array(Arc::new(try_binary::<_, _, _, O>(a, b, op)?))
        }
    })
}

/// The non-null constant divisor of `a op b` when `a` is a column, if any.
fn constant_divisor(l: &Value, r: &Value) -> Result<Option<(ArrayRef, i64)>, ArrowError> {
    if let (Value::Array(a), Value::Scalar(b)) = (l, r) {
        let b = primitive::<Int64Type>(b)?;
        if b.is_valid(0) {
            return Ok(Some((Arc::clone(a), b.value(0))));
        }
    }
    Ok(None)
}

/// `a % b` with Python semantics for `b != 0`: the result takes the sign of
/// the divisor. Cannot overflow (`MIN % -1` is 0).
#[inline]
fn py_mod_nonzero(a: i64, b: i64) -> i64 {
    let r = a.wrapping_rem(b);
    if r != 0 && (r ^ b) < 0 {
        r + b
    } else {
        r
    }
}

/// `a // b` with Python semantics for `b` not 0 or -1 (so it cannot
/// overflow): the quotient is rounded towards negative infinity.
#[inline]
fn py_floor_div_safe(a: i64, b: i64) -> i64 {
    let q = a / b;
    let r = a % b;
    if r != 0 && (r ^ b) < 0 {
        q - 1
    } else {
        q
    }
}

/// Python `a // b` on integers; fails on a zero divisor and on
/// `i64::MIN // -1`.
pub(crate) fn py_floor_div(a: i64, b: i64) -> Result<i64, ArrowError> {
    match b {
        0 => Err(ArrowError::DivideByZero),
        -1 => a.checked_neg().ok_or_else(|| {
            ArrowError::ArithmeticOverflow(format!("Overflow happened on: {a} // -1"))
        }),
        b => Ok(py_floor_div_safe(a, b)),
    }
}

/// Python `a % b` on integers; fails on a zero divisor.
pub(crate) fn py_mod(a: i64, b: i64) -> Result<i64, ArrowError> {
    if b == 0 {
        Err(ArrowError::DivideByZero)
    } else {
        Ok(py_mod_nonzero(a, b))
    }
}

/// Python `a % b` on floats: `fmod` shifted to the sign of the divisor, and a
/// zero result carries the divisor's sign. A zero divisor gives `NaN`
/// ([`float_mod`] refuses it before).
#[inline]
pub(crate) fn py_float_mod(a: f64, b: f64) -> f64 {
    let r = a % b;
    if r != 0.0 {
        if (r < 0.0) != (b < 0.0) {
            r + b
        } else {
            r
        }
    } else {
        0.0f64.copysign(b)
    }
}

/// Integer `//` (Python semantics) on two `Int64` values.
pub(crate) fn int_floor_div(l: &Value, r: &Value) -> Result<Value, ArrowError> {
    if let Some((a, b)) = constant_divisor(l, r)? {
        if b != 0 && b != -1 {
            let a = primitive::<Int64Type>(&a)?;
            return Ok(Value::Array(Arc::new(
                a.unary::<_, Int64Type>(|a| py_floor_div_safe(a, b)),
            )));
        }
    }
    apply::<Int64Type, Int64Type, Int64Type, _>(l, r, py_floor_div)
}

/// Integer `%` (Python semantics) on two `Int64` values.
pub(crate) fn int_mod(l: &Value, r: &Value) -> Result<Value, ArrowError> {
    if let Some((a, b)) = constant_divisor(l, r)? {
        if b != 0 {
            let a = primitive::<Int64Type>(&a)?;
            return Ok(Value::Array(Arc::new(
                a.unary::<_, Int64Type>(|a| py_mod_nonzero(a, b)),
            )));
        }
    }
    apply::<Int64Type, Int64Type, Int64Type, _>(l, r, py_mod)
}

/// What a division does in a row whose divisor is zero and whose operands
/// are both valid (a row with a null operand is null whatever its divisor).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OnZero {
    /// The batch fails: Python's `ZeroDivisionError` for the DSL's operators,
    /// Spark's `DIVIDE_BY_ZERO` in ANSI mode.
    Fail,
    /// The row is null: Spark's `/` with ANSI mode off.
    Null,
}

impl OnZero {
    /// Spark's rule, in ANSI mode (`spark.sql.ansi.enabled`) or out of it.
    pub(crate) fn spark(ansi: bool) -> Self {
        if ansi {
            OnZero::Fail
        } else {
            OnZero::Null
        }
    }

    /// Called where a zero divisor was met in a valid row.
    fn met(self) -> Result<(), ArrowError> {
        match self {
            OnZero::Fail => Err(ArrowError::DivideByZero),
            OnZero::Null => Ok(()),
        }
    }
}

/// `a op b` for a division `op` that gives some value for every pair,
/// zero divisors included (that value is discarded): the rows whose divisor
/// is zero are null or fail as `on_zero` says. A literal divisor is checked
/// once; a column of divisors costs one scan for zeros, and only a batch
/// that has a zero divisor in a valid row gets a new validity bitmap (the
/// quotients' values are shared, never copied).
fn divide<T, O, Z, F>(
    l: &Value,
    r: &Value,
    on_zero: OnZero,
    is_zero: Z,
    op: F,
) -> Result<Value, ArrowError>
where
    T: ArrowPrimitiveType,
    O: ArrowPrimitiveType,
    Z: Fn(T::Native) -> bool,
    F: Fn(T::Native, T::Native) -> O::Native,
{
    let null = || Value::Scalar(new_null_array(&O::DATA_TYPE, 1));
    Ok(match (l, r) {
        (Value::Scalar(a), Value::Scalar(b)) => {
            let (a, b) = (primitive::<T>(a)?, primitive::<T>(b)?);
            if a.is_null(0) || b.is_null(0) {
                null()
            } else if is_zero(b.value(0)) {
                on_zero.met()?;
                null()
            } else {
                let v = op(a.value(0), b.value(0));
                Value::Scalar(Arc::new(PrimitiveArray::<O>::from_value(v, 1)))
            }
        }
        (Value::Array(a), Value::Scalar(b)) => {
            let (a, b) = (primitive::<T>(a)?, primitive::<T>(b)?);
            if b.is_null(0) {
                null()
            } else if is_zero(b.value(0)) {
                if a.null_count() < a.len() {
                    on_zero.met()?;
                }
                null()
            } else {
                let b = b.value(0);
                Value::Array(Arc::new(a.unary::<_, O>(|a| op(a, b))))
            }
        }
        (Value::Scalar(a), Value::Array(b)) => {
            let (a, b) = (primitive::<T>(a)?, primitive::<T>(b)?);
            if a.is_null(0) {
                null()
            } else {
                let a = a.value(0);
                let quotients = b.unary::<_, O>(|b| op(a, b));
                Value::Array(Arc::new(without_zero_divisors(
                    quotients, b, on_zero, is_zero,
                )?))
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            let (a, b) = (primitive::<T>(a)?, primitive::<T>(b)?);
            let quotients = binary::<_, _, _, O>(a, b, op)?;
            Value::Array(Arc::new(without_zero_divisors(
                quotients, b, on_zero, is_zero,
            )?))
        }
    })
}

/// `quotients` of the divisors `divisors`, with each valid row whose divisor
/// is zero null or failing as `on_zero` says; `quotients` itself where
/// there is no such row.
fn without_zero_divisors<T, O, Z>(
    quotients: PrimitiveArray<O>,
    divisors: &PrimitiveArray<T>,
    on_zero: OnZero,
    is_zero: Z,
) -> Result<PrimitiveArray<O>, ArrowError>
where
    T: ArrowPrimitiveType,
    O: ArrowPrimitiveType,
    Z: Fn(T::Native) -> bool,
{
    let values = divisors.values();
    if !values.iter().any(|d| is_zero(*d)) {
        return Ok(quotients);
    }
    let nonzero = BooleanBuffer::collect_bool(values.len(), |i| !is_zero(values[i]));
    let valid = match quotients.nulls() {
        Some(nulls) => nulls.inner() & &nonzero,
        None => nonzero,
    };
    let valid_before = quotients.len() - quotients.null_count();
    if valid.count_set_bits() == valid_before {
        // Every zero divisor sits in a row that is null anyway.
        return Ok(quotients);
    }
    on_zero.met()?;
    let (_, values, _) = quotients.into_parts();
    Ok(PrimitiveArray::<O>::new(
        values,
        Some(NullBuffer::new(valid)),
    ))
}

/// `/` of two `Int64` values: their `Float64` quotient; a zero divisor is
/// handled as `on_zero` says.
pub(crate) fn int_true_div(l: &Value, r: &Value, on_zero: OnZero) -> Result<Value, ArrowError> {
    divide::<Int64Type, Float64Type, _, _>(l, r, on_zero, |b| b == 0, |a, b| a as f64 / b as f64)
}

/// `/` of two `Float64` values; a zero divisor (`0.0` or `-0.0`) is
/// handled as `on_zero` says, any other follows IEEE 754 (`NaN`, `inf`).
pub(crate) fn float_true_div(l: &Value, r: &Value, on_zero: OnZero) -> Result<Value, ArrowError> {
    divide::<Float64Type, Float64Type, _, _>(l, r, on_zero, |b| b == 0.0, |a, b| a / b)
}

/// Below this magnitude every `i64` is exactly an `f64`.
const EXACT_IN_F64: u64 = 1 << 53;

/// Spark's `floor(a / b)` of integers, `b != 0`, the way Spark computes it:
/// `/` divides as doubles and `floor` casts the floored double to bigint,
/// saturating like Java's `(long)` (docs/DESIGN.md "Expressions").
#[inline]
fn spark_floor_quotient_in_f64(a: i64, b: i64) -> i64 {
    (a as f64 / b as f64).floor() as i64
}

/// Spark's `floor(a / b)` of integers, `b != 0`, as an integer floor
/// division wherever that is exactly what the double computation gives.
///
/// Claim: if `|a| < 2^53` and `|b| <= 2^53`, then `floor(fl(a / b))` is the
/// integer floor of the real quotient `q = a / b`. Both operands are exact
/// as doubles, and the division is correctly rounded, so
/// `|fl(q) - q| <= 2^-53 |q|` (round to nearest); `|q| <= |a| < 2^53` gives
/// `|fl(q) - q| < 1 / |b|`. Let `n = floor(q)`; `n` and `n + 1` are doubles
/// (their magnitudes are at most 2^53). If `q = n`, `fl(q) = n`. Otherwise
/// `n + 1 - q = ((n + 1) b - a) / b` has a non-zero integer numerator, so it
/// is at least `1 / |b|` and `fl(q) < n + 1`; and `fl(q) >= n` because
/// rounding is monotone and `n` is a double. So `floor(fl(q)) = n`, which
/// needs no saturation. Outside that range the double computation runs, so
/// every input gives Spark's result (`i64::MIN / -1` saturates to
/// `i64::MAX`, large dividends round before they are divided).
#[inline]
fn spark_floor_quotient(a: i64, b: i64) -> i64 {
    if a.unsigned_abs() < EXACT_IN_F64 && b.unsigned_abs() <= EXACT_IN_F64 {
        // |a| < 2^53: `a / -1` cannot overflow.
        py_floor_div_safe(a, b)
    } else {
        spark_floor_quotient_in_f64(a, b)
    }
}

/// Spark's `floor(a / b)` on two `Int64` values as one integer kernel (see
/// [`spark_floor_quotient`]); a zero divisor is handled as `on_zero` says,
/// as [`int_true_div`] does.
pub(crate) fn int_floor_of_true_div(
    l: &Value,
    r: &Value,
    on_zero: OnZero,
) -> Result<Value, ArrowError> {
    if let Some((a, b)) = constant_divisor(l, r)? {
        if b != 0 {
            let a = primitive::<Int64Type>(&a)?;
            let quotients = if b.unsigned_abs() <= EXACT_IN_F64 {
                a.unary::<_, Int64Type>(|a| {
                    if a.unsigned_abs() < EXACT_IN_F64 {
                        py_floor_div_safe(a, b)
                    } else {
                        spark_floor_quotient_in_f64(a, b)
                    }
                })
            } else {
                a.unary::<_, Int64Type>(|a| spark_floor_quotient_in_f64(a, b))
            };
            return Ok(Value::Array(Arc::new(quotients)));
        }
    }
    // The value for a zero divisor is discarded; it must only not panic.
    divide::<Int64Type, Int64Type, _, _>(
        l,
        r,
        on_zero,
        |b| b == 0,
        |a, b| {
            if b == 0 {
                0
            } else {
                spark_floor_quotient(a, b)
            }
        },
    )
}

/// Float `//`: `floor(a / b)` on two `Float64` values; a zero divisor
/// (`0.0` or `-0.0`) fails, as Python's `ZeroDivisionError`.
pub(crate) fn float_floor_div(l: &Value, r: &Value) -> Result<Value, ArrowError> {
    divide::<Float64Type, Float64Type, _, _>(
        l,
        r,
        OnZero::Fail,
        |b| b == 0.0,
        |a, b| (a / b).floor(),
    )
}

/// Float `%` (Python semantics) on two `Float64` values; a zero divisor
/// fails, as Python's `ZeroDivisionError`.
pub(crate) fn float_mod(l: &Value, r: &Value) -> Result<Value, ArrowError> {
    divide::<Float64Type, Float64Type, _, _>(l, r, OnZero::Fail, |b| b == 0.0, py_float_mod)
}

/// An IEEE 754 comparison of two `Float64` values.
pub(crate) fn float_compare(op: BinaryOp, l: &Value, r: &Value) -> Result<Value, ArrowError> {
    match op {
        BinaryOp::Eq => compare_with(l, r, |a, b| a == b),
        BinaryOp::NotEq => compare_with(l, r, |a, b| a != b),
        BinaryOp::Lt => compare_with(l, r, |a, b| a < b),
        BinaryOp::LtEq => compare_with(l, r, |a, b| a <= b),
        BinaryOp::Gt => compare_with(l, r, |a, b| a > b),
        BinaryOp::GtEq => compare_with(l, r, |a, b| a >= b),
        other => Err(ArrowError::ComputeError(format!(
            "internal error: '{}' is not a comparison",
            other.symbol()
        ))),
    }
}

fn compare_with<F>(l: &Value, r: &Value, f: F) -> Result<Value, ArrowError>
where
    F: Fn(f64, f64) -> bool,
{
    let null = || Value::Scalar(new_null_array(&DataType::Boolean, 1));
    let column = |a: &Float64Array, b: f64, flip: bool| {
        let values = a.values();
        let bits = if flip {
            BooleanBuffer::collect_bool(values.len(), |i| f(b, values[i]))
        } else {
            BooleanBuffer::collect_bool(values.len(), |i| f(values[i], b))
        };
        Value::Array(Arc::new(BooleanArray::new(bits, a.nulls().cloned())))
    };
    Ok(match (l, r) {
        (Value::Scalar(a), Value::Scalar(b)) => {
            let (a, b) = (primitive::<Float64Type>(a)?, primitive::<Float64Type>(b)?);
            if a.is_null(0) || b.is_null(0) {
                null()
            } else {
                Value::Scalar(Arc::new(BooleanArray::from(vec![f(
                    a.value(0),
                    b.value(0),
                )])))
            }
        }
        (Value::Array(a), Value::Scalar(b)) => {
            let (a, b) = (primitive::<Float64Type>(a)?, primitive::<Float64Type>(b)?);
            if b.is_null(0) {
                null()
            } else {
                column(a, b.value(0), false)
            }
        }
        (Value::Scalar(a), Value::Array(b)) => {
            let (a, b) = (primitive::<Float64Type>(a)?, primitive::<Float64Type>(b)?);
            if a.is_null(0) {
                null()
            } else {
                column(b, a.value(0), true)
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            let (a, b) = (primitive::<Float64Type>(a)?, primitive::<Float64Type>(b)?);
            if a.len() != b.len() {
                return Err(ArrowError::ComputeError(
                    "internal error: comparing columns of different lengths".to_string(),
                ));
            }
            let (av, bv) = (a.values(), b.values());
            let bits = BooleanBuffer::collect_bool(av.len(), |i| f(av[i], bv[i]));
            let nulls = NullBuffer::union(a.nulls(), b.nulls());
            Value::Array(Arc::new(BooleanArray::new(bits, nulls)))
        }
    })
}

/// Kleene `a & s` or `a | s` for a boolean column `a` and a literal `s`
/// (`None` for null), computed on the bitmaps without materializing `s`.
pub(crate) fn kleene_with_scalar(op: BinaryOp, a: &BooleanArray, s: Option<bool>) -> BooleanArray {
    let len = a.len();
    match (op, s) {
        (BinaryOp::And, Some(true)) | (BinaryOp::Or, Some(false)) => a.clone(),
        (BinaryOp::And, Some(false)) => BooleanArray::new(BooleanBuffer::new_unset(len), None),
        (BinaryOp::Or, Some(true)) => BooleanArray::new(BooleanBuffer::new_set(len), None),
        (BinaryOp::And, None) => {
            // false & null = false; true & null = null; null & null = null.
            let is_false = !a.values();
            let valid = match a.nulls() {
                Some(nulls) => nulls.inner() & &is_false,
                None => is_false,
            };
            BooleanArray::new(BooleanBuffer::new_unset(len), Some(NullBuffer::new(valid)))
        }
        _ => {
            // true | null = true; false | null = null; null | null = null.
            let valid = match a.nulls() {
                Some(nulls) => nulls.inner() & a.values(),
                None => a.values().clone(),
            };
            BooleanArray::new(a.values().clone(), Some(NullBuffer::new(valid)))
        }
    }
}

/// Kleene logic on two literals.
pub(crate) fn kleene_scalars(op: BinaryOp, a: Option<bool>, b: Option<bool>) -> Option<bool> {
    match op {
        BinaryOp::And => match (a, b) {
            (Some(false), _) | (_, Some(false)) => Some(false),
            (Some(true), Some(true)) => Some(true),
            _ => None,
        },
        _ => match (a, b) {
            (Some(true), _) | (_, Some(true)) => Some(true),
            (Some(false), Some(false)) => Some(false),
            _ => None,
        },
    }
}

/// Repeats the single value of `scalar` `len` times.
pub(crate) fn broadcast(scalar: &ArrayRef, len: usize) -> Result<ArrayRef, ArrowError> {
    if scalar.is_null(0) {
        return Ok(new_null_array(scalar.data_type(), len));
    }
    Ok(match scalar.data_type() {
        DataType::Int64 => {
            let v = primitive::<Int64Type>(scalar)?.value(0);
            Arc::new(PrimitiveArray::<Int64Type>::from_value(v, len))
        }
        DataType::Float64 => {
            let v = primitive::<Float64Type>(scalar)?.value(0);
            Arc::new(PrimitiveArray::<Float64Type>::from_value(v, len))
        }
        DataType::Boolean => {
            let bits = if scalar.as_boolean().value(0) {
                BooleanBuffer::new_set(len)
            } else {
                BooleanBuffer::new_unset(len)
            };
            Arc::new(BooleanArray::new(bits, None))
        }
        DataType::Utf8 => {
            let v = scalar.as_string::<i32>().value(0);
            Arc::new(StringArray::from_iter_values(std::iter::repeat_n(v, len)))
        }
        DataType::LargeUtf8 => {
            let v = scalar.as_string::<i64>().value(0);
            Arc::new(LargeStringArray::from_iter_values(std::iter::repeat_n(
                v, len,
            )))
        }
        _ => {
            let indices = UInt32Array::from_value(0, len);
            arrow::compute::take(scalar.as_ref(), &indices, None)?
        }
    })
}

#[cfg(test)]
mod tests {
    use arrow::array::Int64Array;

    use super::*;

    #[test]
    fn test_python_integer_semantics() {
        for (a, b, q, r) in [
            (7, 3, 2, 1),
            (-7, 3, -3, 2),
            (7, -3, -3, -2),
            (-7, -3, 2, -1),
            (6, -3, -2, 0),
            (i64::MIN, 2, i64::MIN / 2, 0),
            (i64::MIN, -1, 0, 0),
        ] {
            if b != -1 {
                assert_eq!(py_floor_div(a, b).expect("div"), q, "{a} // {b}");
            }
            assert_eq!(py_mod(a, b).expect("mod"), r, "{a} % {b}");
        }
        assert!(py_floor_div(i64::MIN, -1).is_err());
        assert_eq!(py_floor_div(5, -1).expect("div"), -5);
        assert!(matches!(py_mod(1, 0), Err(ArrowError::DivideByZero)));
        assert!(matches!(py_floor_div(1, 0), Err(ArrowError::DivideByZero)));
    }

    /// Dividends and divisors around the edges of the exact range: zero,
    /// small values of both signs, 2^53 and its neighbours, the extremes.
    fn edge_values() -> Vec<i64> {
        let p = 1i64 << 53;
        let mut values = vec![0, 1, 2, 3, 7, 908, 1000, 999_999_999];
        values.extend([
            p - 3,
            p - 1,
            p,
            p + 1,
            p + 3,
            3 * p + 1,
            i64::MAX - 1,
            i64::MAX,
        ]);
        let negatives: Vec<i64> = values.iter().map(|v| -v).collect();
        values.extend(negatives);
        values.push(i64::MIN);
        values.push(i64::MIN + 1);
        values
    }

    #[test]
    fn test_spark_floor_quotient_is_the_double_computation() {
        let values = edge_values();
        for &a in &values {
            for &b in values.iter().filter(|b| **b != 0) {
                let spark = (a as f64 / b as f64).floor() as i64;
                assert_eq!(spark_floor_quotient(a, b), spark, "floor({a} / {b})");
                let l = Value::Array(Arc::new(Int64Array::from(vec![a])));
                let r = Value::Scalar(Arc::new(Int64Array::from(vec![b])));
                let Value::Array(got) =
                    int_floor_of_true_div(&l, &r, OnZero::Fail).expect("kernel")
                else {
                    panic!("a column divided by a literal is a column");
                };
                let got = got.as_primitive::<Int64Type>();
                assert_eq!(got.value(0), spark, "floor({a} / {b}) by a literal");
            }
        }
        // Floors, not truncation, and exact where the double is.
        assert_eq!(spark_floor_quotient(-7, 2), -4);
        assert_eq!(spark_floor_quotient(7, -2), -4);
        assert_eq!(spark_floor_quotient(-6, 3), -2);
        let p = 1i64 << 53;
        assert_eq!(spark_floor_quotient(p - 1, 1), p - 1);
        assert_eq!(spark_floor_quotient(-(p - 1), 2), -(p / 2));
        // Beyond 2^53 the dividend rounds first, as Spark's double does.
        assert_eq!(spark_floor_quotient(p + 1, 1), p);
        assert_eq!(spark_floor_quotient(i64::MIN, -1), i64::MAX);
        assert_eq!(spark_floor_quotient(i64::MAX, 1), i64::MAX);
    }

    #[test]
    fn test_spark_floor_quotient_matches_doubles_on_random_pairs() {
        // A fixed-seed xorshift: dividends of every magnitude, small divisors.
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for _ in 0..200_000 {
            let shift = next() % 64;
            let a = (next() >> shift) as i64 * if next() % 2 == 0 { 1 } else { -1 };
            let b = (next() % 2_000) as i64 - 1_000;
            if b != 0 {
                let spark = (a as f64 / b as f64).floor() as i64;
                assert_eq!(spark_floor_quotient(a, b), spark, "floor({a} / {b})");
            }
        }
    }

    #[test]
    fn test_spark_floor_of_true_div_nulls_and_zero_divisors() {
        let column = |v: Vec<Option<i64>>| Value::Array(Arc::new(Int64Array::from(v)));
        let scalar = |v: Option<i64>| Value::Scalar(Arc::new(Int64Array::from(vec![v])));
        let ints = |v: Value| match v {
            Value::Array(a) | Value::Scalar(a) => {
                a.as_primitive::<Int64Type>().iter().collect::<Vec<_>>()
            }
        };
        let a = column(vec![Some(-7), None, Some(7)]);
        for on_zero in [OnZero::Fail, OnZero::Null] {
            let floor = |l: &Value, r: &Value| int_floor_of_true_div(l, r, on_zero);
            let got = floor(&a, &scalar(Some(2))).expect("by a literal");
            assert_eq!(ints(got), vec![Some(-4), None, Some(3)]);
            let got = floor(&a, &column(vec![Some(-2), Some(0), None]))
                .expect("a null row is never divided");
            assert_eq!(ints(got), vec![Some(3), None, None]);
            let got = floor(&a, &scalar(None)).expect("a null divisor");
            assert_eq!(ints(got), vec![None]);
            let got = floor(&scalar(Some(-1)), &scalar(Some(3))).expect("literals");
            assert_eq!(ints(got), vec![Some(-1)]);
        }
        // A zero divisor in a valid row: an error (Python; Spark's ANSI
        // mode) or null (Spark).
        let zeros = [
            (scalar(Some(0)), vec![None]),
            (
                column(vec![Some(1), Some(1), Some(0)]),
                vec![Some(-7), None, None],
            ),
            (
                column(vec![Some(0), Some(0), Some(-1)]),
                vec![None, None, Some(-7)],
            ),
        ];
        for (zero, nulled) in zeros {
            assert!(matches!(
                int_floor_of_true_div(&a, &zero, OnZero::Fail),
                Err(ArrowError::DivideByZero)
            ));
            let got = int_floor_of_true_div(&a, &zero, OnZero::Null).expect("null");
            assert_eq!(ints(got), nulled);
        }
        let got = int_floor_of_true_div(
            &scalar(Some(5)),
            &column(vec![Some(0), Some(2)]),
            OnZero::Null,
        )
        .expect("a literal by a column");
        assert_eq!(ints(got), vec![None, Some(2)]);
        // A column of dividends that is null throughout meets no zero.
        let nothing = column(vec![None, None]);
        for zero in [scalar(Some(0)), column(vec![Some(0), Some(0)])] {
            let got = int_floor_of_true_div(&nothing, &zero, OnZero::Fail).expect("all null");
            assert!(ints(got).iter().all(Option::is_none));
        }
    }

    #[test]
    fn test_zero_divisors_share_the_quotients_values() {
        let a = Int64Array::from(vec![Some(6), Some(7), None, Some(9)]);
        let b = Int64Array::from(vec![Some(3), Some(0), Some(0), Some(-3)]);
        let quotients = binary::<_, _, _, Float64Type>(&a, &b, |a, b| a as f64 / b as f64)
            .expect("same lengths");
        let values = quotients.values().inner().as_ptr();
        // A zero only where the quotient is null anyway: the same array.
        let b_null_zero = Int64Array::from(vec![Some(3), Some(1), Some(0), Some(-3)]);
        let same = without_zero_divisors(quotients.clone(), &b_null_zero, OnZero::Fail, |b| b == 0)
            .expect("no zero in a valid row");
        assert_eq!(same.values().inner().as_ptr(), values);
        assert_eq!(same.nulls(), quotients.nulls());
        // A zero in a valid row: a new validity bitmap over the same values.
        let nulled =
            without_zero_divisors(quotients.clone(), &b, OnZero::Null, |b| b == 0).expect("null");
        assert_eq!(nulled.values().inner().as_ptr(), values);
        assert_eq!(
            nulled.iter().collect::<Vec<_>>(),
            vec![Some(2.0), None, None, Some(-3.0)]
        );
        assert!(matches!(
            without_zero_divisors(quotients, &b, OnZero::Fail, |b| b == 0),
            Err(ArrowError::DivideByZero)
        ));
    }

    #[test]
    fn test_float_division_by_zero_and_negative_zero() {
        let column = |v: Vec<Option<f64>>| Value::Array(Arc::new(Float64Array::from(v)));
        let scalar = |v: f64| Value::Scalar(Arc::new(Float64Array::from(vec![v])));
        let a = column(vec![Some(1.0), Some(f64::NAN), None]);
        for zero in [
            scalar(0.0),
            scalar(-0.0),
            column(vec![Some(2.0), Some(-0.0), Some(1.0)]),
        ] {
            assert!(float_true_div(&a, &zero, OnZero::Fail).is_err());
            assert!(float_floor_div(&a, &zero).is_err());
            assert!(float_mod(&a, &zero).is_err());
            assert!(float_true_div(&a, &zero, OnZero::Null).is_ok());
        }
        let got = float_true_div(
            &a,
            &column(vec![Some(2.0), Some(-0.0), Some(0.0)]),
            OnZero::Null,
        )
        .expect("null");
        let Value::Array(got) = got else {
            panic!("a column divided by a column is a column");
        };
        let got: Vec<_> = got.as_primitive::<Float64Type>().iter().collect();
        assert_eq!(got, vec![Some(0.5), None, None]);
    }

    #[test]
    fn test_python_float_mod() {
        assert_eq!(py_float_mod(-7.5, 2.0), 0.5);
        assert_eq!(py_float_mod(7.5, -2.0), -0.5);
        assert!(py_float_mod(-3.0, 3.0).is_sign_positive());
        assert!(py_float_mod(3.0, -3.0).is_sign_negative());
        assert!(py_float_mod(1.0, 0.0).is_nan());
    }

    #[test]
    fn test_kleene_with_null_literal() {
        let a = BooleanArray::from(vec![Some(true), Some(false), None]);
        let and = kleene_with_scalar(BinaryOp::And, &a, None);
        assert_eq!(and, BooleanArray::from(vec![None, Some(false), None]));
        let or = kleene_with_scalar(BinaryOp::Or, &a, None);
        assert_eq!(or, BooleanArray::from(vec![Some(true), None, None]));
        let and = kleene_with_scalar(BinaryOp::And, &a, Some(false));
        assert_eq!(and, BooleanArray::from(vec![false, false, false]));
        let or = kleene_with_scalar(BinaryOp::Or, &a, Some(true));
        assert_eq!(or, BooleanArray::from(vec![true, true, true]));
        assert_eq!(
            kleene_scalars(BinaryOp::And, None, Some(false)),
            Some(false)
        );
        assert_eq!(kleene_scalars(BinaryOp::Or, None, Some(false)), None);
    }

    #[test]
    fn test_broadcast_types() {
        let s: ArrayRef = Arc::new(StringArray::from(vec!["x"]));
        let b = broadcast(&s, 3).expect("broadcast");
        assert_eq!(
            b.as_string::<i32>().iter().collect::<Vec<_>>(),
            vec![Some("x"); 3]
        );
        let n = new_null_array(&DataType::Int64, 1);
        let b = broadcast(&n, 2).expect("broadcast");
        assert_eq!(
            (b.len(), b.null_count(), b.data_type()),
            (2, 2, &DataType::Int64)
        );
        let d: ArrayRef = Arc::new(arrow::array::Date32Array::from(vec![5]));
        let b = broadcast(&d, 2).expect("broadcast");
        assert_eq!(
            b.as_primitive::<arrow::datatypes::Date32Type>()
                .values()
                .to_vec(),
            vec![5, 5]
        );
    }
}
