//! Native column expressions: the tree the Python DSL's `col("x") * 2 > 3`
//! builds, its type rules and its vectorized evaluation over Arrow batches
//! (DESIGN.md "Runtime": native operators run in Rust without the GIL).
//!
//! An [`Expr`] is checked against a schema with [`Expr::data_type`] when the
//! job graph is built and evaluated per batch with [`Expr::evaluate`]. The
//! semantics follow Python where Python and SQL agree and SQL for nulls:
//!
//! * Integer types (`Int8`..`Int64`, `UInt8`..`UInt32`) promote to `Int64`,
//!   `Float32`/`Float64` to `Float64`; mixing integers and floats gives
//!   `Float64`. `UInt64` is refused ("cast first") because it does not fit
//!   `Int64`.
//! * `+ - * // %` on integers give `Int64` and fail on overflow; `/` always
//!   gives `Float64`. `/`, `//` and `%` by zero fail with "division by zero",
//!   for floats too (a divisor of `0.0` or `-0.0`), as Python raises
//!   `ZeroDivisionError`; a `NaN` or infinite operand follows IEEE 754.
//! * Spark SQL's `/` (`F.expr`, `env.sql`) is its own operator,
//!   [`BinaryOp::SparkDiv`]: the quotient as a double, null where the divisor
//!   is zero, or in ANSI mode a `DIVIDE_BY_ZERO` failure (DESIGN.md
//!   "Expressions").
//! * `//` floors (Python), `%` takes the sign of the divisor (Python:
//!   `-7 % 3 == 2`, `7 % -3 == -2`); for floats `a // b` is `floor(a / b)`.
//! * Comparisons work between numerics (after promotion), between strings
//!   (`Utf8`, `LargeUtf8`, `Utf8View`), between booleans and between two
//!   values of one other type (dates, timestamps). Floats compare by IEEE 754
//!   (`NaN != NaN`, `-0.0 == 0.0`), like Python.
//! * `& | ~` take booleans only and use Kleene logic (`null & false` is
//!   `false`); every other operator propagates nulls. A `None` literal adopts
//!   the type of the other operand.
//! * Errors raised for a row only count when that row's inputs are not null.
//!
//! Library functions (`lower`, `sha2`, `round`...), casts and `CASE WHEN`
//! follow Spark's non-ANSI semantics instead (DESIGN.md "Expressions"):
//! a [`Expr::Call`] is resolved by name to one of DataFusion's scalar
//! functions, Spark's own version from `datafusion-spark` where Spark
//! differs (see `function.rs`); [`Expr::Cast`] takes a Spark type name and
//! gives null where a value does not convert (see `cast.rs`);
//! [`Expr::Case`] evaluates each branch only on the rows that reach it, as
//! Spark does (see `case.rs`).

mod aggregate;
mod aggregate_ansi;
mod aggregate_set;
mod case;
mod cast;
mod eval;
mod function;
mod json;
mod kernels;
mod parse;
mod spark_datetime;
mod spark_functions;
mod spark_json;
mod spark_nested;
mod spark_regex;
mod spark_regex_run;
mod spark_remainder;
mod spark_time;
mod spark_window_time;
mod type_class;
mod types;
mod value;

#[cfg(test)]
mod spark_tests;

pub use aggregate::{Aggregate, AggregateState, BoundAggregate};
pub use aggregate_set::{AggregateSet, AggregateSlots, STATE_COLUMN_PREFIX};
pub use cast::SparkType;
pub(crate) use function::library_function;
pub use function::Function;
pub use parse::{parse as parse_sql, struct_args, struct_field_name, Parsed};
pub use spark_nested::GENERATORS;
pub(crate) use value::Value;

use std::fmt;

use crate::error::Error;

/// Why an expression cannot be type-checked or evaluated. Expressions do not
/// know which operator runs them: the operator names itself with
/// [`ExprError::at`] where it calls them, so every engine error names its
/// operator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExprError {
    /// An unknown column (a graph error).
    Graph(String),
    /// Operands of the wrong type.
    Schema(String),
    /// A failure while evaluating rows (division by zero, overflow).
    Operator(String),
}

impl ExprError {
    pub(crate) fn graph(message: impl Into<String>) -> Self {
        ExprError::Graph(message.into())
    }

    pub(crate) fn schema(message: impl Into<String>) -> Self {
        ExprError::Schema(message.into())
    }

    pub(crate) fn operator(message: impl Into<String>) -> Self {
        ExprError::Operator(message.into())
    }

    /// The engine error of operator `operator` that evaluated the expression.
    pub fn at(self, operator: &str) -> Error {
        match self {
            ExprError::Graph(m) => Error::graph(operator, m),
            ExprError::Schema(m) => Error::schema(operator, m),
            ExprError::Operator(m) => Error::operator(operator, m),
        }
    }
}

impl fmt::Display for ExprError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExprError::Graph(m) | ExprError::Schema(m) | ExprError::Operator(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for ExprError {}

/// The result of type-checking or evaluating an expression.
pub type ExprResult<T> = std::result::Result<T, ExprError>;

/// A literal value of an expression.
#[derive(Debug, Clone, PartialEq)]
pub enum ScalarValue {
    /// The untyped null (`None` in Python); adopts the other operand's type.
    Null,
    Boolean(bool),
    Int64(i64),
    Float64(f64),
    Utf8(String),
}

/// A binary operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    /// True division, always `Float64` (Python `/`).
    Div,
    /// Floor division (Python `//`): `Int64` for integers, `floor(a / b)` for
    /// floats.
    FloorDiv,
    /// Modulo with Python semantics: the result has the sign of the divisor.
    Mod,
    /// Spark SQL's `/` (the spelling of `F.expr` and `env.sql`): always
    /// `Float64`, and null where the divisor is zero (`0`, `0.0` or `-0.0`),
    /// as Spark with ANSI mode off; with `ansi` (`spark.sql.ansi.enabled`,
    /// [`Expr::with_ansi`]) such a row fails with `DIVIDE_BY_ZERO`.
    SparkDiv {
        ansi: bool,
    },
    Eq,
    NotEq,
    Lt,
    LtEq,
    Gt,
    GtEq,
    /// Kleene AND on booleans.
    And,
    /// Kleene OR on booleans.
    Or,
}

impl BinaryOp {
    /// The Python spelling of the operator.
    pub fn symbol(self) -> &'static str {
        match self {
            BinaryOp::Add => "+",
            BinaryOp::Sub => "-",
            BinaryOp::Mul => "*",
            BinaryOp::Div | BinaryOp::SparkDiv { .. } => "/",
            BinaryOp::FloorDiv => "//",
            BinaryOp::Mod => "%",
            BinaryOp::Eq => "==",
            BinaryOp::NotEq => "!=",
            BinaryOp::Lt => "<",
            BinaryOp::LtEq => "<=",
            BinaryOp::Gt => ">",
            BinaryOp::GtEq => ">=",
            BinaryOp::And => "&",
            BinaryOp::Or => "|",
        }
    }

    /// Whether the operator is arithmetic (`+ - * / // %`).
    pub fn is_arithmetic(self) -> bool {
        matches!(
            self,
            BinaryOp::Add
                | BinaryOp::Sub
                | BinaryOp::Mul
                | BinaryOp::Div
                | BinaryOp::SparkDiv { .. }
                | BinaryOp::FloorDiv
                | BinaryOp::Mod
        )
    }

    /// Whether the operator divides as `/` does, giving `Float64` (Python's
    /// `/` or Spark's).
    pub fn is_true_division(self) -> bool {
        matches!(self, BinaryOp::Div | BinaryOp::SparkDiv { .. })
    }

    /// The operator in Spark's ANSI mode or out of it; only Spark's `/`
    /// has one.
    pub fn with_ansi(self, ansi: bool) -> Self {
        match self {
            BinaryOp::SparkDiv { .. } => BinaryOp::SparkDiv { ansi },
            other => other,
        }
    }

    /// Whether the operator is a comparison (`== != < <= > >=`).
    pub fn is_comparison(self) -> bool {
        matches!(
            self,
            BinaryOp::Eq
                | BinaryOp::NotEq
                | BinaryOp::Lt
                | BinaryOp::LtEq
                | BinaryOp::Gt
                | BinaryOp::GtEq
        )
    }

    /// Whether the operator is logical (`& |`).
    pub fn is_logical(self) -> bool {
        matches!(self, BinaryOp::And | BinaryOp::Or)
    }
}

/// A unary operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UnaryOp {
    /// Boolean negation (`~`), Kleene (`~null` is null).
    Not,
    /// Arithmetic negation; integers promote to `Int64` and fail on overflow.
    Neg,
    /// Whether the value is null; never null itself.
    IsNull,
    /// Whether the value is not null; never null itself.
    IsNotNull,
}

/// An expression over the columns of a record batch.
#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    Column(String),
    Literal(ScalarValue),
    Binary {
        op: BinaryOp,
        left: Box<Expr>,
        right: Box<Expr>,
    },
    Unary {
        op: UnaryOp,
        expr: Box<Expr>,
    },
    /// A call of a library function, resolved by name when it is built
    /// ([`Expr::call`]).
    Call {
        function: Function,
        args: Vec<Expr>,
    },
    /// `CAST(expr AS to)`, null where a value does not convert.
    Cast {
        expr: Box<Expr>,
        to: SparkType,
    },
    /// `CASE WHEN c1 THEN v1 WHEN c2 THEN v2 ... ELSE otherwise END`: the
    /// value of the first branch whose condition is true, else `otherwise`
    /// (null without one).
    Case {
        branches: Vec<(Expr, Expr)>,
        otherwise: Option<Box<Expr>>,
    },
}

impl Expr {
    /// A reference to column `name`.
    pub fn col(name: impl Into<String>) -> Self {
        Expr::Column(name.into())
    }

    /// A literal.
    pub fn lit(value: ScalarValue) -> Self {
        Expr::Literal(value)
    }

    /// `left op right`.
    pub fn binary(op: BinaryOp, left: Expr, right: Expr) -> Self {
        Expr::Binary {
            op,
            left: Box::new(left),
            right: Box::new(right),
        }
    }

    /// `op expr`.
    pub fn unary(op: UnaryOp, expr: Expr) -> Self {
        Expr::Unary {
            op,
            expr: Box::new(expr),
        }
    }

    /// A call of library function `name` (Spark's name, case-insensitive)
    /// with `args`.
    ///
    /// An unknown name is an [`ExprError::Graph`]; argument types are
    /// checked by [`Expr::data_type`].
    pub fn call(name: &str, args: Vec<Expr>) -> ExprResult<Self> {
        function::resolve(name, args)
    }

    /// `CAST(expr AS to)` with `to` a Spark type name (`"int"`, `"bigint"`,
    /// `"double"`, `"string"`, `"decimal(10,2)"`...); an unknown name is an
    /// [`ExprError::Schema`].
    pub fn cast(expr: Expr, to: &str) -> ExprResult<Self> {
        Ok(Expr::Cast {
            expr: Box::new(expr),
            to: SparkType::parse(to)?,
        })
    }

    /// `CASE WHEN ... THEN ... ELSE otherwise END`.
    pub fn case(branches: Vec<(Expr, Expr)>, otherwise: Option<Expr>) -> Self {
        Expr::Case {
            branches,
            otherwise: otherwise.map(Box::new),
        }
    }

    /// The expression in Spark's ANSI mode (`spark.sql.ansi.enabled`) or
    /// out of it: in ANSI mode its casts, library calls and Spark divisions
    /// fail on values they would otherwise turn into null (DESIGN.md
    /// "Expressions").
    pub fn with_ansi(self, ansi: bool) -> Expr {
        let map = |e: Box<Expr>| Box::new(e.with_ansi(ansi));
        match self {
            Expr::Column(_) | Expr::Literal(_) => self,
            Expr::Binary { op, left, right } => Expr::Binary {
                op: op.with_ansi(ansi),
                left: map(left),
                right: map(right),
            },
            Expr::Unary { op, expr } => Expr::Unary {
                op,
                expr: map(expr),
            },
            Expr::Call { function, args } => Expr::Call {
                function: function.with_ansi(ansi),
                args: args.into_iter().map(|a| a.with_ansi(ansi)).collect(),
            },
            Expr::Cast { expr, to } => Expr::Cast {
                expr: map(expr),
                to: to.with_ansi(ansi),
            },
            Expr::Case {
                branches,
                otherwise,
            } => Expr::Case {
                branches: branches
                    .into_iter()
                    .map(|(when, then)| (when.with_ansi(ansi), then.with_ansi(ansi)))
                    .collect(),
                otherwise: otherwise.map(map),
            },
        }
    }

    /// The columns the expression references, each once, in order of first
    /// appearance.
    pub fn columns(&self) -> Vec<&str> {
        let mut out = Vec::new();
        self.collect_columns(&mut out);
        out
    }

    fn collect_columns<'a>(&'a self, out: &mut Vec<&'a str>) {
        match self {
            Expr::Column(name) => {
                if !out.contains(&name.as_str()) {
                    out.push(name);
                }
            }
            Expr::Literal(_) => {}
            Expr::Binary { left, right, .. } => {
                left.collect_columns(out);
                right.collect_columns(out);
            }
            Expr::Unary { expr, .. } | Expr::Cast { expr, .. } => expr.collect_columns(out),
            Expr::Call { args, .. } => {
                for arg in args {
                    arg.collect_columns(out);
                }
            }
            Expr::Case {
                branches,
                otherwise,
            } => {
                for (when, then) in branches {
                    when.collect_columns(out);
                    then.collect_columns(out);
                }
                if let Some(otherwise) = otherwise {
                    otherwise.collect_columns(out);
                }
            }
        }
    }

    /// The expression formatted the way the Python DSL spells it, e.g.
    /// `(col("value") * 2)`; used in error messages.
    pub fn display(&self) -> String {
        self.to_string()
    }
}

impl fmt::Display for ScalarValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ScalarValue::Null => f.write_str("None"),
            ScalarValue::Boolean(true) => f.write_str("True"),
            ScalarValue::Boolean(false) => f.write_str("False"),
            ScalarValue::Int64(v) => write!(f, "{v}"),
            ScalarValue::Float64(v) => write!(f, "{v:?}"),
            ScalarValue::Utf8(s) => write!(f, "{s:?}"),
        }
    }
}

impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Expr::Column(name) => write!(f, "col({name:?})"),
            Expr::Literal(value) => write!(f, "{value}"),
            Expr::Binary { op, left, right } => write!(f, "({left} {} {right})", op.symbol()),
            Expr::Unary { op, expr } => match op {
                UnaryOp::Not => write!(f, "~{expr}"),
                UnaryOp::Neg => write!(f, "-{expr}"),
                UnaryOp::IsNull => write!(f, "{expr}.is_null()"),
                UnaryOp::IsNotNull => write!(f, "{expr}.is_not_null()"),
            },
            Expr::Call { function, args } => {
                write!(f, "{}(", function.name())?;
                for (i, arg) in args.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{arg}")?;
                }
                f.write_str(")")
            }
            Expr::Cast { expr, to } => write!(f, "{expr}.cast({:?})", to.name()),
            Expr::Case {
                branches,
                otherwise,
            } => {
                for (i, (when, then)) in branches.iter().enumerate() {
                    if i == 0 {
                        write!(f, "when({when}, {then})")?;
                    } else {
                        write!(f, ".when({when}, {then})")?;
                    }
                }
                if branches.is_empty() {
                    f.write_str("case()")?;
                }
                match otherwise {
                    Some(otherwise) => write!(f, ".otherwise({otherwise})"),
                    None => Ok(()),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_display_python_spelling() {
        let e = Expr::binary(
            BinaryOp::Mul,
            Expr::col("value"),
            Expr::lit(ScalarValue::Int64(2)),
        );
        assert_eq!(e.to_string(), r#"(col("value") * 2)"#);
        let e = Expr::unary(
            UnaryOp::Not,
            Expr::binary(
                BinaryOp::Eq,
                Expr::col("s"),
                Expr::lit(ScalarValue::Utf8("a".into())),
            ),
        );
        assert_eq!(e.display(), r#"~(col("s") == "a")"#);
        assert_eq!(Expr::lit(ScalarValue::Float64(2.0)).to_string(), "2.0");
        assert_eq!(Expr::lit(ScalarValue::Null).to_string(), "None");
        assert_eq!(
            Expr::unary(UnaryOp::IsNull, Expr::col("a")).to_string(),
            r#"col("a").is_null()"#
        );
    }

    #[test]
    fn test_columns_deduplicated_in_order() {
        let e = Expr::binary(
            BinaryOp::Add,
            Expr::binary(BinaryOp::Mul, Expr::col("b"), Expr::col("a")),
            Expr::unary(UnaryOp::Neg, Expr::col("b")),
        );
        assert_eq!(e.columns(), vec!["b", "a"]);
        assert!(Expr::lit(ScalarValue::Int64(1)).columns().is_empty());
    }
}
