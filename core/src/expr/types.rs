//! The type rules of expressions (see the module docs of `expr`): numeric
//! promotion, which operand types each operator accepts and what it returns.
//! Used both to type-check a graph before it runs ([`Expr::data_type`]) and
//! by the evaluator, so the two can never disagree.

use arrow::datatypes::{DataType, Schema};

pub(crate) use super::type_class::{is_string, numeric_class, NumClass};
use super::{BinaryOp, Expr, ScalarValue, UnaryOp};
use super::{ExprError, ExprResult};

fn unsupported_u64(expr: &Expr) -> ExprError {
    ExprError::schema(format!(
        "unsigned 64-bit columns are not supported in expressions; cast first (in {expr})"
    ))
}

/// The error for a column that is not in `names`.
pub(crate) fn column_not_found<'a>(name: &str, names: impl Iterator<Item = &'a str>) -> ExprError {
    let available: Vec<&str> = names.collect();
    let available = if available.is_empty() {
        "(none)".to_string()
    } else {
        available.join(", ")
    };
    ExprError::graph(format!(
        "column '{name}' does not exist; available columns: {available}"
    ))
}

/// The type of a literal.
pub(crate) fn literal_type(value: &ScalarValue) -> DataType {
    match value {
        ScalarValue::Null => DataType::Null,
        ScalarValue::Boolean(_) => DataType::Boolean,
        ScalarValue::Int64(_) => DataType::Int64,
        ScalarValue::Float64(_) => DataType::Float64,
        ScalarValue::Utf8(_) => DataType::Utf8,
    }
}

/// Whether two operand types can be compared with each other.
pub(crate) fn comparable(l: &DataType, r: &DataType) -> bool {
    (numeric_class(l).is_some() && numeric_class(r).is_some())
        || (is_string(l) && is_string(r))
        || (l == r && !l.is_nested())
}

/// The result type of `l op r` in `expr` (which is only used in messages).
pub(crate) fn binary_type(
    op: BinaryOp,
    l: &DataType,
    r: &DataType,
    expr: &Expr,
) -> ExprResult<DataType> {
    if matches!(l, DataType::UInt64) || matches!(r, DataType::UInt64) {
        return Err(unsupported_u64(expr));
    }
    if op.is_logical() {
        for (side, t) in [("left", l), ("right", r)] {
            if !matches!(t, DataType::Boolean | DataType::Null) {
                return Err(ExprError::schema(format!(
                    "operator '{}' needs boolean operands, but the {side} operand of {expr} is {t}",
                    op.symbol()
                )));
            }
        }
        return Ok(DataType::Boolean);
    }
    // A null literal adopts the other operand's type.
    let (l, r) = match (l, r) {
        (DataType::Null, DataType::Null) => {
            return Ok(if op.is_comparison() {
                DataType::Boolean
            } else {
                DataType::Null
            })
        }
        (DataType::Null, r) => (r, r),
        (l, DataType::Null) => (l, l),
        (l, r) => (l, r),
    };
    if op.is_arithmetic() {
        return match (numeric_class(l), numeric_class(r)) {
            (Some(a), Some(b)) => Ok(if op.is_true_division() {
                DataType::Float64
            } else {
                a.common(b).data_type()
            }),
            _ => Err(ExprError::schema(format!(
                    "operator '{}' is not defined for {l} and {r} (in {expr}); arithmetic needs numeric operands",
                    op.symbol()
                ),
            )),
        };
    }
    if comparable(l, r) {
        Ok(DataType::Boolean)
    } else {
        Err(ExprError::schema(format!(
            "cannot compare {l} with {r} (in {expr})"
        )))
    }
}

/// The result type of `op t` in `expr`.
pub(crate) fn unary_type(op: UnaryOp, t: &DataType, expr: &Expr) -> ExprResult<DataType> {
    match op {
        UnaryOp::IsNull | UnaryOp::IsNotNull => Ok(DataType::Boolean),
        UnaryOp::Not => match t {
            DataType::Boolean | DataType::Null => Ok(DataType::Boolean),
            other => Err(ExprError::schema(format!("operator '~' needs a boolean operand, but the operand of {expr} is {other}"),
            )),
        },
        UnaryOp::Neg => match t {
            DataType::Null => Ok(DataType::Null),
            DataType::UInt64 => Err(unsupported_u64(expr)),
            other => numeric_class(other).map(NumClass::data_type).ok_or_else(|| {
                ExprError::schema(format!("cannot negate a value of type {other} (in {expr}); negation needs a numeric operand"),
                )
            }),
        },
    }
}

impl Expr {
    /// Type-checks the expression against `schema` and returns its result
    /// type.
    ///
    /// An unknown column is an [`ExprError::Graph`] naming the available
    /// columns; operands of the wrong type are an [`ExprError::Schema`]; the
    /// calling operator names itself with [`ExprError::at`].
    pub fn data_type(&self, schema: &Schema) -> ExprResult<DataType> {
        match self {
            Expr::Column(name) => match schema.column_with_name(name) {
                Some((_, field)) => Ok(field.data_type().clone()),
                None => Err(column_not_found(
                    name,
                    schema.fields().iter().map(|f| f.name().as_str()),
                )),
            },
            Expr::Literal(value) => Ok(literal_type(value)),
            Expr::Binary { op, left, right } => {
                let l = left.data_type(schema)?;
                let r = right.data_type(schema)?;
                binary_type(*op, &l, &r, self)
            }
            Expr::Unary { op, expr } => {
                let t = expr.data_type(schema)?;
                unary_type(*op, &t, self)
            }
            Expr::Call { function, args } => function.data_type(args, schema, self),
            Expr::Cast { expr, to } => super::cast::check(&expr.data_type(schema)?, to, self),
            Expr::Case {
                branches,
                otherwise,
            } => super::case::data_type(branches, otherwise.as_deref(), schema, self),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::datatypes::Field;

    fn schema() -> Schema {
        Schema::new(vec![
            Field::new("i32", DataType::Int32, true),
            Field::new("i64", DataType::Int64, true),
            Field::new("f32", DataType::Float32, true),
            Field::new("s", DataType::Utf8, true),
            Field::new("b", DataType::Boolean, true),
            Field::new("u64", DataType::UInt64, true),
        ])
    }

    fn bin(op: BinaryOp, l: Expr, r: Expr) -> Expr {
        Expr::binary(op, l, r)
    }

    #[test]
    fn test_promotion_rules() {
        let s = schema();
        let c = Expr::col;
        let check = |e: Expr, t: DataType| assert_eq!(e.data_type(&s).expect("typed"), t, "{e}");
        check(bin(BinaryOp::Add, c("i32"), c("i32")), DataType::Int64);
        check(bin(BinaryOp::Add, c("i32"), c("f32")), DataType::Float64);
        check(bin(BinaryOp::Div, c("i32"), c("i64")), DataType::Float64);
        check(bin(BinaryOp::FloorDiv, c("i32"), c("i64")), DataType::Int64);
        check(bin(BinaryOp::Mod, c("f32"), c("i64")), DataType::Float64);
        check(bin(BinaryOp::Lt, c("i32"), c("f32")), DataType::Boolean);
        check(
            bin(
                BinaryOp::Eq,
                c("s"),
                Expr::lit(ScalarValue::Utf8("x".into())),
            ),
            DataType::Boolean,
        );
        check(
            bin(BinaryOp::Add, c("i32"), Expr::lit(ScalarValue::Null)),
            DataType::Int64,
        );
        check(
            bin(BinaryOp::And, c("b"), Expr::lit(ScalarValue::Null)),
            DataType::Boolean,
        );
        check(Expr::unary(UnaryOp::Neg, c("i32")), DataType::Int64);
        check(Expr::unary(UnaryOp::IsNull, c("s")), DataType::Boolean);
        check(c("u64"), DataType::UInt64);
    }

    #[test]
    fn test_type_errors_are_schema_errors() {
        let s = schema();
        let c = Expr::col;
        for e in [
            bin(BinaryOp::Add, c("s"), Expr::lit(ScalarValue::Int64(1))),
            bin(BinaryOp::And, c("b"), c("i32")),
            bin(BinaryOp::Lt, c("s"), c("i64")),
            Expr::unary(UnaryOp::Not, c("i64")),
            Expr::unary(UnaryOp::Neg, c("s")),
            bin(BinaryOp::Add, c("u64"), c("i64")),
        ] {
            let err = e.data_type(&s).expect_err("must not type-check");
            assert!(matches!(err, ExprError::Schema(_)), "{e}: {err}");
        }
        let err = bin(BinaryOp::Add, c("u64"), c("i64"))
            .data_type(&s)
            .expect_err("u64");
        assert!(err.to_string().contains("unsigned 64-bit"), "{err}");
    }

    #[test]
    fn test_unknown_column_lists_available() {
        let err = Expr::col("x").data_type(&schema()).expect_err("unknown");
        assert!(matches!(err, ExprError::Graph(_)));
        assert!(
            err.to_string()
                .contains("column 'x' does not exist; available columns: i32, i64, f32, s, b, u64"),
            "{err}"
        );
    }
}
