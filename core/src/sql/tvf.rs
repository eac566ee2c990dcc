//! Flink's windowing table functions, `TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts),
//! INTERVAL '10' SECOND))` (and `HOP`, `SESSION`), which sqlparser does not
//! parse (a `TABLE t` argument): each call is cut out of the token stream
//! before parsing and replaced by the name of a synthetic table,
//! `__window_<n>`, whose schema is the view's plus `window_start` and
//! `window_end` (docs/DESIGN.md "SQL"). The lowering turns a scan of that
//! table into a [`SqlNode::Window`](super::SqlNode::Window).
//!
//! Flink's temporal join, `JOIN v FOR SYSTEM_TIME AS OF o.ts [AS r]`, is cut
//! out the same way: the versioned table becomes a synthetic table
//! `__temporal_<n>` (aliased as the view unless the query aliases it), with
//! the view's schema, and the `AS OF` column is kept for the join's lowering
//! (sqlparser reads `FOR SYSTEM_TIME AS OF` only in some dialects and
//! DataFusion's planner refuses table versions).

use datafusion_sql::sqlparser::ast::{
    Expr as SqlExpr, FunctionArg, FunctionArgExpr, FunctionArguments, SelectItem, SetExpr,
    Statement, Value,
};
use datafusion_sql::sqlparser::dialect::GenericDialect;
use datafusion_sql::sqlparser::keywords::Keyword;
use datafusion_sql::sqlparser::parser::Parser;
use datafusion_sql::sqlparser::tokenizer::{Token, Tokenizer};

use super::{SqlError, View, WindowKind};

/// A windowing table function of the query: the view it reads, its time
/// column and its windows.
#[derive(Debug, Clone)]
pub(crate) struct WindowTable {
    pub name: String,
    pub view: String,
    pub time_column: String,
    pub kind: WindowKind,
}

/// A versioned table of a temporal join: the synthetic table's name, the
/// view, and the `AS OF` column as written (`o.ts`: `["o", "ts"]`).
#[derive(Debug, Clone)]
pub(crate) struct TemporalTable {
    pub name: String,
    pub view: String,
    pub as_of: Vec<String>,
}

/// The query as one parsed statement, with its windowing table functions
/// and versioned tables.
pub(crate) struct Rewritten {
    pub statement: Statement,
    pub windows: Vec<WindowTable>,
    pub temporals: Vec<TemporalTable>,
}

const WINDOW_FUNCTIONS: [&str; 3] = ["TUMBLE", "HOP", "SESSION"];

fn syntax(message: impl Into<String>) -> SqlError {
    SqlError::new("syntax", message)
}

/// Index of the next token at or after `i` that is not whitespace.
fn next_token(tokens: &[Token], mut i: usize) -> usize {
    while i < tokens.len() && matches!(tokens[i], Token::Whitespace(_)) {
        i += 1;
    }
    i
}

/// Index of the parenthesis closing the one at `open`.
fn closing(tokens: &[Token], open: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (i, token) in tokens.iter().enumerate().skip(open) {
        match token {
            Token::LParen => depth += 1,
            Token::RParen => {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
    }
    None
}

fn is_keyword(token: &Token, keyword: Keyword) -> bool {
    matches!(token, Token::Word(w) if w.keyword == keyword && w.quote_style.is_none())
}

/// Parses `query`, replacing each windowing table function by a synthetic table.
pub(crate) fn rewrite(query: &str, views: &[View]) -> Result<Rewritten, SqlError> {
    let dialect = GenericDialect {};
    let tokens = Tokenizer::new(&dialect, query)
        .tokenize()
        .map_err(|e| syntax(e.to_string()))?;
    let mut text = String::with_capacity(query.len());
    let mut windows = Vec::new();
    let mut temporals = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        if let Some((window, end)) = window_call(&tokens, i, windows.len(), views)? {
            text.push_str(&window.name);
            windows.push(window);
            i = end + 1;
        } else if let Some((temporal, end, aliased)) = versioned_table(&tokens, i, temporals.len())?
        {
            text.push_str(&temporal.name);
            if !aliased {
                text.push_str(&format!(" AS {}", tokens[i]));
            }
            temporals.push(temporal);
            i = end + 1;
        } else {
            text.push_str(&tokens[i].to_string());
            i += 1;
        }
    }
    let mut statements = Parser::parse_sql(&dialect, &text).map_err(|e| syntax(e.to_string()))?;
    if statements.len() != 1 {
        return Err(SqlError::new(
            "statement",
            format!(
                "env.sql() takes one query, got {} statements",
                statements.len()
            ),
        ));
    }
    let statement = statements.remove(0);
    if !matches!(statement, Statement::Query(_)) {
        return Err(SqlError::new(
            "statement",
            "env.sql() takes a query (SELECT, WITH, UNION ALL); register streams with \
             create_temporary_view instead of CREATE or INSERT",
        ));
    }
    Ok(Rewritten {
        statement,
        windows,
        temporals,
    })
}

/// `v FOR SYSTEM_TIME AS OF t.ts` starting at token `start`: the versioned
/// table, the index of its last token and whether an alias follows.
fn versioned_table(
    tokens: &[Token],
    start: usize,
    index: usize,
) -> Result<Option<(TemporalTable, usize, bool)>, SqlError> {
    let Token::Word(view) = &tokens[start] else {
        return Ok(None);
    };
    let mut at = start;
    for keyword in [Keyword::FOR, Keyword::SYSTEM_TIME, Keyword::AS, Keyword::OF] {
        at = next_token(tokens, at + 1);
        match tokens.get(at) {
            Some(t) if is_keyword(t, keyword) => {}
            _ => return Ok(None),
        }
    }
    // The AS OF column: `ts` or `o.ts` (Flink takes the left table's time column).
    let mut as_of = Vec::new();
    loop {
        at = next_token(tokens, at + 1);
        match tokens.get(at) {
            Some(Token::Word(w)) => as_of.push(w.value.clone()),
            _ => {
                return Err(SqlError::new(
                    "FOR SYSTEM_TIME AS OF",
                    format!(
                        "{} FOR SYSTEM_TIME AS OF needs a column of the left table (its \
                         event-time column, e.g. o.ts)",
                        view.value
                    ),
                ))
            }
        }
        let dot = next_token(tokens, at + 1);
        if !matches!(tokens.get(dot), Some(Token::Period)) {
            break;
        }
        at = dot;
    }
    let follower = next_token(tokens, at + 1);
    let aliased = match tokens.get(follower) {
        Some(Token::Word(w)) if w.quote_style.is_some() => true,
        Some(Token::Word(w)) => {
            w.keyword == Keyword::AS
                || !datafusion_sql::sqlparser::keywords::RESERVED_FOR_TABLE_ALIAS
                    .contains(&w.keyword)
        }
        _ => false,
    };
    Ok(Some((
        TemporalTable {
            name: format!("__temporal_{index}"),
            view: view.value.clone(),
            as_of,
        },
        at,
        aliased,
    )))
}

/// A `TABLE(TUMBLE|HOP|SESSION(...))` call starting at token `start`: the
/// window table and the index of its last token.
fn window_call(
    tokens: &[Token],
    start: usize,
    index: usize,
    views: &[View],
) -> Result<Option<(WindowTable, usize)>, SqlError> {
    if !is_keyword(&tokens[start], Keyword::TABLE) {
        return Ok(None);
    }
    let open = next_token(tokens, start + 1);
    if !matches!(tokens.get(open), Some(Token::LParen)) {
        return Ok(None);
    }
    let name_at = next_token(tokens, open + 1);
    let function = match tokens.get(name_at) {
        Some(Token::Word(w)) if WINDOW_FUNCTIONS.contains(&w.value.to_uppercase().as_str()) => {
            w.value.to_uppercase()
        }
        _ => return Ok(None),
    };
    let args_open = next_token(tokens, name_at + 1);
    if !matches!(tokens.get(args_open), Some(Token::LParen)) {
        return Ok(None);
    }
    let unclosed = || syntax(format!("{function}(...) is not closed"));
    let args_close = closing(tokens, args_open).ok_or_else(unclosed)?;
    let end = closing(tokens, open).ok_or_else(unclosed)?;
    // `TABLE t` as an argument: sqlparser takes the bare name.
    let args: String = tokens[args_open + 1..args_close]
        .iter()
        .filter(|t| !is_keyword(t, Keyword::TABLE))
        .map(Token::to_string)
        .collect();
    let exprs = select_list(&format!("SELECT {args}"), &function)?;
    let window = window_table(&function, &exprs, index, views)?;
    Ok(Some((window, end)))
}

fn select_list(sql: &str, function: &str) -> Result<Vec<SqlExpr>, SqlError> {
    let bad = |detail: String| syntax(format!("cannot read the arguments of {function}: {detail}"));
    let mut statements =
        Parser::parse_sql(&GenericDialect {}, sql).map_err(|e| bad(e.to_string()))?;
    let Some(Statement::Query(query)) = statements.pop() else {
        return Err(bad("not a list of arguments".into()));
    };
    let SetExpr::Select(select) = *query.body else {
        return Err(bad("not a list of arguments".into()));
    };
    select
        .projection
        .into_iter()
        .map(|item| match item {
            SelectItem::UnnamedExpr(e) => Ok(e),
            other => Err(bad(format!("unexpected argument {other}"))),
        })
        .collect()
}

fn window_table(
    function: &str,
    args: &[SqlExpr],
    index: usize,
    views: &[View],
) -> Result<WindowTable, SqlError> {
    let usage = match function {
        "TUMBLE" => "TUMBLE(TABLE t, DESCRIPTOR(ts), size)",
        "HOP" => "HOP(TABLE t, DESCRIPTOR(ts), slide, size)",
        _ => "SESSION(TABLE t, DESCRIPTOR(ts), gap)",
    };
    let wrong = |detail: &str| SqlError::new(function, format!("{detail}; expected {usage}"));
    let durations = if function == "TUMBLE" || function == "SESSION" {
        1
    } else {
        2
    };
    if args.len() != 2 + durations {
        return Err(wrong(&format!("{} arguments", args.len())));
    }
    let view = match &args[0] {
        SqlExpr::Identifier(ident) => ident.value.clone(),
        SqlExpr::CompoundIdentifier(parts) if !parts.is_empty() => {
            parts[parts.len() - 1].value.clone()
        }
        other => return Err(wrong(&format!("the first argument {other} is not a table"))),
    };
    let Some(found) = views.iter().find(|v| v.name == view) else {
        return Err(SqlError::new(
            "table",
            format!("unknown table '{view}' in {function}; register it with create_temporary_view"),
        ));
    };
    let time_column = descriptor(&args[1]).ok_or_else(|| wrong("no DESCRIPTOR(column)"))?;
    if found.schema.field_with_name(&time_column).is_err() {
        return Err(SqlError::new(
            "column",
            format!("{function}: table '{view}' has no column '{time_column}'"),
        ));
    }
    let mut ms = Vec::with_capacity(durations);
    for arg in &args[2..] {
        ms.push(sql_interval_ms(arg).ok_or_else(|| {
            wrong(&format!(
                "{arg} is not a positive whole number of milliseconds"
            ))
        })?);
    }
    let kind = match function {
        "TUMBLE" => WindowKind::Tumble { size_ms: ms[0] },
        "HOP" => WindowKind::Hop {
            slide_ms: ms[0],
            size_ms: ms[1],
        },
        _ => WindowKind::Session { gap_ms: ms[0] },
    };
    Ok(WindowTable {
        name: format!("__window_{index}"),
        view,
        time_column,
        kind,
    })
}

/// The column of `DESCRIPTOR(column)`.
fn descriptor(expr: &SqlExpr) -> Option<String> {
    let SqlExpr::Function(f) = expr else {
        return None;
    };
    if !f.name.to_string().eq_ignore_ascii_case("DESCRIPTOR") {
        return None;
    }
    let FunctionArguments::List(list) = &f.args else {
        return None;
    };
    match list.args.as_slice() {
        [FunctionArg::Unnamed(FunctionArgExpr::Expr(SqlExpr::Identifier(ident)))] => {
            Some(ident.value.clone())
        }
        _ => None,
    }
}

/// `INTERVAL '10' SECOND`, `INTERVAL '10 seconds'` or `'10 seconds'` in milliseconds.
pub(crate) fn sql_interval_ms(expr: &SqlExpr) -> Option<i64> {
    match expr {
        SqlExpr::Interval(interval) => {
            let text = literal_text(&interval.value)?;
            match &interval.leading_field {
                Some(unit) => interval_ms(&format!("{text} {unit}")),
                None => interval_ms(&text),
            }
        }
        other => interval_ms(&literal_text(other)?),
    }
}

fn literal_text(expr: &SqlExpr) -> Option<String> {
    match expr {
        SqlExpr::Value(v) => match &v.value {
            Value::SingleQuotedString(s) | Value::DoubleQuotedString(s) => Some(s.clone()),
            Value::Number(n, _) => Some(n.clone()),
            _ => None,
        },
        _ => None,
    }
}

/// A duration such as `"10 seconds"`, `"10 SECOND"`, `"250ms"` or `"2 min"`
/// in whole milliseconds; None for anything else or a duration that is not
/// positive.
pub fn interval_ms(text: &str) -> Option<i64> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: f64 = number.trim().parse().ok()?;
    let factor = match unit.trim().to_ascii_lowercase().as_str() {
        "ms" | "millisecond" | "milliseconds" => 1.0,
        "" | "s" | "sec" | "secs" | "second" | "seconds" => 1_000.0,
        "m" | "min" | "mins" | "minute" | "minutes" => 60_000.0,
        "h" | "hour" | "hours" => 3_600_000.0,
        "d" | "day" | "days" => 86_400_000.0,
        _ => return None,
    };
    let ms = number * factor;
    if ms < 1.0 || (ms - ms.round()).abs() > 1e-6 {
        return None;
    }
    // A value of f64 that is a whole number below 2^63 converts exactly.
    (ms < 9.0e18).then_some(ms.round() as i64)
}

#[cfg(test)]
mod tests {
    use super::interval_ms;

    #[test]
    fn interval_ms_reads_flink_and_spark_spellings() {
        assert_eq!(interval_ms("10 SECOND"), Some(10_000));
        assert_eq!(interval_ms("10 seconds"), Some(10_000));
        assert_eq!(interval_ms("250ms"), Some(250));
        assert_eq!(interval_ms("2 min"), Some(120_000));
        assert_eq!(interval_ms("0 s"), None);
        assert_eq!(interval_ms("10 fortnights"), None);
    }
}
