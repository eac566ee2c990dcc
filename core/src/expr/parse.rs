//! `F.expr("<Spark SQL expression>")`: a Spark SQL expression parsed with
//! the `sqlparser` crate (the version DataFusion uses, Spark's dialect) and
//! lowered onto [`Expr`] (DESIGN.md "Expressions").
//!
//! Taken: column names (`` `quoted` `` too), `a.b` and `a['b']` field
//! access, `a[0]` array items, literals (integers are `bigint`, other
//! numbers `double`, `'...'` and `"..."` strings, `true`, `false`, `null`),
//! `+ - * / %` (`/` and `%` are Spark's: `/` gives a double, `%` the
//! dividend's sign, and both are null for a zero divisor), `||`,
//! comparisons (`=`, `==`, `!=`, `<>`, ...), `AND`/`OR`/`NOT`/`!`, `IS [NOT]
//! NULL`, `CASE [x] WHEN ... END`, `CAST(x AS type)`, `[NOT] IN (...)`,
//! `[NOT] BETWEEN`, `[NOT] LIKE`, `RLIKE`/`REGEXP`, and calls of the
//! function library by Spark's names (the same table as `F.*`), and a
//! trailing `AS name`. Anything else is an [`ExprError::Graph`] naming the
//! text and where in it the construct starts; so is an aggregate (`sum(x)`)
//! for now, which belongs in `agg(...)`.

use sqlparser::ast::{
    self as sql, BinaryOperator, CastKind, FunctionArg, FunctionArgExpr, FunctionArguments,
    Spanned, UnaryOperator,
};
use sqlparser::dialect::SparkSqlDialect;
use sqlparser::parser::Parser;

use super::{BinaryOp, Expr, ExprError, ExprResult, ScalarValue, UnaryOp};

/// A parsed expression and the name `AS` gave it, if any.
#[derive(Debug, Clone, PartialEq)]
pub struct Parsed {
    pub expr: Expr,
    pub alias: Option<String>,
}

/// Parses the Spark SQL expression `text`.
pub fn parse(text: &str) -> ExprResult<Parsed> {
    let dialect = SparkSqlDialect {};
    let mut parser = Parser::new(&dialect)
        .try_with_sql(text)
        .map_err(|e| ExprError::graph(format!("cannot parse expression {text:?}: {e}")))?;
    let parsed = parser
        .parse_expr_with_alias()
        .map_err(|e| ExprError::graph(format!("cannot parse expression {text:?}: {e}")))?;
    let next = parser.peek_token();
    if next.token != sqlparser::tokenizer::Token::EOF {
        return Err(ExprError::graph(format!(
            "cannot parse expression {text:?}: unexpected '{}' at line {}, column {}",
            next.token, next.span.start.line, next.span.start.column
        )));
    }
    let lowering = Lowering { text };
    Ok(Parsed {
        expr: lowering.expr(&parsed.expr)?,
        alias: parsed.alias.map(|a| a.value),
    })
}

struct Lowering<'a> {
    text: &'a str,
}

impl Lowering<'_> {
    /// The error for construct `what` of `node`, naming where it starts.
    fn unsupported(&self, what: &str, node: &impl Spanned) -> ExprError {
        ExprError::graph(format!(
            "{what} is not supported in expression {:?}{}",
            self.text,
            position(node)
        ))
    }

    /// Wraps an error of building `node` with where it is.
    fn located(&self, e: ExprError, node: &impl Spanned) -> ExprError {
        let at = format!("in expression {:?}{}", self.text, position(node));
        match e {
            ExprError::Graph(m) => ExprError::Graph(format!("{m} {at}")),
            ExprError::Schema(m) => ExprError::Schema(format!("{m} {at}")),
            ExprError::Operator(m) => ExprError::Operator(format!("{m} {at}")),
        }
    }

    fn call(&self, name: &str, args: Vec<Expr>, node: &impl Spanned) -> ExprResult<Expr> {
        Expr::call(name, args).map_err(|e| self.located(e, node))
    }

    fn boxed(&self, e: &sql::Expr) -> ExprResult<Box<Expr>> {
        self.expr(e).map(Box::new)
    }

    fn expr(&self, e: &sql::Expr) -> ExprResult<Expr> {
        use sql::Expr as S;
        Ok(match e {
            S::Identifier(ident) => Expr::col(ident.value.clone()),
            S::CompoundIdentifier(parts) => {
                let mut out = Expr::col(parts[0].value.clone());
                for part in &parts[1..] {
                    out = field(out, &part.value)?;
                }
                out
            }
            S::CompoundFieldAccess { root, access_chain } => self.access(root, access_chain, e)?,
            S::Nested(inner) => self.expr(inner)?,
            S::Value(value) => Expr::lit(self.value(value)?),
            S::IsNull(inner) => Expr::unary(UnaryOp::IsNull, self.expr(inner)?),
            S::IsNotNull(inner) => Expr::unary(UnaryOp::IsNotNull, self.expr(inner)?),
            S::UnaryOp { op, expr } => self.unary(*op, expr, e)?,
            S::BinaryOp { left, op, right } => self.binary(op, left, right, e)?,
            S::InList {
                expr,
                list,
                negated,
            } => negate(*negated, self.in_list(expr, list)?),
            S::Between {
                expr,
                negated,
                low,
                high,
            } => {
                let value = self.expr(expr)?;
                let low = Expr::binary(BinaryOp::GtEq, value.clone(), self.expr(low)?);
                let high = Expr::binary(BinaryOp::LtEq, value, self.expr(high)?);
                negate(*negated, Expr::binary(BinaryOp::And, low, high))
            }
            S::Like {
                negated,
                any: false,
                expr,
                pattern,
                escape_char: None,
            } => {
                let args = vec![self.expr(expr)?, self.expr(pattern)?];
                negate(*negated, self.call("like", args, e)?)
            }
            S::RLike {
                negated,
                expr,
                pattern,
                ..
            } => {
                let args = vec![self.expr(expr)?, self.expr(pattern)?];
                negate(*negated, self.call("rlike", args, e)?)
            }
            S::Cast {
                kind: CastKind::Cast,
                expr,
                data_type,
                array: false,
                format: None,
            } => Expr::cast(self.expr(expr)?, &data_type.to_string())
                .map_err(|err| self.located(err, e))?,
            S::Case {
                operand,
                conditions,
                else_result,
                ..
            } => self.case(operand.as_deref(), conditions, else_result.as_deref())?,
            S::Function(function) => self.function(function, e)?,
            // Spark's `struct(a, b)` (the parser's struct literal).
            S::Struct { values, fields } if fields.is_empty() => {
                let values = values
                    .iter()
                    .map(|v| self.expr(v))
                    .collect::<ExprResult<Vec<_>>>()?;
                self.call("named_struct", struct_args(values), e)?
            }
            S::Ceil {
                expr,
                field: sql::CeilFloorKind::DateTimeField(sql::DateTimeField::NoDateTime),
            } => self.call("ceil", vec![self.expr(expr)?], e)?,
            S::Floor {
                expr,
                field: sql::CeilFloorKind::DateTimeField(sql::DateTimeField::NoDateTime),
            } => self.call("floor", vec![self.expr(expr)?], e)?,
            other => {
                let what = format!("'{other}'");
                return Err(self.unsupported(&what, e));
            }
        })
    }

    /// `root.a`, `root['a']`, `root[0]`.
    fn access(
        &self,
        root: &sql::Expr,
        chain: &[sql::AccessExpr],
        node: &sql::Expr,
    ) -> ExprResult<Expr> {
        let mut out = self.expr(root)?;
        for access in chain {
            out = match access {
                sql::AccessExpr::Dot(sql::Expr::Identifier(ident)) => field(out, &ident.value)?,
                sql::AccessExpr::Subscript(sql::Subscript::Index { index }) => {
                    match self.expr(index)? {
                        Expr::Literal(ScalarValue::Utf8(name)) => field(out, &name)?,
                        index => self.call("get_item", vec![out, index], node)?,
                    }
                }
                other => return Err(self.unsupported(&format!("'{other}'"), node)),
            };
        }
        Ok(out)
    }

    /// `value IN (list)`: Spark's `value = a OR value = b ...`.
    fn in_list(&self, value: &sql::Expr, list: &[sql::Expr]) -> ExprResult<Expr> {
        let value = self.expr(value)?;
        let mut out: Option<Expr> = None;
        for item in list {
            let eq = Expr::binary(BinaryOp::Eq, value.clone(), self.expr(item)?);
            out = Some(match out {
                None => eq,
                Some(acc) => Expr::binary(BinaryOp::Or, acc, eq),
            });
        }
        Ok(out.unwrap_or(Expr::lit(ScalarValue::Boolean(false))))
    }

    /// `CASE [operand] WHEN ... THEN ... [ELSE ...] END`.
    fn case(
        &self,
        operand: Option<&sql::Expr>,
        conditions: &[sql::CaseWhen],
        else_result: Option<&sql::Expr>,
    ) -> ExprResult<Expr> {
        let operand = operand.map(|o| self.expr(o)).transpose()?;
        let mut branches = Vec::with_capacity(conditions.len());
        for when in conditions {
            let condition = self.expr(&when.condition)?;
            let condition = match &operand {
                Some(o) => Expr::binary(BinaryOp::Eq, o.clone(), condition),
                None => condition,
            };
            branches.push((condition, self.expr(&when.result)?));
        }
        let otherwise = else_result.map(|o| self.boxed(o)).transpose()?;
        Ok(Expr::Case {
            branches,
            otherwise,
        })
    }

    fn value(&self, value: &sql::ValueWithSpan) -> ExprResult<ScalarValue> {
        use sql::Value as V;
        Ok(match &value.value {
            V::Null => ScalarValue::Null,
            V::Boolean(b) => ScalarValue::Boolean(*b),
            V::SingleQuotedString(s) | V::DoubleQuotedString(s) => ScalarValue::Utf8(s.clone()),
            V::Number(n, _) => {
                let integral = n.bytes().all(|b| b.is_ascii_digit());
                match (integral, n.parse::<i64>(), n.parse::<f64>()) {
                    (true, Ok(i), _) => ScalarValue::Int64(i),
                    (false, _, Ok(f)) => ScalarValue::Float64(f),
                    _ => {
                        return Err(self.unsupported(
                            &format!("the number {n} (beyond a 64-bit integer)"),
                            value,
                        ))
                    }
                }
            }
            other => return Err(self.unsupported(&format!("the literal {other}"), value)),
        })
    }

    fn unary(&self, op: UnaryOperator, inner: &sql::Expr, node: &sql::Expr) -> ExprResult<Expr> {
        let value = self.expr(inner)?;
        Ok(match op {
            UnaryOperator::Not | UnaryOperator::BangNot => Expr::unary(UnaryOp::Not, value),
            UnaryOperator::Minus => match value {
                Expr::Literal(ScalarValue::Int64(v)) => Expr::lit(ScalarValue::Int64(-v)),
                Expr::Literal(ScalarValue::Float64(v)) => Expr::lit(ScalarValue::Float64(-v)),
                other => Expr::unary(UnaryOp::Neg, other),
            },
            UnaryOperator::Plus => value,
            other => return Err(self.unsupported(&format!("the operator '{other}'"), node)),
        })
    }

    fn binary(
        &self,
        op: &BinaryOperator,
        left: &sql::Expr,
        right: &sql::Expr,
        node: &sql::Expr,
    ) -> ExprResult<Expr> {
        let op = match op {
            BinaryOperator::Plus => BinaryOp::Add,
            BinaryOperator::Minus => BinaryOp::Sub,
            BinaryOperator::Multiply => BinaryOp::Mul,
            // Spark's `/`: null for a zero divisor, unlike the DSL's (Python's).
            BinaryOperator::Divide => BinaryOp::SparkDiv { ansi: false },
            BinaryOperator::Eq => BinaryOp::Eq,
            BinaryOperator::NotEq => BinaryOp::NotEq,
            BinaryOperator::Lt => BinaryOp::Lt,
            BinaryOperator::LtEq => BinaryOp::LtEq,
            BinaryOperator::Gt => BinaryOp::Gt,
            BinaryOperator::GtEq => BinaryOp::GtEq,
            BinaryOperator::And => BinaryOp::And,
            BinaryOperator::Or => BinaryOp::Or,
            // Spark's `%` keeps the dividend's sign (Java), unlike the
            // Python `%` of the DSL's operator.
            BinaryOperator::Modulo => {
                return self.call("mod", vec![self.expr(left)?, self.expr(right)?], node)
            }
            BinaryOperator::StringConcat => {
                return self.call("concat", vec![self.expr(left)?, self.expr(right)?], node)
            }
            other => return Err(self.unsupported(&format!("the operator '{other}'"), node)),
        };
        Ok(Expr::binary(op, self.expr(left)?, self.expr(right)?))
    }

    fn function(&self, function: &sql::Function, node: &sql::Expr) -> ExprResult<Expr> {
        let name = function.name.to_string();
        if function.over.is_some() || function.filter.is_some() || !function.within_group.is_empty()
        {
            return Err(self.unsupported(&format!("a window or filter clause on '{name}'"), node));
        }
        let lower = name.to_ascii_lowercase();
        if super::Aggregate::new(&lower, vec![]).is_ok()
            && Expr::call(&lower, vec![]).is_err_and(|e| matches!(e, ExprError::Graph(_)))
        {
            return Err(self.unsupported(
                &format!("the aggregate '{name}' (aggregates belong in agg(...))"),
                node,
            ));
        }
        let args = match &function.args {
            FunctionArguments::None => Vec::new(),
            FunctionArguments::List(list) => {
                if list.duplicate_treatment.is_some() || !list.clauses.is_empty() {
                    return Err(
                        self.unsupported(&format!("DISTINCT or a clause in '{name}'"), node)
                    );
                }
                let mut args = Vec::with_capacity(list.args.len());
                for arg in &list.args {
                    match arg {
                        FunctionArg::Unnamed(FunctionArgExpr::Expr(a)) => args.push(self.expr(a)?),
                        other => {
                            return Err(self
                                .unsupported(&format!("the argument '{other}' of '{name}'"), node))
                        }
                    }
                }
                args
            }
            FunctionArguments::Subquery(_) => {
                return Err(self.unsupported(&format!("a subquery in '{name}'"), node))
            }
        };
        match lower.as_str() {
            // `struct(a, b)` names its fields after the columns, as Spark.
            "struct" => self.call("named_struct", struct_args(args), node),
            "isnull" => Ok(Expr::unary(UnaryOp::IsNull, one(args, &name)?)),
            "isnotnull" => Ok(Expr::unary(UnaryOp::IsNotNull, one(args, &name)?)),
            _ => self.call(&lower, args, node),
        }
    }
}

/// Where `node` starts, as " (at line L, column C)"; empty where the parser
/// keeps no position for it.
fn position(node: &impl Spanned) -> String {
    let start = node.span().start;
    if start.line == 0 {
        String::new()
    } else {
        format!(" (at line {}, column {})", start.line, start.column)
    }
}

fn one(mut args: Vec<Expr>, name: &str) -> ExprResult<Expr> {
    match (args.pop(), args.is_empty()) {
        (Some(a), true) => Ok(a),
        _ => Err(ExprError::schema(format!(
            "function '{name}' takes one argument"
        ))),
    }
}

fn negate(negated: bool, e: Expr) -> Expr {
    if negated {
        Expr::unary(UnaryOp::Not, e)
    } else {
        e
    }
}

/// Field `name` of the struct `base`.
pub(crate) fn field(base: Expr, name: &str) -> ExprResult<Expr> {
    Expr::call(
        "get_field",
        vec![base, Expr::lit(ScalarValue::Utf8(name.to_string()))],
    )
}

/// The name Spark gives a struct field made from `e` (the `i`-th, from 0):
/// a column's name, a field's name, else `col{i+1}`.
pub fn struct_field_name(e: &Expr, i: usize) -> String {
    match e {
        Expr::Column(name) => name.clone(),
        Expr::Call { function, args } if function.name() == "get_field" => match args.get(1) {
            Some(Expr::Literal(ScalarValue::Utf8(name))) => name.clone(),
            _ => format!("col{}", i + 1),
        },
        _ => format!("col{}", i + 1),
    }
}

/// The arguments of `named_struct` for `struct(values...)`.
pub fn struct_args(values: Vec<Expr>) -> Vec<Expr> {
    let mut args = Vec::with_capacity(values.len() * 2);
    for (i, value) in values.into_iter().enumerate() {
        args.push(Expr::lit(ScalarValue::Utf8(struct_field_name(&value, i))));
        args.push(value);
    }
    args
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(text: &str) -> Expr {
        parse(text).expect("parses").expr
    }

    #[test]
    fn test_operators_and_literals() {
        assert_eq!(p("a + 1 > b").to_string(), r#"((col("a") + 1) > col("b"))"#);
        assert_eq!(
            p("NOT (x IS NULL) AND y != 'q'").to_string(),
            r#"(~col("x").is_null() & (col("y") != "q"))"#
        );
        assert_eq!(p("-2.5").to_string(), "-2.5");
        assert_eq!(
            p("`weird col` * 2").to_string(),
            r#"(col("weird col") * 2)"#
        );
        assert_eq!(p("a % 3").to_string(), r#"mod(col("a"), 3)"#);
        assert_eq!(p("lower(s)").to_string(), r#"lower(col("s"))"#);
        assert_eq!(
            p("s.a.b").to_string(),
            r#"get_field(get_field(col("s"), "a"), "b")"#
        );
    }

    #[test]
    fn test_alias() {
        let parsed = parse("x * 2 AS doubled").expect("parses");
        assert_eq!(parsed.alias.as_deref(), Some("doubled"));
    }

    #[test]
    fn test_errors_name_text_and_position() {
        let err = parse("nosuch(x)").expect_err("unknown function");
        assert!(
            err.to_string().contains("unknown function 'nosuch'"),
            "{err}"
        );
        assert!(err.to_string().contains("column 1"), "{err}");
        let err = parse("a + sum(x)").expect_err("aggregate");
        assert!(err.to_string().contains("aggregate 'sum'"), "{err}");
        assert!(err.to_string().contains("column 5"), "{err}");
        let err = parse("a +").expect_err("syntax");
        assert!(
            err.to_string().contains("cannot parse expression \"a +\""),
            "{err}"
        );
        let err = parse("a b").expect_err("trailing");
        assert!(
            err.to_string()
                .contains("unexpected 'b' at line 1, column 3"),
            "{err}"
        );
    }
}
