//! Spark's time functions as DataFusion scalar functions, with UTC as the
//! session time zone (DESIGN.md "Expressions"): `to_timestamp`, `to_date`,
//! `unix_timestamp`, `from_unixtime`, `date_format`, `date_trunc` and the
//! fields `year`, `quarter`, `month`, `dayofmonth` (`day`), `dayofyear`,
//! `dayofweek` (1 is Sunday), `hour`, `minute`, `second`.
//!
//! DataFusion's own versions take chrono's `%Y-%m-%d` formats and
//! `datafusion-spark` has only some of them (its `date_trunc` exists only
//! as a planner rewrite), so they are written here over Spark's patterns
//! (`spark_datetime.rs`). Every function takes a timestamp (any unit, the
//! time zone ignored since the session's is UTC), a date, or a string,
//! which is parsed like Spark's `CAST(s AS TIMESTAMP)` (or `AS DATE` where
//! the function takes a date). A string that does not parse is null; in
//! ANSI mode (`enable_ansi_mode`, the environment's `ansi=True`) it fails
//! the batch with an error naming the function and the value, as Spark's
//! `spark.sql.ansi.enabled=true` does. Formats must be literals; an invalid
//! one is an error when the graph is built. `current_timestamp` is left
//! out on purpose: it is not deterministic, so a replay after a restore
//! would compute other values than the first run.

use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, Date32Array, Int32Array, Int64Array, StringArray,
    TimestampMicrosecondArray,
};
use arrow::datatypes::{
    DataType, Date32Type, Field, FieldRef, Int64Type, TimeUnit, TimestampMicrosecondType,
    TimestampMillisecondType, TimestampNanosecondType, TimestampSecondType,
};
use chrono::{Datelike, NaiveDate, Timelike};
use datafusion_common::{exec_err, plan_err, Result, ScalarValue};
use datafusion_expr::{
    ColumnarValue, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    Volatility,
};

use super::spark_datetime::{
    micros_of, parse_date, parse_timestamp, utc, Pattern, MICROS_PER_DAY, MICROS_PER_SECOND,
};

/// Spark's default pattern of `unix_timestamp` and `from_unixtime`.
const DEFAULT_PATTERN: &str = "yyyy-MM-dd HH:mm:ss";

/// The functions of this module.
pub(super) fn functions() -> Vec<Arc<ScalarUDF>> {
    use Kind::*;
    use Part::*;
    let f = |name, kind| Arc::new(ScalarUDF::from(TimeFunction::new(name, kind)));
    vec![
        f("to_timestamp", ToTimestamp),
        f("to_date", ToDate),
        f("unix_timestamp", UnixTimestamp),
        f("from_unixtime", FromUnixtime),
        f("date_format", DateFormat),
        f("date_trunc", DateTrunc),
        f("year", Field(Year)),
        f("quarter", Field(Quarter)),
        f("month", Field(Month)),
        f("dayofmonth", Field(DayOfMonth)),
        f("day", Field(DayOfMonth)),
        f("dayofyear", Field(DayOfYear)),
        f("dayofweek", Field(DayOfWeek)),
        f("hour", Field(Hour)),
        f("minute", Field(Minute)),
        f("second", Field(Second)),
    ]
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Part {
    Year,
    Quarter,
    Month,
    DayOfMonth,
    DayOfYear,
    DayOfWeek,
    Hour,
    Minute,
    Second,
}

impl Part {
    /// Whether the part is of the date (the argument is taken as a date).
    fn of_date(self) -> bool {
        !matches!(self, Part::Hour | Part::Minute | Part::Second)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    ToTimestamp,
    ToDate,
    UnixTimestamp,
    FromUnixtime,
    DateFormat,
    DateTrunc,
    Field(Part),
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct TimeFunction {
    name: &'static str,
    kind: Kind,
    signature: Signature,
}

impl TimeFunction {
    fn new(name: &'static str, kind: Kind) -> Self {
        TimeFunction {
            name,
            kind,
            signature: Signature::user_defined(Volatility::Immutable),
        }
    }

    /// How many arguments the function takes, and the index of its format
    /// argument, if any.
    fn arity(&self) -> (std::ops::RangeInclusive<usize>, Option<usize>) {
        match self.kind {
            Kind::ToTimestamp | Kind::ToDate | Kind::UnixTimestamp | Kind::FromUnixtime => {
                (1..=2, Some(1))
            }
            Kind::DateFormat => (2..=2, Some(1)),
            Kind::DateTrunc => (2..=2, None),
            Kind::Field(_) => (1..=1, None),
        }
    }

    fn return_data_type(&self) -> DataType {
        match self.kind {
            Kind::ToTimestamp | Kind::DateTrunc => timestamp_type(),
            Kind::ToDate => DataType::Date32,
            Kind::UnixTimestamp => DataType::Int64,
            Kind::FromUnixtime | Kind::DateFormat => DataType::Utf8,
            Kind::Field(_) => DataType::Int32,
        }
    }
}

/// Spark's `timestamp`: microseconds, UTC.
fn timestamp_type() -> DataType {
    DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()))
}

fn is_string(t: &DataType) -> bool {
    matches!(t, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View)
}

/// The type a time argument is handed over as: timestamps and `Date32` as
/// they are, other dates as `Date32`, strings (and null) as `Utf8`.
fn time_argument(name: &str, t: &DataType) -> Result<DataType> {
    match t {
        DataType::Timestamp(_, _) | DataType::Date32 => Ok(t.clone()),
        DataType::Date64 => Ok(DataType::Date32),
        DataType::Null => Ok(DataType::Utf8),
        t if is_string(t) => Ok(DataType::Utf8),
        other => plan_err!("{name} takes a timestamp, a date or a string, not {other}"),
    }
}

impl ScalarUDFImpl for TimeFunction {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        let (count, format) = self.arity();
        if !count.contains(&arg_types.len()) {
            return plan_err!(
                "{} takes {} to {} arguments, got {}",
                self.name,
                count.start(),
                count.end(),
                arg_types.len()
            );
        }
        arg_types
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let string = is_string(t) || matches!(t, DataType::Null);
                match (self.kind, i) {
                    (_, i) if Some(i) == format || (self.kind == Kind::DateTrunc && i == 0) => {
                        if string {
                            Ok(DataType::Utf8)
                        } else {
                            plan_err!("the format of {} is a string, not {t}", self.name)
                        }
                    }
                    (Kind::FromUnixtime, _) if t.is_numeric() || string => Ok(DataType::Int64),
                    (Kind::FromUnixtime, _) => {
                        plan_err!("{} takes seconds since the epoch, not {t}", self.name)
                    }
                    _ => time_argument(self.name, t),
                }
            })
            .collect()
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(self.return_data_type())
    }

    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<FieldRef> {
        let (_, format) = self.arity();
        let literal_at = match (self.kind, format) {
            (Kind::DateTrunc, _) => Some(0),
            (_, Some(i)) if i < args.arg_fields.len() => Some(i),
            _ => None,
        };
        if let Some(i) = literal_at {
            match args.scalar_arguments.get(i).copied().flatten() {
                Some(ScalarValue::Utf8(Some(p))) if self.kind != Kind::DateTrunc => {
                    if let Err(e) = Pattern::parse(p) {
                        return plan_err!("{e}");
                    }
                }
                Some(_) => {}
                None => {
                    return plan_err!(
                        "the {} of {} must be a literal string",
                        if self.kind == Kind::DateTrunc {
                            "unit"
                        } else {
                            "format"
                        },
                        self.name
                    )
                }
            }
        }
        Ok(Arc::new(Field::new(
            self.name,
            self.return_data_type(),
            true,
        )))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let ansi = args.config_options.execution.enable_ansi_mode;
        let rows = args.number_rows;
        let literal = |i: usize| -> Result<Option<String>> {
            match args.args.get(i) {
                Some(ColumnarValue::Scalar(ScalarValue::Utf8(s))) => Ok(s.clone()),
                Some(ColumnarValue::Scalar(ScalarValue::Null)) => Ok(None),
                Some(_) => exec_err!("the format of {} must be a literal string", self.name),
                None => Ok(None),
            }
        };
        let value = args.args[0].to_array(rows)?;
        let parse_error = |s: &str, what: &str| -> Result<Option<i64>> {
            exec_err!(
                "{}: cannot parse '{s}' as {what} (ANSI mode, spark.sql.ansi.enabled)",
                self.name
            )
        };
        let out: ArrayRef = match self.kind {
            Kind::ToTimestamp | Kind::UnixTimestamp => {
                let format = match (literal(1)?, args.args.len(), self.kind) {
                    (Some(f), _, _) => Some(f),
                    (None, 2, _) => return null_result(self.return_data_type(), rows),
                    (None, _, Kind::UnixTimestamp) => Some(DEFAULT_PATTERN.to_string()),
                    (None, _, _) => None,
                };
                let micros = instants(&value, format.as_deref(), ansi, &parse_error)?;
                if self.kind == Kind::ToTimestamp {
                    Arc::new(micros.with_timezone("UTC"))
                } else {
                    // Spark divides toward zero: 1969-12-31 23:59:59.5 is 0.
                    let seconds: Int64Array = micros
                        .iter()
                        .map(|m| m.map(|m| m / MICROS_PER_SECOND))
                        .collect();
                    Arc::new(seconds)
                }
            }
            Kind::ToDate => {
                let days: Date32Array = match (literal(1)?, args.args.len()) {
                    (None, 2) => return null_result(DataType::Date32, rows),
                    (None, _) => dates(&value, ansi, &parse_error)?,
                    (Some(f), _) => instants(&value, Some(&f), ansi, &parse_error)?
                        .iter()
                        .map(|m| m.map(day_of))
                        .collect(),
                };
                Arc::new(days)
            }
            Kind::FromUnixtime => {
                let Some(format) = (match args.args.len() {
                    1 => Some(DEFAULT_PATTERN.to_string()),
                    _ => literal(1)?,
                }) else {
                    return null_result(DataType::Utf8, rows);
                };
                let pattern = pattern(&format)?;
                let seconds = value.as_primitive::<Int64Type>();
                let out: StringArray = seconds
                    .iter()
                    .map(|s| {
                        s.and_then(|s| s.checked_mul(MICROS_PER_SECOND))
                            .and_then(|m| pattern.format(m))
                    })
                    .collect();
                Arc::new(out)
            }
            Kind::DateFormat => {
                let Some(format) = literal(1)? else {
                    return null_result(DataType::Utf8, rows);
                };
                let pattern = pattern(&format)?;
                let micros = instants(&value, None, ansi, &parse_error)?;
                let out: StringArray = micros
                    .iter()
                    .map(|m| m.and_then(|m| pattern.format(m)))
                    .collect();
                Arc::new(out)
            }
            Kind::DateTrunc => {
                let unit = literal(0)?.and_then(|u| TruncUnit::parse(&u));
                let Some(unit) = unit else {
                    // Spark: an unknown unit gives null.
                    return null_result(timestamp_type(), rows);
                };
                let value = args.args[1].to_array(rows)?;
                let micros = instants(&value, None, ansi, &parse_error)?;
                let out: TimestampMicrosecondArray = micros
                    .iter()
                    .map(|m| m.and_then(|m| unit.truncate(m)))
                    .collect();
                Arc::new(out.with_timezone("UTC"))
            }
            Kind::Field(part) => Arc::new(field(part, &value, ansi, &parse_error)?),
        };
        Ok(ColumnarValue::Array(out))
    }
}

/// Field `part` of each value, in UTC.
fn field(
    part: Part,
    value: &ArrayRef,
    ansi: bool,
    parse_error: &dyn Fn(&str, &str) -> Result<Option<i64>>,
) -> Result<Int32Array> {
    Ok(if part.of_date() {
        let epoch = NaiveDate::from_ymd_opt(1970, 1, 1).unwrap_or_default();
        dates(value, ansi, parse_error)?
            .iter()
            .map(|d| {
                let date = epoch.checked_add_signed(chrono::Duration::days(d?.into()))?;
                Some(date_part(part, date))
            })
            .collect()
    } else {
        instants(value, None, ansi, parse_error)?
            .iter()
            .map(|m| {
                let t = utc(m?)?;
                Some(match part {
                    Part::Hour => t.hour(),
                    Part::Minute => t.minute(),
                    _ => t.second(),
                } as i32)
            })
            .collect()
    })
}

fn pattern(format: &str) -> Result<Pattern> {
    Pattern::parse(format).or_else(|e| exec_err!("{e}"))
}

fn null_result(t: DataType, rows: usize) -> Result<ColumnarValue> {
    Ok(ColumnarValue::Array(arrow::array::new_null_array(&t, rows)))
}

fn day_of(micros: i64) -> i32 {
    micros.div_euclid(MICROS_PER_DAY) as i32
}

fn date_part(part: Part, date: NaiveDate) -> i32 {
    (match part {
        Part::Year => return date.year(),
        Part::Quarter => date.month0() / 3 + 1,
        Part::Month => date.month(),
        Part::DayOfMonth => date.day(),
        Part::DayOfYear => date.ordinal(),
        // Spark: 1 is Sunday, 7 Saturday.
        _ => date.weekday().num_days_from_sunday() + 1,
    }) as i32
}

/// The instants (microseconds since the epoch) of a timestamp, date or
/// string column; strings parsed with `format`, or like a cast without one.
fn instants(
    value: &ArrayRef,
    format: Option<&str>,
    ansi: bool,
    parse_error: &dyn Fn(&str, &str) -> Result<Option<i64>>,
) -> Result<TimestampMicrosecondArray> {
    Ok(match value.data_type() {
        DataType::Timestamp(unit, _) => {
            let per_second = |v: i64, factor: i64| v.checked_mul(factor);
            match unit {
                TimeUnit::Second => value
                    .as_primitive::<TimestampSecondType>()
                    .iter()
                    .map(|v| v.and_then(|v| per_second(v, MICROS_PER_SECOND)))
                    .collect(),
                TimeUnit::Millisecond => value
                    .as_primitive::<TimestampMillisecondType>()
                    .iter()
                    .map(|v| v.and_then(|v| per_second(v, 1000)))
                    .collect(),
                TimeUnit::Microsecond => {
                    let v = value.as_primitive::<TimestampMicrosecondType>();
                    TimestampMicrosecondArray::new(v.values().clone(), v.nulls().cloned())
                }
                TimeUnit::Nanosecond => value
                    .as_primitive::<TimestampNanosecondType>()
                    .iter()
                    .map(|v| v.map(|v| v.div_euclid(1000)))
                    .collect(),
            }
        }
        DataType::Date32 => value
            .as_primitive::<Date32Type>()
            .iter()
            .map(|d| d.map(|d| i64::from(d) * MICROS_PER_DAY))
            .collect(),
        _ => {
            let pattern = format.map(pattern).transpose()?;
            let what = match format {
                Some(f) => format!("a timestamp of pattern '{f}'"),
                None => "a timestamp".to_string(),
            };
            let mut out = Vec::with_capacity(value.len());
            for s in value.as_string::<i32>().iter() {
                out.push(match s {
                    None => None,
                    Some(s) => match &pattern {
                        Some(p) => p.parse_micros(s),
                        None => parse_timestamp(s),
                    }
                    .map_or_else(
                        || {
                            if ansi {
                                parse_error(s, &what)
                            } else {
                                Ok(None)
                            }
                        },
                        |m| Ok(Some(m)),
                    )?,
                });
            }
            TimestampMicrosecondArray::from(out)
        }
    })
}

/// The dates (days since the epoch) of a timestamp, date or string column;
/// strings parsed like `CAST(s AS DATE)`.
fn dates(
    value: &ArrayRef,
    ansi: bool,
    parse_error: &dyn Fn(&str, &str) -> Result<Option<i64>>,
) -> Result<Date32Array> {
    Ok(match value.data_type() {
        DataType::Date32 => value.as_primitive::<Date32Type>().clone(),
        DataType::Timestamp(_, _) => instants(value, None, ansi, parse_error)?
            .iter()
            .map(|m| m.map(day_of))
            .collect(),
        _ => {
            let mut out = Vec::with_capacity(value.len());
            for s in value.as_string::<i32>().iter() {
                out.push(match s {
                    None => None,
                    Some(s) => match parse_date(s) {
                        Some(d) => Some(d),
                        None if ansi => {
                            parse_error(s, "a date")?;
                            None
                        }
                        None => None,
                    },
                });
            }
            Date32Array::from(out)
        }
    })
}

/// The units of Spark's `date_trunc`, case-insensitive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TruncUnit {
    Year,
    Quarter,
    Month,
    Week,
    Day,
    Hour,
    Minute,
    Second,
    Millisecond,
    Microsecond,
}

impl TruncUnit {
    fn parse(unit: &str) -> Option<Self> {
        Some(match unit.to_ascii_lowercase().as_str() {
            "year" | "yyyy" | "yy" => TruncUnit::Year,
            "quarter" => TruncUnit::Quarter,
            "month" | "mon" | "mm" => TruncUnit::Month,
            "week" => TruncUnit::Week,
            "day" | "dd" => TruncUnit::Day,
            "hour" => TruncUnit::Hour,
            "minute" => TruncUnit::Minute,
            "second" => TruncUnit::Second,
            "millisecond" => TruncUnit::Millisecond,
            "microsecond" => TruncUnit::Microsecond,
            _ => return None,
        })
    }

    /// `micros` truncated to the unit, in UTC.
    fn truncate(self, micros: i64) -> Option<i64> {
        let floor = |unit: i64| Some(micros - micros.rem_euclid(unit));
        let date = || utc(micros).map(|t| t.date());
        let start_of = |d: Option<NaiveDate>| d.and_then(|d| d.and_hms_opt(0, 0, 0)).map(micros_of);
        match self {
            TruncUnit::Microsecond => Some(micros),
            TruncUnit::Millisecond => floor(1000),
            TruncUnit::Second => floor(MICROS_PER_SECOND),
            TruncUnit::Minute => floor(60 * MICROS_PER_SECOND),
            TruncUnit::Hour => floor(3600 * MICROS_PER_SECOND),
            TruncUnit::Day => floor(MICROS_PER_DAY),
            TruncUnit::Week => {
                let d = date()?;
                let monday = d - chrono::Duration::days(d.weekday().num_days_from_monday().into());
                start_of(Some(monday))
            }
            TruncUnit::Month => start_of(date().and_then(|d| d.with_day(1))),
            TruncUnit::Quarter => start_of(
                date().and_then(|d| NaiveDate::from_ymd_opt(d.year(), d.month0() / 3 * 3 + 1, 1)),
            ),
            TruncUnit::Year => {
                start_of(date().and_then(|d| NaiveDate::from_ymd_opt(d.year(), 1, 1)))
            }
        }
    }
}
