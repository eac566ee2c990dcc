//! Spark's datetime patterns (`yyyy-MM-dd HH:mm:ss`...) and its string to
//! timestamp cast, with UTC as the session time zone (DESIGN.md
//! "Expressions"; the functions that use them are in `spark_time.rs`).
//!
//! A pattern is parsed once into [`Token`]s; formatting and parsing walk
//! them. The letters are Spark 3's (java.time's `DateTimeFormatter` as Spark
//! restricts it): `y` year (`yy` two digits based at 2000), `M`/`L` month
//! (`MMM` `Jan`, `MMMM` `January`), `d` day of month, `D` day of year, `H`
//! hour 0-23, `h` 1-12, `K` 0-11, `k` 1-24, `m`, `s`, `S` fraction (parsing
//! takes 1 to as many digits as letters), `a` AM/PM, `E` day of week
//! (`EEEE` in full), `X`/`x`/`Z` offsets, `z`/`VV` the zone (UTC when
//! formatting; `UTC`, `GMT`, `Z` or a region id such as `Europe/Paris` when
//! parsing), text in single quotes (`''` is a quote) and any other
//! non-letter as itself. A numeric field of one letter takes as many digits
//! as there are (a run of fixed-width fields after it keeps theirs); of two
//! or more letters exactly that many. Parsing is case-insensitive, must use
//! the whole string, and resolves strictly (`2024-02-30` does not parse);
//! missing fields default to 1970-01-01 00:00:00 and an hour of `h`/`K`
//! without `a` is AM, as Spark's. Letters Spark refuses (week-based
//! fields, `[...]` optional sections, `G`, `Q`...) are an error naming the
//! pattern.

use chrono::{
    DateTime, Datelike, Duration, LocalResult, NaiveDate, NaiveDateTime, NaiveTime, Offset,
    TimeZone, Timelike,
};
use chrono_tz::Tz;

pub(super) const MICROS_PER_SECOND: i64 = 1_000_000;
pub(super) const MICROS_PER_DAY: i64 = 86_400 * MICROS_PER_SECOND;

/// A date as days since 1970-01-01 (Arrow's `Date32`).
pub(super) fn epoch_days(date: NaiveDate) -> i32 {
    let epoch = NaiveDate::from_ymd_opt(1970, 1, 1).unwrap_or_default();
    (date - epoch).num_days() as i32
}

/// The UTC date-time of `micros` since the epoch.
pub(super) fn utc(micros: i64) -> Option<NaiveDateTime> {
    DateTime::from_timestamp_micros(micros).map(|t| t.naive_utc())
}

/// Microseconds since the epoch of a UTC date-time.
pub(super) fn micros_of(t: NaiveDateTime) -> i64 {
    t.and_utc().timestamp_micros()
}

/// One element of a pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Literal(String),
    /// A pattern letter and how many times it is repeated.
    Field(char, usize),
}

/// A parsed Spark datetime pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Pattern {
    tokens: Vec<Token>,
}

const SHORT_MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];
const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const SHORT_DAYS: [&str; 7] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];
const DAYS: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];

impl Pattern {
    /// Parses `pattern`; an unsupported letter or an unclosed quote is an
    /// error saying which.
    pub(super) fn parse(pattern: &str) -> Result<Self, String> {
        let chars: Vec<char> = pattern.chars().collect();
        let mut tokens = Vec::new();
        let mut literal = String::new();
        let mut i = 0;
        let flush = |literal: &mut String, tokens: &mut Vec<Token>| {
            if !literal.is_empty() {
                tokens.push(Token::Literal(std::mem::take(literal)));
            }
        };
        while i < chars.len() {
            let c = chars[i];
            if c == '\'' {
                // A quoted literal; '' inside or alone is one quote.
                let mut j = i + 1;
                if chars.get(j) == Some(&'\'') {
                    literal.push('\'');
                    i = j + 1;
                    continue;
                }
                loop {
                    match chars.get(j) {
                        None => return Err(format!("unclosed quote in pattern '{pattern}'")),
                        Some('\'') if chars.get(j + 1) == Some(&'\'') => {
                            literal.push('\'');
                            j += 2;
                        }
                        Some('\'') => break,
                        Some(&other) => {
                            literal.push(other);
                            j += 1;
                        }
                    }
                }
                i = j + 1;
            } else if c.is_ascii_alphabetic() {
                let mut count = 1;
                while chars.get(i + count) == Some(&c) {
                    count += 1;
                }
                let most = match c {
                    'y' => 6,
                    'M' | 'L' | 'E' => 4,
                    'd' | 'H' | 'h' | 'K' | 'k' | 'm' | 's' => 2,
                    'D' => 3,
                    'S' => 9,
                    'a' => 1,
                    'X' | 'x' => 3,
                    'Z' => 5,
                    'z' => 3,
                    'V' => 2,
                    _ => {
                        return Err(format!(
                            "unsupported letter '{c}' in datetime pattern '{pattern}'"
                        ))
                    }
                };
                if count > most || (c == 'V' && count != 2) {
                    return Err(format!(
                        "too many pattern letters '{c}' in datetime pattern '{pattern}'"
                    ));
                }
                flush(&mut literal, &mut tokens);
                tokens.push(Token::Field(c, count));
                i += count;
            } else if c == '[' || c == ']' || c == '{' || c == '}' || c == '#' {
                return Err(format!(
                    "unsupported character '{c}' in datetime pattern '{pattern}' \
                     (optional sections are not supported)"
                ));
            } else {
                literal.push(c);
                i += 1;
            }
        }
        flush(&mut literal, &mut tokens);
        Ok(Pattern { tokens })
    }

    /// `micros` since the epoch formatted in UTC.
    pub(super) fn format(&self, micros: i64) -> Option<String> {
        let t = utc(micros)?;
        let mut out = String::with_capacity(32);
        for token in &self.tokens {
            match token {
                Token::Literal(s) => out.push_str(s),
                Token::Field(c, n) => format_field(&mut out, *c, *n, &t, micros),
            }
        }
        Some(out)
    }

    /// Parses `s` to microseconds since the epoch; `None` where it does not
    /// match the pattern or names no valid date-time.
    pub(super) fn parse_micros(&self, s: &str) -> Option<i64> {
        let mut fields = Parsed::default();
        let mut rest = s;
        for (i, token) in self.tokens.iter().enumerate() {
            rest = match token {
                Token::Literal(lit) => strip_prefix_ignore_case(rest, lit)?,
                Token::Field(c, n) => {
                    let reserved = self.fixed_width_after(i);
                    fields.parse_field(*c, *n, rest, reserved)?
                }
            };
        }
        if !rest.is_empty() {
            return None;
        }
        fields.resolve()
    }

    /// The digits the fixed-width numeric fields right after token `i`
    /// need (a variable-width field leaves them those).
    fn fixed_width_after(&self, i: usize) -> usize {
        self.tokens[i + 1..]
            .iter()
            .map_while(|t| match t {
                Token::Field(c, n) if *n >= 2 && is_numeric(*c, *n) => Some(*n),
                _ => None,
            })
            .sum()
    }
}

fn is_numeric(c: char, n: usize) -> bool {
    match c {
        'M' | 'L' => n <= 2,
        'y' | 'd' | 'D' | 'H' | 'h' | 'K' | 'k' | 'm' | 's' | 'S' => true,
        _ => false,
    }
}

fn pad(out: &mut String, value: i64, width: usize) {
    if value < 0 {
        out.push('-');
    }
    let digits = value.unsigned_abs().to_string();
    for _ in digits.len()..width {
        out.push('0');
    }
    out.push_str(&digits);
}

fn format_field(out: &mut String, c: char, n: usize, t: &NaiveDateTime, micros: i64) {
    let number = |out: &mut String, v: u32| pad(out, i64::from(v), n);
    match c {
        'y' => {
            let year = i64::from(t.year());
            if n == 2 {
                pad(out, year.rem_euclid(100), 2);
            } else {
                if n >= 4 && year > 9999 {
                    out.push('+');
                }
                pad(out, year, n);
            }
        }
        'M' | 'L' => match n {
            1 | 2 => number(out, t.month()),
            3 => out.push_str(SHORT_MONTHS[t.month0() as usize]),
            _ => out.push_str(MONTHS[t.month0() as usize]),
        },
        'd' => number(out, t.day()),
        'D' => number(out, t.ordinal()),
        'H' => number(out, t.hour()),
        'h' => number(out, (t.hour() + 11) % 12 + 1),
        'K' => number(out, t.hour() % 12),
        'k' => number(out, if t.hour() == 0 { 24 } else { t.hour() }),
        'm' => number(out, t.minute()),
        's' => number(out, t.second()),
        'S' => {
            // Nanoseconds of the second, cut to n digits.
            let nanos = micros.rem_euclid(MICROS_PER_SECOND) * 1000;
            let digits = format!("{nanos:09}");
            out.push_str(&digits[..n]);
        }
        'a' => out.push_str(if t.hour() < 12 { "AM" } else { "PM" }),
        'E' => {
            let day = t.weekday().num_days_from_monday() as usize;
            out.push_str(if n == 4 { DAYS[day] } else { SHORT_DAYS[day] });
        }
        // The session time zone is UTC: every offset is zero.
        'X' => out.push('Z'),
        'x' => out.push_str(match n {
            1 => "+00",
            2 => "+0000",
            _ => "+00:00",
        }),
        'Z' => out.push_str(match n {
            4 => "GMT",
            5 => "Z",
            _ => "+0000",
        }),
        // 'z' and 'VV'.
        _ => out.push_str("UTC"),
    }
}

fn strip_prefix_ignore_case<'a>(s: &'a str, prefix: &str) -> Option<&'a str> {
    let head = s.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| &s[prefix.len()..])
}

/// Takes `least..=most` ASCII digits from the front of `s`.
fn digits(s: &str, least: usize, most: usize) -> Option<(i64, &str)> {
    let count = s.bytes().take(most).take_while(u8::is_ascii_digit).count();
    if count < least || count == 0 {
        return None;
    }
    let value = s[..count].parse::<i64>().ok()?;
    Some((value, &s[count..]))
}

/// The fields a parse found.
#[derive(Debug, Default)]
struct Parsed {
    year: Option<i64>,
    month: Option<i64>,
    day: Option<i64>,
    day_of_year: Option<i64>,
    hour_of_day: Option<i64>,
    hour_of_ampm: Option<i64>,
    pm: Option<bool>,
    minute: Option<i64>,
    second: Option<i64>,
    micros: Option<i64>,
    weekday: Option<u32>,
    offset_seconds: Option<i64>,
    zone: Option<Tz>,
}

/// Takes the longest of `names` (case-insensitive) from the front of `s`,
/// giving its index.
fn name_of<'a>(s: &'a str, names: &[&str]) -> Option<(usize, &'a str)> {
    names
        .iter()
        .enumerate()
        .filter_map(|(i, name)| strip_prefix_ignore_case(s, name).map(|rest| (i, rest)))
        .max_by_key(|(_, rest)| std::cmp::Reverse(rest.len()))
}

fn set(slot: &mut Option<i64>, value: i64) -> Option<()> {
    match slot {
        Some(old) if *old != value => None,
        _ => {
            *slot = Some(value);
            Some(())
        }
    }
}

impl Parsed {
    /// Parses field `c` repeated `n` times from the front of `s`, leaving
    /// `reserved` digits to fixed-width fields after it.
    fn parse_field<'a>(
        &mut self,
        c: char,
        n: usize,
        s: &'a str,
        reserved: usize,
    ) -> Option<&'a str> {
        // A numeric field of one letter (and a year of 3 or more) takes as
        // many digits as there are, up to what the next fields need.
        let variable = |s: &'a str, least: usize, most: usize| {
            let available = s.bytes().take_while(u8::is_ascii_digit).count();
            let most = most.min(available.saturating_sub(reserved)).max(least);
            digits(s, least, most)
        };
        let number = |s: &'a str, most: usize| {
            if n == 1 {
                variable(s, 1, most)
            } else {
                digits(s, n, n)
            }
        };
        match c {
            'y' => {
                let (negative, s) = match s.as_bytes().first() {
                    Some(b'-') if n != 2 => (true, &s[1..]),
                    Some(b'+') if n >= 4 => (false, &s[1..]),
                    _ => (false, s),
                };
                let (value, rest) = if n == 2 {
                    digits(s, 2, 2).map(|(v, r)| (2000 + v, r))?
                } else {
                    variable(s, n.min(4), 9)?
                };
                set(&mut self.year, if negative { -value } else { value })?;
                Some(rest)
            }
            'M' | 'L' if n >= 3 => {
                let names: &[&str] = if n == 3 { &SHORT_MONTHS } else { &MONTHS };
                let (i, rest) = name_of(s, names)?;
                set(&mut self.month, i as i64 + 1)?;
                Some(rest)
            }
            'E' => {
                let names: &[&str] = if n == 4 { &DAYS } else { &SHORT_DAYS };
                let (i, rest) = name_of(s, names)?;
                self.weekday = Some(i as u32);
                Some(rest)
            }
            'a' => {
                let (i, rest) = name_of(s, &["AM", "PM"])?;
                self.pm = Some(i == 1);
                Some(rest)
            }
            'S' => {
                let count = s.bytes().take(n).take_while(u8::is_ascii_digit).count();
                let (value, rest) = digits(s, 1, count)?;
                // To microseconds: pad or cut to six digits.
                let micros = if count <= 6 {
                    value * 10_i64.pow((6 - count) as u32)
                } else {
                    value / 10_i64.pow((count - 6) as u32)
                };
                set(&mut self.micros, micros)?;
                Some(rest)
            }
            'X' | 'x' | 'Z' => self.parse_offset(c, n, s),
            'z' | 'V' => self.parse_zone(s),
            _ => {
                let (value, rest) = number(s, 19)?;
                let slot = match c {
                    'M' | 'L' => &mut self.month,
                    'd' => &mut self.day,
                    'D' => &mut self.day_of_year,
                    'H' => &mut self.hour_of_day,
                    'k' => {
                        if !(1..=24).contains(&value) {
                            return None;
                        }
                        return set(&mut self.hour_of_day, value % 24).map(|()| rest);
                    }
                    'h' => {
                        if !(1..=12).contains(&value) {
                            return None;
                        }
                        return set(&mut self.hour_of_ampm, value % 12).map(|()| rest);
                    }
                    'K' => &mut self.hour_of_ampm,
                    'm' => &mut self.minute,
                    _ => &mut self.second,
                };
                set(slot, value)?;
                Some(rest)
            }
        }
    }

    /// `z` and `VV`: `UTC`, `GMT`, `UT`, `Z` or a region id.
    fn parse_zone<'a>(&mut self, s: &'a str) -> Option<&'a str> {
        let end = s
            .find(|ch: char| !(ch.is_ascii_alphanumeric() || "/_+-".contains(ch)))
            .unwrap_or(s.len());
        let (name, rest) = s.split_at(end);
        let zone = match name.to_ascii_uppercase().as_str() {
            "Z" | "UTC" | "GMT" | "UT" => Tz::UTC,
            _ => name.parse::<Tz>().ok()?,
        };
        self.zone = Some(zone);
        Some(rest)
    }

    /// `X` (`Z` for zero), `x` and `Z`: `+HH`, `+HHmm` or `+HH:mm` by the
    /// count of letters, as java.time's offset patterns.
    fn parse_offset<'a>(&mut self, c: char, n: usize, s: &'a str) -> Option<&'a str> {
        let zulu = c == 'X' || (c == 'Z' && n == 5);
        if zulu {
            if let Some(rest) = strip_prefix_ignore_case(s, "Z") {
                self.offset_seconds = Some(0);
                return Some(rest);
            }
        }
        if c == 'Z' && n == 4 {
            let rest = strip_prefix_ignore_case(s, "GMT")?;
            if rest.is_empty() || !rest.starts_with(['+', '-']) {
                self.offset_seconds = Some(0);
                return Some(rest);
            }
            return self.parse_offset('X', 3, rest);
        }
        let sign = match s.as_bytes().first()? {
            b'+' => 1,
            b'-' => -1,
            _ => return None,
        };
        let s = &s[1..];
        let (hours, s) = digits(s, 2, 2)?;
        let colon = matches!((c, n), ('X' | 'x', 3) | ('Z', 5));
        let (minutes, rest) = match (c, n) {
            ('X' | 'x', 1) => match digits(s, 2, 2) {
                Some((m, rest)) => (m, rest),
                None => (0, s),
            },
            _ if colon => digits(s.strip_prefix(':')?, 2, 2)?,
            _ => digits(s, 2, 2)?,
        };
        if hours > 18 || minutes > 59 {
            return None;
        }
        self.offset_seconds = Some(sign * (hours * 3600 + minutes * 60));
        Some(rest)
    }

    /// The instant the fields name, strictly: every field in its range and
    /// the day existing in its month.
    fn resolve(self) -> Option<i64> {
        let year = i32::try_from(self.year.unwrap_or(1970)).ok()?;
        let date = match self.day_of_year {
            Some(doy) => {
                let date = NaiveDate::from_yo_opt(year, u32::try_from(doy).ok()?)?;
                let agrees = |v: Option<i64>, actual: u32| v.is_none_or(|v| v == i64::from(actual));
                if !agrees(self.month, date.month()) || !agrees(self.day, date.day()) {
                    return None;
                }
                date
            }
            None => NaiveDate::from_ymd_opt(
                year,
                u32::try_from(self.month.unwrap_or(1)).ok()?,
                u32::try_from(self.day.unwrap_or(1)).ok()?,
            )?,
        };
        if let Some(day) = self.weekday {
            if date.weekday().num_days_from_monday() != day {
                return None;
            }
        }
        let hour = match (self.hour_of_day, self.hour_of_ampm, self.pm) {
            (Some(h), None, pm) => {
                // H with a: they must agree.
                if pm.is_some_and(|pm| pm != (h >= 12)) {
                    return None;
                }
                h
            }
            (Some(h), Some(hh), pm) => {
                if h % 12 != hh || pm.is_some_and(|pm| pm != (h >= 12)) {
                    return None;
                }
                h
            }
            (None, Some(hh), pm) => {
                if hh > 11 {
                    return None;
                }
                hh + if pm == Some(true) { 12 } else { 0 }
            }
            (None, None, Some(true)) => 12,
            (None, None, _) => 0,
        };
        let time = NaiveTime::from_hms_micro_opt(
            u32::try_from(hour).ok()?,
            u32::try_from(self.minute.unwrap_or(0)).ok()?,
            u32::try_from(self.second.unwrap_or(0)).ok()?,
            u32::try_from(self.micros.unwrap_or(0)).ok()?,
        )?;
        let local = date.and_time(time);
        match (self.offset_seconds, self.zone) {
            (Some(offset), _) => Some(micros_of(local) - offset * MICROS_PER_SECOND),
            (None, Some(zone)) => in_zone(local, zone),
            (None, None) => Some(micros_of(local)),
        }
    }
}

/// The instant of local date-time `local` in `zone`, as java.time resolves
/// it: in an overlap (clocks going back) the earlier offset, in a gap
/// (clocks going forward) the time moved later by the gap's length.
fn in_zone(local: NaiveDateTime, zone: Tz) -> Option<i64> {
    match zone.from_local_datetime(&local) {
        LocalResult::Single(t) => Some(t.timestamp_micros()),
        LocalResult::Ambiguous(earlier, later) => {
            Some(earlier.timestamp_micros().min(later.timestamp_micros()))
        }
        LocalResult::None => {
            // The offset in force before the gap.
            let before = zone
                .offset_from_utc_datetime(&(local - Duration::days(1)))
                .fix()
                .local_minus_utc();
            Some(micros_of(local) - i64::from(before) * MICROS_PER_SECOND)
        }
    }
}

/// Parses a string as Spark's `CAST(s AS TIMESTAMP)` does: trimmed,
/// `[+-]yyyy[-[m]m[-[d]d]]` then optionally `T` or a space and
/// `[h]h:[m]m[:[s]s[.fraction]]`, then optionally a zone (`Z`, `+hh`,
/// `+hh:mm`, `+hhmm`, `UTC`/`GMT`/`UT` with or without an offset, or a
/// region id), with or without a space before it. Without a zone the time
/// is UTC's.
pub(super) fn parse_timestamp(s: &str) -> Option<i64> {
    let s = s.trim_matches(|c: char| c <= ' ');
    let (date, rest) = parse_date_prefix(s)?;
    let rest = match rest.as_bytes().first() {
        None => return Some(micros_of(date.and_time(NaiveTime::MIN))),
        Some(b' ' | b'T') => &rest[1..],
        Some(_) => return None,
    };
    let (hour, rest) = digits(rest, 1, 2)?;
    let (minute, rest) = digits(rest.strip_prefix(':')?, 1, 2)?;
    let (second, rest) = match rest.strip_prefix(':') {
        Some(r) => digits(r, 1, 2)?,
        None => (0, rest),
    };
    let (micros, rest) = match rest.strip_prefix('.') {
        Some(r) => {
            // Digits past the sixth are dropped, as Spark drops them.
            let count = r.bytes().take_while(u8::is_ascii_digit).count();
            let (value, _) = digits(r, 1, count.min(6))?;
            let micros = value * 10_i64.pow((6 - count.min(6)) as u32);
            (micros, &r[count..])
        }
        None => (0, rest),
    };
    let time = NaiveTime::from_hms_micro_opt(
        u32::try_from(hour).ok()?,
        u32::try_from(minute).ok()?,
        u32::try_from(second).ok()?,
        u32::try_from(micros).ok()?,
    )?;
    let local = date.and_time(time);
    let zone = rest.strip_prefix(' ').unwrap_or(rest);
    if zone.is_empty() {
        return Some(micros_of(local));
    }
    let offset = |z: &str| -> Option<i64> {
        let sign = match z.as_bytes().first()? {
            b'+' => 1,
            b'-' => -1,
            _ => return None,
        };
        let z = &z[1..];
        let (hours, z) = digits(z, 1, 2)?;
        let (minutes, z) = match z.strip_prefix(':') {
            Some(m) => digits(m, 2, 2)?,
            None if z.is_empty() => (0, z),
            None => digits(z, 2, 2)?,
        };
        if !z.is_empty() || hours > 18 || minutes > 59 {
            return None;
        }
        Some(sign * (hours * 3600 + minutes * 60))
    };
    if zone.eq_ignore_ascii_case("Z") {
        return Some(micros_of(local));
    }
    if let Some(seconds) = offset(zone) {
        return Some(micros_of(local) - seconds * MICROS_PER_SECOND);
    }
    for prefix in ["UTC", "GMT", "UT"] {
        if let Some(tail) = strip_prefix_ignore_case(zone, prefix) {
            if tail.is_empty() {
                return Some(micros_of(local));
            }
            if let Some(seconds) = offset(tail) {
                return Some(micros_of(local) - seconds * MICROS_PER_SECOND);
            }
        }
    }
    in_zone(local, zone.parse::<Tz>().ok()?)
}

/// `[+-]yyyy[-[m]m[-[d]d]]` from the front of `s` (a year of 4 to 7
/// digits), and what follows.
fn parse_date_prefix(s: &str) -> Option<(NaiveDate, &str)> {
    let (negative, s) = match s.as_bytes().first()? {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let (year, rest) = digits(s, 4, 7)?;
    let year = if negative { -year } else { year };
    let (month, rest) = match rest.strip_prefix('-') {
        Some(r) => digits(r, 1, 2)?,
        None => (1, rest),
    };
    let (day, rest) = match rest.strip_prefix('-') {
        Some(r) => digits(r, 1, 2)?,
        None => (1, rest),
    };
    let date = NaiveDate::from_ymd_opt(
        i32::try_from(year).ok()?,
        u32::try_from(month).ok()?,
        u32::try_from(day).ok()?,
    )?;
    Some((date, rest))
}

/// Parses a string as Spark's `CAST(s AS DATE)`: the date part of
/// [`parse_timestamp`]'s format; anything after a `T` or a space is
/// ignored.
pub(super) fn parse_date(s: &str) -> Option<i32> {
    let s = s.trim_matches(|c: char| c <= ' ');
    let (date, rest) = parse_date_prefix(s)?;
    match rest.as_bytes().first() {
        None | Some(b' ' | b'T') => Some(epoch_days(date)),
        Some(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> i64 {
        micros_of(NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S%.f").unwrap_or_default())
    }

    #[test]
    fn test_format_spark_letters() {
        let p = Pattern::parse("yyyy-MM-dd HH:mm:ss.SSS a h K k E EEEE MMM MMMM D yy XXX 'T''x'")
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            p.format(at("2024-02-29 00:05:06.123456")).as_deref(),
            Some("2024-02-29 00:05:06.123 AM 12 0 24 Thu Thursday Feb February 60 24 Z T'x")
        );
        let p = Pattern::parse("y-M-d H:m:s").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            p.format(at("2024-03-05 07:08:09")).as_deref(),
            Some("2024-3-5 7:8:9")
        );
        assert_eq!(p.format(-1).as_deref(), Some("1969-12-31 23:59:59"));
    }

    #[test]
    fn test_parse_strict_and_defaults() {
        let p = Pattern::parse("yyyy-MM-dd HH:mm:ss").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            p.parse_micros("2024-02-29 10:00:00"),
            Some(at("2024-02-29 10:00:00"))
        );
        assert_eq!(p.parse_micros("2023-02-29 10:00:00"), None);
        assert_eq!(p.parse_micros("2024-1-05 10:00:00"), None);
        assert_eq!(p.parse_micros("2024-01-05 10:00:00 "), None);
        let p = Pattern::parse("yyyyMMdd").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(p.parse_micros("20240105"), Some(at("2024-01-05 00:00:00")));
        let p = Pattern::parse("dd/MMM/yyyy h:mm a").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            p.parse_micros("05/jan/2024 12:30 pm"),
            Some(at("2024-01-05 12:30:00"))
        );
        assert_eq!(
            p.parse_micros("05/Jan/2024 12:30 AM"),
            Some(at("2024-01-05 00:30:00"))
        );
        let p = Pattern::parse("yyyy-MM-dd HH:mm:ss.SSSXXX").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            p.parse_micros("2024-03-10 02:30:00.5-05:00"),
            Some(at("2024-03-10 07:30:00.5"))
        );
        assert_eq!(p.parse_micros("2024-03-10 02:30:00.1234-05:00"), None);
        assert!(Pattern::parse("YYYY").is_err());
        assert!(Pattern::parse("yyyy-MM-dd'T").is_err());
        assert!(Pattern::parse("yyyy[-MM]").is_err());
    }

    #[test]
    fn test_cast_like_parse() {
        assert_eq!(
            parse_timestamp(" 2024-3-1 1:2:3 "),
            Some(at("2024-03-01 01:02:03"))
        );
        assert_eq!(
            parse_timestamp("2024-03-01T01:02:03.25Z"),
            Some(at("2024-03-01 01:02:03.25"))
        );
        assert_eq!(
            parse_timestamp("2024-03-01 01:02:03+01:00"),
            Some(at("2024-03-01 00:02:03"))
        );
        assert_eq!(parse_timestamp("2024"), Some(at("2024-01-01 00:00:00")));
        assert_eq!(
            parse_timestamp("2024-03-01 01:02:03 UTC"),
            Some(at("2024-03-01 01:02:03"))
        );
        // New York's clocks went from 02:00 to 03:00 on 2024-03-10: 02:30
        // is in the gap and moves to 03:30 EDT; 01:30 on 2024-11-03 happens
        // twice and takes the earlier (EDT) offset.
        assert_eq!(
            parse_timestamp("2024-03-10 02:30:00 America/New_York"),
            Some(at("2024-03-10 07:30:00"))
        );
        assert_eq!(
            parse_timestamp("2024-11-03 01:30:00 America/New_York"),
            Some(at("2024-11-03 05:30:00"))
        );
        assert_eq!(parse_timestamp("2023-02-29"), None);
        assert_eq!(parse_timestamp("not a time"), None);
        assert_eq!(parse_date("2024-02-29 junk"), Some(19782));
        assert_eq!(parse_date("2024-02-29junk"), None);
    }
}
