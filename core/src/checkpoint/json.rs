//! The strict JSON subset checkpoint manifests are written in (see
//! [`super::manifest`]): objects, arrays, strings, `true`/`false`/`null` and
//! unsigned 64-bit integers only; unknown and duplicate keys, trailing data
//! and nesting deeper than needed are refused. Written and read by hand (no
//! serde) so the format cannot drift with a dependency.

/// Parses exactly 16 hex digits.
pub(crate) fn parse_hex16(s: &str) -> Option<u64> {
    if s.len() == 16 && s.bytes().all(|b| b.is_ascii_hexdigit()) {
        u64::from_str_radix(s, 16).ok()
    } else {
        None
    }
}

/// A JSON string literal.
pub(crate) fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                // A control character: `\u00XX` (all are below 0x80).
                const DIGITS: &[u8; 16] = b"0123456789abcdef";
                let code = c as u32;
                out.push_str("\\u00");
                out.push(char::from(DIGITS[(code >> 4) as usize & 0xf]));
                out.push(char::from(DIGITS[(code & 0xf) as usize]));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A decoded value of the JSON subset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Value {
    Null,
    Bool(bool),
    Num(u64),
    Str(String),
    Arr(Vec<Value>),
    Obj(Vec<(String, Value)>),
}

/// The members of one object, taken one by one; `finish` rejects leftovers.
pub(crate) struct Fields {
    what: String,
    members: Vec<(String, Value)>,
}

impl Fields {
    pub(crate) fn new(v: Value, what: &str) -> Result<Self, String> {
        match v {
            Value::Obj(members) => Ok(Fields {
                what: what.to_string(),
                members,
            }),
            _ => Err(format!("is invalid: {what} is not an object")),
        }
    }

    pub(crate) fn take(&mut self, key: &str) -> Result<Value, String> {
        let pos = self
            .members
            .iter()
            .position(|(k, _)| k == key)
            .ok_or_else(|| format!("is invalid: {}: field '{key}' is missing", self.what))?;
        Ok(self.members.swap_remove(pos).1)
    }

    pub(crate) fn u64(&mut self, key: &str) -> Result<u64, String> {
        match self.take(key)? {
            Value::Num(n) => Ok(n),
            _ => Err(format!(
                "is invalid: {}: field '{key}' is not an unsigned integer",
                self.what
            )),
        }
    }

    pub(crate) fn u32(&mut self, key: &str) -> Result<u32, String> {
        let n = self.u64(key)?;
        u32::try_from(n).map_err(|_| {
            format!(
                "is invalid: {}: field '{key}' ({n}) is too large",
                self.what
            )
        })
    }

    pub(crate) fn bool(&mut self, key: &str) -> Result<bool, String> {
        match self.take(key)? {
            Value::Bool(b) => Ok(b),
            _ => Err(format!(
                "is invalid: {}: field '{key}' is not true or false",
                self.what
            )),
        }
    }

    pub(crate) fn string(&mut self, key: &str) -> Result<String, String> {
        match self.take(key)? {
            Value::Str(s) => Ok(s),
            _ => Err(format!(
                "is invalid: {}: field '{key}' is not a string",
                self.what
            )),
        }
    }

    pub(crate) fn array(&mut self, key: &str) -> Result<Vec<Value>, String> {
        match self.take(key)? {
            Value::Arr(a) => Ok(a),
            _ => Err(format!(
                "is invalid: {}: field '{key}' is not an array",
                self.what
            )),
        }
    }

    /// Whether the object has member `key` (for optional members).
    pub(crate) fn has(&self, key: &str) -> bool {
        self.members.iter().any(|(k, _)| k == key)
    }

    pub(crate) fn finish(self) -> Result<(), String> {
        match self.members.first() {
            None => Ok(()),
            Some((k, _)) => Err(format!("is invalid: {}: unknown field '{k}'", self.what)),
        }
    }
}

/// Nesting deeper than this is refused (the format needs 6 levels).
const MAX_DEPTH: usize = 16;

/// A strict recursive-descent parser of the JSON subset.
pub(crate) struct Parser<'a> {
    text: &'a str,
    pos: usize,
    depth: usize,
}

impl<'a> Parser<'a> {
    pub(crate) fn new(text: &'a str) -> Self {
        Parser {
            text,
            pos: 0,
            depth: 0,
        }
    }

    pub(crate) fn document(mut self) -> Result<Value, String> {
        let v = self.value()?;
        self.skip_ws();
        if self.pos != self.text.len() {
            return Err(self.error("unexpected data after the end of the manifest"));
        }
        Ok(v)
    }

    fn error(&self, what: &str) -> String {
        format!("is not valid JSON: {what} at byte {}", self.pos)
    }

    fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.pos).copied()
    }

    fn skip_ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\n' | b'\r' | b'\t')) {
            self.pos += 1;
        }
    }

    fn expect(&mut self, byte: u8) -> Result<(), String> {
        self.skip_ws();
        if self.peek() == Some(byte) {
            self.pos += 1;
            Ok(())
        } else {
            Err(self.error(&format!("expected '{}'", byte as char)))
        }
    }

    fn literal(&mut self, word: &str, v: Value) -> Result<Value, String> {
        if self.text[self.pos..].starts_with(word) {
            self.pos += word.len();
            Ok(v)
        } else {
            Err(self.error("expected a value"))
        }
    }

    fn value(&mut self) -> Result<Value, String> {
        self.skip_ws();
        match self.peek() {
            Some(b'{') => self.nested(Self::object),
            Some(b'[') => self.nested(Self::array),
            Some(b'"') => self.string().map(Value::Str),
            Some(b'0'..=b'9') => self.number(),
            Some(b't') => self.literal("true", Value::Bool(true)),
            Some(b'f') => self.literal("false", Value::Bool(false)),
            Some(b'n') => self.literal("null", Value::Null),
            None => Err(self.error("unexpected end (the file is truncated)")),
            Some(_) => Err(self.error("expected a value")),
        }
    }

    fn nested(&mut self, f: fn(&mut Self) -> Result<Value, String>) -> Result<Value, String> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.error("nesting too deep"));
        }
        let v = f(self);
        self.depth -= 1;
        v
    }

    fn object(&mut self) -> Result<Value, String> {
        self.expect(b'{')?;
        let mut members: Vec<(String, Value)> = Vec::new();
        self.skip_ws();
        if self.peek() == Some(b'}') {
            self.pos += 1;
            return Ok(Value::Obj(members));
        }
        loop {
            self.skip_ws();
            if self.peek() != Some(b'"') {
                return Err(self.error("expected a field name"));
            }
            let key = self.string()?;
            if members.iter().any(|(k, _)| *k == key) {
                return Err(self.error(&format!("duplicate field '{key}'")));
            }
            self.expect(b':')?;
            let v = self.value()?;
            members.push((key, v));
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b'}') => {
                    self.pos += 1;
                    return Ok(Value::Obj(members));
                }
                _ => return Err(self.error("expected ',' or '}'")),
            }
        }
    }

    pub(crate) fn array(&mut self) -> Result<Value, String> {
        self.expect(b'[')?;
        let mut items = Vec::new();
        self.skip_ws();
        if self.peek() == Some(b']') {
            self.pos += 1;
            return Ok(Value::Arr(items));
        }
        loop {
            items.push(self.value()?);
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b']') => {
                    self.pos += 1;
                    return Ok(Value::Arr(items));
                }
                _ => return Err(self.error("expected ',' or ']'")),
            }
        }
    }

    fn number(&mut self) -> Result<Value, String> {
        let start = self.pos;
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.pos += 1;
        }
        let digits = &self.text[start..self.pos];
        if digits.len() > 1 && digits.starts_with('0') {
            return Err(self.error("a number has a leading zero"));
        }
        if matches!(self.peek(), Some(b'.' | b'e' | b'E')) {
            return Err(self.error("only unsigned integers are allowed"));
        }
        digits
            .parse::<u64>()
            .map(Value::Num)
            .map_err(|_| self.error("a number does not fit 64 bits"))
    }

    pub(crate) fn string(&mut self) -> Result<String, String> {
        self.expect(b'"')?;
        let mut out = String::new();
        loop {
            let rest = &self.text[self.pos..];
            let Some(c) = rest.chars().next() else {
                return Err(self.error("unterminated string (the file is truncated)"));
            };
            self.pos += c.len_utf8();
            match c {
                '"' => return Ok(out),
                '\\' => {
                    let esc = self.peek();
                    self.pos += 1;
                    match esc {
                        Some(b'"') => out.push('"'),
                        Some(b'\\') => out.push('\\'),
                        Some(b'/') => out.push('/'),
                        Some(b'n') => out.push('\n'),
                        Some(b'r') => out.push('\r'),
                        Some(b't') => out.push('\t'),
                        Some(b'b') => out.push('\u{8}'),
                        Some(b'f') => out.push('\u{c}'),
                        Some(b'u') => {
                            let hex = self
                                .text
                                .get(self.pos..self.pos + 4)
                                .ok_or_else(|| self.error("truncated \\u escape"))?;
                            let code = u32::from_str_radix(hex, 16)
                                .ok()
                                .filter(|_| hex.bytes().all(|b| b.is_ascii_hexdigit()))
                                .ok_or_else(|| self.error("bad \\u escape"))?;
                            self.pos += 4;
                            let ch = char::from_u32(code)
                                .filter(|_| !(0xD800..0xE000).contains(&code))
                                .ok_or_else(|| self.error("\\u escape of a surrogate"))?;
                            out.push(ch);
                        }
                        _ => return Err(self.error("bad escape in a string")),
                    }
                }
                c if (c as u32) < 0x20 => {
                    return Err(self.error("a control character inside a string"))
                }
                c => out.push(c),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_quote_escapes_control_characters_as_json_does() {
        for code in (0u32..0x20).chain([0x7f]) {
            let c = char::from_u32(code).expect("an ASCII code");
            let expected = match c {
                '\n' => "\"\\n\"".to_string(),
                '\r' => "\"\\r\"".to_string(),
                '\t' => "\"\\t\"".to_string(),
                _ => format!("\"\\u{code:04x}\""),
            };
            assert_eq!(quote(&c.to_string()), expected, "code {code:#x}");
        }
        assert_eq!(quote("a\"b\\c\u{1f}é"), "\"a\\\"b\\\\c\\u001fé\"");
    }

    #[test]
    fn test_parser_is_strict() {
        for bad in [
            "{\"a\": 1,}",
            "{\"a\": 01}",
            "{\"a\": -1}",
            "{\"a\": 1.5}",
            "{\"a\": 1, \"a\": 2}",
            "{\"a\": 1} x",
            "[1 2]",
            "\"\\q\"",
        ] {
            assert!(Parser::new(bad).document().is_err(), "{bad}");
        }
        assert_eq!(
            Parser::new(" {\"a\": [true, null, \"\\u0001\"]} ").document(),
            Ok(Value::Obj(vec![(
                "a".into(),
                Value::Arr(vec![
                    Value::Bool(true),
                    Value::Null,
                    Value::Str("\u{1}".into())
                ])
            )]))
        );
    }
}
