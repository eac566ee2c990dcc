//! Spark's array functions that neither DataFusion nor `datafusion-spark`
//! has with Spark's semantics, as DataFusion scalar functions so they
//! resolve, type-check and evaluate like the library's (`function.rs`;
//! DESIGN.md "Expressions"). Structs (`named_struct`, `get_field`) and
//! `array`, `array_contains` are the libraries' own.
//!
//! * `element_at(array, i)`: 1-based, negative counts from the end, null
//!   out of range (Spark's non-ANSI behaviour); index 0 is an error, as in
//!   Spark.
//! * `get_item(array, i)`: 0-based (`col[i]`, Spark's `getItem`), null out
//!   of range and for a negative index.
//! * `split(s, pattern[, limit])`: Java's `String.split` as Spark calls it:
//!   `limit > 0` gives at most `limit` parts (the last holds the rest),
//!   `limit <= 0` every part, trailing empty strings kept; a zero-width
//!   match at the start gives no leading empty part; an empty pattern splits
//!   into characters.
//! * `get_field(struct, name)`: DataFusion's, except that a field of a null
//!   struct is null (DataFusion passes the child's value through).
//! * `size(array)`: `datafusion-spark`'s, -1 for a null array, except in
//!   ANSI mode, where it is null: Spark applies `spark.sql.legacy.sizeOfNull`
//!   only without ANSI mode.
//! * `explode`, `explode_outer`, `posexplode`, `posexplode_outer`:
//!   generators, only valid where a stream
//!   flattens them (`select`, `stream.explode`, see `operator/explode.rs`);
//!   anywhere else they are a type error when the graph is built.
//!
//! The array functions pick one value per row with one `take` over the
//! list's values, never a value at a time.

use std::sync::Arc;

use arrow::array::{
    make_array, Array, ArrayRef, AsArray, GenericListArray, ListBuilder, OffsetSizeTrait,
    StringBuilder, UInt64Array,
};
use arrow::buffer::NullBuffer;
use arrow::compute::{cast, take};
use arrow::datatypes::{DataType, Field, FieldRef, Int64Type};
use datafusion_common::{exec_err, plan_err, Result};
use datafusion_expr::{
    ColumnarValue, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    TypeSignature, Volatility,
};
use regex::Regex;

use super::spark_functions::arrays;
use super::spark_regex::PatternCache;

/// The functions of this module.
pub(super) fn functions() -> Vec<Arc<ScalarUDF>> {
    vec![
        Arc::new(ScalarUDF::from(ElementAt::new("element_at", Base::One))),
        Arc::new(ScalarUDF::from(ElementAt::new("get_item", Base::Zero))),
        Arc::new(ScalarUDF::from(Split::new())),
        Arc::new(ScalarUDF::from(Generator::new("explode"))),
        Arc::new(ScalarUDF::from(Generator::new("explode_outer"))),
        Arc::new(ScalarUDF::from(Generator::new("posexplode"))),
        Arc::new(ScalarUDF::from(Generator::new("posexplode_outer"))),
        Arc::new(ScalarUDF::from(NullsFromInput::get_field())),
        Arc::new(ScalarUDF::from(NullsFromInput::size())),
    ]
}

/// The names of the generator functions.
pub const GENERATORS: [&str; 4] = ["explode", "explode_outer", "posexplode", "posexplode_outer"];

/// The element field of a list type, or an error naming `function`.
fn element_field(function: &str, t: &DataType) -> Result<FieldRef> {
    match t {
        DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) => {
            Ok(Arc::clone(f))
        }
        other => plan_err!("{function} needs an array as its first argument, got {other}"),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Base {
    /// `element_at`: 1-based, negative from the end, 0 an error.
    One,
    /// `get_item`: 0-based, negative null.
    Zero,
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct ElementAt {
    name: &'static str,
    base: Base,
    signature: Signature,
}

impl ElementAt {
    fn new(name: &'static str, base: Base) -> Self {
        ElementAt {
            name,
            base,
            signature: Signature::user_defined(Volatility::Immutable),
        }
    }

    /// The index into the list's values of row `row`'s element `index`, or
    /// None where Spark gives null.
    fn position(&self, start: i64, length: i64, index: i64) -> Result<Option<u64>> {
        let offset = match self.base {
            Base::Zero => (0..length).contains(&index).then_some(index),
            Base::One if index == 0 => {
                return exec_err!("element_at: SQL array indices start at 1, got index 0")
            }
            Base::One if index > 0 => (index <= length).then_some(index - 1),
            Base::One => (-index <= length).then_some(length + index),
        };
        Ok(offset.map(|o| (start + o) as u64))
    }

    fn pick<O: OffsetSizeTrait>(
        &self,
        list: &GenericListArray<O>,
        indices: &ArrayRef,
    ) -> Result<ArrayRef> {
        let indices = indices.as_primitive::<Int64Type>();
        let offsets = list.value_offsets();
        let mut positions = Vec::with_capacity(list.len());
        for row in 0..list.len() {
            if list.is_null(row) || indices.is_null(row) {
                positions.push(None);
                continue;
            }
            let start = offsets[row].as_usize() as i64;
            let length = offsets[row + 1].as_usize() as i64 - start;
            positions.push(self.position(start, length, indices.value(row))?);
        }
        let positions = UInt64Array::from(positions);
        Ok(take(list.values().as_ref(), &positions, None)?)
    }
}

impl ScalarUDFImpl for ElementAt {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        let [array, index] = arg_types else {
            return plan_err!("{} takes two arguments: an array and an index", self.name);
        };
        element_field(self.name, array)?;
        if !index.is_integer() && !index.is_null() {
            return plan_err!("{} needs an integer index, got {index}", self.name);
        }
        let array = match array {
            DataType::FixedSizeList(f, _) => DataType::List(Arc::clone(f)),
            other => other.clone(),
        };
        Ok(vec![array, DataType::Int64])
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        Ok(element_field(self.name, &arg_types[0])?.data_type().clone())
    }

    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<FieldRef> {
        let element = element_field(self.name, args.arg_fields[0].data_type())?;
        Ok(Arc::new(Field::new(
            self.name,
            element.data_type().clone(),
            true,
        )))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let rows = args.number_rows;
        let arrays = arrays(&args.args, rows)?;
        let index = cast(&arrays[1], &DataType::Int64)?;
        let out = match arrays[0].data_type() {
            DataType::List(_) => self.pick(arrays[0].as_list::<i32>(), &index)?,
            DataType::LargeList(_) => self.pick(arrays[0].as_list::<i64>(), &index)?,
            other => return exec_err!("{} needs an array, got {other}", self.name),
        };
        Ok(ColumnarValue::Array(out))
    }
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct Split {
    signature: Signature,
}

impl Split {
    fn new() -> Self {
        Split {
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

fn string_list() -> DataType {
    DataType::List(Arc::new(Field::new("item", DataType::Utf8, true)))
}

/// Java's `Pattern.split(input, limit)` with Spark's handling of `limit`
/// (0 means -1) and of the empty pattern, appending the parts to `out`.
fn java_split(input: &str, regex: &Regex, empty_pattern: bool, limit: i64, out: &mut Parts) {
    if empty_pattern && !input.is_empty() {
        let chars = input.chars().count() as i64;
        let parts = if limit <= 0 || limit > chars {
            chars
        } else {
            limit
        };
        let mut rest = input;
        for _ in 1..parts {
            let width = rest.chars().next().map_or(0, char::len_utf8);
            out.push(&rest[..width]);
            rest = &rest[width..];
        }
        out.push(rest);
        return;
    }
    let limited = limit > 0;
    let mut count: i64 = 0;
    let mut index = 0;
    for m in regex.find_iter(input) {
        if limited && count >= limit - 1 {
            break;
        }
        if index == 0 && m.start() == 0 && m.end() == 0 {
            continue;
        }
        out.push(&input[index..m.start()]);
        count += 1;
        index = m.end();
    }
    out.push(&input[index..]);
}

/// The parts of one row, written straight into the list builder.
struct Parts<'a>(&'a mut ListBuilder<StringBuilder>);

impl Parts<'_> {
    fn push(&mut self, part: &str) {
        self.0.values().append_value(part);
    }
}

impl ScalarUDFImpl for Split {
    fn name(&self) -> &str {
        "split"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(string_list())
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let rows = args.number_rows;
        let arrays = arrays(&args.args, rows)?;
        let (strings, patterns) = (arrays[0].as_string::<i32>(), arrays[1].as_string::<i32>());
        let limits = arrays.get(2).map(|l| l.as_primitive::<Int64Type>());
        let values = StringBuilder::with_capacity(rows, strings.value_data().len());
        let mut out =
            ListBuilder::new(values).with_field(Arc::new(Field::new("item", DataType::Utf8, true)));
        let mut compiled = PatternCache::default();
        for row in 0..rows {
            let limit = match limits {
                Some(l) if l.is_null(row) => None,
                Some(l) => Some(l.value(row)),
                None => Some(-1),
            };
            let (Some(limit), false, false) = (limit, strings.is_null(row), patterns.is_null(row))
            else {
                out.append_null();
                continue;
            };
            let pattern = patterns.value(row);
            let (regex, _) = compiled.get("split", pattern)?;
            java_split(
                strings.value(row),
                regex.regex(),
                pattern.is_empty(),
                limit,
                &mut Parts(&mut out),
            );
            out.append(true);
        }
        Ok(ColumnarValue::Array(Arc::new(out.finish())))
    }
}

/// `explode` / `posexplode` (and `_outer`) outside a place that flattens them.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Generator {
    name: &'static str,
    signature: Signature,
}

impl Generator {
    fn new(name: &'static str) -> Self {
        Generator {
            name,
            signature: Signature::any(1, Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for Generator {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        plan_err!(
            "{} is a generator: it may only be a whole column of select(...) or the \
             argument of stream.explode(...), not part of another expression",
            self.name
        )
    }

    fn invoke_with_args(&self, _args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        exec_err!(
            "{} is a generator and cannot be evaluated per row",
            self.name
        )
    }
}

/// Where a [`NullsFromInput`] function's result takes its first argument's
/// nulls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum InputNulls {
    /// Always, besides the result's own: DataFusion's `get_field`, whose
    /// field of a null struct is null.
    Added,
    /// In ANSI mode, in place of the result's: `datafusion-spark`'s `size`,
    /// null for a null array in ANSI mode (-1 otherwise, as Spark's legacy
    /// `sizeOfNull`).
    InAnsiMode,
}

/// A function of DataFusion or `datafusion-spark` with a nullable result that
/// takes the nulls of its first argument as `nulls` says; otherwise the
/// function itself.
#[derive(Debug, PartialEq, Eq, Hash)]
struct NullsFromInput {
    inner: Arc<ScalarUDF>,
    nulls: InputNulls,
}

impl NullsFromInput {
    fn get_field() -> Self {
        NullsFromInput {
            inner: datafusion_functions::core::get_field(),
            nulls: InputNulls::Added,
        }
    }

    fn size() -> Self {
        NullsFromInput {
            inner: datafusion_spark::function::collection::size(),
            nulls: InputNulls::InAnsiMode,
        }
    }
}

impl ScalarUDFImpl for NullsFromInput {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn signature(&self) -> &Signature {
        self.inner.signature()
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        self.inner.coerce_types(arg_types)
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.inner.return_type(arg_types)
    }

    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<FieldRef> {
        let field = self.inner.return_field_from_args(args)?;
        Ok(Arc::new(field.as_ref().clone().with_nullable(true)))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let rows = args.number_rows;
        let ansi = args.config_options.execution.enable_ansi_mode;
        let input = args.args[0].to_array(rows)?;
        let value = self.inner.invoke_with_args(args)?.to_array(rows)?;
        let nulls = match (self.nulls, input.logical_nulls()) {
            (InputNulls::Added, Some(nulls)) => {
                NullBuffer::union(Some(&nulls), value.logical_nulls().as_ref())
            }
            (InputNulls::InAnsiMode, Some(nulls)) if ansi => Some(nulls),
            _ => return Ok(ColumnarValue::Array(value)),
        };
        let data = value.to_data().into_builder().nulls(nulls).build()?;
        Ok(ColumnarValue::Array(make_array(data)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(input: &str, pattern: &str, limit: i64) -> Vec<String> {
        let regex = Regex::new(pattern).expect("pattern");
        let mut builder = ListBuilder::new(StringBuilder::new());
        java_split(
            input,
            &regex,
            pattern.is_empty(),
            limit,
            &mut Parts(&mut builder),
        );
        builder.append(true);
        let list = builder.finish();
        let values = list.value(0);
        values
            .as_string::<i32>()
            .iter()
            .map(|v| v.expect("part").to_string())
            .collect()
    }

    /// One list column `xs`: [1, 2, 3], null, [].
    fn lists() -> arrow::record_batch::RecordBatch {
        let xs = arrow::array::ListArray::from_iter_primitive::<Int64Type, _, _>(vec![
            Some(vec![Some(1), Some(2), Some(3)]),
            None,
            Some(vec![]),
        ]);
        arrow::record_batch::RecordBatch::try_from_iter(vec![("xs", Arc::new(xs) as ArrayRef)])
            .expect("batch")
    }

    #[test]
    fn test_field_of_a_null_struct_is_null() {
        use crate::expr::{Expr, ScalarValue};
        use arrow::array::{Int64Array, StructArray};
        use arrow::record_batch::RecordBatch;

        let a: ArrayRef = Arc::new(Int64Array::from(vec![1, 0, 3]));
        let fields = vec![Arc::new(Field::new("a", DataType::Int64, true))];
        let nulls = NullBuffer::from(vec![true, false, true]);
        let st = StructArray::new(fields.into(), vec![a], Some(nulls));
        let batch =
            RecordBatch::try_from_iter(vec![("st", Arc::new(st) as ArrayRef)]).expect("batch");
        let field = Expr::call(
            "get_field",
            vec![Expr::col("st"), Expr::lit(ScalarValue::Utf8("a".into()))],
        )
        .expect("resolves");
        let out = field.evaluate(&batch).expect("evaluates");
        let values: Vec<Option<i64>> = out.as_primitive::<Int64Type>().iter().collect();
        assert_eq!(values, vec![Some(1), None, Some(3)]);
    }

    #[test]
    fn test_size_of_a_null_array_is_minus_one_or_null_in_ansi_mode() {
        use crate::expr::Expr;
        use arrow::datatypes::Int32Type;

        let batch = lists();
        let sizes = |ansi: bool| -> Vec<Option<i32>> {
            let e = Expr::call("size", vec![Expr::col("xs")])
                .expect("resolves")
                .with_ansi(ansi);
            let out = e.evaluate(&batch).expect("evaluates");
            out.as_primitive::<Int32Type>().iter().collect()
        };
        assert_eq!(sizes(false), vec![Some(3), Some(-1), Some(0)]);
        assert_eq!(sizes(true), vec![Some(3), None, Some(0)]);
    }

    #[test]
    fn test_element_at_and_get_item() {
        use crate::expr::{Expr, ScalarValue};

        let batch = lists();
        let at = |name: &str, i: i64| -> Vec<Option<i64>> {
            let e = Expr::call(
                name,
                vec![Expr::col("xs"), Expr::lit(ScalarValue::Int64(i))],
            )
            .expect("resolves");
            let out = e.evaluate(&batch).expect("evaluates");
            out.as_primitive::<Int64Type>().iter().collect()
        };
        assert_eq!(at("element_at", 1), vec![Some(1), None, None]);
        assert_eq!(at("element_at", -1), vec![Some(3), None, None]);
        assert_eq!(at("element_at", 4), vec![None, None, None]);
        assert_eq!(at("get_item", 0), vec![Some(1), None, None]);
        assert_eq!(at("get_item", -1), vec![None, None, None]);
        let zero = Expr::call(
            "element_at",
            vec![Expr::col("xs"), Expr::lit(ScalarValue::Int64(0))],
        )
        .expect("resolves");
        let err = zero.evaluate(&batch).expect_err("index 0");
        assert!(
            err.to_string().contains("SQL array indices start at 1"),
            "{err}"
        );
    }

    #[test]
    fn test_split_follows_java() {
        assert_eq!(split("a,b,,c,,", ",", -1), ["a", "b", "", "c", "", ""]);
        assert_eq!(split("a,b,,c,,", ",", 0), ["a", "b", "", "c", "", ""]);
        assert_eq!(split("a,b,c", ",", 2), ["a", "b,c"]);
        assert_eq!(split("a,b,c", ",", 1), ["a,b,c"]);
        assert_eq!(split(",a", ",", -1), ["", "a"]);
        assert_eq!(split("", ",", -1), [""]);
        assert_eq!(split("abc", "", -1), ["a", "b", "c"]);
        assert_eq!(split("äbc", "", 2), ["ä", "bc"]);
        assert_eq!(split("", "", -1), [""]);
        assert_eq!(split("a1b22c", "[0-9]+", -1), ["a", "b", "c"]);
    }
}
