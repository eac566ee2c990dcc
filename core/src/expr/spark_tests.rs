//! Library functions, casts and `CASE` checked against the results Spark
//! itself gives (PySpark 4, `spark.sql.ansi.enabled=false`, session time
//! zone UTC) for the same inputs: nulls, empty strings, unicode, NaN and
//! infinities, integer overflow.

use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, Float64Array, Int32Array, Int64Array, StringArray,
};
use arrow::compute::{cast_with_options, CastOptions};
use arrow::datatypes::{DataType, Field, Float64Type, Int32Type, Int64Type, Schema};
use arrow::record_batch::RecordBatch;

use super::{BinaryOp, Expr, ExprError, ScalarValue};

fn batch(columns: Vec<(&str, ArrayRef)>) -> RecordBatch {
    let fields: Vec<Field> = columns
        .iter()
        .map(|(name, a)| Field::new(*name, a.data_type().clone(), true))
        .collect();
    let arrays = columns.into_iter().map(|(_, a)| a).collect();
    RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays).expect("valid batch")
}

fn strings(values: &[Option<&str>]) -> ArrayRef {
    Arc::new(StringArray::from(values.to_vec()))
}

/// Type-checks and evaluates `e` over `batch`, checking that the evaluated
/// type is the checked one and that there is one value per row.
fn run(e: &Expr, batch: &RecordBatch) -> ArrayRef {
    let checked = e
        .data_type(batch.schema_ref())
        .unwrap_or_else(|err| panic!("{e} must type-check: {err}"));
    let out = e
        .evaluate(batch)
        .unwrap_or_else(|err| panic!("{e} must evaluate: {err}"));
    assert_eq!(out.data_type(), &checked, "{e}");
    assert_eq!(out.len(), batch.num_rows(), "{e}");
    out
}

/// The values of `e` over `batch` as strings (null as `None`).
fn run_strings(e: &Expr, batch: &RecordBatch) -> Vec<Option<String>> {
    let out = run(e, batch);
    let text = cast_with_options(&out, &DataType::Utf8, &CastOptions::default())
        .expect("displayable as a string");
    text.as_string::<i32>()
        .iter()
        .map(|s| s.map(str::to_string))
        .collect()
}

fn call(name: &str, args: Vec<Expr>) -> Expr {
    Expr::call(name, args).unwrap_or_else(|err| panic!("{name} must resolve: {err}"))
}

fn s(v: &str) -> Expr {
    Expr::lit(ScalarValue::Utf8(v.to_string()))
}

fn i(v: i64) -> Expr {
    Expr::lit(ScalarValue::Int64(v))
}

fn f(v: f64) -> Expr {
    Expr::lit(ScalarValue::Float64(v))
}

fn some(values: &[Option<&str>]) -> Vec<Option<String>> {
    values.iter().map(|v| v.map(str::to_string)).collect()
}

#[test]
fn test_string_functions_match_spark_on_unicode_empty_and_null() {
    let b = batch(vec![(
        "s",
        strings(&[Some("ÀÉÎ Straße"), Some(""), None, Some("héllo😀")]),
    )]);
    let c = || Expr::col("s");
    assert_eq!(
        run_strings(&call("lower", vec![c()]), &b),
        some(&[Some("àéî straße"), Some(""), None, Some("héllo😀")])
    );
    assert_eq!(
        run_strings(&call("UPPER", vec![s("straße ǆ")]), &b),
        some(&[Some("STRASSE Ǆ"); 4])
    );
    // Characters, not bytes: the emoji is one.
    let lengths = run(&call("length", vec![c()]), &b);
    assert_eq!(lengths.data_type(), &DataType::Int32);
    assert_eq!(
        lengths
            .as_primitive::<Int32Type>()
            .iter()
            .collect::<Vec<_>>(),
        vec![Some(10), Some(0), None, Some(6)]
    );
    let sub = |args: Vec<Expr>| run_strings(&call("substring", args), &b)[0].clone();
    assert_eq!(sub(vec![s("Spark SQL"), i(5)]), Some("k SQL".into()));
    assert_eq!(sub(vec![s("Spark SQL"), i(-3)]), Some("SQL".into()));
    assert_eq!(sub(vec![s("Spark SQL"), i(0), i(3)]), Some("Spa".into()));
    assert_eq!(sub(vec![s("Spark SQL"), i(5), i(1)]), Some("k".into()));
    assert_eq!(
        sub(vec![s("日本語テキスト"), i(2), i(3)]),
        Some("本語テ".into())
    );
    assert_eq!(sub(vec![s("abc"), i(10)]), Some("".into()));
    // Spark's concat is null when any argument is; concat_ws skips nulls.
    assert_eq!(
        run_strings(&call("concat", vec![s("a"), c(), s("ü")]), &b),
        some(&[Some("aÀÉÎ Straßeü"), Some("aü"), None, Some("ahéllo😀ü")])
    );
    assert_eq!(
        run_strings(&call("concat_ws", vec![s("-"), s("a"), c(), s("b")]), &b),
        some(&[
            Some("a-ÀÉÎ Straße-b"),
            Some("a--b"),
            Some("a-b"),
            Some("a-héllo😀-b")
        ])
    );
    // trim removes spaces only, not tabs.
    let t = |v: &str| run_strings(&call("trim", vec![s(v)]), &b)[0].clone();
    assert_eq!(t("  a b  "), Some("a b".into()));
    assert_eq!(t("\ta\t"), Some("\ta\t".into()));
    for (name, needle, expected) in [
        ("startswith", "Sp", true),
        ("endswith", "rk", true),
        ("contains", "par", true),
        ("startswith", "rk", false),
    ] {
        let out = run(&call(name, vec![s("Spark"), s(needle)]), &b);
        assert_eq!(out.as_boolean().value(0), expected, "{name}({needle})");
    }
}

#[test]
fn test_regex_functions_match_spark() {
    let b = batch(vec![("s", strings(&[Some("aaa"), Some("a1b22"), None]))]);
    // Spark replaces every match and refers to groups as $n.
    assert_eq!(
        run_strings(
            &call(
                "regexp_replace",
                vec![Expr::col("s"), s("(\\d+)"), s("<$1>")]
            ),
            &b
        ),
        some(&[Some("aaa"), Some("a<1>b<22>"), None])
    );
    assert_eq!(
        run_strings(
            &call("regexp_replace", vec![Expr::col("s"), s("a"), s("b")]),
            &b
        ),
        some(&[Some("bbb"), Some("b1b22"), None])
    );
    assert_eq!(
        run_strings(
            &call(
                "regexp_extract",
                vec![s("foo123bar"), s("([a-z]+)(\\d+)"), i(2)]
            ),
            &b
        )[0]
        .as_deref(),
        Some("123")
    );
    // Group 1 by default; no match is the empty string; null stays null.
    assert_eq!(
        run_strings(
            &call("regexp_extract", vec![Expr::col("s"), s("a(\\d)")]),
            &b
        ),
        some(&[Some(""), Some("1"), None])
    );
    let err = call("regexp_extract", vec![Expr::col("s"), s("a(\\d)"), i(2)])
        .evaluate(&b)
        .expect_err("no group 2");
    assert!(
        err.to_string().contains("has 1 groups, but group 2"),
        "{err}"
    );
    let out = run(&call("rlike", vec![Expr::col("s"), s("^a.c$|^a+$")]), &b);
    assert_eq!(
        out.as_boolean().iter().collect::<Vec<_>>(),
        vec![Some(true), Some(false), None]
    );
}

#[test]
fn test_math_functions_match_spark_on_nan_infinity_and_overflow() {
    let b = batch(vec![(
        "x",
        Arc::new(Float64Array::from(vec![
            Some(2.5),
            Some(-2.5),
            Some(f64::NAN),
            None,
            Some(f64::NEG_INFINITY),
            Some(0.0),
        ])) as ArrayRef,
    )]);
    let x = || Expr::col("x");
    let floats = |e: Expr| -> Vec<Option<f64>> {
        run(&e, &b).as_primitive::<Float64Type>().iter().collect()
    };
    // Half up, not half to even.
    let rounded = floats(call("round", vec![x()]));
    assert_eq!(&rounded[..2], &[Some(3.0), Some(-3.0)]);
    assert!(rounded[2].is_some_and(f64::is_nan));
    assert_eq!(rounded[3], None);
    assert_eq!(rounded[4], Some(f64::NEG_INFINITY));
    assert_eq!(floats(call("round", vec![f(1.235), i(2)]))[0], Some(1.24));
    // floor and ceil of a double are bigint.
    let floor = run(&call("floor", vec![x()]), &b);
    assert_eq!(floor.data_type(), &DataType::Int64);
    assert_eq!(floor.as_primitive::<Int64Type>().value(1), -3);
    let ceil = run(&call("ceil", vec![f(1.2)]), &b);
    assert_eq!(ceil.as_primitive::<Int64Type>().value(0), 2);
    assert!(floats(call("sqrt", vec![f(-1.0)]))[0].is_some_and(f64::is_nan));
    // Spark (Java's StrictMath) gives 2.7182818284590455, one unit in the
    // last place above Rust's libm: a documented difference.
    let e = floats(call("exp", vec![i(1)]))[0].expect("a value");
    assert!(
        (e - 2.718_281_828_459_045_5_f64).abs() <= f64::EPSILON * 4.0,
        "{e}"
    );
    // Spark's logarithms are null for zero and negative input.
    assert_eq!(floats(call("ln", vec![x()]))[5], None);
    assert_eq!(floats(call("log", vec![x()]))[1], None);
    assert_eq!(floats(call("log", vec![i(1)]))[0], Some(0.0));
    assert_eq!(floats(call("log", vec![i(10), i(100)]))[0], Some(2.0));
    assert_eq!(floats(call("log", vec![i(2), i(0)]))[0], None);
    assert_eq!(floats(call("ln", vec![f(-0.0)]))[0], None);
    assert_eq!(floats(call("log10", vec![i(1000)]))[0], Some(3.0));
    assert_eq!(floats(call("pow", vec![i(2), i(10)]))[0], Some(1024.0));
    assert_eq!(
        floats(call("pow", vec![i(0), i(-1)]))[0],
        Some(f64::INFINITY)
    );
    assert_eq!(floats(call("abs", vec![x()]))[4], Some(f64::INFINITY));
    // Non-ANSI abs of the smallest integer wraps (Java's Math.abs).
    let ints = batch(vec![(
        "n",
        Arc::new(Int32Array::from(vec![Some(i32::MIN), Some(-7), None])) as ArrayRef,
    )]);
    let abs = run(&call("abs", vec![Expr::col("n")]), &ints);
    assert_eq!(
        abs.as_primitive::<Int32Type>().iter().collect::<Vec<_>>(),
        vec![Some(i32::MIN), Some(7), None]
    );
    // greatest and least skip nulls.
    let g = run(
        &call("greatest", vec![i(1), Expr::lit(ScalarValue::Null), i(3)]),
        &ints,
    );
    assert_eq!(g.as_primitive::<Int64Type>().value(0), 3);
    let l = run(
        &call(
            "least",
            vec![Expr::col("n"), Expr::lit(ScalarValue::Null), i(3)],
        ),
        &ints,
    );
    // The literal 3 is a bigint here (an int in Spark), so the result is.
    assert_eq!(
        l.as_primitive::<Int64Type>().iter().collect::<Vec<_>>(),
        vec![Some(i64::from(i32::MIN)), Some(-7), Some(3)]
    );
    let c = run(
        &call(
            "coalesce",
            vec![Expr::lit(ScalarValue::Null), Expr::col("n"), i(2)],
        ),
        &ints,
    );
    assert_eq!(
        cast_with_options(&c, &DataType::Int64, &CastOptions::default())
            .expect("int")
            .as_primitive::<Int64Type>()
            .iter()
            .collect::<Vec<_>>(),
        vec![Some(i64::from(i32::MIN)), Some(-7), Some(2)]
    );
}

#[test]
fn test_hash_functions_match_spark() {
    let b = batch(vec![("s", strings(&[Some("Spark"), Some(""), None]))]);
    let c = || Expr::col("s");
    assert_eq!(
        run_strings(&call("md5", vec![c()]), &b)[0].as_deref(),
        Some("8cde774d6f7333752ed72cacddb05126")
    );
    assert_eq!(run_strings(&call("md5", vec![c()]), &b)[2], None);
    // A string, as Spark's, not DataFusion's `Utf8View` (a Spark table
    // sink refuses that type); `run` checks the evaluated type is this.
    assert_eq!(
        call("md5", vec![c()])
            .data_type(b.schema_ref())
            .expect("md5"),
        DataType::Utf8
    );
    let lit = call("md5", vec![s("Spark")]);
    assert_eq!(run(&lit, &b).data_type(), &DataType::Utf8);
    let sha2 = |bits: i64| run_strings(&call("sha2", vec![c(), i(bits)]), &b)[0].clone();
    let sha256 = "529bc3b07127ecb7e53a4dcf1991d9152c24537d919178022b2c42657f79a26b";
    assert_eq!(sha2(256).as_deref(), Some(sha256));
    assert_eq!(sha2(0).as_deref(), Some(sha256));
    assert_eq!(
        sha2(512).as_deref(),
        Some(
            "44844a586c54c9a212da1dbfe05c5f1705de1af5fda1f0d36297623249b279fd\
             8f0ccec03f888f4fb13bf7cd83fdad58591c797f81121a23cfdd5e0897795238"
        )
    );
    // An unsupported bit length is null, not an error.
    assert_eq!(sha2(1), None);
    assert_eq!(
        run_strings(&call("sha1", vec![c()]), &b)[0].as_deref(),
        Some("85f5955f4b27a9a4c2aab6ffe5d7189fc298b92c")
    );
    let crc = run(&call("crc32", vec![c()]), &b);
    assert_eq!(
        cast_with_options(&crc, &DataType::Int64, &CastOptions::default())
            .expect("int")
            .as_primitive::<Int64Type>()
            .value(0),
        1_557_323_817
    );
    let xx = run(&call("xxhash64", vec![c()]), &b);
    assert_eq!(
        xx.as_primitive::<Int64Type>().iter().collect::<Vec<_>>(),
        vec![
            Some(-4_294_468_057_691_064_905),
            Some(-7_444_071_767_201_028_348),
            Some(42)
        ]
    );
    let longs = batch(vec![("n", Arc::new(Int64Array::from(vec![1])) as ArrayRef)]);
    let xx = run(&call("xxhash64", vec![Expr::col("n")]), &longs);
    assert_eq!(
        xx.as_primitive::<Int64Type>().value(0),
        -7_001_672_635_703_045_582
    );
    let ints = batch(vec![("n", Arc::new(Int32Array::from(vec![1])) as ArrayRef)]);
    let xx = run(&call("xxhash64", vec![Expr::col("n")]), &ints);
    assert_eq!(
        xx.as_primitive::<Int64Type>().value(0),
        -6_698_625_589_789_238_999
    );
}

#[test]
fn test_spark_hash_matches_spark() {
    let b = batch(vec![
        ("s", strings(&[Some("Spark"), None])),
        (
            "n",
            Arc::new(Int32Array::from(vec![Some(1), None])) as ArrayRef,
        ),
    ]);
    let hash = |args: Vec<Expr>| -> Vec<Option<i32>> {
        run(&call("hash", args), &b)
            .as_primitive::<Int32Type>()
            .iter()
            .collect()
    };
    // Spark: hash('Spark') = 228093765, hash(1) = -559580957 (an int), and
    // a null argument leaves the seed 42.
    assert_eq!(
        hash(vec![Expr::col("s")]),
        vec![Some(228_093_765), Some(42)]
    );
    assert_eq!(
        hash(vec![Expr::col("n")]),
        vec![Some(-559_580_957), Some(42)]
    );
}

#[test]
fn test_unknown_function_is_a_graph_error_naming_it() {
    let err = Expr::call("lowerr", vec![Expr::col("s")]).expect_err("unknown");
    assert!(matches!(err, ExprError::Graph(_)), "{err}");
    assert!(
        err.to_string().contains("unknown function 'lowerr'"),
        "{err}"
    );
}

#[test]
fn test_wrong_argument_types_name_the_function_and_the_column() {
    let schema = Schema::new(vec![
        Field::new("flag", DataType::Boolean, true),
        Field::new("s", DataType::Utf8, true),
    ]);
    let err = call("md5", vec![Expr::col("flag")])
        .data_type(&schema)
        .expect_err("md5 of a boolean");
    assert!(matches!(err, ExprError::Schema(_)), "{err}");
    let msg = err.to_string();
    assert!(msg.contains("function 'md5'"), "{msg}");
    assert!(msg.contains("column 'flag'"), "{msg}");
    assert!(msg.contains("Boolean"), "{msg}");
    let err = call("substring", vec![Expr::col("s")])
        .data_type(&schema)
        .expect_err("substring needs a position");
    assert!(err.to_string().contains("function 'substring'"), "{err}");
}

#[test]
fn test_call_over_literals_only_is_a_single_value() {
    let b = batch(vec![(
        "n",
        Arc::new(Int32Array::from(vec![1, 2, 3])) as ArrayRef,
    )]);
    let e = call("upper", vec![s("ab")]);
    let value = e.eval(&b).expect("evaluates");
    assert!(value.is_scalar());
    assert_eq!(
        run_strings(&e, &b),
        some(&[Some("AB"), Some("AB"), Some("AB")])
    );
    // Nested in arithmetic: length("abc") + n.
    let sum = Expr::binary(
        BinaryOp::Add,
        call("length", vec![s("abc")]),
        Expr::col("n"),
    );
    assert_eq!(
        run(&sum, &b).as_primitive::<Int64Type>().values().to_vec(),
        vec![4, 5, 6]
    );
}

#[test]
fn test_cast_follows_spark_non_ansi_rules() {
    let b = batch(vec![(
        "s",
        strings(&[
            Some("  12 "),
            Some("1.5"),
            Some("abc"),
            None,
            Some("+5"),
            Some("9999999999"),
            Some("1e3"),
            Some("-2147483648"),
        ]),
    )]);
    let cast = |e: Expr, to: &str| Expr::cast(e, to).expect("known type");
    let ints = run(&cast(Expr::col("s"), "int"), &b);
    assert_eq!(
        ints.as_primitive::<Int32Type>().iter().collect::<Vec<_>>(),
        vec![
            Some(12),
            Some(1),
            None,
            None,
            Some(5),
            None,
            None,
            Some(i32::MIN)
        ]
    );
    let doubles = run(&cast(s(" 1.5 "), "double"), &b);
    assert_eq!(doubles.as_primitive::<Float64Type>().value(0), 1.5);
    // Narrowing wraps like a JVM cast; doubles truncate and saturate.
    let longs = batch(vec![(
        "n",
        Arc::new(Int64Array::from(vec![Some(3_000_000_000), Some(-1), None])) as ArrayRef,
    )]);
    let narrowed = run(&cast(Expr::col("n"), "int"), &longs);
    assert_eq!(
        narrowed
            .as_primitive::<Int32Type>()
            .iter()
            .collect::<Vec<_>>(),
        vec![Some(-1_294_967_296), Some(-1), None]
    );
    let shorts = run(&cast(Expr::col("n"), "smallint"), &longs);
    assert_eq!(
        cast_with_options(&shorts, &DataType::Int64, &CastOptions::default())
            .expect("int")
            .as_primitive::<Int64Type>()
            .value(0),
        24_064
    );
    let floats = batch(vec![(
        "x",
        Arc::new(Float64Array::from(vec![1.9, -1.9, 1e20, f64::NAN])) as ArrayRef,
    )]);
    let truncated = run(&cast(Expr::col("x"), "int"), &floats);
    assert_eq!(
        truncated.as_primitive::<Int32Type>().values().to_vec(),
        vec![1, -1, i32::MAX, 0]
    );
    let short = run(&cast(f(1e10), "smallint"), &floats);
    assert_eq!(
        cast_with_options(&short, &DataType::Int64, &CastOptions::default())
            .expect("int")
            .as_primitive::<Int64Type>()
            .value(0),
        -1
    );
    assert_eq!(
        run_strings(&cast(f(1.0), "string"), &b)[0].as_deref(),
        Some("1.0")
    );
    assert_eq!(
        run_strings(&cast(Expr::lit(ScalarValue::Boolean(true)), "string"), &b)[0].as_deref(),
        Some("true")
    );
}

#[test]
fn test_cast_to_boolean_date_and_decimal_follows_spark() {
    let b = batch(vec![("s", strings(&[Some("  12 ")]))]);
    let cast = |e: Expr, to: &str| Expr::cast(e, to).expect("known type");
    let bools = run(
        &cast(Expr::col("s"), "boolean"),
        &batch(vec![(
            "s",
            strings(&[Some(" true "), Some("yes"), Some("x")]),
        )]),
    );
    assert_eq!(
        bools.as_boolean().iter().collect::<Vec<_>>(),
        vec![Some(true), Some(true), None]
    );
    let dates = run_strings(
        &cast(Expr::col("s"), "date"),
        &batch(vec![(
            "s",
            strings(&[Some("2024-02-29"), Some("2023-02-29")]),
        )]),
    );
    assert_eq!(dates, some(&[Some("2024-02-29"), None]));
    let err = Expr::cast(Expr::col("s"), "integr").expect_err("unknown type");
    assert!(err.to_string().contains("unknown type 'integr'"), "{err}");
    assert_eq!(
        Expr::cast(Expr::col("s"), "Decimal(10, 2)")
            .expect("decimal")
            .data_type(b.schema_ref())
            .expect("typed"),
        DataType::Decimal128(10, 2)
    );
}

#[test]
fn test_case_takes_the_first_true_branch_and_null_conditions_are_false() {
    let b = batch(vec![(
        "n",
        Arc::new(Int64Array::from(vec![Some(5), Some(-2), None, Some(0)])) as ArrayRef,
    )]);
    let n = || Expr::col("n");
    let e = Expr::case(
        vec![
            (Expr::binary(BinaryOp::Gt, n(), i(0)), s("pos")),
            (Expr::binary(BinaryOp::Lt, n(), i(0)), s("neg")),
        ],
        Some(s("zero or null")),
    );
    assert_eq!(
        run_strings(&e, &b),
        some(&[
            Some("pos"),
            Some("neg"),
            Some("zero or null"),
            Some("zero or null")
        ])
    );
    let no_else = Expr::case(vec![(Expr::binary(BinaryOp::Gt, n(), i(0)), n())], None);
    let out = run(&no_else, &b);
    assert_eq!(
        out.as_primitive::<Int64Type>().iter().collect::<Vec<_>>(),
        vec![Some(5), None, None, None]
    );
    // Mixed numeric branches promote like arithmetic.
    let mixed = Expr::case(
        vec![(Expr::binary(BinaryOp::Gt, n(), i(0)), n())],
        Some(f(0.5)),
    );
    assert_eq!(
        mixed.data_type(b.schema_ref()).expect("typed"),
        DataType::Float64
    );
    let out = run(&mixed, &b);
    assert_eq!(
        out.as_primitive::<Float64Type>().values().to_vec(),
        vec![5.0, 0.5, 0.5, 0.5]
    );
}

#[test]
fn test_case_evaluates_a_branch_only_on_the_rows_that_reach_it() {
    let b = batch(vec![
        (
            "n",
            Arc::new(Int64Array::from(vec![Some(7), Some(9), Some(1), None])) as ArrayRef,
        ),
        (
            "d",
            Arc::new(Int64Array::from(vec![Some(2), Some(0), Some(0), Some(3)])) as ArrayRef,
        ),
    ]);
    let (n, d) = (|| Expr::col("n"), || Expr::col("d"));
    // n // d divides by zero where d == 0; only rows with d != 0 reach it,
    // and the second condition only sees rows the first did not take.
    let e = Expr::case(
        vec![
            (
                Expr::binary(BinaryOp::NotEq, d(), i(0)),
                Expr::binary(BinaryOp::FloorDiv, n(), d()),
            ),
            (
                Expr::binary(
                    BinaryOp::Gt,
                    Expr::binary(
                        BinaryOp::FloorDiv,
                        n(),
                        Expr::binary(BinaryOp::Sub, d(), i(0)),
                    ),
                    i(0),
                ),
                i(-1),
            ),
        ],
        Some(i(0)),
    );
    let err = e
        .evaluate(&b)
        .expect_err("the second condition divides by zero");
    assert!(err.to_string().contains("division by zero"), "{err}");
    let e = Expr::case(
        vec![(
            Expr::binary(BinaryOp::NotEq, d(), i(0)),
            Expr::binary(BinaryOp::FloorDiv, n(), d()),
        )],
        Some(i(0)),
    );
    assert_eq!(
        run(&e, &b)
            .as_primitive::<Int64Type>()
            .iter()
            .collect::<Vec<_>>(),
        vec![Some(3), Some(0), Some(0), None]
    );
}

#[test]
fn test_case_type_errors_name_the_condition_and_the_types() {
    let schema = Schema::new(vec![
        Field::new("n", DataType::Int64, true),
        Field::new("s", DataType::Utf8, true),
    ]);
    let err = Expr::case(vec![(Expr::col("n"), i(1))], None)
        .data_type(&schema)
        .expect_err("int condition");
    assert!(matches!(err, ExprError::Schema(_)), "{err}");
    assert!(err.to_string().contains(r#"condition col("n")"#), "{err}");
    let err = Expr::case(
        vec![(Expr::lit(ScalarValue::Boolean(true)), Expr::col("s"))],
        Some(i(1)),
    )
    .data_type(&schema)
    .expect_err("string and int");
    assert!(
        err.to_string().contains("incompatible types (Utf8, Int64)"),
        "{err}"
    );
}

#[test]
fn test_case_over_an_empty_batch_and_without_columns() {
    let empty = batch(vec![(
        "n",
        Arc::new(Int64Array::from(Vec::<i64>::new())) as ArrayRef,
    )]);
    let e = Expr::case(
        vec![(Expr::binary(BinaryOp::Gt, Expr::col("n"), i(0)), s("pos"))],
        None,
    );
    assert_eq!(run(&e, &empty).len(), 0);
    let b = batch(vec![(
        "flag",
        Arc::new(BooleanArray::from(vec![Some(true), None, Some(false)])) as ArrayRef,
    )]);
    let e = Expr::case(vec![(Expr::col("flag"), s("yes"))], Some(s("no")));
    assert_eq!(
        run_strings(&e, &b),
        some(&[Some("yes"), Some("no"), Some("no")])
    );
}

#[test]
fn test_display_spells_calls_casts_and_cases() {
    let e = Expr::case(
        vec![(
            call("startswith", vec![Expr::col("s"), s("a")]),
            Expr::cast(call("length", vec![Expr::col("s")]), "bigint").expect("type"),
        )],
        Some(i(0)),
    );
    assert_eq!(
        e.to_string(),
        r#"when(startswith(col("s"), "a"), length(col("s")).cast("bigint")).otherwise(0)"#
    );
    assert_eq!(e.columns(), vec!["s"]);
}

/// Scratch timing of W8's expressions (not a test): `cargo test --release
/// -p eddyline-core --lib w8_timing -- --ignored --nocapture`.
#[test]
#[ignore]
fn w8_timing() {
    let batches = w8_batches();
    w8_timing_of(&batches);
}

/// W8's rows: a key and a URL with an item id, 31 batches of 65,536.
fn w8_batches() -> Vec<RecordBatch> {
    let mut state = 42u64;
    let mut next = |bound: u64| {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (state >> 33) % bound
    };
    (0..31)
        .map(|_| {
            let rows: Vec<(i64, i64)> = (0..65_536)
                .map(|_| (next(10_000) as i64, next(1000) as i64))
                .collect();
            let urls: Vec<String> = rows
                .iter()
                .map(|(k, v)| format!("https://Shop.Example.COM/Item/{}?ref={k}", v * 97))
                .collect();
            batch(vec![
                (
                    "key",
                    Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.0))),
                ),
                ("url", Arc::new(StringArray::from_iter_values(urls.iter()))),
            ])
        })
        .collect()
}

fn w8_timing_of(batches: &[RecordBatch]) {
    let lower = call("lower", vec![Expr::col("url")]);
    let lowered: Vec<RecordBatch> = batches
        .iter()
        .map(|b| batch(vec![("l", lower.evaluate(b).unwrap())]))
        .collect();
    let extract = call(
        "regexp_extract",
        vec![
            Expr::col("l"),
            s(r"/item/(\d+)"),
            Expr::lit(ScalarValue::Int64(1)),
        ],
    );
    let extracted: Vec<RecordBatch> = lowered
        .iter()
        .map(|b| batch(vec![("e", extract.evaluate(b).unwrap())]))
        .collect();
    let cast = Expr::cast(Expr::col("e"), "bigint").unwrap();
    let items: Vec<RecordBatch> = extracted
        .iter()
        .map(|b| batch(vec![("item", cast.evaluate(b).unwrap())]))
        .collect();
    let i = |v: i64| Expr::lit(ScalarValue::Int64(v));
    let case = Expr::case(
        vec![
            (
                Expr::binary(BinaryOp::Lt, Expr::col("item"), i(10_000)),
                s("low"),
            ),
            (
                Expr::binary(BinaryOp::Lt, Expr::col("item"), i(50_000)),
                s("mid"),
            ),
        ],
        Some(s("high")),
    );
    let time = |name: &str, e: &Expr, input: &[RecordBatch]| {
        let mut runs: Vec<f64> = (0..7)
            .map(|_| {
                let start = std::time::Instant::now();
                for b in input {
                    std::hint::black_box(e.evaluate(b).unwrap());
                }
                start.elapsed().as_secs_f64()
            })
            .collect();
        runs.sort_by(f64::total_cmp);
        let rows = (input.len() * 65_536) as f64;
        println!("{name}: {:.1} ns/row (median of 7)", runs[3] * 1e9 / rows);
    };
    for (name, pattern) in [
        (
            "search: literal run",
            super::spark_regex::compile(r"/item/(\d+)"),
        ),
        (
            "search: one-pass",
            super::spark_regex::compile_without_run(r"/item/(\d+)"),
        ),
    ] {
        let mut runs: Vec<f64> = (0..7)
            .map(|_| {
                let mut searcher = pattern.searcher();
                let start = std::time::Instant::now();
                for b in &lowered {
                    for v in b.column(0).as_string::<i32>().iter().flatten() {
                        std::hint::black_box(pattern.extract(&mut searcher, v, 1));
                    }
                }
                start.elapsed().as_secs_f64()
            })
            .collect();
        runs.sort_by(f64::total_cmp);
        let rows = (lowered.len() * 65_536) as f64;
        println!("{name}: {:.1} ns/row (median of 7)", runs[3] * 1e9 / rows);
    }
    time("lower", &lower, batches);
    time("regexp_extract", &extract, &lowered);
    time("cast", &cast, &extracted);
    time("case", &case, &items);
}
