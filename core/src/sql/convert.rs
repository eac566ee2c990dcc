//! DataFusion's logical expressions as eddyline's [`Expr`] (docs/DESIGN.md
//! "SQL"): columns are renamed to the names the lowered input has, library
//! calls are resolved again by name (to the same function, with Spark's
//! semantics), operators map to the expression's own, and SQL's `%`, `||`,
//! `BETWEEN`, `IN`, `LIKE` and `CASE x WHEN` to what Spark evaluates.

use arrow::datatypes::DataType;
use datafusion_common::{DFSchema, ScalarValue as DfScalar};
use datafusion_expr::{Expr as DfExpr, Operator};

use super::SqlError;
use crate::expr::{BinaryOp, Expr, ScalarValue, UnaryOp};

/// The columns of a plan node as DataFusion knows them and as the lowered
/// stream names them (aligned by index).
pub(crate) struct Columns<'a> {
    pub schema: &'a DFSchema,
    pub names: &'a [String],
}

impl Columns<'_> {
    /// The stream's name of DataFusion's column `column`.
    pub(crate) fn name_of(&self, column: &datafusion_common::Column) -> Result<String, SqlError> {
        let index = self
            .schema
            .index_of_column(column)
            .map_err(|e| SqlError::new("column", e.strip_backtrace()))?;
        Ok(self.names[index].clone())
    }
}

fn unsupported(construct: &str, why: &str) -> SqlError {
    SqlError::new(construct, why)
}

/// The Spark type name of an Arrow type a SQL `CAST` names.
fn spark_type(data_type: &DataType) -> Result<String, SqlError> {
    Ok(match data_type {
        DataType::Boolean => "boolean".into(),
        DataType::Int8 => "tinyint".into(),
        DataType::Int16 => "smallint".into(),
        DataType::Int32 => "int".into(),
        DataType::Int64 => "bigint".into(),
        DataType::Float32 => "float".into(),
        DataType::Float64 => "double".into(),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => "string".into(),
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView => "binary".into(),
        DataType::Date32 => "date".into(),
        DataType::Timestamp(_, Some(_)) => "timestamp".into(),
        DataType::Timestamp(_, None) => "timestamp_ntz".into(),
        DataType::Decimal128(p, s) => format!("decimal({p},{s})"),
        other => {
            return Err(unsupported(
                "CAST",
                &format!("no cast to {other}; cast to a Spark type (int, bigint, double, string, boolean, date, timestamp, decimal(p,s))"),
            ))
        }
    })
}

fn literal(value: &DfScalar) -> Result<ScalarValue, SqlError> {
    if value.is_null() {
        return Ok(ScalarValue::Null);
    }
    Ok(match value {
        DfScalar::Boolean(Some(b)) => ScalarValue::Boolean(*b),
        DfScalar::Int8(Some(v)) => ScalarValue::Int64(i64::from(*v)),
        DfScalar::Int16(Some(v)) => ScalarValue::Int64(i64::from(*v)),
        DfScalar::Int32(Some(v)) => ScalarValue::Int64(i64::from(*v)),
        DfScalar::Int64(Some(v)) => ScalarValue::Int64(*v),
        DfScalar::UInt8(Some(v)) => ScalarValue::Int64(i64::from(*v)),
        DfScalar::UInt16(Some(v)) => ScalarValue::Int64(i64::from(*v)),
        DfScalar::UInt32(Some(v)) => ScalarValue::Int64(i64::from(*v)),
        DfScalar::UInt64(Some(v)) => ScalarValue::Int64(
            i64::try_from(*v)
                .map_err(|_| unsupported("literal", &format!("{v} does not fit a bigint")))?,
        ),
        DfScalar::Float32(Some(v)) => ScalarValue::Float64(f64::from(*v)),
        DfScalar::Float64(Some(v)) => ScalarValue::Float64(*v),
        DfScalar::Utf8(Some(s)) | DfScalar::LargeUtf8(Some(s)) | DfScalar::Utf8View(Some(s)) => {
            ScalarValue::Utf8(s.clone())
        }
        other => {
            return Err(unsupported(
                "literal",
                &format!(
                    "literal {other} of type {} is not supported yet; use a number, string or \
                     boolean (CAST('...' AS TIMESTAMP) for times)",
                    other.data_type()
                ),
            ))
        }
    })
}

fn binary(op: BinaryOp, left: Expr, right: Expr) -> Expr {
    Expr::binary(op, left, right)
}

fn call(name: &str, args: Vec<Expr>) -> Result<Expr, SqlError> {
    Expr::call(name, args).map_err(|e| SqlError::new("function", e.to_string()))
}

/// `expr` over the input `columns` as an eddyline expression.
pub(crate) fn to_expr(expr: &DfExpr, columns: &Columns<'_>) -> Result<Expr, SqlError> {
    let conv = |e: &DfExpr| to_expr(e, columns);
    Ok(match expr {
        DfExpr::Alias(alias) => conv(&alias.expr)?,
        DfExpr::Column(c) => Expr::col(columns.name_of(c)?),
        DfExpr::Literal(value, _) => Expr::lit(literal(value)?),
        DfExpr::BinaryExpr(b) => binary_expr(b, columns)?,
        DfExpr::Not(e) => Expr::unary(UnaryOp::Not, conv(e)?),
        DfExpr::Negative(e) => Expr::unary(UnaryOp::Neg, conv(e)?),
        DfExpr::IsNull(e) => Expr::unary(UnaryOp::IsNull, conv(e)?),
        DfExpr::IsNotNull(e) => Expr::unary(UnaryOp::IsNotNull, conv(e)?),
        DfExpr::Between(_) | DfExpr::InList(_) | DfExpr::Like(_) => predicate(expr, columns)?,
        DfExpr::Cast(cast) => Expr::cast(conv(&cast.expr)?, &spark_type(cast.field.data_type())?)
            .map_err(|e| SqlError::new("CAST", e.to_string()))?,
        DfExpr::TryCast(cast) => {
            Expr::cast(conv(&cast.expr)?, &spark_type(cast.field.data_type())?)
                .map_err(|e| SqlError::new("TRY_CAST", e.to_string()))?
        }
        DfExpr::ScalarFunction(f) => {
            let args = f.args.iter().map(conv).collect::<Result<Vec<_>, _>>()?;
            call(f.func.name(), args)?
        }
        DfExpr::Case(case) => case_expr(case, columns)?,
        DfExpr::AggregateFunction(f) => {
            return Err(unsupported(
                "aggregate",
                &format!(
                    "aggregate {}() is only allowed in a SELECT with GROUP BY",
                    f.func.name()
                ),
            ))
        }
        DfExpr::WindowFunction(_) => {
            return Err(unsupported(
                "OVER",
                "window functions (OVER ...) are not supported; group by a window instead",
            ))
        }
        DfExpr::ScalarSubquery(_) | DfExpr::Exists(_) | DfExpr::InSubquery(_) => {
            return Err(unsupported(
                "subquery expression",
                "subqueries in expressions are not supported; use a join or a subquery in FROM",
            ))
        }
        other => {
            return Err(unsupported(
                other.variant_name(),
                &format!("expression {other} is not supported yet"),
            ))
        }
    })
}

/// A binary operator of SQL over `columns`.
fn binary_expr(b: &datafusion_expr::BinaryExpr, columns: &Columns<'_>) -> Result<Expr, SqlError> {
    let (left, right) = (to_expr(&b.left, columns)?, to_expr(&b.right, columns)?);
    let op = match b.op {
        Operator::Plus => BinaryOp::Add,
        Operator::Minus => BinaryOp::Sub,
        Operator::Multiply => BinaryOp::Mul,
        // Spark's `/`: null for a zero divisor, unlike the DSL's (Python's).
        Operator::Divide => BinaryOp::SparkDiv { ansi: false },
        // Spark's `%` keeps the dividend's sign (Python's the divisor's).
        Operator::Modulo => return call("mod", vec![left, right]),
        Operator::StringConcat => return call("concat", vec![left, right]),
        Operator::Eq => BinaryOp::Eq,
        Operator::NotEq => BinaryOp::NotEq,
        Operator::Lt => BinaryOp::Lt,
        Operator::LtEq => BinaryOp::LtEq,
        Operator::Gt => BinaryOp::Gt,
        Operator::GtEq => BinaryOp::GtEq,
        Operator::And => BinaryOp::And,
        Operator::Or => BinaryOp::Or,
        other => {
            return Err(unsupported(
                &other.to_string(),
                &format!("operator {other} is not supported yet"),
            ))
        }
    };
    Ok(binary(op, left, right))
}

/// `BETWEEN`, `IN (...)` and `LIKE` over `columns`, as Spark evaluates them.
fn predicate(expr: &DfExpr, columns: &Columns<'_>) -> Result<Expr, SqlError> {
    let conv = |e: &DfExpr| to_expr(e, columns);
    Ok(match expr {
        DfExpr::Between(b) => {
            let value = conv(&b.expr)?;
            let low = binary(BinaryOp::GtEq, value.clone(), conv(&b.low)?);
            let high = binary(BinaryOp::LtEq, value, conv(&b.high)?);
            let both = binary(BinaryOp::And, low, high);
            if b.negated {
                Expr::unary(UnaryOp::Not, both)
            } else {
                both
            }
        }
        DfExpr::InList(list) => {
            let value = conv(&list.expr)?;
            let mut any: Option<Expr> = None;
            for item in &list.list {
                let eq = binary(BinaryOp::Eq, value.clone(), conv(item)?);
                any = Some(match any {
                    None => eq,
                    Some(acc) => binary(BinaryOp::Or, acc, eq),
                });
            }
            let any = any.unwrap_or_else(|| Expr::lit(ScalarValue::Boolean(false)));
            if list.negated {
                Expr::unary(UnaryOp::Not, any)
            } else {
                any
            }
        }
        DfExpr::Like(like) => {
            if like.escape_char.is_some() {
                return Err(unsupported(
                    "LIKE ... ESCAPE",
                    "LIKE with ESCAPE is not supported yet",
                ));
            }
            let name = if like.case_insensitive {
                "ilike"
            } else {
                "like"
            };
            let matched = call(name, vec![conv(&like.expr)?, conv(&like.pattern)?])?;
            if like.negated {
                Expr::unary(UnaryOp::Not, matched)
            } else {
                matched
            }
        }
        other => return Err(unsupported(other.variant_name(), "not a predicate")),
    })
}

/// `CASE [x] WHEN ... THEN ... [ELSE ...] END` over `columns`.
fn case_expr(case: &datafusion_expr::expr::Case, columns: &Columns<'_>) -> Result<Expr, SqlError> {
    let conv = |e: &DfExpr| to_expr(e, columns);
    let operand = case.expr.as_deref().map(conv).transpose()?;
    let mut branches = Vec::with_capacity(case.when_then_expr.len());
    for (when, then) in &case.when_then_expr {
        let when = conv(when)?;
        let when = match &operand {
            Some(value) => binary(BinaryOp::Eq, value.clone(), when),
            None => when,
        };
        branches.push((when, conv(then)?));
    }
    let otherwise = case.else_expr.as_deref().map(conv).transpose()?;
    Ok(Expr::case(branches, otherwise))
}
