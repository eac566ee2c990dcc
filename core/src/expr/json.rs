//! A JSON value as Spark's JSON functions see it (Jackson under Spark):
//! objects keep their keys in order, integers keep their digits, and
//! floating-point numbers print as Java's `Double.toString` does (`1.50` is
//! `1.5`, `1e2` is `100.0`, `1e20` is `1.0E20`), so text re-serialized
//! here equals Spark's (`spark_json.rs`; DESIGN.md "Expressions").
//!
//! Parsing is strict JSON with two of Jackson's leniencies Spark relies on:
//! unescaped control characters inside strings are accepted, and only the
//! first value is read (text after it is ignored). Nesting deeper than
//! Jackson's default limit (1000) is malformed.

use std::fmt::Write;

/// The deepest nesting [`parse`] accepts.
const MAX_DEPTH: usize = 1000;

/// A parsed JSON value.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Json {
    Null,
    Bool(bool),
    /// An integer, as its digits (any size).
    Int(String),
    Float(f64),
    Str(String),
    Array(Vec<Json>),
    Object(Vec<(String, Json)>),
}

impl Json {
    /// The value of key `name` of an object: the last one of a repeated
    /// key, as `from_json` keeps the last value it reads.
    pub(super) fn get(&self, name: &str) -> Option<&Json> {
        match self {
            Json::Object(fields) => fields.iter().rev().find(|(k, _)| k == name).map(|(_, v)| v),
            _ => None,
        }
    }

    /// The value of key `name` of an object: the first one of a repeated
    /// key, as `get_json_object` stops at the first match.
    pub(super) fn get_first(&self, name: &str) -> Option<&Json> {
        match self {
            Json::Object(fields) => fields.iter().find(|(k, _)| k == name).map(|(_, v)| v),
            _ => None,
        }
    }

    /// The value compactly printed, as Jackson prints it.
    pub(super) fn to_text(&self) -> String {
        let mut out = String::new();
        self.write(&mut out);
        out
    }

    fn write(&self, out: &mut String) {
        match self {
            Json::Null => out.push_str("null"),
            Json::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Json::Int(digits) => out.push_str(digits),
            Json::Float(v) => out.push_str(&java_double(*v)),
            Json::Str(s) => write_escaped(out, s, true),
            Json::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    item.write(out);
                }
                out.push(']');
            }
            Json::Object(fields) => {
                out.push('{');
                for (i, (key, value)) in fields.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write_escaped(out, key, true);
                    out.push(':');
                    value.write(out);
                }
                out.push('}');
            }
        }
    }
}

/// `s` as a JSON string literal, escaped as Jackson escapes it (Spark's
/// `to_json` writer keeps characters outside the BMP as they are).
pub(super) fn write_string(out: &mut String, s: &str) {
    write_escaped(out, s, false);
}

/// `s` as a JSON string literal; with `astral` characters outside the BMP
/// as escaped surrogate pairs, as the generator of `get_json_object`
/// writes them.
fn write_escaped(out: &mut String, s: &str, astral: bool) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04X}", c as u32);
            }
            // Jackson writes characters outside the BMP as escaped
            // surrogate pairs.
            c if astral && (c as u32) > 0xFFFF => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    let _ = write!(out, "\\u{:04X}", unit);
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// A `double` as Java's `Double.toString`: the shortest digits that read
/// back to the same value, in plain notation with at least one decimal
/// for magnitudes in [1e-3, 1e7), otherwise as `d.dddE±n`.
pub(super) fn java_double(v: f64) -> String {
    java_float_text(v, v.abs(), format!("{v:e}"))
}

/// A `float` as Java's `Float.toString`.
pub(super) fn java_float(v: f32) -> String {
    java_float_text(f64::from(v), f64::from(v.abs()), format!("{v:e}"))
}

fn java_float_text(v: f64, magnitude: f64, scientific: String) -> String {
    if v.is_nan() {
        return "NaN".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "Infinity" } else { "-Infinity" }.into();
    }
    if v == 0.0 {
        return if v.is_sign_negative() { "-0.0" } else { "0.0" }.into();
    }
    // Rust's `{:e}` gives the shortest round-trip digits: "-1.2345e8".
    let (mantissa, exponent) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => ("-", m),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    if (1e-3..1e7).contains(&magnitude) {
        let point = exponent + 1;
        let (whole, fraction) = if point <= 0 {
            ("0".to_string(), "0".repeat((-point) as usize) + &digits)
        } else if point as usize >= digits.len() {
            (
                digits.clone() + &"0".repeat(point as usize - digits.len()),
                String::new(),
            )
        } else {
            (
                digits[..point as usize].to_string(),
                digits[point as usize..].to_string(),
            )
        };
        let fraction = if fraction.is_empty() {
            "0".to_string()
        } else {
            fraction
        };
        format!("{sign}{whole}.{fraction}")
    } else {
        let (first, rest) = digits.split_at(1);
        let rest = if rest.is_empty() { "0" } else { rest };
        format!("{sign}{first}.{rest}E{exponent}")
    }
}

/// Parses the first JSON value of `text`; `None` if it is malformed.
pub(super) fn parse(text: &str) -> Option<Json> {
    let mut parser = Parser {
        bytes: text.as_bytes(),
        text,
        at: 0,
    };
    parser.value(0)
}

struct Parser<'a> {
    bytes: &'a [u8],
    text: &'a str,
    at: usize,
}

impl Parser<'_> {
    fn skip_space(&mut self) {
        while matches!(self.bytes.get(self.at), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.at += 1;
        }
    }

    fn eat(&mut self, byte: u8) -> bool {
        self.skip_space();
        if self.bytes.get(self.at) == Some(&byte) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    fn keyword(&mut self, word: &str, value: Json) -> Option<Json> {
        let end = self.at + word.len();
        (self.bytes.get(self.at..end) == Some(word.as_bytes())).then(|| {
            self.at = end;
            value
        })
    }

    fn value(&mut self, depth: usize) -> Option<Json> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.skip_space();
        match *self.bytes.get(self.at)? {
            b'{' => {
                self.at += 1;
                let mut fields = Vec::new();
                if self.eat(b'}') {
                    return Some(Json::Object(fields));
                }
                loop {
                    self.skip_space();
                    if self.bytes.get(self.at) != Some(&b'"') {
                        return None;
                    }
                    let key = self.string()?;
                    if !self.eat(b':') {
                        return None;
                    }
                    fields.push((key, self.value(depth + 1)?));
                    if self.eat(b'}') {
                        return Some(Json::Object(fields));
                    }
                    if !self.eat(b',') {
                        return None;
                    }
                }
            }
            b'[' => {
                self.at += 1;
                let mut items = Vec::new();
                if self.eat(b']') {
                    return Some(Json::Array(items));
                }
                loop {
                    items.push(self.value(depth + 1)?);
                    if self.eat(b']') {
                        return Some(Json::Array(items));
                    }
                    if !self.eat(b',') {
                        return None;
                    }
                }
            }
            b'"' => self.string().map(Json::Str),
            b't' => self.keyword("true", Json::Bool(true)),
            b'f' => self.keyword("false", Json::Bool(false)),
            b'n' => self.keyword("null", Json::Null),
            b'-' | b'0'..=b'9' => self.number(),
            _ => None,
        }
    }

    fn number(&mut self) -> Option<Json> {
        let start = self.at;
        let digits = |p: &mut Self| {
            let from = p.at;
            while p.bytes.get(p.at).is_some_and(u8::is_ascii_digit) {
                p.at += 1;
            }
            p.at - from
        };
        if self.bytes.get(self.at) == Some(&b'-') {
            self.at += 1;
        }
        let int_start = self.at;
        let whole = digits(self);
        // No leading zeros, as JSON (and Jackson by default).
        if whole == 0 || (whole > 1 && self.bytes[int_start] == b'0') {
            return None;
        }
        let mut float = false;
        if self.bytes.get(self.at) == Some(&b'.') {
            self.at += 1;
            float = true;
            if digits(self) == 0 {
                return None;
            }
        }
        if matches!(self.bytes.get(self.at), Some(b'e' | b'E')) {
            self.at += 1;
            float = true;
            if matches!(self.bytes.get(self.at), Some(b'+' | b'-')) {
                self.at += 1;
            }
            if digits(self) == 0 {
                return None;
            }
        }
        let text = &self.text[start..self.at];
        Some(if float {
            Json::Float(text.parse().ok()?)
        } else {
            // Jackson reads `-0` as the number 0.
            Json::Int(match text.parse::<i64>() {
                Ok(v) => v.to_string(),
                Err(_) => text.to_string(),
            })
        })
    }

    fn hex4(&mut self) -> Option<u32> {
        let hex = self.text.get(self.at..self.at + 4)?;
        self.at += 4;
        u32::from_str_radix(hex, 16).ok()
    }

    /// A string literal (the cursor on its opening quote).
    fn string(&mut self) -> Option<String> {
        self.at += 1;
        let mut out = String::new();
        loop {
            let run_start = self.at;
            while !matches!(self.bytes.get(self.at), Some(b'"' | b'\\') | None) {
                self.at += 1;
            }
            out.push_str(self.text.get(run_start..self.at)?);
            match self.bytes.get(self.at)? {
                b'"' => {
                    self.at += 1;
                    return Some(out);
                }
                _ => {
                    self.at += 1;
                    let escaped = *self.bytes.get(self.at)?;
                    self.at += 1;
                    match escaped {
                        b'"' => out.push('"'),
                        b'\\' => out.push('\\'),
                        b'/' => out.push('/'),
                        b'b' => out.push('\u{8}'),
                        b'f' => out.push('\u{c}'),
                        b'n' => out.push('\n'),
                        b'r' => out.push('\r'),
                        b't' => out.push('\t'),
                        b'u' => {
                            let unit = self.hex4()?;
                            let c = if (0xD800..0xDC00).contains(&unit) {
                                // A surrogate pair.
                                if self.bytes.get(self.at..self.at + 2) != Some(b"\\u") {
                                    return None;
                                }
                                self.at += 2;
                                let low = self.hex4()?;
                                if !(0xDC00..0xE000).contains(&low) {
                                    return None;
                                }
                                char::from_u32(0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00))?
                            } else {
                                char::from_u32(unit)?
                            };
                            out.push(c);
                        }
                        _ => return None,
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_java_double_strings() {
        let cases = [
            (1.0, "1.0"),
            (1.5, "1.5"),
            (100.0, "100.0"),
            (1e20, "1.0E20"),
            (1e-5, "1.0E-5"),
            (123456789.0, "1.23456789E8"),
            (1234567.0, "1234567.0"),
            (0.001, "0.001"),
            (-0.5, "-0.5"),
            (0.1 + 0.2, "0.30000000000000004"),
        ];
        for (v, text) in cases {
            assert_eq!(java_double(v), text, "{v}");
        }
        assert_eq!(java_float(0.1), "0.1");
    }

    #[test]
    fn test_parse_keeps_order_and_normalises_floats() {
        let v = parse(r#" {"z": 1.50, "a": [1, 2e0, "s\u00e9\n", null, true]} trailing"#);
        assert_eq!(
            v.map(|v| v.to_text()).as_deref(),
            Some(r#"{"z":1.5,"a":[1,2.0,"sé\n",null,true]}"#)
        );
        assert_eq!(parse("{bad"), None);
        assert_eq!(parse("01"), None);
        assert_eq!(parse(r#""\ud83d\ude00""#), Some(Json::Str("😀".into())));
        assert_eq!(parse("[-0]").map(|v| v.to_text()).as_deref(), Some("[0]"));
        assert_eq!(Json::Str("😀".into()).to_text(), r#""\uD83D\uDE00""#);
        assert_eq!(parse(&"[".repeat(2000)), None);
    }
}
