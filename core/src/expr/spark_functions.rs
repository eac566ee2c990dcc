//! The few Spark functions neither DataFusion nor `datafusion-spark` has
//! with Spark's semantics, written as DataFusion scalar functions so they
//! resolve, type-check and evaluate like the library's (`function.rs`;
//! DESIGN.md "Expressions"):
//!
//! * `ln`, `log10`, `log2`, `log([base,] x)`: Spark's logarithms are null
//!   for zero and negative input (DataFusion's give `-inf` and `NaN`), and
//!   Spark's one-argument `log` is the natural logarithm, not base 10;
//! * `sqrt`: NaN for negative input (DataFusion's fails the batch);
//! * `regexp_extract(s, pattern[, group])`: group 1 by default, the empty
//!   string where the pattern does not match, null for null input;
//! * `hash(...)`: Spark's Murmur3 x86 32-bit row hash with seed 42, null
//!   arguments skipped, so results equal Spark's for the same values;
//! * `md5(s)`: DataFusion's, as a `string` (Arrow `Utf8`) like Spark's and
//!   every other string function here; DataFusion's gives `Utf8View`, which
//!   a sink of Spark's types (`SparkTableSink`) refuses.
//!
//! Patterns (compiled once per task thread, `spark_regex.rs`) use the Rust
//! `regex` syntax, which agrees with Java's for the
//! common constructs (classes, groups, anchors, quantifiers) but has no
//! look-around or back-references: such a pattern is an error naming it.

use std::sync::Arc;

use arrow::array::{
    new_null_array, Array, ArrayRef, AsArray, Float64Array, Int32Array, StringArray, StringBuilder,
};
use arrow::datatypes::{DataType, Float64Type, Int64Type};
use datafusion_common::{exec_err, Result, ScalarValue};
use datafusion_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, TypeSignature,
    Volatility,
};

use super::spark_regex::{Pattern, PatternCache};

/// The functions of this module.
pub(super) fn functions() -> Vec<Arc<ScalarUDF>> {
    let log =
        |name: &'static str, base: Base| Arc::new(ScalarUDF::from(SparkLogarithm::new(name, base)));
    vec![
        log("ln", Base::E),
        log("log10", Base::Ten),
        log("log2", Base::Two),
        log("log", Base::FirstArgument),
        Arc::new(ScalarUDF::from(SparkSqrt::new())),
        Arc::new(ScalarUDF::from(RegexpExtract::new())),
        Arc::new(ScalarUDF::from(SparkHash::new())),
    ]
    .into_iter()
    .chain(SparkMd5::new().map(|m| Arc::new(ScalarUDF::from(m))))
    .collect()
}

/// Spark's `md5`: DataFusion's hex digest, returned as `Utf8`.
#[derive(Debug, PartialEq, Eq, Hash)]
struct SparkMd5 {
    inner: Arc<ScalarUDF>,
}

impl SparkMd5 {
    fn new() -> Option<Self> {
        let inner = datafusion_functions::all_default_functions()
            .into_iter()
            .find(|f| f.name() == "md5")?;
        Some(SparkMd5 { inner })
    }
}

impl ScalarUDFImpl for SparkMd5 {
    fn name(&self) -> &str {
        "md5"
    }

    fn signature(&self) -> &Signature {
        self.inner.signature()
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        self.inner.coerce_types(arg_types)
    }

    fn invoke_with_args(&self, mut args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        // DataFusion's md5 checks (in debug builds) that it returns the
        // type its caller expects: its own.
        let inner = args
            .return_field
            .as_ref()
            .clone()
            .with_data_type(DataType::Utf8View);
        args.return_field = Arc::new(inner);
        match self.inner.invoke_with_args(args)? {
            ColumnarValue::Array(a) => Ok(ColumnarValue::Array(arrow::compute::cast(
                &a,
                &DataType::Utf8,
            )?)),
            ColumnarValue::Scalar(v) => Ok(ColumnarValue::Scalar(v.cast_to(&DataType::Utf8)?)),
        }
    }
}

/// The arguments as arrays of `rows` values.
pub(super) fn arrays(args: &[ColumnarValue], rows: usize) -> Result<Vec<ArrayRef>> {
    args.iter()
        .map(|a| a.to_array(rows))
        .collect::<Result<Vec<_>>>()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Base {
    E,
    Ten,
    Two,
    /// `log(base, x)`; with one argument the natural logarithm.
    FirstArgument,
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct SparkLogarithm {
    name: &'static str,
    base: Base,
    signature: Signature,
}

impl SparkLogarithm {
    fn new(name: &'static str, base: Base) -> Self {
        let one = TypeSignature::Exact(vec![DataType::Float64]);
        let signature = if base == Base::FirstArgument {
            let two = TypeSignature::Exact(vec![DataType::Float64, DataType::Float64]);
            Signature::one_of(vec![one, two], Volatility::Immutable)
        } else {
            Signature::one_of(vec![one], Volatility::Immutable)
        };
        SparkLogarithm {
            name,
            base,
            signature,
        }
    }
}

impl ScalarUDFImpl for SparkLogarithm {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Float64)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let arrays = arrays(&args.args, args.number_rows)?;
        let positive = |v: f64| (v > 0.0).then_some(v);
        let out: Float64Array = match (self.base, arrays.as_slice()) {
            (_, [x]) => {
                let log = match self.base {
                    Base::Ten => f64::log10,
                    Base::Two => f64::log2,
                    Base::E | Base::FirstArgument => f64::ln,
                };
                x.as_primitive::<Float64Type>()
                    .iter()
                    .map(|v| v.and_then(positive).map(log))
                    .collect()
            }
            (Base::FirstArgument, [base, x]) => base
                .as_primitive::<Float64Type>()
                .iter()
                .zip(x.as_primitive::<Float64Type>().iter())
                .map(
                    |(b, v)| match (b.and_then(positive), v.and_then(positive)) {
                        (Some(b), Some(v)) => Some(v.ln() / b.ln()),
                        _ => None,
                    },
                )
                .collect(),
            _ => return exec_err!("{} takes one or two arguments", self.name),
        };
        Ok(ColumnarValue::Array(Arc::new(out)))
    }
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct SparkSqrt {
    signature: Signature,
}

impl SparkSqrt {
    fn new() -> Self {
        SparkSqrt {
            signature: Signature::exact(vec![DataType::Float64], Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for SparkSqrt {
    fn name(&self) -> &str {
        "sqrt"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Float64)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let arrays = arrays(&args.args, args.number_rows)?;
        let [x] = arrays.as_slice() else {
            return exec_err!("sqrt takes one argument");
        };
        let out = x
            .as_primitive::<Float64Type>()
            .unary::<_, Float64Type>(f64::sqrt);
        Ok(ColumnarValue::Array(Arc::new(out)))
    }
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct RegexpExtract {
    signature: Signature,
}

impl RegexpExtract {
    fn new() -> Self {
        RegexpExtract {
            signature: Signature::one_of(
                vec![
                    TypeSignature::Exact(vec![DataType::Utf8, DataType::Utf8]),
                    TypeSignature::Exact(vec![DataType::Utf8, DataType::Utf8, DataType::Int64]),
                ],
                Volatility::Immutable,
            ),
        }
    }
}

impl ScalarUDFImpl for RegexpExtract {
    fn name(&self) -> &str {
        "regexp_extract"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let rows = args.number_rows;
        // The usual call: a literal pattern and group over a column, matched
        // with one compiled pattern and no per-row lookups.
        match args.args.as_slice() {
            [ColumnarValue::Array(strings), ColumnarValue::Scalar(pattern), rest @ ..]
                if rest.iter().all(|g| matches!(g, ColumnarValue::Scalar(_))) =>
            {
                let group = match rest.first() {
                    Some(ColumnarValue::Scalar(ScalarValue::Int64(g))) => *g,
                    None => Some(1),
                    Some(other) => {
                        return exec_err!("regexp_extract: group {other:?} is not a bigint")
                    }
                };
                let ScalarValue::Utf8(pattern) = pattern else {
                    return exec_err!("regexp_extract: pattern {pattern:?} is not a string");
                };
                let out = match (pattern, group) {
                    (Some(pattern), Some(group)) => {
                        extract_column(strings.as_string::<i32>(), pattern, group)?
                    }
                    _ => new_null_array(&DataType::Utf8, strings.len()),
                };
                Ok(ColumnarValue::Array(out))
            }
            _ => extract_rows(&arrays(&args.args, rows)?, rows),
        }
    }
}

/// The index of group `group` of `pattern`, or the error Spark gives for a
/// group the pattern does not have.
fn group_index(compiled: &Pattern, pattern: &str, group: i64) -> Result<usize> {
    let group_count = compiled.groups();
    match usize::try_from(group).ok().filter(|g| *g <= group_count) {
        Some(index) => Ok(index),
        None => exec_err!(
            "regexp_extract: the pattern '{pattern}' has {group_count} groups, \
             but group {group} was asked for"
        ),
    }
}

/// `regexp_extract` of every value of `strings` with one pattern and group.
fn extract_column(strings: &StringArray, pattern: &str, group: i64) -> Result<ArrayRef> {
    // As row by row: the pattern and the group are checked on the first
    // value that is not null.
    if strings.null_count() == strings.len() {
        return Ok(new_null_array(&DataType::Utf8, strings.len()));
    }
    let compiled = Pattern::get("regexp_extract", pattern)?;
    let index = group_index(&compiled, pattern, group)?;
    let mut searcher = compiled.searcher();
    // The extracts are parts of the values: the values' size bounds theirs.
    let mut out = StringBuilder::with_capacity(strings.len(), strings.value_data().len());
    for value in strings.iter() {
        match value {
            Some(value) => {
                let found = compiled.extract(&mut searcher, value, index);
                out.append_value(found.unwrap_or(""));
            }
            None => out.append_null(),
        }
    }
    Ok(Arc::new(out.finish()))
}

/// `regexp_extract` with a pattern or group that may change from row to row.
fn extract_rows(arrays: &[ArrayRef], rows: usize) -> Result<ColumnarValue> {
    let (strings, patterns) = (arrays[0].as_string::<i32>(), arrays[1].as_string::<i32>());
    let groups = arrays.get(2).map(|g| g.as_primitive::<Int64Type>());
    let mut out = StringBuilder::with_capacity(rows, strings.value_data().len());
    let mut compiled = PatternCache::default();
    let mut searcher = None;
    for row in 0..rows {
        let group = match groups {
            Some(g) if g.is_null(row) => None,
            Some(g) => Some(g.value(row)),
            None => Some(1),
        };
        let (Some(group), false, false) = (group, strings.is_null(row), patterns.is_null(row))
        else {
            out.append_null();
            continue;
        };
        let pattern = patterns.value(row);
        let (regex, fresh) = compiled.get("regexp_extract", pattern)?;
        if fresh {
            searcher = Some(regex.searcher());
        }
        let Some(searcher) = searcher.as_mut() else {
            return exec_err!("regexp_extract: no compiled pattern");
        };
        let index = group_index(regex, pattern, group)?;
        let found = regex.extract(searcher, strings.value(row), index);
        out.append_value(found.unwrap_or(""));
    }
    Ok(ColumnarValue::Array(Arc::new(out.finish())))
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct SparkHash {
    signature: Signature,
}

impl SparkHash {
    fn new() -> Self {
        SparkHash {
            signature: Signature::variadic_any(Volatility::Immutable),
        }
    }
}

/// Spark's seed for `hash`.
const SPARK_HASH_SEED: u32 = 42;

impl ScalarUDFImpl for SparkHash {
    fn name(&self) -> &str {
        "hash"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Int32)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let rows = args.number_rows;
        let mut hashes = vec![SPARK_HASH_SEED; rows];
        for array in arrays(&args.args, rows)? {
            murmur3::hash_column(&array, &mut hashes)?;
        }
        let out: Int32Array = hashes.into_iter().map(|h| h as i32).collect();
        Ok(ColumnarValue::Array(Arc::new(out)))
    }
}

/// Spark's Murmur3 x86 32-bit (`org.apache.spark.unsafe.hash.Murmur3_x86_32`),
/// including its way of hashing the bytes after the last whole 4-byte word
/// (each as a sign-extended int of its own, unlike the reference
/// algorithm).
mod murmur3 {
    use arrow::array::{Array, ArrayRef, AsArray};
    use arrow::datatypes::{
        DataType, Date32Type, Float32Type, Float64Type, Int16Type, Int32Type, Int64Type, Int8Type,
        TimestampMicrosecondType, UInt16Type, UInt32Type, UInt8Type,
    };
    use datafusion_common::{exec_err, Result};

    const C1: u32 = 0xcc9e_2d51;
    const C2: u32 = 0x1b87_3593;

    fn mix_k1(k1: u32) -> u32 {
        k1.wrapping_mul(C1).rotate_left(15).wrapping_mul(C2)
    }

    fn mix_h1(h1: u32, k1: u32) -> u32 {
        (h1 ^ k1)
            .rotate_left(13)
            .wrapping_mul(5)
            .wrapping_add(0xe654_6b64)
    }

    fn fmix(mut h1: u32, length: u32) -> u32 {
        h1 ^= length;
        h1 ^= h1 >> 16;
        h1 = h1.wrapping_mul(0x85eb_ca6b);
        h1 ^= h1 >> 13;
        h1 = h1.wrapping_mul(0xc2b2_ae35);
        h1 ^ (h1 >> 16)
    }

    pub(super) fn hash_int(input: u32, seed: u32) -> u32 {
        fmix(mix_h1(seed, mix_k1(input)), 4)
    }

    pub(super) fn hash_long(input: u64, seed: u32) -> u32 {
        let h1 = mix_h1(seed, mix_k1(input as u32));
        fmix(mix_h1(h1, mix_k1((input >> 32) as u32)), 8)
    }

    pub(super) fn hash_bytes(bytes: &[u8], seed: u32) -> u32 {
        let mut h1 = seed;
        let mut words = bytes.chunks_exact(4);
        for word in &mut words {
            h1 = mix_h1(
                h1,
                mix_k1(u32::from_le_bytes([word[0], word[1], word[2], word[3]])),
            );
        }
        for &byte in words.remainder() {
            h1 = mix_h1(h1, mix_k1(i32::from(byte as i8) as u32));
        }
        fmix(h1, bytes.len() as u32)
    }

    fn hash_double(v: f64, seed: u32) -> u32 {
        // -0.0 hashes as 0.0 and every NaN as Java's canonical NaN.
        let bits = if v == 0.0 {
            0
        } else if v.is_nan() {
            0x7ff8_0000_0000_0000
        } else {
            v.to_bits()
        };
        hash_long(bits, seed)
    }

    fn hash_float(v: f32, seed: u32) -> u32 {
        let bits = if v == 0.0 {
            0
        } else if v.is_nan() {
            0x7fc0_0000
        } else {
            v.to_bits()
        };
        hash_int(bits, seed)
    }

    /// Updates `hashes` (one per row) with the values of `array`, leaving
    /// a row's hash unchanged where its value is null.
    pub(super) fn hash_column(array: &ArrayRef, hashes: &mut [u32]) -> Result<()> {
        macro_rules! each {
            ($values:expr, $hash:expr) => {
                for (h, v) in hashes.iter_mut().zip($values) {
                    if let Some(v) = v {
                        *h = $hash(v, *h);
                    }
                }
            };
        }
        match array.data_type() {
            DataType::Null => {}
            DataType::Boolean => each!(array.as_boolean().iter(), |v: bool, h| hash_int(
                u32::from(v),
                h
            )),
            DataType::Int8 => each!(array.as_primitive::<Int8Type>().iter(), |v: i8, h| {
                hash_int(i32::from(v) as u32, h)
            }),
            DataType::Int16 => each!(array.as_primitive::<Int16Type>().iter(), |v: i16, h| {
                hash_int(i32::from(v) as u32, h)
            }),
            DataType::Int32 => each!(array.as_primitive::<Int32Type>().iter(), |v: i32, h| {
                hash_int(v as u32, h)
            }),
            DataType::UInt8 => each!(array.as_primitive::<UInt8Type>().iter(), |v: u8, h| {
                hash_int(u32::from(v), h)
            }),
            DataType::UInt16 => each!(array.as_primitive::<UInt16Type>().iter(), |v: u16, h| {
                hash_int(u32::from(v), h)
            }),
            DataType::Date32 => each!(array.as_primitive::<Date32Type>().iter(), |v: i32, h| {
                hash_int(v as u32, h)
            }),
            DataType::Int64 => each!(array.as_primitive::<Int64Type>().iter(), |v: i64, h| {
                hash_long(v as u64, h)
            }),
            DataType::UInt32 => each!(array.as_primitive::<UInt32Type>().iter(), |v: u32, h| {
                hash_long(u64::from(v), h)
            }),
            DataType::Timestamp(arrow::datatypes::TimeUnit::Microsecond, _) => each!(
                array.as_primitive::<TimestampMicrosecondType>().iter(),
                |v: i64, h| hash_long(v as u64, h)
            ),
            DataType::Float32 => each!(array.as_primitive::<Float32Type>().iter(), hash_float),
            DataType::Float64 => each!(array.as_primitive::<Float64Type>().iter(), hash_double),
            DataType::Utf8 => each!(array.as_string::<i32>().iter(), |v: &str, h| hash_bytes(
                v.as_bytes(),
                h
            )),
            DataType::LargeUtf8 => each!(array.as_string::<i64>().iter(), |v: &str, h| {
                hash_bytes(v.as_bytes(), h)
            }),
            DataType::Utf8View => each!(array.as_string_view().iter(), |v: &str, h| {
                hash_bytes(v.as_bytes(), h)
            }),
            DataType::Binary => each!(array.as_binary::<i32>().iter(), hash_bytes),
            DataType::LargeBinary => each!(array.as_binary::<i64>().iter(), hash_bytes),
            other => return exec_err!("hash does not support values of type {other} yet"),
        }
        Ok(())
    }
}
