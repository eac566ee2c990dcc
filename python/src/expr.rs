//! `eddyline._core.Expr`: a native column expression, a thin Python handle on
//! core's `Expr` (`core/src/expr`), built by `ed.col`, `ed.lit` and the
//! Python operators, and read by the plan as it is (no tree to parse).
//!
//! One constructor per core variant (`_col`, `_lit`, `_binary`, `_unary`,
//! `_call`, `_cast`, `_case`); a new core variant gets its own and its arm
//! in `render` and `__reduce__`. Spark's Column methods (`cast`, `isin`,
//! `between`, `like`, `when`/`otherwise`, ...) build on the same variants;
//! `eddyline/functions.py` holds Spark's function names.

use eddyline_core::expr::{
    parse_sql, struct_field_name, BinaryOp, Expr, ExprError, ScalarValue, UnaryOp, GENERATORS,
};
use pyo3::basic::CompareOp;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyFloat, PyInt, PyList, PyString, PyTuple};

/// A native column expression (immutable); see `eddyline/expr.py`.
#[pyclass(name = "Expr", module = "eddyline._core", frozen, skip_from_py_object)]
#[derive(Clone)]
pub struct PyExpr {
    pub expr: Expr,
    pub alias: Option<String>,
    /// The names after `alias` of a generator that makes several columns
    /// (`F.posexplode(c).alias("p", "x")`); empty otherwise.
    pub more_aliases: Vec<String>,
}

impl PyExpr {
    fn new(expr: Expr) -> Self {
        PyExpr {
            expr,
            alias: None,
            more_aliases: Vec::new(),
        }
    }

    fn binary(&self, op: BinaryOp, other: &Bound<'_, PyAny>, reflected: bool) -> PyResult<Self> {
        let other = to_expr(other)?;
        let (left, right) = if reflected {
            (other, self.expr.clone())
        } else {
            (self.expr.clone(), other)
        };
        Ok(PyExpr::new(Expr::binary(op, left, right)))
    }

    /// `name(self, other)`, a library call with one more operand.
    fn call2(&self, py: Python<'_>, name: &str, other: &Bound<'_, PyAny>) -> PyResult<Self> {
        Expr::call(name, vec![self.expr.clone(), to_expr(other)?])
            .map(PyExpr::new)
            .map_err(|e| expr_err(py, e, name))
    }

    fn unary(&self, op: UnaryOp) -> Self {
        PyExpr::new(Expr::unary(op, self.expr.clone()))
    }
}

/// A Python literal as a core scalar: None, bool, int (64-bit), float or
/// str; a NumPy scalar as the Python value it holds.
fn scalar(value: &Bound<'_, PyAny>) -> PyResult<ScalarValue> {
    if value.is_none() {
        return Ok(ScalarValue::Null);
    }
    if value.is_instance_of::<PyBool>() {
        return Ok(ScalarValue::Boolean(value.extract()?));
    }
    if value.is_instance_of::<PyInt>() {
        return Ok(ScalarValue::Int64(value.extract()?));
    }
    if value.is_instance_of::<PyFloat>() {
        return Ok(ScalarValue::Float64(value.extract()?));
    }
    if value.is_instance_of::<PyString>() {
        return Ok(ScalarValue::Utf8(value.extract()?));
    }
    let module: String = value.get_type().getattr("__module__")?.extract()?;
    if module == "numpy" && value.hasattr("item")? {
        let item = value.call_method0("item")?;
        if !item.get_type().is(value.get_type()) {
            return scalar(&item);
        }
    }
    let type_name = value.get_type().name()?;
    Err(PyTypeError::new_err(format!(
        "unsupported literal {} of type {type_name}: expected None, bool, int, float or str",
        value.repr()?
    )))
}

/// An operand: an expression, or a literal made one.
fn to_expr(value: &Bound<'_, PyAny>) -> PyResult<Expr> {
    match value.cast::<PyExpr>() {
        Ok(e) => Ok(e.get().expr.clone()),
        Err(_) => Ok(Expr::lit(scalar(value)?)),
    }
}

fn scalar_to_py<'py>(py: Python<'py>, value: &ScalarValue) -> PyResult<Bound<'py, PyAny>> {
    Ok(match value {
        ScalarValue::Null => py.None().into_bound(py),
        ScalarValue::Boolean(b) => PyBool::new(py, *b).to_owned().into_any(),
        ScalarValue::Int64(v) => v.into_pyobject(py)?.into_any(),
        ScalarValue::Float64(v) => v.into_pyobject(py)?.into_any(),
        ScalarValue::Utf8(s) => PyString::new(py, s).into_any(),
    })
}

/// The name `_binary` takes for Spark SQL's `/` (`F.expr`, `env.sql`), which
/// is spelled `/` as the DSL's is but is null for a zero divisor: a pickled
/// expression keeps it apart.
const SPARK_DIV: &str = "spark /";

/// The name `_binary` takes for `op`.
fn binary_name(op: BinaryOp) -> &'static str {
    match op {
        BinaryOp::SparkDiv { .. } => SPARK_DIV,
        other => other.symbol(),
    }
}

fn binary_op(symbol: &str) -> PyResult<BinaryOp> {
    Ok(match symbol {
        SPARK_DIV => BinaryOp::SparkDiv { ansi: false },
        "+" => BinaryOp::Add,
        "-" => BinaryOp::Sub,
        "*" => BinaryOp::Mul,
        "/" => BinaryOp::Div,
        "//" => BinaryOp::FloorDiv,
        "%" => BinaryOp::Mod,
        "==" => BinaryOp::Eq,
        "!=" => BinaryOp::NotEq,
        "<" => BinaryOp::Lt,
        "<=" => BinaryOp::LtEq,
        ">" => BinaryOp::Gt,
        ">=" => BinaryOp::GtEq,
        "&" => BinaryOp::And,
        "|" => BinaryOp::Or,
        other => return Err(PyValueError::new_err(format!("unknown operator '{other}'"))),
    })
}

fn unary_name(op: UnaryOp) -> &'static str {
    match op {
        UnaryOp::Not => "not",
        UnaryOp::Neg => "neg",
        UnaryOp::IsNull => "is_null",
        UnaryOp::IsNotNull => "is_not_null",
    }
}

fn unary_op(name: &str) -> PyResult<UnaryOp> {
    Ok(match name {
        "not" => UnaryOp::Not,
        "neg" => UnaryOp::Neg,
        "is_null" => UnaryOp::IsNull,
        "is_not_null" => UnaryOp::IsNotNull,
        other => return Err(PyValueError::new_err(format!("unknown operator '{other}'"))),
    })
}

/// The expression spelled as the Python DSL builds it, e.g. `(col('x') * 2)`.
fn render(py: Python<'_>, expr: &Expr) -> PyResult<String> {
    Ok(match expr {
        Expr::Column(name) => format!("col({})", PyString::new(py, name).repr()?),
        Expr::Literal(value) => scalar_to_py(py, value)?.repr()?.to_string(),
        Expr::Binary { op, left, right } => format!(
            "({} {} {})",
            render(py, left)?,
            op.symbol(),
            render(py, right)?
        ),
        Expr::Unary { op, expr } => {
            let inner = render(py, expr)?;
            match op {
                UnaryOp::Not => format!("~{inner}"),
                UnaryOp::Neg => format!("-{inner}"),
                UnaryOp::IsNull => format!("{inner}.is_null()"),
                UnaryOp::IsNotNull => format!("{inner}.is_not_null()"),
            }
        }
        Expr::Call { function, args } => {
            let args = args
                .iter()
                .map(|a| render(py, a))
                .collect::<PyResult<Vec<_>>>()?;
            format!("{}({})", function.name(), args.join(", "))
        }
        Expr::Cast { expr, to } => format!(
            "{}.cast({})",
            render(py, expr)?,
            PyString::new(py, to.name()).repr()?
        ),
        Expr::Case {
            branches,
            otherwise,
        } => {
            let mut text = String::new();
            for (i, (when, then)) in branches.iter().enumerate() {
                let dot = if i == 0 { "" } else { "." };
                text.push_str(&format!(
                    "{dot}when({}, {})",
                    render(py, when)?,
                    render(py, then)?
                ));
            }
            if let Some(otherwise) = otherwise {
                text.push_str(&format!(".otherwise({})", render(py, otherwise)?));
            }
            text
        }
    })
}

/// A core expression error as the `eddyline.errors` class it maps to
/// (`GraphError` for an unknown function, `SchemaError` for a wrong type),
/// naming the function's expression as the operator until a plan node owns it.
fn expr_err(py: Python<'_>, err: ExprError, what: &str) -> PyErr {
    crate::errors::to_py(py, &err.at(what))
}

/// A misuse of `when`/`otherwise` as a `GraphError` naming the method.
fn case_err(py: Python<'_>, method: &str, message: &str) -> PyErr {
    expr_err(py, ExprError::Graph(message.to_string()), method)
}

#[pymethods]
impl PyExpr {
    /// A reference to column `name` (`ed.col` checks the name first).
    #[staticmethod]
    fn _col(name: String) -> Self {
        PyExpr::new(Expr::col(name))
    }

    /// A literal (None, bool, int, float, str or a NumPy scalar of one).
    #[staticmethod]
    fn _lit(value: &Bound<'_, PyAny>) -> PyResult<Self> {
        Ok(PyExpr::new(Expr::lit(scalar(value)?)))
    }

    /// `left op right`, `op` spelled as in Python (`"+"`, `"<="`, `"&"`, ...),
    /// or `"spark /"` for Spark SQL's `/`.
    #[staticmethod]
    fn _binary(op: &str, left: PyRef<'_, PyExpr>, right: PyRef<'_, PyExpr>) -> PyResult<Self> {
        let op = binary_op(op)?;
        Ok(PyExpr::new(Expr::binary(
            op,
            left.expr.clone(),
            right.expr.clone(),
        )))
    }

    /// `op expr` (`"not"`, `"neg"`, `"is_null"`, `"is_not_null"`).
    #[staticmethod]
    fn _unary(op: &str, expr: PyRef<'_, PyExpr>) -> PyResult<Self> {
        Ok(PyExpr::new(Expr::unary(unary_op(op)?, expr.expr.clone())))
    }

    /// A call of library function `name` (Spark's name) on `args`; an
    /// unknown name is a `GraphError` naming it.
    #[staticmethod]
    fn _call(py: Python<'_>, name: &str, args: Vec<PyRef<'_, PyExpr>>) -> PyResult<Self> {
        let args = args.iter().map(|a| a.expr.clone()).collect();
        Expr::call(name, args)
            .map(PyExpr::new)
            .map_err(|e| expr_err(py, e, name))
    }

    /// `CAST(expr AS to)`, `to` a Spark type name; an unknown one is a
    /// `SchemaError` naming it.
    #[staticmethod]
    fn _cast(py: Python<'_>, expr: PyRef<'_, PyExpr>, to: &str) -> PyResult<Self> {
        Expr::cast(expr.expr.clone(), to)
            .map(PyExpr::new)
            .map_err(|e| expr_err(py, e, "cast"))
    }

    /// `CASE WHEN c THEN v ... ELSE otherwise END` from `(c, v)` pairs.
    #[staticmethod]
    #[pyo3(signature = (branches, otherwise=None))]
    fn _case(
        branches: Vec<(PyRef<'_, PyExpr>, PyRef<'_, PyExpr>)>,
        otherwise: Option<PyRef<'_, PyExpr>>,
    ) -> Self {
        let branches = branches
            .iter()
            .map(|(w, t)| (w.expr.clone(), t.expr.clone()))
            .collect();
        PyExpr::new(Expr::case(branches, otherwise.map(|o| o.expr.clone())))
    }

    /// How pickle rebuilds the expression (for worker processes): from its
    /// parts, through the constructors above.
    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyTuple>> {
        let py = slf.py();
        let this = slf.get();
        let class = slf.get_type();
        if let Some(alias) = &this.alias {
            let bare = PyExpr::new(this.expr.clone()).into_pyobject(py)?;
            let method = class.getattr("alias")?;
            let mut args = vec![bare.into_any(), PyString::new(py, alias).into_any()];
            args.extend(
                this.more_aliases
                    .iter()
                    .map(|a| PyString::new(py, a).into_any()),
            );
            return PyTuple::new(py, [method, PyTuple::new(py, args)?.into_any()]);
        }
        let child = |e: &Expr| {
            PyExpr::new(e.clone())
                .into_pyobject(py)
                .map(Bound::into_any)
        };
        let (ctor, args) = match &this.expr {
            Expr::Column(name) => ("_col", vec![PyString::new(py, name).into_any()]),
            Expr::Literal(value) => ("_lit", vec![scalar_to_py(py, value)?]),
            Expr::Binary { op, left, right } => (
                "_binary",
                vec![
                    PyString::new(py, binary_name(*op)).into_any(),
                    child(left)?,
                    child(right)?,
                ],
            ),
            Expr::Unary { op, expr } => (
                "_unary",
                vec![PyString::new(py, unary_name(*op)).into_any(), child(expr)?],
            ),
            Expr::Call { function, args } => {
                let args = args.iter().map(child).collect::<PyResult<Vec<_>>>()?;
                (
                    "_call",
                    vec![
                        PyString::new(py, function.name()).into_any(),
                        PyList::new(py, args)?.into_any(),
                    ],
                )
            }
            Expr::Cast { expr, to } => (
                "_cast",
                vec![child(expr)?, PyString::new(py, to.name()).into_any()],
            ),
            Expr::Case {
                branches,
                otherwise,
            } => {
                let pairs = branches
                    .iter()
                    .map(|(w, t)| Ok(PyTuple::new(py, [child(w)?, child(t)?])?.into_any()))
                    .collect::<PyResult<Vec<_>>>()?;
                let otherwise = match otherwise {
                    Some(o) => child(o)?,
                    None => py.None().into_bound(py),
                };
                ("_case", vec![PyList::new(py, pairs)?.into_any(), otherwise])
            }
        };
        PyTuple::new(
            py,
            [class.getattr(ctor)?, PyTuple::new(py, args)?.into_any()],
        )
    }

    /// The name of the column this expression produces: its alias, or the
    /// name of a bare column; None otherwise.
    #[getter]
    fn output_name(&self) -> Option<String> {
        match (&self.alias, &self.expr) {
            (Some(alias), _) => Some(alias.clone()),
            (None, Expr::Column(name)) => Some(name.clone()),
            // Spark names a field access after the field.
            (None, Expr::Call { function, args }) if function.name() == "get_field" => {
                match args.get(1) {
                    Some(Expr::Literal(ScalarValue::Utf8(field))) => Some(field.clone()),
                    _ => None,
                }
            }
            _ => None,
        }
    }

    /// The names of the columns the expression reads, in first-use order.
    fn columns(&self) -> Vec<String> {
        self.expr.columns().into_iter().map(String::from).collect()
    }

    /// The same expression, naming the column it produces (for `select`);
    /// a generator that makes several columns (`posexplode`) takes a name
    /// for each, as in PySpark.
    #[pyo3(signature = (*names))]
    fn alias(&self, names: &Bound<'_, PyTuple>) -> PyResult<Self> {
        let mut texts = Vec::with_capacity(names.len());
        for name in names.iter() {
            let text: Option<String> = match name.cast::<PyString>() {
                Ok(s) => Some(s.to_str()?.to_string()).filter(|n| !n.is_empty()),
                Err(_) => None,
            };
            let Some(text) = text else {
                return Err(PyTypeError::new_err(format!(
                    "alias name must be a non-empty str, got {}",
                    name.repr()?
                )));
            };
            texts.push(text);
        }
        if texts.is_empty() {
            return Err(PyTypeError::new_err("alias() needs a name"));
        }
        if texts.len() > 1 && self._generator().is_none() {
            return Err(PyTypeError::new_err(format!(
                "alias() takes one name; several ({}) name the columns of a generator \
                 (F.posexplode) only",
                texts.join(", ")
            )));
        }
        let alias = texts.remove(0);
        Ok(PyExpr {
            expr: self.expr.clone(),
            alias: Some(alias),
            more_aliases: texts,
        })
    }

    /// Every name given by `alias(...)` (several for a generator), in order.
    #[getter]
    fn aliases(&self) -> Vec<String> {
        self.alias
            .iter()
            .chain(&self.more_aliases)
            .cloned()
            .collect()
    }

    /// True where the value is null.
    fn is_null(&self) -> Self {
        self.unary(UnaryOp::IsNull)
    }

    /// True where the value is not null.
    fn is_not_null(&self) -> Self {
        self.unary(UnaryOp::IsNotNull)
    }

    /// Spark's `isNull`: the same as [`is_null`](Self::is_null).
    #[pyo3(name = "isNull")]
    fn is_null_spark(&self) -> Self {
        self.unary(UnaryOp::IsNull)
    }

    /// Spark's `isNotNull`: the same as [`is_not_null`](Self::is_not_null).
    #[pyo3(name = "isNotNull")]
    fn is_not_null_spark(&self) -> Self {
        self.unary(UnaryOp::IsNotNull)
    }

    /// `CAST(self AS to)`, `to` a Spark type name (`"int"`, `"string"`,
    /// `"double"`, ...); an unknown one is a `SchemaError` naming it.
    fn cast(&self, py: Python<'_>, to: &str) -> PyResult<Self> {
        Expr::cast(self.expr.clone(), to)
            .map(PyExpr::new)
            .map_err(|e| expr_err(py, e, "cast"))
    }

    /// Spark's `isin`: `self = v1 OR self = v2 ...`, so null where `self`
    /// is null, or where nothing matches and a value is null; false for no
    /// values. The values may be given as one list or tuple.
    #[pyo3(signature = (*values))]
    fn isin(&self, values: &Bound<'_, PyTuple>) -> PyResult<Self> {
        let mut items: Vec<Bound<'_, PyAny>> = values.iter().collect();
        if items.len() == 1
            && (items[0].is_instance_of::<PyList>() || items[0].is_instance_of::<PyTuple>())
        {
            let only = items.remove(0);
            items = only.try_iter()?.collect::<PyResult<Vec<_>>>()?;
        }
        let mut result: Option<Expr> = None;
        for item in &items {
            let eq = Expr::binary(BinaryOp::Eq, self.expr.clone(), to_expr(item)?);
            result = Some(match result {
                None => eq,
                Some(acc) => Expr::binary(BinaryOp::Or, acc, eq),
            });
        }
        Ok(PyExpr::new(
            result.unwrap_or_else(|| Expr::lit(ScalarValue::Boolean(false))),
        ))
    }

    /// Spark's `between`: `lo <= self AND self <= hi` (both ends included).
    fn between(&self, lo: &Bound<'_, PyAny>, hi: &Bound<'_, PyAny>) -> PyResult<Self> {
        let low = Expr::binary(BinaryOp::GtEq, self.expr.clone(), to_expr(lo)?);
        let high = Expr::binary(BinaryOp::LtEq, self.expr.clone(), to_expr(hi)?);
        Ok(PyExpr::new(Expr::binary(BinaryOp::And, low, high)))
    }

    /// SQL `LIKE` (`%` any run, `_` one character).
    fn like(&self, py: Python<'_>, pattern: &Bound<'_, PyAny>) -> PyResult<Self> {
        self.call2(py, "like", pattern)
    }

    /// True where a Java-style regular expression matches somewhere.
    fn rlike(&self, py: Python<'_>, pattern: &Bound<'_, PyAny>) -> PyResult<Self> {
        self.call2(py, "rlike", pattern)
    }

    /// True where the string starts with `other`.
    fn startswith(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<Self> {
        self.call2(py, "startswith", other)
    }

    /// True where the string ends with `other`.
    fn endswith(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<Self> {
        self.call2(py, "endswith", other)
    }

    /// True where the string contains `other`.
    fn contains(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<Self> {
        self.call2(py, "contains", other)
    }

    /// Another branch of a `when(...)` chain: `F.when(c, v).when(c2, v2)`.
    /// Only a `CASE` without an `otherwise` takes one.
    fn when(
        &self,
        py: Python<'_>,
        condition: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
    ) -> PyResult<Self> {
        match &self.expr {
            Expr::Case {
                branches,
                otherwise: None,
            } => {
                let mut branches = branches.clone();
                branches.push((to_expr(condition)?, to_expr(value)?));
                Ok(PyExpr::new(Expr::case(branches, None)))
            }
            Expr::Case { .. } => Err(case_err(
                py,
                "when",
                "when() cannot follow otherwise(): the CASE is complete",
            )),
            _ => Err(case_err(
                py,
                "when",
                "when() applies only to a CASE started by functions.when(condition, value)",
            )),
        }
    }

    /// The value of a `when(...)` chain where no condition holds (null
    /// without one); given once, on a `CASE` only.
    fn otherwise(&self, py: Python<'_>, value: &Bound<'_, PyAny>) -> PyResult<Self> {
        match &self.expr {
            Expr::Case {
                branches,
                otherwise: None,
            } => Ok(PyExpr::new(Expr::case(
                branches.clone(),
                Some(to_expr(value)?),
            ))),
            Expr::Case { .. } => Err(case_err(
                py,
                "otherwise",
                "otherwise() given twice: the CASE already has a default value",
            )),
            _ => Err(case_err(
                py,
                "otherwise",
                "otherwise() applies only to a CASE started by functions.when(condition, value)",
            )),
        }
    }

    /// `F.expr(text)`: a Spark SQL expression, named by its `AS` if it has
    /// one; text that does not parse or uses an unknown function is a
    /// `GraphError` naming the text and the position.
    #[staticmethod]
    fn _parse(py: Python<'_>, text: &str) -> PyResult<Self> {
        let parsed = parse_sql(text).map_err(|e| expr_err(py, e, "expr"))?;
        Ok(PyExpr {
            expr: parsed.expr,
            alias: parsed.alias,
            more_aliases: Vec::new(),
        })
    }

    /// `F.struct(*cols)`: a struct whose fields are named as Spark names
    /// them (an alias, a column's or field's name, else `col1`, `col2`...).
    #[staticmethod]
    fn _struct(py: Python<'_>, values: Vec<PyRef<'_, PyExpr>>) -> PyResult<Self> {
        let mut args = Vec::with_capacity(values.len() * 2);
        for (i, value) in values.iter().enumerate() {
            let name = match &value.alias {
                Some(alias) => alias.clone(),
                None => struct_field_name(&value.expr, i),
            };
            args.push(Expr::lit(ScalarValue::Utf8(name)));
            args.push(value.expr.clone());
        }
        Expr::call("named_struct", args)
            .map(PyExpr::new)
            .map_err(|e| expr_err(py, e, "struct"))
    }

    /// `col["field"]` is a struct's field, `col[i]` an array's item
    /// (0-based, null out of range), as in PySpark.
    fn __getitem__(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<Self> {
        self.get_item(py, key)
    }

    /// Not iterable (indexing is field and item access).
    fn __iter__(&self) -> PyResult<()> {
        Err(PyTypeError::new_err(
            "an eddyline expression is not iterable",
        ))
    }

    /// The struct's field `name`.
    #[pyo3(name = "getField")]
    fn get_field(&self, py: Python<'_>, name: &Bound<'_, PyAny>) -> PyResult<Self> {
        let Ok(name) = name.extract::<String>() else {
            return Err(PyTypeError::new_err(format!(
                "getField() takes a field name (str), got {}",
                name.repr()?
            )));
        };
        self.call2(py, "get_field", &PyString::new(py, &name).into_any())
    }

    /// A struct's field (a str key) or an array's item (0-based).
    #[pyo3(name = "getItem")]
    fn get_item(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<Self> {
        if key.is_instance_of::<PyString>() {
            return self.get_field(py, key);
        }
        if key.is_instance_of::<PyBool>()
            || !(key.is_instance_of::<PyInt>() || key.cast::<PyExpr>().is_ok())
        {
            return Err(PyTypeError::new_err(format!(
                "an expression is indexed by a field name (str) or an array index (int), got {}",
                key.repr()?
            )));
        }
        self.call2(py, "get_item", key)
    }

    /// `(name, array)` when the expression is a generator call
    /// (`F.explode(array)`, `F.explode_outer(array)`), else None.
    #[getter]
    fn _generator(&self) -> Option<(String, PyExpr)> {
        match &self.expr {
            Expr::Call { function, args }
                if GENERATORS.contains(&function.name()) && args.len() == 1 =>
            {
                Some((function.name().to_string(), PyExpr::new(args[0].clone())))
            }
            _ => None,
        }
    }

    fn __add__(&self, other: &Bound<'_, PyAny>) -> PyResult<Self> {
        self.binary(BinaryOp::Add, other, false)
    }
    fn __radd__(&self, other: &Bound<'_, PyAny>) -> PyResult<Self> {
        self.binary(BinaryOp::Add, other, true)
    }
    fn __sub__(&self, other: &Bound<'_, PyAny>) -> PyResult<Self> {
        self.binary(BinaryOp::Sub, other, false)
    }
    fn __rsub__(&self, other: &Bound<'_, PyAny>) -> PyResult<Self> {
        self.binary(BinaryOp::Sub, other, true)
    }
    fn __mul__(&self, other: &Bound<'_, PyAny>) -> PyResult<Self> {
        self.binary(BinaryOp::Mul, other, false)
    }
    fn __rmul__(&self, other: &Bound<'_, PyAny>) -> PyResult<Self> {
        self.binary(BinaryOp::Mul, other, true)
    }
    fn __truediv__(&self, other: &Bound<'_, PyAny>) -> PyResult<Self> {
        self.binary(BinaryOp::Div, other, false)
    }
    fn __rtruediv__(&self, other: &Bound<'_, PyAny>) -> PyResult<Self> {
        self.binary(BinaryOp::Div, other, true)
    }
    fn __floordiv__(&self, other: &Bound<'_, PyAny>) -> PyResult<Self> {
        self.binary(BinaryOp::FloorDiv, other, false)
    }
    fn __rfloordiv__(&self, other: &Bound<'_, PyAny>) -> PyResult<Self> {
        self.binary(BinaryOp::FloorDiv, other, true)
    }
    fn __mod__(&self, other: &Bound<'_, PyAny>) -> PyResult<Self> {
        self.binary(BinaryOp::Mod, other, false)
    }
    fn __rmod__(&self, other: &Bound<'_, PyAny>) -> PyResult<Self> {
        self.binary(BinaryOp::Mod, other, true)
    }
    fn __and__(&self, other: &Bound<'_, PyAny>) -> PyResult<Self> {
        self.binary(BinaryOp::And, other, false)
    }
    fn __rand__(&self, other: &Bound<'_, PyAny>) -> PyResult<Self> {
        self.binary(BinaryOp::And, other, true)
    }
    fn __or__(&self, other: &Bound<'_, PyAny>) -> PyResult<Self> {
        self.binary(BinaryOp::Or, other, false)
    }
    fn __ror__(&self, other: &Bound<'_, PyAny>) -> PyResult<Self> {
        self.binary(BinaryOp::Or, other, true)
    }

    fn __richcmp__(&self, other: &Bound<'_, PyAny>, op: CompareOp) -> PyResult<Self> {
        let op = match op {
            CompareOp::Eq => BinaryOp::Eq,
            CompareOp::Ne => BinaryOp::NotEq,
            CompareOp::Lt => BinaryOp::Lt,
            CompareOp::Le => BinaryOp::LtEq,
            CompareOp::Gt => BinaryOp::Gt,
            CompareOp::Ge => BinaryOp::GtEq,
        };
        self.binary(op, other, false)
    }

    fn __invert__(&self) -> Self {
        self.unary(UnaryOp::Not)
    }

    fn __neg__(&self) -> Self {
        self.unary(UnaryOp::Neg)
    }

    fn __pos__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __bool__(&self) -> PyResult<bool> {
        Err(PyTypeError::new_err(
            "the truth value of an eddyline expression is undefined: use & (and), | (or) and \
             ~ (not) instead of 'and', 'or', 'not', put comparisons in parentheses, and avoid \
             chained comparisons such as 'a < col(\"x\") < b'",
        ))
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let text = render(py, &self.expr)?;
        if self.alias.is_none() {
            return Ok(text);
        }
        let names = self
            .aliases()
            .iter()
            .map(|a| PyString::new(py, a).repr().map(|r| r.to_string()))
            .collect::<PyResult<Vec<_>>>()?;
        Ok(format!("{text}.alias({})", names.join(", ")))
    }
}
