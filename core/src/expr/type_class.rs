//! The classes of Arrow types the type rules speak of: the numeric class a
//! type promotes to and the string types. Shared by the operators' rules
//! (`types.rs`) and those of casts and `CASE` (`cast.rs`, `case.rs`).

use arrow::datatypes::DataType;

/// The numeric class an Arrow type promotes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NumClass {
    /// Promotes to `Int64`.
    Int,
    /// Promotes to `Float64`.
    Float,
}

impl NumClass {
    /// The promoted Arrow type.
    pub(crate) fn data_type(self) -> DataType {
        match self {
            NumClass::Int => DataType::Int64,
            NumClass::Float => DataType::Float64,
        }
    }

    /// The class both operands promote to.
    pub(crate) fn common(self, other: NumClass) -> NumClass {
        if self == NumClass::Int && other == NumClass::Int {
            NumClass::Int
        } else {
            NumClass::Float
        }
    }
}

/// The numeric class of `dt`, if it is a supported numeric type.
pub(crate) fn numeric_class(dt: &DataType) -> Option<NumClass> {
    match dt {
        DataType::Int8
        | DataType::Int16
        | DataType::Int32
        | DataType::Int64
        | DataType::UInt8
        | DataType::UInt16
        | DataType::UInt32 => Some(NumClass::Int),
        DataType::Float32 | DataType::Float64 => Some(NumClass::Float),
        _ => None,
    }
}

/// Whether `dt` is one of the string types.
pub(crate) fn is_string(dt: &DataType) -> bool {
    matches!(
        dt,
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
    )
}
