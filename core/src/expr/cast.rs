//! `CAST(expr AS type)` ([`Expr::Cast`]) with Spark type names and Spark's
//! non-ANSI semantics (DESIGN.md "Expressions"): a value that does not
//! convert is null, never a failed job. In ANSI mode (`Expr::with_ansi`,
//! Spark's `spark.sql.ansi.enabled`) such a value, a string with a fraction
//! cast to an integer, and an integer that would wrap fail instead.
//!
//! Arrow's safe cast does most of the work; where Spark's rules differ from
//! it, this module does what Spark does first:
//!
//! * strings are trimmed of leading and trailing whitespace and control
//!   characters (code points up to U+0020) before they are parsed as a
//!   number, boolean, date or timestamp (`cast(' 7 ' as int)` is 7);
//! * a string cast to an integer type may have a fraction, which is
//!   dropped (`cast('1.5' as int)` is 1), but no exponent (`'1e3'` is
//!   null); a value out of the type's range is null;
//! * a number narrowed to a smaller integer type wraps like a JVM primitive
//!   cast (`cast(3000000000L as int)` is -1294967296), and a floating-point
//!   value converts by truncation toward zero, saturating at the bounds of
//!   `int`/`bigint`, with NaN giving 0 (`tinyint` and `smallint` go through
//!   `int` and wrap from there, as on the JVM).

use std::sync::Arc;

use arrow::array::builder::NullBufferBuilder;
use arrow::array::{Array, ArrayRef, AsArray, PrimitiveArray, StringArray};
use arrow::compute::{cast_with_options, CastOptions};
use arrow::datatypes::{
    ArrowNativeType, ArrowPrimitiveType, DataType, Float64Type, Int16Type, Int32Type, Int64Type,
    Int8Type, TimeUnit,
};
use arrow::error::ArrowError;

use super::type_class::{is_string, numeric_class, NumClass};
use super::value::Value;
use super::{Expr, ExprError, ExprResult};

/// A Spark SQL type, by name, and the Arrow type eddyline represents it
/// with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SparkType {
    name: String,
    data_type: DataType,
    /// Whether a cast to the type is ANSI (`spark.sql.ansi.enabled`): a
    /// value that does not convert fails instead of becoming null.
    ansi: bool,
}

impl SparkType {
    /// Parses a Spark type name (case-insensitive): `boolean`, `tinyint`
    /// (`byte`), `smallint` (`short`), `int` (`integer`), `bigint` (`long`),
    /// `float` (`real`), `double`, `string` (`varchar(n)`, `char(n)`),
    /// `binary`, `date`, `timestamp` (microseconds, UTC), `timestamp_ntz`,
    /// `decimal[(p[,s])]` (`dec`, `numeric`; default precision 10, scale
    /// 0).
    pub fn parse(name: &str) -> ExprResult<Self> {
        let spelled = name.trim().to_ascii_lowercase();
        let unknown = || {
            ExprError::schema(format!(
                "unknown type '{name}' in a cast; expected a Spark type name such as \
                 int, bigint, double, string, boolean, date, timestamp or decimal(10,2)"
            ))
        };
        let (base, params) = match spelled.split_once('(') {
            Some((base, rest)) => {
                let params = rest.strip_suffix(')').ok_or_else(unknown)?;
                let params = params
                    .split(',')
                    .map(|p| p.trim().parse::<u8>().map_err(|_| unknown()))
                    .collect::<ExprResult<Vec<u8>>>()?;
                (base.trim(), params)
            }
            None => (spelled.as_str(), Vec::new()),
        };
        let data_type = match (base, params.as_slice()) {
            ("boolean", []) => DataType::Boolean,
            ("tinyint" | "byte", []) => DataType::Int8,
            ("smallint" | "short", []) => DataType::Int16,
            ("int" | "integer", []) => DataType::Int32,
            ("bigint" | "long", []) => DataType::Int64,
            ("float" | "real", []) => DataType::Float32,
            ("double", []) => DataType::Float64,
            ("string", []) | ("varchar" | "char", [_]) => DataType::Utf8,
            ("binary", []) => DataType::Binary,
            ("date", []) => DataType::Date32,
            ("timestamp", []) => DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            ("timestamp_ntz", []) => DataType::Timestamp(TimeUnit::Microsecond, None),
            ("decimal" | "dec" | "numeric", []) => DataType::Decimal128(10, 0),
            ("decimal" | "dec" | "numeric", [p]) => decimal(*p, 0).ok_or_else(unknown)?,
            ("decimal" | "dec" | "numeric", [p, s]) => decimal(*p, *s).ok_or_else(unknown)?,
            _ => return Err(unknown()),
        };
        Ok(SparkType {
            name: spelled,
            data_type,
            ansi: false,
        })
    }

    /// The type name as it was spelled (lower case).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The Arrow type of the cast's result.
    pub fn data_type(&self) -> &DataType {
        &self.data_type
    }

    /// The type cast to in ANSI mode or not.
    pub(super) fn with_ansi(self, ansi: bool) -> Self {
        SparkType { ansi, ..self }
    }
}

fn decimal(precision: u8, scale: u8) -> Option<DataType> {
    (1..=38)
        .contains(&precision)
        .then_some(())
        .filter(|()| scale <= precision)
        .map(|()| DataType::Decimal128(precision, scale as i8))
}

/// Whether a value of type `from` can be cast to `to` at all.
pub(super) fn check(from: &DataType, to: &SparkType, cast: &Expr) -> ExprResult<DataType> {
    if matches!(from, DataType::Null) || arrow::compute::can_cast_types(from, to.data_type()) {
        Ok(to.data_type().clone())
    } else {
        Err(ExprError::schema(format!(
            "cannot cast a value of type {from} to {} in {cast}",
            to.name()
        )))
    }
}

/// Evaluates `CAST(value AS to)`.
pub(super) fn eval(value: Value, to: &SparkType, cast: &Expr) -> ExprResult<Value> {
    check(value.data_type(), to, cast)?;
    let failed = |e: ArrowError| ExprError::operator(format!("failed to evaluate {cast}: {e}"));
    let (array, single) = match value {
        Value::Array(a) => (a, false),
        Value::Scalar(a) => (a, true),
    };
    let out = spark_cast(&array, to.data_type()).map_err(failed)?;
    if to.ansi {
        ansi_check(&array, &out, to, cast)?;
    }
    Ok(if single {
        Value::Scalar(out)
    } else {
        Value::Array(out)
    })
}

fn spark_cast(array: &ArrayRef, to: &DataType) -> Result<ArrayRef, ArrowError> {
    let from = array.data_type();
    if from == to {
        return Ok(Arc::clone(array));
    }
    let safe = CastOptions::default();
    let int_target = matches!(
        to,
        DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64
    );
    if is_string(from) && int_target {
        let strings = cast_with_options(array, &DataType::Utf8, &safe)?;
        let parsed = parse_integers(strings.as_string::<i32>());
        // Out of the target's range is null, like Spark's UTF8String.toInt.
        return cast_with_options(&parsed, to, &safe);
    }
    if is_string(from) && !is_string(to) && !matches!(to, DataType::Binary) {
        let trimmed = trim_controls(array)?;
        return cast_with_options(&trimmed, to, &safe);
    }
    match numeric_class(from) {
        Some(NumClass::Int) if int_target && !matches!(from, DataType::UInt64) => {
            let wide = cast_with_options(array, &DataType::Int64, &safe)?;
            let wide = wide.as_primitive::<Int64Type>();
            Ok(match to {
                DataType::Int8 => wrap::<Int64Type, Int8Type>(wide, |v| v as i8),
                DataType::Int16 => wrap::<Int64Type, Int16Type>(wide, |v| v as i16),
                DataType::Int32 => wrap::<Int64Type, Int32Type>(wide, |v| v as i32),
                _ => Arc::new(wide.clone()),
            })
        }
        Some(NumClass::Float) if int_target => {
            let wide = cast_with_options(array, &DataType::Float64, &safe)?;
            let wide = wide.as_primitive::<Float64Type>();
            // Rust's float-to-int `as` truncates, saturates and maps NaN to
            // 0, exactly like the JVM's d2i/d2l.
            Ok(match to {
                DataType::Int8 => wrap::<Float64Type, Int8Type>(wide, |v| (v as i32) as i8),
                DataType::Int16 => wrap::<Float64Type, Int16Type>(wide, |v| (v as i32) as i16),
                DataType::Int32 => wrap::<Float64Type, Int32Type>(wide, |v| v as i32),
                _ => wrap::<Float64Type, Int64Type>(wide, |v| v as i64),
            })
        }
        _ => cast_with_options(array, to, &safe),
    }
}

fn wrap<I: ArrowPrimitiveType, O: ArrowPrimitiveType>(
    array: &PrimitiveArray<I>,
    op: impl Fn(I::Native) -> O::Native,
) -> ArrayRef {
    Arc::new(array.unary::<_, O>(op))
}

/// [`parse_spark_integer`] of every value of `strings`, straight from the
/// offsets and bytes of the array into the result's buffers.
fn parse_integers(strings: &StringArray) -> PrimitiveArray<Int64Type> {
    let offsets = strings.value_offsets();
    let data = strings.value_data();
    let mut values = Vec::with_capacity(strings.len());
    let mut valid = NullBufferBuilder::new(strings.len());
    for (row, bounds) in offsets.windows(2).enumerate() {
        let parsed = if strings.is_null(row) {
            None
        } else {
            // Offsets of a valid array lie within its data, in order.
            let (start, end) = (bounds[0].as_usize(), bounds[1].as_usize());
            data.get(start..end).and_then(parse_spark_integer)
        };
        values.push(parsed.unwrap_or(0));
        valid.append(parsed.is_some());
    }
    PrimitiveArray::new(values.into(), valid.finish())
}

/// Parses an integer the way Spark's non-ANSI cast does
/// (`UTF8String.toLong`): surrounding characters up to U+0020 trimmed, an
/// optional sign, at least one digit, optionally a `.` and more digits
/// (dropped); `None` when malformed or out of the `bigint` range.
///
/// Works on the UTF-8 bytes: the characters up to U+0020 are exactly the
/// bytes up to 0x20, and every byte of a longer character is 0x80 or more.
fn parse_spark_integer(s: &[u8]) -> Option<i64> {
    let is_space = |b: &u8| *b <= b' ';
    let first = s.iter().position(|b| !is_space(b))?;
    let last = s.iter().rposition(|b| !is_space(b))?;
    let s = &s[first..=last];
    let (negative, digits) = match s[0] {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let (whole, fraction) = match digits.iter().position(|b| *b == b'.') {
        Some(dot) => (&digits[..dot], Some(&digits[dot + 1..])),
        None => (digits, None),
    };
    if !fraction.is_none_or(|f| f.iter().all(u8::is_ascii_digit)) {
        return None;
    }
    if whole.is_empty() && fraction.is_none_or(<[u8]>::is_empty) {
        return None;
    }
    let mut value: i64 = 0;
    for b in whole {
        if !b.is_ascii_digit() {
            return None;
        }
        // Accumulate negatively so i64::MIN parses.
        value = value.checked_mul(10)?.checked_sub(i64::from(b - b'0'))?;
    }
    if negative {
        Some(value)
    } else {
        value.checked_neg()
    }
}

/// The strings of `array` without leading and trailing characters up to
/// U+0020, as Spark trims before parsing (`UTF8String.trimAll`).
fn trim_controls(array: &ArrayRef) -> Result<ArrayRef, ArrowError> {
    let strings = cast_with_options(array, &DataType::Utf8, &CastOptions::default())?;
    let strings = strings.as_string::<i32>();
    let is_space = |c: char| c <= ' ';
    if strings
        .iter()
        .flatten()
        .all(|s| !s.starts_with(is_space) && !s.ends_with(is_space))
    {
        return Ok(Arc::new(strings.clone()));
    }
    let trimmed: StringArray = strings
        .iter()
        .map(|s| s.map(|s| s.trim_matches(is_space)))
        .collect();
    Ok(Arc::new(trimmed))
}

/// ANSI mode (`spark.sql.ansi.enabled`): fails where the non-ANSI cast
/// `output` of `input` lost a value (null for a value that is not) or where
/// an integer target wrapped or saturated, as Spark's ANSI cast fails there.
fn ansi_check(input: &ArrayRef, output: &ArrayRef, to: &SparkType, cast: &Expr) -> ExprResult<()> {
    let from = input.data_type();
    let error = |row: usize| {
        let value = arrow::util::display::array_value_to_string(input, row)
            .unwrap_or_else(|_| "?".to_string());
        ExprError::operator(format!(
            "cannot cast {value:?} ({from}) to {} in {cast} under ANSI mode \
             (spark.sql.ansi.enabled); without it the value would be null",
            to.name()
        ))
    };
    let int_target = matches!(
        to.data_type(),
        DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64
    );
    if int_target && numeric_class(from).is_some() {
        // Arrow's unsafe cast fails exactly where a value is out of range.
        let unsafe_cast = CastOptions {
            safe: false,
            ..CastOptions::default()
        };
        if cast_with_options(input, to.data_type(), &unsafe_cast).is_err() {
            let wrapped = (0..input.len()).find(|&row| {
                input.is_valid(row)
                    && cast_with_options(&input.slice(row, 1), to.data_type(), &unsafe_cast)
                        .is_err()
            });
            return Err(error(wrapped.unwrap_or(0)));
        }
    }
    let strings = (is_string(from) && int_target)
        .then(|| cast_with_options(input, &DataType::Utf8, &CastOptions::default()))
        .transpose()
        .map_err(|e| ExprError::operator(format!("failed to evaluate {cast}: {e}")))?;
    for row in 0..input.len() {
        // Spark's ANSI string-to-integer cast takes no fraction.
        let fraction = strings
            .as_ref()
            .is_some_and(|s| s.is_valid(row) && s.as_string::<i32>().value(row).contains('.'));
        if input.is_valid(row) && (output.is_null(row) || fraction) {
            return Err(error(row));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_parse_from_bytes_as_spark_parses_them() {
        let values = [
            Some("12"),
            Some("\t 12 \n"),
            Some("\u{a0}12"),
            Some("-"),
            Some("."),
            Some("1."),
            Some(".5"),
            Some("-0.9"),
            Some("+7"),
            Some("-9223372036854775808"),
            Some("9223372036854775808"),
            Some("9223372036854775807"),
            Some("١٢"),
            Some("1e3"),
            Some("1.2.3"),
            Some(""),
            None,
            Some("é5"),
        ];
        let strings = StringArray::from(values.to_vec());
        let expected = vec![
            Some(12),
            Some(12),
            None,
            None,
            None,
            Some(1),
            Some(0),
            Some(0),
            Some(7),
            Some(i64::MIN),
            None,
            Some(i64::MAX),
            None,
            None,
            None,
            None,
            None,
            None,
        ];
        let parsed = parse_integers(&strings);
        assert_eq!(parsed.iter().collect::<Vec<_>>(), expected);
        // A slice of the array: offsets that do not start at zero.
        let sliced = parse_integers(&strings.slice(5, 4));
        assert_eq!(sliced.iter().collect::<Vec<_>>(), expected[5..9].to_vec());
    }
}
