//! The keyed-state layer the keyed aggregates (`operator/keyed_agg.rs`) and
//! the windows (`operator/window.rs`) share, and the joins will (DESIGN.md
//! "Keyed state layer and the operators on it"): the native aggregates, their
//! accumulators over `i64` or `f64`, how an input column binds to one, and
//! the helpers both use to encode keys and build their output columns. The
//! per-key-group blobs stay with each operator (their formats are versioned
//! separately and must read back what older checkpoints wrote).

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, ArrowPrimitiveType, AsArray, PrimitiveArray};
use arrow::buffer::{NullBuffer, ScalarBuffer};
use arrow::compute::{cast_with_options, CastOptions};
use arrow::datatypes::ArrowNativeType;
use arrow::datatypes::{DataType, FieldRef, Float64Type, Int64Type, Schema, SchemaRef};
use arrow::row::SortField;

use std::io::Cursor;

use arrow::ipc::reader::StreamReader;

use crate::error::{Error, ForOperator, Result};
use crate::keygroup::{hash_keys, key_group, KeyGroupOwnership};
use crate::state::{OperatorState, StateBlob};

/// Which running aggregate to compute.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AggKind {
    /// Sum of the non-null values of the column.
    Sum,
    /// Number of rows (or of non-null values when a column is given).
    Count,
    /// Minimum of the non-null values of the column.
    Min,
    /// Maximum of the non-null values of the column.
    Max,
}

impl AggKind {
    /// The lower-case name (`sum`, `count`, `min`, `max`).
    pub fn name(self) -> &'static str {
        match self {
            AggKind::Sum => "sum",
            AggKind::Count => "count",
            AggKind::Min => "min",
            AggKind::Max => "max",
        }
    }
}

/// Whether the accumulator is an `i64` or an `f64`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ValueKind {
    Int,
    Float,
}

impl ValueKind {
    /// The kind of accumulator a column of type `dt` takes: an integer's or
    /// a floating-point number's; None for a type a native aggregate cannot
    /// sum.
    pub(crate) fn of(dt: &DataType) -> Option<ValueKind> {
        if dt.is_integer() {
            Some(ValueKind::Int)
        } else if dt.is_floating() {
            Some(ValueKind::Float)
        } else {
            None
        }
    }

    pub(crate) fn data_type(self) -> DataType {
        match self {
            ValueKind::Int => DataType::Int64,
            ValueKind::Float => DataType::Float64,
        }
    }
}

/// The native accumulator type (`i64` or `f64`).
pub(crate) trait Num:
    ArrowNativeType + Default + PartialEq + Send + Sync + std::fmt::Debug + 'static
{
    type Arrow: ArrowPrimitiveType<Native = Self>;
    const ONE: Self;
    /// `self` and `other` combined by `agg` (a count adds).
    fn combine(self, agg: AggKind, other: Self) -> Self;
}

impl Num for i64 {
    type Arrow = Int64Type;
    const ONE: Self = 1;
    #[inline]
    fn combine(self, agg: AggKind, other: Self) -> Self {
        match agg {
            AggKind::Sum | AggKind::Count => self.wrapping_add(other),
            AggKind::Min => Ord::min(self, other),
            AggKind::Max => Ord::max(self, other),
        }
    }
}

impl Num for f64 {
    type Arrow = Float64Type;
    const ONE: Self = 1.0;
    #[inline]
    fn combine(self, agg: AggKind, other: Self) -> Self {
        match agg {
            AggKind::Sum | AggKind::Count => self + other,
            AggKind::Min => f64::min(self, other),
            AggKind::Max => f64::max(self, other),
        }
    }
}

/// A running aggregate; `has == false` means no value was seen yet.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Acc<V> {
    pub value: V,
    pub has: bool,
}

impl<V: Num> Acc<V> {
    /// Nothing seen yet (a count always has a value).
    pub(crate) fn empty(agg: AggKind) -> Self {
        Acc {
            value: V::default(),
            has: agg == AggKind::Count,
        }
    }

    /// Adds one value.
    #[inline]
    pub(crate) fn add(&mut self, agg: AggKind, v: V) {
        self.value = if self.has {
            self.value.combine(agg, v)
        } else {
            v
        };
        self.has = true;
    }

    /// The aggregate of `self` and `other`.
    #[inline]
    pub(crate) fn merge(self, agg: AggKind, other: Acc<V>) -> Acc<V> {
        if !other.has {
            self
        } else if !self.has {
            other
        } else {
            Acc {
                value: self.value.combine(agg, other.value),
                has: true,
            }
        }
    }
}

/// `column` as the accumulator's native type (cast when it has another
/// numeric type; a value that does not fit is an error of `operator`).
pub(crate) fn native_values<V: Num>(
    operator: &str,
    column: &ArrayRef,
) -> Result<PrimitiveArray<V::Arrow>> {
    let target = V::Arrow::DATA_TYPE;
    if column.data_type() == &target {
        return Ok(column.as_primitive::<V::Arrow>().clone());
    }
    let options = CastOptions {
        safe: false,
        ..Default::default()
    };
    let cast = cast_with_options(column, &target, &options).map_err(|e| {
        Error::operator(
            operator,
            format!(
                "cannot aggregate a {} value as {target}: {e}",
                column.data_type()
            ),
        )
    })?;
    Ok(cast.as_primitive::<V::Arrow>().clone())
}

/// `values` as an Arrow column, null where `valid` is false.
pub(crate) fn values_array<V: Num>(values: Vec<V>, valid: &[bool]) -> ArrayRef {
    let nulls = if valid.iter().all(|v| *v) {
        None
    } else {
        Some(NullBuffer::from(valid))
    };
    Arc::new(PrimitiveArray::<V::Arrow>::new(
        ScalarBuffer::from(values),
        nulls,
    ))
}

/// Accumulators as an Arrow column (null where nothing was seen).
pub(crate) fn acc_array<V: Num>(accs: impl Iterator<Item = Acc<V>>) -> ArrayRef {
    let (lower, _) = accs.size_hint();
    let mut values = Vec::with_capacity(lower);
    let mut valid = Vec::with_capacity(lower);
    for a in accs {
        values.push(a.value);
        valid.push(a.has);
    }
    values_array(values, &valid)
}

/// The columns of `schema`, for error messages.
pub(crate) fn describe_columns(schema: &Schema) -> String {
    schema
        .fields()
        .iter()
        .map(|f| f.name().as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The index of column `name`, or a graph error of `operator` naming the
/// columns there are.
pub(crate) fn column_index(operator: &str, schema: &Schema, name: &str) -> Result<usize> {
    schema.index_of(name).map_err(|_| {
        Error::graph(
            operator,
            format!(
                "column '{name}' does not exist; available columns: {}",
                describe_columns(schema)
            ),
        )
    })
}

/// Binds the column `col` that `agg` (other than a plain count) aggregates:
/// its index and the accumulator kind its type needs, or a schema error of
/// `operator` for a non-numeric column.
pub(crate) fn numeric_column(
    operator: &str,
    input: &Schema,
    agg: AggKind,
    col: &str,
) -> Result<(usize, ValueKind)> {
    let idx = column_index(operator, input, col)?;
    let dt = input.field(idx).data_type();
    let Some(kind) = ValueKind::of(dt) else {
        return Err(Error::schema(
            operator,
            format!(
                "{} needs a numeric (integer or floating-point) column, but column '{col}' has type {dt}",
                agg.name()
            ),
        ));
    };
    Ok((idx, kind))
}

/// The key columns `keys` of `input`: their indices and fields, each of a
/// type the row format can key on (else a schema error of `operator` naming
/// the column). `what` names the key columns' owner ("", "left ").
pub(crate) fn key_columns(
    operator: &str,
    input: &Schema,
    keys: &[String],
    what: &str,
) -> Result<(Vec<usize>, Vec<FieldRef>)> {
    let mut key_idx = Vec::with_capacity(keys.len());
    let mut fields = Vec::with_capacity(keys.len());
    for key in keys {
        let idx = column_index(operator, input, key)?;
        let field = input.fields()[idx].clone();
        if !arrow::row::RowConverter::supports_fields(&[SortField::new(field.data_type().clone())])
        {
            return Err(Error::schema(
                operator,
                format!(
                    "{what}key column '{key}' has type {}, which cannot be used as a key",
                    field.data_type()
                ),
            ));
        }
        key_idx.push(idx);
        fields.push(field);
    }
    Ok((key_idx, fields))
}

/// The key columns of a window (tumbling, sliding or session) over `keys`:
/// at least one, none named like the window's output columns, their fields
/// nullable (fired rows hold keys of earlier batches too). `kind` names the
/// window in errors ("a window sum").
pub(crate) fn window_key_columns(
    operator: &str,
    input: &Schema,
    keys: &[String],
    kind: &str,
) -> Result<(Vec<usize>, Vec<FieldRef>)> {
    if keys.is_empty() {
        return Err(Error::graph(
            operator,
            format!("{kind} needs at least one key column"),
        ));
    }
    let (key_idx, fields) = key_columns(operator, input, keys, "")?;
    if let Some(f) = fields
        .iter()
        .find(|f| matches!(f.name().as_str(), "window_start" | "window_end"))
    {
        return Err(Error::graph(
            operator,
            format!(
                "key column '{}' clashes with the window's output columns",
                f.name()
            ),
        ));
    }
    let fields = fields
        .into_iter()
        .map(|f| Arc::new(f.as_ref().clone().with_nullable(true)))
        .collect();
    Ok((key_idx, fields))
}

/// The column a window aggregate `agg` reads (`None`: a count of rows) and
/// its accumulator kind; `kind` names the window in errors.
pub(crate) fn window_agg_column(
    operator: &str,
    input: &Schema,
    agg: AggKind,
    column: Option<&str>,
    kind: &str,
) -> Result<(Option<usize>, ValueKind)> {
    Ok(match (agg, column) {
        (AggKind::Count, None) => (None, ValueKind::Int),
        (AggKind::Count, Some(col)) => (Some(column_index(operator, input, col)?), ValueKind::Int),
        (_, None) => {
            return Err(Error::graph(
                operator,
                format!("{kind} needs a column to aggregate"),
            ))
        }
        (agg, Some(col)) => {
            let (idx, kind) = numeric_column(operator, input, agg, col)?;
            (Some(idx), kind)
        }
    })
}

/// Whether a binding made for the input schema `bound` still holds for
/// `schema` (the same schema object, or the same fields).
pub(crate) fn same_input(bound: &SchemaRef, schema: &SchemaRef) -> bool {
    Arc::ptr_eq(bound, schema) || bound.fields() == schema.fields()
}

/// The binding of a keyed operator for input `schema`: `None` while the one
/// it holds (made for input `held`) still fits, else what `bind` makes (its
/// error named after `operator`).
pub(crate) fn rebinding<B>(
    operator: &str,
    held: Option<&SchemaRef>,
    schema: &SchemaRef,
    bind: impl FnOnce() -> Result<B>,
) -> Result<Option<B>> {
    if held.is_some_and(|h| same_input(h, schema)) {
        return Ok(None);
    }
    bind().map(Some).map_err(|e| e.in_operator(operator))
}

/// The row-format fields of key columns (multi-column and non-integer keys
/// are encoded with arrow's row format).
pub(crate) fn sort_fields(key_fields: &[FieldRef]) -> Vec<SortField> {
    key_fields
        .iter()
        .map(|f| SortField::new(f.data_type().clone()))
        .collect()
}

/// Checks that every key of `key_cols` (restored from the blob of key group
/// `kg`) belongs to `kg`: a key of another group means `max_parallelism`
/// changed, which would misroute it. `what` names the state in
/// the error ("the keyed state", "the window state").
pub(crate) fn check_key_group(
    operator: &str,
    what: &str,
    key_cols: &[ArrayRef],
    hashes: &mut Vec<u64>,
    kg: usize,
    max_parallelism: usize,
) -> Result<()> {
    hash_keys(key_cols, hashes).for_operator(operator)?;
    match hashes
        .iter()
        .find(|h| key_group(**h, max_parallelism) != kg)
    {
        None => Ok(()),
        Some(h) => Err(Error::checkpoint(
            None,
            format!(
                "{what} of key group {kg} holds a key of key group {} (max_parallelism is \
                 {max_parallelism}; was it changed?)",
                key_group(*h, max_parallelism),
            ),
        )),
    }
}

/// The key groups of a restored operator that keeps keyed state only, each
/// checked to be one this subtask owns; a checkpoint error when `kind` (e.g.
/// "a keyed sum") was given operator state, which it never writes.
pub(crate) fn owned_key_groups(
    state: OperatorState,
    own: &KeyGroupOwnership,
    kind: &str,
) -> Result<Vec<(usize, StateBlob)>> {
    if state.operator.is_some() {
        return Err(Error::checkpoint(
            None,
            format!(
                "operator '{}' ({kind}) was given non-keyed state, which it never writes",
                own.name
            ),
        ));
    }
    let mut groups = Vec::with_capacity(state.keyed.len());
    for (kg, blob) in state.keyed {
        let kg = kg as usize;
        own.check_restored(kg)?;
        groups.push((kg, blob));
    }
    Ok(groups)
}

/// The Arrow IPC stream of a per-key-group blob whose first byte is its
/// format version, checked against `version` (`bad` words the error).
pub(crate) fn open_blob<'a>(
    bytes: &'a [u8],
    version: u8,
    bad: &dyn Fn(String) -> Error,
) -> Result<StreamReader<Cursor<&'a [u8]>>> {
    let Some((&found, body)) = bytes.split_first() else {
        return Err(bad("is empty".to_string()));
    };
    if found != version {
        return Err(bad(format!(
            "has format version {found}, but this build reads version {version}"
        )));
    }
    StreamReader::try_new(Cursor::new(body), None).map_err(|e| bad(format!("cannot be read: {e}")))
}

/// The metadata key under which a window multi-aggregate's key-group blob
/// keeps the input schema its aggregates were bound to: a restore whose
/// graph does not know the input schema (a Python function without
/// `schema=` upstream) binds the restored state with it, so windows can
/// fire before the first record arrives.
pub(crate) const META_INPUT_SCHEMA: &str = "eddyline.input_schema";

/// `schema` as the hex of an Arrow IPC stream without batches (metadata
/// values are strings).
pub(crate) fn encode_schema(operator: &str, schema: &Schema) -> Result<String> {
    let mut bytes = Vec::new();
    let mut writer =
        arrow::ipc::writer::StreamWriter::try_new(&mut bytes, schema).for_operator(operator)?;
    writer.finish().for_operator(operator)?;
    drop(writer);
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// The input schema recorded in a key-group blob (`META_INPUT_SCHEMA`),
/// if it has one (blobs of older checkpoints do not); `None` when the blob
/// cannot be read: restoring it reports that.
pub(crate) fn recorded_input_schema(blob: &StateBlob, version: u8) -> Option<SchemaRef> {
    let bytes = blob.to_bytes().ok()?;
    let reader = open_blob(&bytes, version, &|m| Error::checkpoint(None, m)).ok()?;
    let hex = reader.schema().metadata().get(META_INPUT_SCHEMA)?.clone();
    let raw: Option<Vec<u8>> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect();
    let raw = raw?;
    StreamReader::try_new(Cursor::new(raw.as_slice()), None)
        .ok()
        .map(|r| r.schema())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_accumulators_combine_and_merge_by_aggregate() {
        let mut a = Acc::<i64>::empty(AggKind::Min);
        assert!(!a.has);
        a.add(AggKind::Min, 5);
        a.add(AggKind::Min, 3);
        assert_eq!(a.value, 3);
        let c = Acc::<i64>::empty(AggKind::Count);
        assert!(c.has && c.value == 0);
        let b = Acc {
            value: 7,
            has: true,
        };
        assert_eq!(a.merge(AggKind::Max, b).value, 7);
        assert_eq!(Acc::<i64>::default().merge(AggKind::Sum, b), b);
        assert_eq!(2.5f64.combine(AggKind::Sum, 1.0), 3.5);
        assert_eq!(
            i64::MAX.combine(AggKind::Sum, 1),
            i64::MIN,
            "sums wrap like Flink's"
        );
    }

    #[test]
    fn test_numeric_column_refuses_strings_naming_the_column() {
        let schema = Schema::new(vec![arrow::datatypes::Field::new(
            "s",
            DataType::Utf8,
            false,
        )]);
        let err = numeric_column("op", &schema, AggKind::Sum, "s").expect_err("string");
        assert!(
            err.to_string().contains("column 's' has type Utf8"),
            "{err}"
        );
        let err = column_index("op", &schema, "nope").expect_err("missing");
        assert!(err.to_string().contains("available columns: s"), "{err}");
    }
}
