//! Spark's JSON functions as DataFusion scalar functions (DESIGN.md
//! "Expressions"; neither DataFusion nor `datafusion-spark` has them):
//!
//! * `get_json_object(json, path)`: the value at a JSONPath of `$`,
//!   `.name`, `['name']` and `[index]` steps: a string's contents, any
//!   other value as compact JSON text (Jackson's spelling, `json.rs`), null
//!   for JSON null, a missing value, malformed JSON or an invalid path.
//!   Wildcards (`[*]`, `.*`) are not supported (null).
//! * `from_json(json, schema)`: a struct of the schema, given as Spark's
//!   DDL (`"a INT, b STRING"`, `"struct<a:int,b:array<string>>"`), read as
//!   Spark's default PERMISSIVE mode does: null for null or empty input; for
//!   malformed JSON or a value that is not an object, a struct of nulls; a
//!   field whose value does not fit its type is null and the others are
//!   kept; a string field takes any value, non-strings as their JSON text.
//! * `to_json(struct | array | map)`: compact JSON as Spark writes it:
//!   null fields left out, doubles as Java prints them (`NaN` and the
//!   infinities as strings), timestamps as `2024-01-01T00:00:00.000Z` (UTC,
//!   milliseconds), dates as `2024-01-01`.

use std::sync::Arc;

use arrow::array::{
    new_null_array, Array, ArrayRef, AsArray, BooleanArray, Float32Array, Float64Array, Int16Array,
    Int32Array, Int64Array, Int8Array, ListArray, StringArray, StructArray,
};
use arrow::buffer::{NullBuffer, OffsetBuffer};
use arrow::compute::{cast_with_options, CastOptions};
use arrow::datatypes::{
    DataType, Date32Type, Decimal128Type, Field, FieldRef, Fields, Float32Type, Float64Type,
    Int16Type, Int32Type, Int64Type, Int8Type, TimeUnit, TimestampMicrosecondType,
};
use datafusion_common::{exec_err, plan_err, Result, ScalarValue};
use datafusion_expr::{
    ColumnarValue, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    Volatility,
};

use super::cast::SparkType;
use super::json::{java_double, java_float, parse, write_string, Json};
use super::spark_datetime::{parse_date, parse_timestamp, utc, Pattern};

/// The functions of this module.
pub(super) fn functions() -> Vec<Arc<ScalarUDF>> {
    vec![
        Arc::new(ScalarUDF::from(JsonFunction::new("get_json_object"))),
        Arc::new(ScalarUDF::from(JsonFunction::new("from_json"))),
        Arc::new(ScalarUDF::from(JsonFunction::new("to_json"))),
    ]
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct JsonFunction {
    name: &'static str,
    signature: Signature,
}

impl JsonFunction {
    fn new(name: &'static str) -> Self {
        JsonFunction {
            name,
            signature: Signature::user_defined(Volatility::Immutable),
        }
    }
}

fn is_string(t: &DataType) -> bool {
    matches!(
        t,
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View | DataType::Null
    )
}

impl ScalarUDFImpl for JsonFunction {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        match (self.name, arg_types) {
            ("to_json", [t]) => match t {
                DataType::Struct(_) | DataType::List(_) | DataType::Map(_, _) => {
                    writable(t)?;
                    Ok(vec![t.clone()])
                }
                other => plan_err!("to_json takes a struct, an array or a map, not {other}"),
            },
            ("get_json_object" | "from_json", [a, b]) if is_string(a) && is_string(b) => {
                Ok(vec![DataType::Utf8, DataType::Utf8])
            }
            ("to_json", _) => plan_err!("to_json takes one argument"),
            (name, _) => plan_err!("{name} takes a JSON string and a literal string"),
        }
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<FieldRef> {
        let data_type = match self.name {
            "from_json" => match args.scalar_arguments.get(1).copied().flatten() {
                Some(ScalarValue::Utf8(Some(schema))) => parse_ddl(schema)?,
                _ => return plan_err!("the schema of from_json must be a literal DDL string"),
            },
            _ => DataType::Utf8,
        };
        Ok(Arc::new(Field::new(self.name, data_type, true)))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let rows = args.number_rows;
        let value = args.args[0].to_array(rows)?;
        let out: ArrayRef = match self.name {
            "to_json" => {
                let mut out = Vec::with_capacity(rows);
                for row in 0..value.len() {
                    out.push(if value.is_null(row) {
                        None
                    } else {
                        let mut text = String::new();
                        write_value(&mut text, value.as_ref(), row)?;
                        Some(text)
                    });
                }
                Arc::new(StringArray::from(out))
            }
            "get_json_object" => {
                let path = match &args.args[1] {
                    ColumnarValue::Scalar(ScalarValue::Utf8(Some(p))) => parse_path(p),
                    ColumnarValue::Scalar(_) => None,
                    ColumnarValue::Array(_) => {
                        return exec_err!("the path of get_json_object must be a literal string")
                    }
                };
                let Some(path) = path else {
                    return Ok(ColumnarValue::Array(new_null_array(&DataType::Utf8, rows)));
                };
                let out: StringArray = value
                    .as_string::<i32>()
                    .iter()
                    .map(|s| {
                        let json = parse(s?)?;
                        match path.iter().try_fold(&json, |v, step| step.apply(v))? {
                            Json::Null => None,
                            Json::Str(s) => Some(s.clone()),
                            other => Some(other.to_text()),
                        }
                    })
                    .collect();
                Arc::new(out)
            }
            _ => {
                let data_type = args.return_field.data_type().clone();
                let DataType::Struct(fields) = &data_type else {
                    return exec_err!("from_json needs a struct schema, got {data_type}");
                };
                let strings = value.as_string::<i32>();
                let parsed: Vec<Option<Json>> = strings
                    .iter()
                    .map(|s| {
                        // Empty input is null, as in Spark.
                        s.filter(|s| !s.trim().is_empty()).map(|s| match parse(s) {
                            Some(object @ Json::Object(_)) => object,
                            // Malformed or not an object: a struct of nulls.
                            _ => Json::Object(Vec::new()),
                        })
                    })
                    .collect();
                let refs: Vec<Option<&Json>> = parsed.iter().map(Option::as_ref).collect();
                read_struct(fields, &refs)?
            }
        };
        Ok(ColumnarValue::Array(out))
    }
}

/// One step of a JSONPath.
#[derive(Debug, PartialEq)]
enum Step {
    Key(String),
    Index(usize),
}

impl Step {
    fn apply<'a>(&self, value: &'a Json) -> Option<&'a Json> {
        match (self, value) {
            (Step::Key(k), v) => v.get_first(k),
            (Step::Index(i), Json::Array(items)) => items.get(*i),
            _ => None,
        }
    }
}

/// Spark's JSONPath subset: `$` then `.name`, `['name']` or `[n]` steps.
fn parse_path(path: &str) -> Option<Vec<Step>> {
    let mut rest = path.strip_prefix('$')?;
    let mut steps = Vec::new();
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            let name = &r[..end];
            if name.is_empty() || name == "*" {
                return None;
            }
            steps.push(Step::Key(name.to_string()));
            rest = &r[end..];
        } else if let Some(r) = rest.strip_prefix("['") {
            let end = r.find("']")?;
            steps.push(Step::Key(r[..end].to_string()));
            rest = &r[end + 2..];
        } else if let Some(r) = rest.strip_prefix('[') {
            let end = r.find(']')?;
            steps.push(Step::Index(r[..end].trim().parse().ok()?));
            rest = &r[end + 1..];
        } else {
            return None;
        }
    }
    Some(steps)
}

// -- from_json ----------------------------------------------------------------

/// Parses Spark's DDL for a schema: `name type, ...` (names optionally in
/// backquotes, `name: type` too) or `struct<...>`; types are Spark's type
/// names, `array<t>` and `struct<...>`.
pub(super) fn parse_ddl(ddl: &str) -> Result<DataType> {
    let text = ddl.trim();
    let lower = text.to_ascii_lowercase();
    let fields = if lower.starts_with("struct<") && text.ends_with('>') {
        &text["struct<".len()..text.len() - 1]
    } else {
        text
    };
    let fields = parse_fields(fields).map_err(|e| {
        datafusion_common::DataFusionError::Plan(format!(
            "cannot read the schema '{ddl}' of from_json: {e}"
        ))
    })?;
    if fields.is_empty() {
        return plan_err!("the schema '{ddl}' of from_json has no fields");
    }
    Ok(DataType::Struct(fields))
}

/// Splits `s` at top-level commas (outside `<...>` and `(...)`).
fn split_top(s: &str) -> Vec<&str> {
    let mut depth = 0i32;
    let mut start = 0;
    let mut parts = Vec::new();
    for (i, c) in s.char_indices() {
        match c {
            '<' | '(' => depth += 1,
            '>' | ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&s[start..]);
    parts
}

fn parse_fields(s: &str) -> std::result::Result<Fields, String> {
    if s.trim().is_empty() {
        return Ok(Fields::empty());
    }
    let mut fields = Vec::new();
    for part in split_top(s) {
        let part = part.trim();
        let (name, rest) = if let Some(r) = part.strip_prefix('`') {
            let end = r.find('`').ok_or("unclosed backquote")?;
            (r[..end].to_string(), &r[end + 1..])
        } else {
            let end = part
                .find(|c: char| c.is_whitespace() || c == ':')
                .ok_or_else(|| format!("field '{part}' has no type"))?;
            (part[..end].to_string(), &part[end..])
        };
        let ty = rest.trim_start().trim_start_matches(':').trim();
        let ty = ty
            .strip_suffix("NOT NULL")
            .or_else(|| ty.strip_suffix("not null"))
            .unwrap_or(ty)
            .trim();
        fields.push(Field::new(name, parse_type(ty)?, true));
    }
    Ok(Fields::from(fields))
}

fn parse_type(ty: &str) -> std::result::Result<DataType, String> {
    let lower = ty.to_ascii_lowercase();
    let inner = |prefix: &str| {
        lower
            .starts_with(prefix)
            .then(|| ty[prefix.len()..].strip_suffix('>'))
            .flatten()
    };
    if let Some(element) = inner("array<") {
        let element = parse_type(element.trim())?;
        return Ok(DataType::List(Arc::new(Field::new(
            "element", element, true,
        ))));
    }
    if let Some(fields) = inner("struct<") {
        return Ok(DataType::Struct(parse_fields(fields)?));
    }
    let spark = SparkType::parse(ty).map_err(|e| e.to_string())?;
    let t = spark.data_type().clone();
    readable(&t)
        .then_some(t)
        .ok_or_else(|| format!("from_json does not read type '{ty}'"))
}

fn readable(t: &DataType) -> bool {
    matches!(
        t,
        DataType::Boolean
            | DataType::Int8
            | DataType::Int16
            | DataType::Int32
            | DataType::Int64
            | DataType::Float32
            | DataType::Float64
            | DataType::Utf8
            | DataType::Date32
            | DataType::Decimal128(_, _)
            | DataType::Timestamp(TimeUnit::Microsecond, _)
    )
}

fn read_struct(fields: &Fields, values: &[Option<&Json>]) -> Result<ArrayRef> {
    let nulls = NullBuffer::from_iter(values.iter().map(Option::is_some));
    let columns = fields
        .iter()
        .map(|f| {
            let children: Vec<Option<&Json>> = values
                .iter()
                .map(|v| v.and_then(|v| v.get(f.name())))
                .collect();
            read_column(f.data_type(), &children)
        })
        .collect::<Result<Vec<_>>>()?;
    let nulls = (nulls.null_count() > 0).then_some(nulls);
    Ok(Arc::new(StructArray::try_new(
        fields.clone(),
        columns,
        nulls,
    )?))
}

/// An integer JSON value in `[low, high]`.
fn int_in(v: Option<&Json>, low: i64, high: i64) -> Option<i64> {
    match v? {
        Json::Int(digits) => digits
            .parse::<i64>()
            .ok()
            .filter(|n| (low..=high).contains(n)),
        _ => None,
    }
}

fn float_of(v: Option<&Json>) -> Option<f64> {
    match v? {
        Json::Int(digits) => digits.parse().ok(),
        Json::Float(f) => Some(*f),
        Json::Str(s) => match s.as_str() {
            "NaN" => Some(f64::NAN),
            "Infinity" | "+Infinity" | "+INF" | "INF" => Some(f64::INFINITY),
            "-Infinity" | "-INF" => Some(f64::NEG_INFINITY),
            _ => None,
        },
        _ => None,
    }
}

fn read_column(t: &DataType, values: &[Option<&Json>]) -> Result<ArrayRef> {
    let ints = |low, high| values.iter().map(move |v| int_in(*v, low, high));
    Ok(match t {
        DataType::Boolean => Arc::new(
            values
                .iter()
                .map(|v| match v {
                    Some(Json::Bool(b)) => Some(*b),
                    _ => None,
                })
                .collect::<BooleanArray>(),
        ),
        DataType::Int8 => Arc::new(
            ints(i8::MIN.into(), i8::MAX.into())
                .map(|v| v.map(|v| v as i8))
                .collect::<Int8Array>(),
        ),
        DataType::Int16 => Arc::new(
            ints(i16::MIN.into(), i16::MAX.into())
                .map(|v| v.map(|v| v as i16))
                .collect::<Int16Array>(),
        ),
        DataType::Int32 => Arc::new(
            ints(i32::MIN.into(), i32::MAX.into())
                .map(|v| v.map(|v| v as i32))
                .collect::<Int32Array>(),
        ),
        DataType::Int64 => Arc::new(ints(i64::MIN, i64::MAX).collect::<Int64Array>()),
        DataType::Float64 => Arc::new(
            values
                .iter()
                .map(|v| float_of(*v))
                .collect::<Float64Array>(),
        ),
        DataType::Float32 => Arc::new(
            values
                .iter()
                .map(|v| float_of(*v).map(|f| f as f32))
                .collect::<Float32Array>(),
        ),
        DataType::Utf8 => Arc::new(
            values
                .iter()
                .map(|v| match v {
                    None | Some(Json::Null) => None,
                    Some(Json::Str(s)) => Some(s.clone()),
                    Some(other) => Some(other.to_text()),
                })
                .collect::<StringArray>(),
        ),
        DataType::Date32 => Arc::new(
            values
                .iter()
                .map(|v| match v {
                    Some(Json::Str(s)) => parse_date(s),
                    _ => None,
                })
                .collect::<arrow::array::Date32Array>(),
        ),
        DataType::Timestamp(_, _) => Arc::new(
            values
                .iter()
                .map(|v| match v {
                    Some(Json::Str(s)) => parse_timestamp(s),
                    _ => None,
                })
                .collect::<arrow::array::TimestampMicrosecondArray>()
                .with_timezone("UTC"),
        ),
        DataType::Decimal128(_, _) => {
            // Through the number's text, with Arrow's (safe) cast.
            let texts: StringArray = values
                .iter()
                .map(|v| match v {
                    Some(Json::Int(d)) => Some(d.clone()),
                    Some(Json::Float(f)) => Some(f.to_string()),
                    _ => None,
                })
                .collect();
            cast_with_options(&texts, t, &CastOptions::default())?
        }
        DataType::List(element) => read_list(element, values)?,
        DataType::Struct(fields) => {
            let objects: Vec<Option<&Json>> = values
                .iter()
                .map(|v| v.filter(|v| matches!(v, Json::Object(_))))
                .collect();
            read_struct(fields, &objects)?
        }
        other => return exec_err!("from_json does not read type {other}"),
    })
}

/// An array of `element`s; an element that does not fit the element type
/// (a null one does) makes the whole array null, as in Spark.
fn read_list(element: &FieldRef, values: &[Option<&Json>]) -> Result<ArrayRef> {
    let mut offsets = vec![0usize];
    let mut children = Vec::new();
    let mut valid = Vec::with_capacity(values.len());
    for v in values {
        if let Some(Json::Array(items)) = v {
            children.extend(items.iter().map(Some));
            valid.push(true);
        } else {
            valid.push(false);
        }
        offsets.push(children.len());
    }
    let child = read_column(element.data_type(), &children)?;
    // An element that does not fit the element type (a null one
    // does) makes the whole array null, as in Spark.
    for (row, window) in offsets.windows(2).enumerate() {
        let misfit = (window[0]..window[1])
            .any(|i| !matches!(children[i], Some(Json::Null)) && child.is_null(i));
        if misfit {
            valid[row] = false;
        }
    }
    Ok(Arc::new(ListArray::try_new(
        Arc::clone(element),
        OffsetBuffer::from_lengths(offsets.windows(2).map(|w| w[1] - w[0])),
        child,
        Some(NullBuffer::from(valid)),
    )?))
}

// -- to_json --------------------------------------------------------------------

/// Whether `to_json` can write values of type `t`.
fn writable(t: &DataType) -> Result<()> {
    match t {
        DataType::Struct(fields) => fields.iter().try_for_each(|f| writable(f.data_type())),
        DataType::List(f) | DataType::LargeList(f) => writable(f.data_type()),
        DataType::Map(entries, _) => writable(entries.data_type()),
        DataType::Null
        | DataType::Boolean
        | DataType::Int8
        | DataType::Int16
        | DataType::Int32
        | DataType::Int64
        | DataType::UInt8
        | DataType::UInt16
        | DataType::UInt32
        | DataType::UInt64
        | DataType::Float32
        | DataType::Float64
        | DataType::Utf8
        | DataType::LargeUtf8
        | DataType::Date32
        | DataType::Decimal128(_, _)
        | DataType::Timestamp(_, _) => Ok(()),
        other => plan_err!("to_json cannot write values of type {other}"),
    }
}

/// Writes row `row` of `array` (not null) as JSON.
fn write_value(out: &mut String, array: &dyn Array, row: usize) -> Result<()> {
    use std::fmt::Write;
    let quoted = |out: &mut String, s: &str| {
        out.push('"');
        out.push_str(s);
        out.push('"');
    };
    match array.data_type() {
        DataType::Null => out.push_str("null"),
        DataType::Boolean => out.push_str(if array.as_boolean().value(row) {
            "true"
        } else {
            "false"
        }),
        DataType::Int8 => {
            let _ = write!(out, "{}", array.as_primitive::<Int8Type>().value(row));
        }
        DataType::Int16 => {
            let _ = write!(out, "{}", array.as_primitive::<Int16Type>().value(row));
        }
        DataType::Int32 => {
            let _ = write!(out, "{}", array.as_primitive::<Int32Type>().value(row));
        }
        DataType::Int64 => {
            let _ = write!(out, "{}", array.as_primitive::<Int64Type>().value(row));
        }
        DataType::UInt8 | DataType::UInt16 | DataType::UInt32 | DataType::UInt64 => {
            let wide = cast_with_options(
                &array.slice(row, 1),
                &DataType::Utf8,
                &CastOptions::default(),
            )?;
            out.push_str(wide.as_string::<i32>().value(0));
        }
        DataType::Float64 => {
            let v = array.as_primitive::<Float64Type>().value(row);
            if v.is_finite() {
                out.push_str(&java_double(v))
            } else {
                quoted(out, &java_double(v))
            }
        }
        DataType::Float32 => {
            let v = array.as_primitive::<Float32Type>().value(row);
            if v.is_finite() {
                out.push_str(&java_float(v))
            } else {
                quoted(out, &java_float(v))
            }
        }
        DataType::Utf8 => write_string(out, array.as_string::<i32>().value(row)),
        DataType::LargeUtf8 => write_string(out, array.as_string::<i64>().value(row)),
        DataType::Date32 => {
            let days = array.as_primitive::<Date32Type>().value(row);
            let pattern = Pattern::parse("yyyy-MM-dd").or_else(|e| exec_err!("{e}"))?;
            let text = pattern.format(i64::from(days) * super::spark_datetime::MICROS_PER_DAY);
            quoted(out, text.as_deref().unwrap_or_default());
        }
        DataType::Timestamp(_, _) => {
            let micros = cast_with_options(
                &array.slice(row, 1),
                &DataType::Timestamp(TimeUnit::Microsecond, None),
                &CastOptions::default(),
            )?;
            let micros = micros.as_primitive::<TimestampMicrosecondType>().value(0);
            let text = utc(micros).map(|t| t.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string());
            quoted(out, text.as_deref().unwrap_or_default());
        }
        DataType::Decimal128(_, _) => {
            out.push_str(&array.as_primitive::<Decimal128Type>().value_as_string(row));
        }
        DataType::Struct(_) => write_struct(out, array.as_struct(), row)?,
        DataType::List(_) => {
            let items = array.as_list::<i32>().value(row);
            write_items(out, items.as_ref())?;
        }
        DataType::LargeList(_) => {
            let items = array.as_list::<i64>().value(row);
            write_items(out, items.as_ref())?;
        }
        DataType::Map(_, _) => write_map(out, &array.as_map().value(row))?,
        other => return exec_err!("to_json cannot write values of type {other}"),
    }
    Ok(())
}

/// Writes row `row` of a struct as a JSON object; Spark leaves null fields
/// out (`ignoreNullFields`).
fn write_struct(out: &mut String, s: &StructArray, row: usize) -> Result<()> {
    out.push('{');
    let mut first = true;
    for (field, column) in s.fields().iter().zip(s.columns()) {
        // Spark leaves null fields out (ignoreNullFields).
        if column.is_null(row) {
            continue;
        }
        if !first {
            out.push(',');
        }
        first = false;
        write_string(out, field.name());
        out.push(':');
        write_value(out, column.as_ref(), row)?;
    }
    out.push('}');
    Ok(())
}

/// Writes one map (its entries) as a JSON object, keys as strings.
fn write_map(out: &mut String, entries: &StructArray) -> Result<()> {
    let (keys, values) = (entries.column(0), entries.column(1));
    out.push('{');
    for i in 0..entries.len() {
        if i > 0 {
            out.push(',');
        }
        let mut key = String::new();
        write_value(&mut key, keys.as_ref(), i)?;
        match key.strip_prefix('"').and_then(|k| k.strip_suffix('"')) {
            Some(_) => out.push_str(&key),
            None => write_string(out, &key),
        }
        out.push(':');
        if values.is_null(i) {
            out.push_str("null");
        } else {
            write_value(out, values.as_ref(), i)?;
        }
    }
    out.push('}');
    Ok(())
}

fn write_items(out: &mut String, items: &dyn Array) -> Result<()> {
    out.push('[');
    for i in 0..items.len() {
        if i > 0 {
            out.push(',');
        }
        if items.is_null(i) {
            out.push_str("null");
        } else {
            write_value(out, items, i)?;
        }
    }
    out.push(']');
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_ddl_schemas() {
        let t = parse_ddl("a INT, `b c` STRING, d array<struct<x: double>>").ok();
        let expected = DataType::Struct(Fields::from(vec![
            Field::new("a", DataType::Int32, true),
            Field::new("b c", DataType::Utf8, true),
            Field::new(
                "d",
                DataType::List(Arc::new(Field::new(
                    "element",
                    DataType::Struct(Fields::from(vec![Field::new("x", DataType::Float64, true)])),
                    true,
                ))),
                true,
            ),
        ]));
        assert_eq!(t, Some(expected));
        assert!(parse_ddl("struct<a:bigint>").is_ok());
        assert!(parse_ddl("a").is_err());
        assert!(parse_ddl("a binary").is_err());
    }

    #[test]
    fn test_paths() {
        assert_eq!(
            parse_path("$.a['b c'][2]"),
            Some(vec![
                Step::Key("a".into()),
                Step::Key("b c".into()),
                Step::Index(2)
            ])
        );
        assert_eq!(parse_path("a.b"), None);
        assert_eq!(parse_path("$[*]"), None);
    }
}
