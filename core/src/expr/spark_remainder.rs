//! Spark's `mod` (SQL's `%`) and `pmod` with Spark's zero divisors
//! (DESIGN.md "Expressions"): a zero divisor (`0`, `0.0` or `-0.0`) makes
//! the row null, or in ANSI mode (`spark.sql.ansi.enabled`) fails with
//! `REMAINDER_BY_ZERO` where the dividend is not null; any other row is
//! `datafusion-spark`'s remainder.
//!
//! `datafusion-spark`'s functions find zeros with Arrow's `eq`, which
//! orders floats totally (`-0.0 != 0.0`), so `x % -0.0` would be `NaN`;
//! and in ANSI mode they leave a zero divisor to Arrow's `rem`, which fails
//! with no error class for integers and gives `NaN` for floats. Here the
//! zeros are found with IEEE equality and nulled before the library's
//! function runs. An integer divisor given as a non-zero literal goes
//! straight to Arrow's `rem` kernel with the divisor as a scalar (the form of
//! the DSL's `%`), not expanded to an array and masked first.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, BooleanArray};
use arrow::buffer::BooleanBuffer;
use arrow::compute::kernels::cmp;
use arrow::compute::nullif;
use arrow::datatypes::{DataType, Float32Type, Float64Type};
use datafusion_common::{exec_err, Result, ScalarValue};
use datafusion_expr::{ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature};

/// The functions of this module.
pub(super) fn functions() -> Vec<Arc<ScalarUDF>> {
    ["mod", "pmod"]
        .into_iter()
        .filter_map(SparkRemainder::new)
        .map(|f| Arc::new(ScalarUDF::from(f)))
        .collect()
}

/// `mod` or `pmod`: `datafusion-spark`'s, with Spark's zero divisors.
#[derive(Debug, PartialEq, Eq, Hash)]
struct SparkRemainder {
    name: &'static str,
    inner: Arc<ScalarUDF>,
}

impl SparkRemainder {
    fn new(name: &'static str) -> Option<Self> {
        let inner = datafusion_spark::all_default_scalar_functions()
            .into_iter()
            .find(|f| f.name() == name)?;
        Some(SparkRemainder { name, inner })
    }

    /// Spark's ANSI error, for the rows of `dividend` whose divisor is zero.
    fn ansi_check(&self, dividend: &ColumnarValue, zero: Option<&BooleanArray>) -> Result<()> {
        let met = match (dividend, zero) {
            (ColumnarValue::Scalar(a), None) => !a.is_null(),
            (ColumnarValue::Array(a), None) => a.null_count() < a.len(),
            (ColumnarValue::Scalar(a), Some(zero)) => !a.is_null() && zero.true_count() > 0,
            (ColumnarValue::Array(a), Some(zero)) => match a.nulls() {
                Some(valid) => (valid.inner() & zero.values()).count_set_bits() > 0,
                None => zero.true_count() > 0,
            },
        };
        if met {
            return exec_err!(
                "[REMAINDER_BY_ZERO] remainder by zero in {} under ANSI mode \
                 (spark.sql.ansi.enabled); without it the value would be null",
                self.name
            );
        }
        Ok(())
    }
}

/// Whether the scalar is a zero of its type (`-0.0` too).
fn scalar_is_zero(value: &ScalarValue) -> Result<bool> {
    Ok(match value {
        ScalarValue::Float64(Some(v)) => *v == 0.0,
        ScalarValue::Float32(Some(v)) => *v == 0.0,
        v if v.is_null() => false,
        v => *v == ScalarValue::new_zero(&v.data_type())?,
    })
}

/// The rows of `divisors` that are valid and zero (`-0.0` too), as a
/// boolean array without nulls; `None` where there is no such row.
fn zero_rows(divisors: &ArrayRef) -> Result<Option<BooleanArray>> {
    let bits = match divisors.data_type() {
        DataType::Float64 => {
            let values = divisors.as_primitive::<Float64Type>().values();
            BooleanBuffer::collect_bool(values.len(), |i| values[i] == 0.0)
        }
        DataType::Float32 => {
            let values = divisors.as_primitive::<Float32Type>().values();
            BooleanBuffer::collect_bool(values.len(), |i| values[i] == 0.0)
        }
        t => {
            let zero = ScalarValue::new_zero(t)?.to_scalar()?;
            cmp::eq(divisors, &zero)?.values().clone()
        }
    };
    let bits = match divisors.nulls() {
        Some(valid) => valid.inner() & &bits,
        None => bits,
    };
    Ok((bits.count_set_bits() > 0).then(|| BooleanArray::new(bits, None)))
}

impl ScalarUDFImpl for SparkRemainder {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        self.inner.signature()
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.inner.return_type(arg_types)
    }

    fn return_field_from_args(
        &self,
        args: datafusion_expr::ReturnFieldArgs,
    ) -> Result<arrow::datatypes::FieldRef> {
        self.inner.return_field_from_args(args)
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        self.inner.coerce_types(arg_types)
    }

    fn invoke_with_args(&self, mut args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let ansi = args.config_options.execution.enable_ansi_mode;
        let [dividend, divisor] = args.args.as_slice() else {
            return exec_err!("{} takes two arguments", self.name);
        };
        match divisor {
            ColumnarValue::Scalar(d) if scalar_is_zero(d)? => {
                if ansi {
                    self.ansi_check(dividend, None)?;
                }
                let null = ScalarValue::try_from(args.return_field.data_type())?;
                return Ok(ColumnarValue::Scalar(null));
            }
            ColumnarValue::Scalar(d) => {
                let t = d.data_type();
                if let (ColumnarValue::Array(left), "mod") = (dividend, self.name) {
                    if !d.is_null() && t.is_integer() && *left.data_type() == t {
                        let out = arrow::compute::kernels::numeric::rem(left, &d.to_scalar()?)?;
                        return Ok(ColumnarValue::Array(out));
                    }
                }
            }
            ColumnarValue::Array(d) => {
                if let Some(zero) = zero_rows(d)? {
                    if ansi {
                        self.ansi_check(dividend, Some(&zero))?;
                    }
                    args.args[1] = ColumnarValue::Array(nullif(d, &zero)?);
                }
            }
        }
        self.inner.invoke_with_args(args)
    }
}

#[cfg(test)]
mod tests {
    use arrow::array::{Float64Array, Int64Array};
    use arrow::datatypes::{Field, Int64Type};
    use datafusion_common::config::ConfigOptions;

    use super::*;

    fn call(
        name: &'static str,
        l: ColumnarValue,
        r: ColumnarValue,
        ansi: bool,
    ) -> Result<ArrayRef> {
        let f = SparkRemainder::new(name).expect("in datafusion-spark");
        let t = l.data_type();
        let mut options = ConfigOptions::new();
        options.execution.enable_ansi_mode = ansi;
        let rows = match (&l, &r) {
            (ColumnarValue::Array(a), _) | (_, ColumnarValue::Array(a)) => a.len(),
            _ => 1,
        };
        let field = |n: &str| Arc::new(Field::new(n, t.clone(), true));
        let out = f.invoke_with_args(ScalarFunctionArgs {
            args: vec![l, r],
            arg_fields: vec![field("a"), field("b")],
            number_rows: rows,
            return_field: field("out"),
            config_options: Arc::new(options),
        })?;
        out.to_array(rows)
    }

    fn ints(values: &[Option<i64>]) -> ColumnarValue {
        ColumnarValue::Array(Arc::new(Int64Array::from(values.to_vec())))
    }

    fn floats(values: &[Option<f64>]) -> ColumnarValue {
        ColumnarValue::Array(Arc::new(Float64Array::from(values.to_vec())))
    }

    #[test]
    fn test_zero_divisors_are_null_as_in_spark() {
        // Spark: -7 % 2 = -1, pmod(-7, 2) = 1, x % 0 and pmod(x, 0) are null.
        let a = ints(&[Some(-7), Some(7), None, Some(5)]);
        let b = ints(&[Some(2), Some(0), Some(0), Some(-3)]);
        let got = call("mod", a.clone(), b.clone(), false).expect("null, no error");
        let got: Vec<_> = got.as_primitive::<Int64Type>().iter().collect();
        assert_eq!(got, vec![Some(-1), None, None, Some(2)]);
        let got = call("pmod", a.clone(), b, false).expect("null, no error");
        let got: Vec<_> = got.as_primitive::<Int64Type>().iter().collect();
        assert_eq!(got, vec![Some(1), None, None, Some(2)]);
        let zero = ColumnarValue::Scalar(ScalarValue::Int64(Some(0)));
        for name in ["mod", "pmod"] {
            let got = call(name, a.clone(), zero.clone(), false).expect("null");
            assert_eq!(got.null_count(), 4, "{name}");
        }
        // -0.0 is a zero divisor as 0.0 is (Java's `==`), NaN is not.
        let f = floats(&[Some(7.5), Some(7.5), Some(7.5), Some(-7.5)]);
        let g = floats(&[Some(0.0), Some(-0.0), Some(f64::NAN), Some(2.0)]);
        for name in ["mod", "pmod"] {
            let got = call(name, f.clone(), g.clone(), false).expect("null");
            let got: Vec<_> = got.as_primitive::<Float64Type>().iter().collect();
            assert_eq!(&got[..2], &[None, None], "{name}");
            assert!(got[2].expect("valid").is_nan(), "{name}");
            let want = if name == "mod" { -1.5 } else { 0.5 };
            assert_eq!(got[3], Some(want), "{name}");
            let negative_zero = ColumnarValue::Scalar(ScalarValue::Float64(Some(-0.0)));
            let got = call(name, f.clone(), negative_zero, false).expect("null");
            assert_eq!(got.null_count(), 4, "{name}");
        }
    }

    #[test]
    fn test_zero_divisors_fail_in_ansi_mode_where_the_dividend_is_valid() {
        let a = ints(&[Some(-7), None, Some(5)]);
        for name in ["mod", "pmod"] {
            for (b, fails) in [
                (ints(&[Some(2), Some(0), Some(-3)]), false),
                (ints(&[Some(2), Some(1), Some(0)]), true),
                (ColumnarValue::Scalar(ScalarValue::Int64(Some(0))), true),
                (ColumnarValue::Scalar(ScalarValue::Int64(None)), false),
            ] {
                match call(name, a.clone(), b, true) {
                    Ok(_) => assert!(!fails, "{name} should fail"),
                    Err(e) => {
                        assert!(fails, "{name}: {e}");
                        assert!(e.to_string().contains("[REMAINDER_BY_ZERO]"), "{e}");
                    }
                }
            }
            let f = floats(&[Some(1.0), Some(2.0)]);
            let err = call(name, f, floats(&[Some(1.0), Some(-0.0)]), true).expect_err("-0.0");
            assert!(err.to_string().contains("[REMAINDER_BY_ZERO]"), "{err}");
            let nothing = ints(&[None, None]);
            let zero = ColumnarValue::Scalar(ScalarValue::Int64(Some(0)));
            assert!(
                call(name, nothing, zero, true).is_ok(),
                "{name}: null dividends"
            );
        }
    }
}
