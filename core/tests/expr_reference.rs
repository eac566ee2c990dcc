//! Expressions against a plain-Rust reference evaluated row by row: the
//! vectorized evaluator (`Expr::evaluate`) must agree with a scalar
//! interpreter of the documented semantics (Python arithmetic, SQL nulls,
//! Kleene logic, IEEE float comparisons), including the rows where it must
//! fail (division by zero, integer overflow). Also checks that the type
//! checker and the evaluator agree on the result type.

use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, Float64Array, Int32Array, Int64Array, StringArray,
};
use arrow::datatypes::{DataType, Field, Float64Type, Int32Type, Int64Type, Schema};
use arrow::record_batch::RecordBatch;
use eddyline_core::expr::{BinaryOp, Expr, ExprError, ScalarValue, UnaryOp};
use eddyline_core::operator::filter::FilterFactory;
use eddyline_core::operator::project::ProjectFactory;
use eddyline_core::operator::{Collector, OperatorContext, OperatorFactory};
use eddyline_core::{Error, Result};
use proptest::prelude::*;

/// One reference value.
#[derive(Debug, Clone, Copy)]
enum V {
    I(i64),
    F(f64),
    B(bool),
}

/// A reference cell: `None` is null.
type Cell = Option<V>;

/// Why the reference refuses a row.
#[derive(Debug)]
enum RefError {
    DivByZero,
    Overflow,
}

/// The columns of the test batch, row-major for the reference.
#[derive(Debug)]
struct Table {
    a: Vec<Option<i64>>,
    b: Vec<Option<i64>>,
    n: Vec<Option<i32>>,
    x: Vec<Option<f64>>,
    y: Vec<Option<f64>>,
}

impl Table {
    fn rows(&self) -> usize {
        self.a.len()
    }

    fn batch(&self) -> RecordBatch {
        let schema = Schema::new(vec![
            Field::new("a", DataType::Int64, true),
            Field::new("b", DataType::Int64, true),
            Field::new("n", DataType::Int32, true),
            Field::new("x", DataType::Float64, true),
            Field::new("y", DataType::Float64, true),
        ]);
        RecordBatch::try_new(
            Arc::new(schema),
            vec![
                Arc::new(Int64Array::from(self.a.clone())),
                Arc::new(Int64Array::from(self.b.clone())),
                Arc::new(Int32Array::from(self.n.clone())),
                Arc::new(Float64Array::from(self.x.clone())),
                Arc::new(Float64Array::from(self.y.clone())),
            ],
        )
        .expect("valid batch")
    }

    fn cell(&self, name: &str, row: usize) -> Cell {
        match name {
            "a" => self.a[row].map(V::I),
            "b" => self.b[row].map(V::I),
            "n" => self.n[row].map(|v| V::I(v.into())),
            "x" => self.x[row].map(V::F),
            "y" => self.y[row].map(V::F),
            other => panic!("no column {other}"),
        }
    }
}

fn as_f64(v: V) -> f64 {
    match v {
        V::I(i) => i as f64,
        V::F(f) => f,
        V::B(_) => panic!("boolean in arithmetic"),
    }
}

fn py_div_floor(a: i64, b: i64) -> std::result::Result<i64, RefError> {
    if b == 0 {
        return Err(RefError::DivByZero);
    }
    let q = a.checked_div(b).ok_or(RefError::Overflow)?;
    if (a % b != 0) && ((a < 0) != (b < 0)) {
        Ok(q - 1)
    } else {
        Ok(q)
    }
}

fn py_mod(a: i64, b: i64) -> std::result::Result<i64, RefError> {
    if b == 0 {
        return Err(RefError::DivByZero);
    }
    // i64::MIN % -1 is 0 in Python (no overflow).
    let r = a.checked_rem(b).unwrap_or(0);
    Ok(if r != 0 && ((r < 0) != (b < 0)) {
        r + b
    } else {
        r
    })
}

fn py_float_mod(a: f64, b: f64) -> f64 {
    let r = a % b;
    if r == 0.0 {
        0.0f64.copysign(b)
    } else if (r < 0.0) != (b < 0.0) {
        r + b
    } else {
        r
    }
}

fn kleene(op: BinaryOp, l: Option<bool>, r: Option<bool>) -> Option<bool> {
    match (op, l, r) {
        (BinaryOp::And, Some(false), _) | (BinaryOp::And, _, Some(false)) => Some(false),
        (BinaryOp::And, Some(true), Some(true)) => Some(true),
        (BinaryOp::Or, Some(true), _) | (BinaryOp::Or, _, Some(true)) => Some(true),
        (BinaryOp::Or, Some(false), Some(false)) => Some(false),
        _ => None,
    }
}

fn as_bool(c: Cell) -> Option<bool> {
    match c {
        Some(V::B(b)) => Some(b),
        None => None,
        Some(other) => panic!("not a boolean: {other:?}"),
    }
}

/// The scalar reference interpreter.
fn reference(e: &Expr, t: &Table, row: usize) -> std::result::Result<Cell, RefError> {
    Ok(match e {
        Expr::Column(name) => t.cell(name, row),
        Expr::Literal(v) => match v {
            ScalarValue::Null => None,
            ScalarValue::Boolean(b) => Some(V::B(*b)),
            ScalarValue::Int64(i) => Some(V::I(*i)),
            ScalarValue::Float64(f) => Some(V::F(*f)),
            ScalarValue::Utf8(_) => panic!("strings are not generated"),
        },
        // The generator builds operator trees only; library calls, casts
        // and CASE are checked against Spark in the crate's expr tests.
        Expr::Call { .. } | Expr::Cast { .. } | Expr::Case { .. } => {
            panic!("calls, casts and CASE are not generated")
        }
        Expr::Unary { op, expr } => {
            let v = reference(expr, t, row)?;
            match op {
                UnaryOp::IsNull => Some(V::B(v.is_none())),
                UnaryOp::IsNotNull => Some(V::B(v.is_some())),
                UnaryOp::Not => as_bool(v).map(|b| V::B(!b)),
                UnaryOp::Neg => match v {
                    None => None,
                    Some(V::I(i)) => Some(V::I(i.checked_neg().ok_or(RefError::Overflow)?)),
                    Some(V::F(f)) => Some(V::F(-f)),
                    Some(V::B(_)) => panic!("negated boolean"),
                },
            }
        }
        Expr::Binary { op, left, right } => {
            let l = reference(left, t, row)?;
            let r = reference(right, t, row)?;
            if op.is_logical() {
                return Ok(kleene(*op, as_bool(l), as_bool(r)).map(V::B));
            }
            let (Some(l), Some(r)) = (l, r) else {
                return Ok(None);
            };
            if op.is_comparison() {
                let ord = match (l, r) {
                    (V::I(a), V::I(b)) => a.partial_cmp(&b),
                    (V::B(a), V::B(b)) => a.partial_cmp(&b),
                    (a, b) => as_f64(a).partial_cmp(&as_f64(b)),
                };
                use std::cmp::Ordering::*;
                let result = match op {
                    BinaryOp::Eq => ord == Some(Equal),
                    BinaryOp::NotEq => ord != Some(Equal),
                    BinaryOp::Lt => ord == Some(Less),
                    BinaryOp::LtEq => matches!(ord, Some(Less | Equal)),
                    BinaryOp::Gt => ord == Some(Greater),
                    BinaryOp::GtEq => matches!(ord, Some(Greater | Equal)),
                    _ => unreachable!(),
                };
                return Ok(Some(V::B(result)));
            }
            match (l, r) {
                (V::I(a), V::I(b)) => Some(match op {
                    BinaryOp::Add => V::I(a.checked_add(b).ok_or(RefError::Overflow)?),
                    BinaryOp::Sub => V::I(a.checked_sub(b).ok_or(RefError::Overflow)?),
                    BinaryOp::Mul => V::I(a.checked_mul(b).ok_or(RefError::Overflow)?),
                    BinaryOp::Div if b == 0 => return Err(RefError::DivByZero),
                    BinaryOp::Div => V::F(a as f64 / b as f64),
                    BinaryOp::FloorDiv => V::I(py_div_floor(a, b)?),
                    BinaryOp::Mod => V::I(py_mod(a, b)?),
                    _ => unreachable!(),
                }),
                (a, b) => {
                    let (a, b) = (as_f64(a), as_f64(b));
                    // Python: `x / 0.0`, `x // -0.0` and `x % 0.0` raise
                    // ZeroDivisionError; other divisors (NaN too) are IEEE.
                    if b == 0.0 && matches!(op, BinaryOp::Div | BinaryOp::FloorDiv | BinaryOp::Mod)
                    {
                        return Err(RefError::DivByZero);
                    }
                    Some(V::F(match op {
                        BinaryOp::Add => a + b,
                        BinaryOp::Sub => a - b,
                        BinaryOp::Mul => a * b,
                        BinaryOp::Div => a / b,
                        BinaryOp::FloorDiv => (a / b).floor(),
                        BinaryOp::Mod => py_float_mod(a, b),
                        _ => unreachable!(),
                    }))
                }
            }
        }
    })
}

/// The evaluated array as reference cells.
fn cells(array: &ArrayRef) -> Vec<Cell> {
    match array.data_type() {
        DataType::Int64 => array
            .as_primitive::<Int64Type>()
            .iter()
            .map(|v| v.map(V::I))
            .collect(),
        DataType::Int32 => array
            .as_primitive::<Int32Type>()
            .iter()
            .map(|v| v.map(|v| V::I(v.into())))
            .collect(),
        DataType::Float64 => array
            .as_primitive::<Float64Type>()
            .iter()
            .map(|v| v.map(V::F))
            .collect(),
        DataType::Boolean => array.as_boolean().iter().map(|v| v.map(V::B)).collect(),
        DataType::Null => vec![None; array.len()],
        other => panic!("unexpected result type {other}"),
    }
}

fn same(a: Cell, b: Cell) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(V::I(a)), Some(V::I(b))) => a == b,
        (Some(V::B(a)), Some(V::B(b))) => a == b,
        (Some(V::F(a)), Some(V::F(b))) => a == b || (a.is_nan() && b.is_nan()),
        _ => false,
    }
}

/// Checks `e` over `t` against the reference; returns a description of the
/// first disagreement.
fn check(e: &Expr, t: &Table) -> std::result::Result<(), String> {
    let batch = t.batch();
    let expected: std::result::Result<Vec<Cell>, RefError> =
        (0..t.rows()).map(|row| reference(e, t, row)).collect();
    let declared = e
        .data_type(batch.schema_ref())
        .map_err(|err| format!("{e}: type check failed: {err}"))?;
    match (expected, e.evaluate(&batch)) {
        (Err(why), Ok(_)) => Err(format!("{e}: expected an error ({why:?}), got a result")),
        (Err(_), Err(ExprError::Operator(message))) => {
            if message.contains("division by zero") || message.contains("overflow") {
                Ok(())
            } else {
                Err(format!("{e}: unexpected error message: {message}"))
            }
        }
        (_, Err(err)) => Err(format!("{e}: unexpected error: {err}")),
        (Ok(want), Ok(got)) => {
            if got.len() != t.rows() {
                return Err(format!("{e}: {} rows, want {}", got.len(), t.rows()));
            }
            if got.data_type() != &declared {
                return Err(format!(
                    "{e}: evaluated to {} but the type check said {declared}",
                    got.data_type()
                ));
            }
            let got = cells(&got);
            for (row, (w, g)) in want.iter().zip(&got).enumerate() {
                if !same(*w, *g) {
                    return Err(format!("{e}: row {row}: want {w:?}, got {g:?}"));
                }
            }
            Ok(())
        }
    }
}

fn c(name: &str) -> Expr {
    Expr::col(name)
}
fn i(v: i64) -> Expr {
    Expr::lit(ScalarValue::Int64(v))
}
fn f(v: f64) -> Expr {
    Expr::lit(ScalarValue::Float64(v))
}
fn bin(op: BinaryOp, l: Expr, r: Expr) -> Expr {
    Expr::binary(op, l, r)
}

fn fixed_table() -> Table {
    Table {
        a: vec![
            Some(-7),
            Some(7),
            Some(-7),
            Some(7),
            None,
            Some(0),
            Some(i64::MIN),
        ],
        b: vec![Some(3), Some(-3), Some(-3), Some(3), Some(2), None, Some(2)],
        n: vec![Some(2), None, Some(-4), Some(5), Some(1), Some(-1), Some(3)],
        x: vec![
            Some(-7.5),
            Some(7.5),
            None,
            Some(-0.0),
            Some(f64::NAN),
            Some(2.0),
            Some(1e300),
        ],
        y: vec![
            Some(2.0),
            Some(-2.0),
            Some(1.0),
            Some(0.0),
            Some(1.0),
            None,
            Some(-3.0),
        ],
    }
}

#[test]
fn test_negative_mod_and_floor_div_follow_python() {
    let t = fixed_table();
    for op in [BinaryOp::Mod, BinaryOp::FloorDiv, BinaryOp::Div] {
        for e in [
            bin(op, c("a"), c("b")),
            bin(op, c("a"), i(3)),
            bin(op, c("a"), i(-3)),
            bin(op, i(-7), c("b")),
            bin(op, c("x"), c("y")),
            bin(op, c("a"), c("y")),
            bin(op, c("x"), i(-2)),
        ] {
            check(&e, &t).unwrap_or_else(|msg| panic!("{msg}"));
        }
    }
    // Concrete values, so the reference itself is pinned down.
    let got = bin(BinaryOp::Mod, c("a"), c("b"))
        .evaluate(&t.batch())
        .expect("eval");
    assert_eq!(
        got.as_primitive::<Int64Type>().iter().collect::<Vec<_>>(),
        vec![Some(2), Some(-2), Some(-1), Some(1), None, None, Some(0)]
    );
    let got = bin(BinaryOp::FloorDiv, c("a"), c("b"))
        .evaluate(&t.batch())
        .expect("eval");
    assert_eq!(
        got.as_primitive::<Int64Type>().iter().collect::<Vec<_>>(),
        vec![
            Some(-3),
            Some(-3),
            Some(2),
            Some(2),
            None,
            None,
            Some(i64::MIN / 2)
        ]
    );
}

#[test]
fn test_mixed_types_and_nulls() {
    let t = fixed_table();
    for e in [
        bin(BinaryOp::Add, c("n"), c("a")),
        bin(BinaryOp::Add, c("n"), c("x")),
        bin(BinaryOp::Mul, c("n"), f(0.5)),
        bin(BinaryOp::Lt, c("n"), c("a")),
        bin(BinaryOp::GtEq, c("n"), i(2)),
        bin(BinaryOp::Eq, c("x"), i(0)),
        bin(BinaryOp::NotEq, c("x"), c("x")),
        bin(BinaryOp::Sub, c("a"), Expr::lit(ScalarValue::Null)),
        bin(
            BinaryOp::And,
            bin(BinaryOp::Gt, c("a"), i(0)),
            bin(BinaryOp::Lt, c("x"), f(3.0)),
        ),
        bin(
            BinaryOp::Or,
            Expr::unary(UnaryOp::IsNull, c("n")),
            Expr::lit(ScalarValue::Null),
        ),
        Expr::unary(UnaryOp::Not, bin(BinaryOp::Eq, c("y"), f(1.0))),
        Expr::unary(UnaryOp::Neg, c("n")),
        bin(BinaryOp::Add, i(1), i(2)),
    ] {
        check(&e, &t).unwrap_or_else(|msg| panic!("{msg}"));
    }
}

#[test]
fn test_division_by_zero_is_an_operator_error() {
    let t = fixed_table();
    for op in [BinaryOp::Div, BinaryOp::FloorDiv, BinaryOp::Mod] {
        let e = bin(op, c("a"), i(0));
        let err = e.evaluate(&t.batch()).expect_err("division by zero");
        assert!(matches!(err, ExprError::Operator(_)), "{err}");
        // The operator evaluating it names itself.
        let named = err.clone().at("double");
        assert!(matches!(named, Error::Operator { .. }), "{named}");
        assert!(named.to_string().contains("operator 'double'"), "{named}");
        assert!(
            err.to_string()
                .contains(&format!("division by zero in expression {e}")),
            "{err}"
        );
    }
    // Overflow too: i64::MIN // -1 and i64::MIN * 2.
    let err = bin(BinaryOp::FloorDiv, c("a"), i(-1))
        .evaluate(&t.batch())
        .expect_err("overflow");
    assert!(err.to_string().contains("overflow"), "{err}");
    let err = bin(BinaryOp::Mul, c("a"), i(2))
        .evaluate(&t.batch())
        .expect_err("overflow");
    assert!(err.to_string().contains("overflow"), "{err}");
}

#[test]
fn test_unknown_column_fails_type_check() {
    let schema = fixed_table().batch().schema();
    let err = bin(BinaryOp::Add, c("a"), c("zzz"))
        .data_type(&schema)
        .expect_err("unknown");
    assert!(matches!(err, ExprError::Graph(_)), "{err}");
    assert!(
        err.to_string()
            .contains("column 'zzz' does not exist; available columns: a, b, n, x, y"),
        "{err}"
    );
    let err = bin(BinaryOp::And, c("a"), c("x"))
        .data_type(&schema)
        .expect_err("types");
    assert!(matches!(err, ExprError::Schema(_)), "{err}");
    let strings = Schema::new(vec![Field::new("s", DataType::Utf8, true)]);
    let err = bin(BinaryOp::Add, c("s"), i(1))
        .data_type(&strings)
        .expect_err("types");
    assert!(matches!(err, ExprError::Schema(_)), "{err}");
}

#[derive(Default)]
struct Sink(Vec<RecordBatch>);

impl Collector for Sink {
    fn emit(&mut self, batch: RecordBatch) -> Result<()> {
        self.0.push(batch);
        Ok(())
    }
    fn emit_watermark(&mut self, _watermark: i64) -> Result<()> {
        Ok(())
    }
}

fn ctx() -> OperatorContext {
    OperatorContext {
        name: "op".into(),
        uid: "op".into(),
        subtask_index: 0,
        parallelism: 1,
        max_parallelism: 128,
        key_groups: 0..128,
        attempt: 0,
    }
}

/// `filter(value % 3 != 0).with_columns(value = value * 2)`, the benchmark
/// pipeline, against the reference.
#[test]
fn test_filter_then_project_pipeline() {
    let values: Vec<i64> = (-20..20).collect();
    let schema = Arc::new(Schema::new(vec![
        Field::new("value", DataType::Int64, false),
        Field::new("tag", DataType::Utf8, false),
    ]));
    let batch = RecordBatch::try_new(
        Arc::clone(&schema),
        vec![
            Arc::new(Int64Array::from(values.clone())),
            Arc::new(StringArray::from_iter_values(
                values.iter().map(|v| format!("t{v}")),
            )),
        ],
    )
    .expect("batch");
    let filter = FilterFactory::new(bin(
        BinaryOp::NotEq,
        bin(BinaryOp::Mod, c("value"), i(3)),
        i(0),
    ));
    let project =
        ProjectFactory::with_columns(vec![("value".into(), bin(BinaryOp::Mul, c("value"), i(2)))]);
    let out_schema = project
        .output_schema(
            "op",
            &filter.output_schema("op", &schema).expect("filter schema"),
        )
        .expect("project schema");
    let mut filtered = Sink::default();
    filter
        .create(&ctx())
        .expect("filter")
        .process_batch(0, batch, &mut filtered)
        .expect("filter batch");
    let mut projected = Sink::default();
    let mut op = project.create(&ctx()).expect("project");
    for b in filtered.0 {
        op.process_batch(0, b, &mut projected)
            .expect("project batch");
    }
    let out = &projected.0[0];
    assert_eq!(out.schema_ref(), &out_schema);
    let got: Vec<i64> = out.column(0).as_primitive::<Int64Type>().values().to_vec();
    let want: Vec<i64> = values
        .iter()
        .filter(|v| v.rem_euclid(3) != 0)
        .map(|v| v * 2)
        .collect();
    assert_eq!(got, want);
    let tags: Vec<&str> = out.column(1).as_string::<i32>().iter().flatten().collect();
    let want_tags: Vec<String> = values
        .iter()
        .filter(|v| v.rem_euclid(3) != 0)
        .map(|v| format!("t{v}"))
        .collect();
    assert_eq!(tags, want_tags);
}

#[test]
fn test_filter_all_pass_is_zero_copy_and_none_pass_is_empty() {
    let schema = Arc::new(Schema::new(vec![Field::new(
        "flag",
        DataType::Boolean,
        true,
    )]));
    let batch = RecordBatch::try_new(
        schema,
        vec![Arc::new(BooleanArray::from(vec![true, true, true]))],
    )
    .expect("batch");
    let mut sink = Sink::default();
    let mut all = FilterFactory::new(c("flag"))
        .create(&ctx())
        .expect("create");
    all.process_batch(0, batch.clone(), &mut sink)
        .expect("filter");
    assert_eq!(sink.0.len(), 1);
    assert!(Arc::ptr_eq(sink.0[0].column(0), batch.column(0)));
    let mut none = FilterFactory::new(Expr::unary(UnaryOp::Not, c("flag")))
        .create(&ctx())
        .expect("create");
    let mut sink = Sink::default();
    none.process_batch(0, batch, &mut sink).expect("filter");
    assert!(sink.0.is_empty());
}

// ---- property: random expression trees against the reference ----

fn int_value() -> impl Strategy<Value = i64> {
    prop_oneof![
        20 => -20i64..=20,
        1 => Just(i64::MAX),
        1 => Just(i64::MIN),
        1 => any::<i64>(),
    ]
}

fn nonzero_int() -> impl Strategy<Value = i64> {
    prop_oneof![
        30 => (1i64..=20).prop_flat_map(|v| prop_oneof![Just(v), Just(-v)]),
        1 => Just(0i64),
        1 => int_value(),
    ]
}

fn float_value() -> impl Strategy<Value = f64> {
    prop_oneof![
        20 => -50.0f64..50.0,
        2 => (-10i64..10).prop_map(|v| v as f64),
        1 => Just(0.0),
        1 => Just(-0.0),
    ]
}

fn table() -> impl Strategy<Value = Table> {
    (1usize..12).prop_flat_map(|rows| {
        let ints = || prop::collection::vec(prop::option::weighted(0.8, nonzero_int()), rows);
        let floats = || prop::collection::vec(prop::option::weighted(0.8, float_value()), rows);
        let small = prop::collection::vec(prop::option::weighted(0.8, -100i32..100), rows);
        (ints(), ints(), small, floats(), floats()).prop_map(|(a, b, n, x, y)| Table {
            a,
            b,
            n,
            x,
            y,
        })
    })
}

fn leaf() -> impl Strategy<Value = Expr> {
    prop_oneof![
        8 => prop::sample::select(vec!["a", "b", "n", "x", "y"]).prop_map(Expr::col),
        3 => nonzero_int().prop_map(|v| Expr::lit(ScalarValue::Int64(v))),
        2 => float_value().prop_map(|v| Expr::lit(ScalarValue::Float64(v))),
        1 => Just(Expr::lit(ScalarValue::Null)),
    ]
}

fn numeric() -> impl Strategy<Value = Expr> {
    let arith = prop::sample::select(vec![
        BinaryOp::Add,
        BinaryOp::Sub,
        BinaryOp::Mul,
        BinaryOp::Div,
        BinaryOp::FloorDiv,
        BinaryOp::Mod,
    ]);
    leaf().prop_recursive(4, 24, 2, move |inner| {
        prop_oneof![
            6 => (arith.clone(), inner.clone(), inner.clone())
                .prop_map(|(op, l, r)| Expr::binary(op, l, r)),
            1 => inner.prop_map(|e| Expr::unary(UnaryOp::Neg, e)),
        ]
    })
}

fn predicate() -> impl Strategy<Value = Expr> {
    let cmp = prop::sample::select(vec![
        BinaryOp::Eq,
        BinaryOp::NotEq,
        BinaryOp::Lt,
        BinaryOp::LtEq,
        BinaryOp::Gt,
        BinaryOp::GtEq,
    ]);
    let base = prop_oneof![
        6 => (cmp, numeric(), numeric()).prop_map(|(op, l, r)| Expr::binary(op, l, r)),
        1 => numeric().prop_map(|e| Expr::unary(UnaryOp::IsNull, e)),
        1 => numeric().prop_map(|e| Expr::unary(UnaryOp::IsNotNull, e)),
        1 => prop_oneof![Just(true), Just(false)].prop_map(|b| Expr::lit(ScalarValue::Boolean(b))),
    ];
    base.prop_recursive(2, 8, 2, |inner| {
        let logic = prop::sample::select(vec![BinaryOp::And, BinaryOp::Or]);
        prop_oneof![
            3 => (logic, inner.clone(), inner.clone()).prop_map(|(op, l, r)| Expr::binary(op, l, r)),
            1 => inner.clone().prop_map(|e| Expr::unary(UnaryOp::Not, e)),
            1 => inner.prop_map(|e| Expr::binary(BinaryOp::And, e, Expr::lit(ScalarValue::Null))),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn prop_arithmetic_matches_reference(e in numeric(), t in table()) {
        if let Err(msg) = check(&e, &t) {
            prop_assert!(false, "{}", msg);
        }
    }

    #[test]
    fn prop_predicates_match_reference(e in predicate(), t in table()) {
        if let Err(msg) = check(&e, &t) {
            prop_assert!(false, "{}", msg);
        }
    }
}
