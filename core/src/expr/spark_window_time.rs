//! Spark's `window_time(window)`: the event time of a window's result row,
//! the last instant of the window, `window.end` minus one step of its type
//! (docs/API.md "SQL", Spark's spelling; DESIGN.md "Expressions").
//!
//! Spark's window columns are structs of `start` and `end` timestamps of
//! microseconds, and `window_time` is `end - 1 µs`. Here a window's fields
//! have the event-time column's type: int64 milliseconds (then it is
//! `end - 1`) or a timestamp of any unit (`end` minus one unit: Spark's
//! value for microseconds). As milliseconds, the unit of event time, each is
//! `end - 1 ms`, the time the DSL gives a window's results (docs/API.md
//! "Chaining windows"). A timestamp of seconds has no value 1 ms before the
//! end: refused.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, Int64Array};
use arrow::buffer::NullBuffer;
use arrow::datatypes::{DataType, Field, FieldRef, Int64Type, TimeUnit};
use datafusion_common::{exec_err, plan_err, Result, ScalarValue};
use datafusion_expr::{
    ColumnarValue, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    Volatility,
};

const NAME: &str = "window_time";

/// The functions of this module.
pub(super) fn functions() -> Vec<Arc<ScalarUDF>> {
    vec![Arc::new(ScalarUDF::from(WindowTime {
        signature: Signature::any(1, Volatility::Immutable),
    }))]
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct WindowTime {
    signature: Signature,
}

/// The type of `window_time` of a window column of type `t`: its `end`'s,
/// where `t` is a window (a struct of `start` and `end` of one time type).
fn end_type(t: &DataType) -> Result<DataType> {
    let DataType::Struct(fields) = t else {
        return plan_err!(
            "function {NAME} takes a window (a struct of start and end, as GROUP BY \
             window(...) or session_window(...) gives), not {t}"
        );
    };
    let field = |name: &str| fields.iter().find(|f| f.name() == name);
    let (Some(start), Some(end)) = (field("start"), field("end")) else {
        return plan_err!("function {NAME} takes a window, a struct of start and end, not {t}");
    };
    let end_type = end.data_type();
    if start.data_type() != end_type {
        return plan_err!("function {NAME} takes a window: its start and end differ in type ({t})");
    }
    match end_type {
        DataType::Int64
        | DataType::Timestamp(
            TimeUnit::Millisecond | TimeUnit::Microsecond | TimeUnit::Nanosecond,
            _,
        ) => Ok(end_type.clone()),
        DataType::Timestamp(TimeUnit::Second, _) => plan_err!(
            "function {NAME} of a window of timestamps in seconds: the window's last millisecond has no \
             value in seconds; time the view by milliseconds or a finer timestamp"
        ),
        other => {
            plan_err!("function {NAME} takes a window of int64 milliseconds or timestamps, not of {other}")
        }
    }
}

impl ScalarUDFImpl for WindowTime {
    fn name(&self) -> &str {
        NAME
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        match arg_types {
            [t] => end_type(t),
            _ => plan_err!("function {NAME} takes one window, got {}", arg_types.len()),
        }
    }

    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<FieldRef> {
        let types: Vec<DataType> = args
            .arg_fields
            .iter()
            .map(|f| f.data_type().clone())
            .collect();
        Ok(Arc::new(Field::new(NAME, self.return_type(&types)?, true)))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let [window] = args.args.as_slice() else {
            return exec_err!("{NAME} takes one window column");
        };
        let scalar = matches!(window, ColumnarValue::Scalar(_));
        let out = window_time(&window.to_array(args.number_rows)?)?;
        if scalar {
            return Ok(ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?));
        }
        Ok(ColumnarValue::Array(out))
    }
}

/// `end` minus one step of its type, null where the window or its end is.
fn window_time(window: &ArrayRef) -> Result<ArrayRef> {
    let Some(windows) = window.as_struct_opt() else {
        return exec_err!("{NAME} takes a window column, not {}", window.data_type());
    };
    let Some(end) = windows.column_by_name("end") else {
        return exec_err!("{NAME} takes a window column with an end");
    };
    let end_type = end.data_type().clone();
    // A timestamp's values as they are stored (its unit), then back.
    let raw = arrow::compute::cast(end, &DataType::Int64)?;
    let raw = raw.as_primitive::<Int64Type>();
    let nulls = NullBuffer::union(windows.nulls(), raw.nulls());
    let values = raw.unary::<_, Int64Type>(|v| v.wrapping_sub(1));
    let last = Int64Array::new(values.values().clone(), nulls);
    Ok(arrow::compute::cast(&last, &end_type)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{StructArray, TimestampMicrosecondArray};
    use arrow::datatypes::Fields;

    fn windows(start: ArrayRef, end: ArrayRef, nulls: Option<NullBuffer>) -> ArrayRef {
        let fields = Fields::from(vec![
            Field::new("start", start.data_type().clone(), true),
            Field::new("end", end.data_type().clone(), true),
        ]);
        Arc::new(StructArray::new(fields, vec![start, end], nulls))
    }

    #[test]
    fn test_window_time_is_the_end_minus_one_step_of_its_type() {
        let ints = windows(
            Arc::new(Int64Array::from(vec![0, 10_000, 20_000])),
            Arc::new(Int64Array::from(vec![Some(10_000), None, Some(30_000)])),
            Some(NullBuffer::from(vec![true, true, false])),
        );
        let out = window_time(&ints).unwrap();
        assert_eq!(out.data_type(), &DataType::Int64);
        let got: Vec<Option<i64>> = out.as_primitive::<Int64Type>().iter().collect();
        assert_eq!(got, vec![Some(9_999), None, None]);

        let micros = |v: Vec<i64>| -> ArrayRef {
            Arc::new(TimestampMicrosecondArray::from(v).with_timezone("UTC"))
        };
        let stamps = windows(micros(vec![0]), micros(vec![10_000_000]), None);
        let out = window_time(&stamps).unwrap();
        assert_eq!(
            out.data_type(),
            &DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()))
        );
        let raw = arrow::compute::cast(&out, &DataType::Int64).unwrap();
        assert_eq!(raw.as_primitive::<Int64Type>().value(0), 9_999_999);
    }

    #[test]
    fn test_window_time_refuses_what_is_not_a_window() {
        let err = end_type(&DataType::Int64).unwrap_err().to_string();
        assert!(err.contains("takes a window (a struct"), "{err}");
        let seconds = DataType::Timestamp(TimeUnit::Second, None);
        let fields = Fields::from(vec![
            Field::new("start", seconds.clone(), true),
            Field::new("end", seconds, true),
        ]);
        let err = end_type(&DataType::Struct(fields)).unwrap_err().to_string();
        assert!(err.contains("timestamps in seconds"), "{err}");
    }
}
