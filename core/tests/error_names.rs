//! Every error names its operator where it is built, or says it belongs to
//! no operator; none reads `operator ''` (a SparkRunner restart failure
//! once showed `operator '' failed`). Causes are kept as
//! `source()`.
#![allow(clippy::unwrap_used)] // test helpers

mod common;

use std::error::Error as _;
use std::sync::Arc;

use arrow::array::{ArrayRef, Int64Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema};
use eddyline_core::error::Error;
use eddyline_core::expr::{BinaryOp, Expr, ScalarValue};
use eddyline_core::graph::{JobGraph, LoopPriority, LoopSpec};
use eddyline_core::operator::filter::FilterFactory;
use eddyline_core::operator::project::ProjectFactory;
use eddyline_core::operator::{Collector, OperatorContext, OperatorFactory};
use eddyline_core::partition::{Partitioner, Partitioning};
use eddyline_core::runtime::{JobConfig, JobHandle};

use common::seq_node;

fn assert_named(err: &Error, operator: Option<&str>) {
    let text = err.to_string();
    assert!(!text.contains("operator ''"), "an unnamed error: {text}");
    if let Some(op) = operator {
        assert!(text.contains(&format!("operator '{op}'")), "{text}");
    }
}

#[test]
fn test_error_names_job_graph_errors_belong_to_the_job() {
    for graph in [
        JobGraph {
            nodes: vec![seq_node(0, 1, 10)],
            max_parallelism: 0,
            loops: vec![],
        },
        JobGraph {
            nodes: vec![seq_node(0, 1, 10)],
            max_parallelism: 128,
            loops: vec![LoopSpec {
                id: 1,
                head: 7,
                tail: 9,
                feedback_memory: 1 << 20,
                priority: LoopPriority::FeedbackFirst,
                co: false,
                spill_dir: None,
            }],
        },
    ] {
        let err = JobHandle::start(graph, JobConfig::default()).err().unwrap();
        assert!(matches!(err, Error::JobGraph { .. }), "{err}");
        assert!(err.to_string().starts_with("invalid job graph: "), "{err}");
        assert_named(&err, None);
    }
}

#[test]
fn test_error_names_helpers_name_the_operator_that_called_them() {
    // A hash exchange into `sum` without its key column.
    let mut p = Partitioner::new(
        "sum",
        Partitioning::Hash {
            keys: vec!["nope".into()],
        },
        2,
        128,
        0,
    );
    let batch = RecordBatch::try_new(
        Arc::new(Schema::new(vec![Field::new(
            "value",
            DataType::Int64,
            false,
        )])),
        vec![Arc::new(Int64Array::from(vec![1, 2])) as ArrayRef],
    )
    .unwrap();
    let err = p.route(batch.clone(), |_, _| Ok(())).unwrap_err();
    assert_named(&err, Some("sum"));

    // Expressions: at build time and while running.
    let unknown = ProjectFactory::with_columns(vec![("x".into(), Expr::col("missing"))]);
    let err = unknown
        .output_schema("double", &batch.schema())
        .unwrap_err();
    assert_named(&err, Some("double"));
    let by_zero = Expr::binary(
        BinaryOp::FloorDiv,
        Expr::col("value"),
        Expr::lit(ScalarValue::Int64(0)),
    );
    let gt = Expr::binary(BinaryOp::Gt, by_zero, Expr::lit(ScalarValue::Int64(0)));
    let ctx = OperatorContext {
        name: "positive".into(),
        uid: "positive".into(),
        subtask_index: 0,
        parallelism: 1,
        max_parallelism: 128,
        key_groups: 0..128,
        attempt: 0,
    };
    let mut op = FilterFactory::new(gt).create(&ctx).unwrap();
    struct Drop;
    impl Collector for Drop {
        fn emit(&mut self, _: RecordBatch) -> eddyline_core::error::Result<()> {
            Ok(())
        }
        fn emit_watermark(&mut self, _: i64) -> eddyline_core::error::Result<()> {
            Ok(())
        }
    }
    let err = op.process_batch(0, batch, &mut Drop).unwrap_err();
    assert_named(&err, Some("positive"));
    assert!(err.to_string().contains("division by zero"), "{err}");
}

#[test]
fn test_error_names_io_and_arrow_causes_are_kept_as_source() {
    let io = std::io::Error::new(std::io::ErrorKind::PermissionDenied, "denied");
    let err = Error::io("sink", "/x", &io);
    let source = err.source().expect("an I/O error keeps its cause");
    assert!(source.to_string().contains("denied"), "{source}");
    let arrow = arrow::error::ArrowError::ComputeError("bad kernel".into());
    let err = Error::arrow("map", &arrow);
    assert!(err.source().unwrap().to_string().contains("bad kernel"));
    assert_named(&err, Some("map"));
}
