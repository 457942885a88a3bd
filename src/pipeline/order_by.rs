//! The `--by` text: `<col> [ASC|DESC] [NULLS FIRST|LAST], ...`, as in SQL's ORDER BY.
//!
//! Column names are bare words (letters, digits, `_`, `$`, `.`, `-`) or double-quoted with
//! `""` for a quote. Keywords are case-insensitive. Defaults are SQL's: ASC, and nulls
//! sort as the largest value (NULLS LAST for ASC, NULLS FIRST for DESC). Names are matched
//! against the input schema exactly, else case-insensitively when that is unambiguous.

use datafusion::arrow::datatypes::Schema;

use super::error::PipelineError;

/// One sort key as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SortKey {
    /// The column name (resolved against the schema by [`resolve_columns`]).
    pub column: String,
    /// Largest first.
    pub descending: bool,
    /// Nulls before all values.
    pub nulls_first: bool,
}

/// Parses `text` into sort keys.
pub fn parse_order_by(text: &str) -> Result<Vec<SortKey>, PipelineError> {
    let bad = |message: String| PipelineError::BadOrderBy {
        text: text.to_string(),
        message,
    };
    let tokens = tokenize(text).map_err(bad)?;
    let mut keys = Vec::new();
    for item in tokens.split(|t| *t == Token::Comma) {
        let Some((Token::Name(column), rest)) = item.split_first() else {
            return Err(bad(match item.first() {
                None => "empty sort key (stray comma?)".into(),
                Some(t) => format!("expected a column name, found {t}"),
            }));
        };
        let words: Vec<String> = rest
            .iter()
            .map(|t| t.word())
            .collect::<Result<_, _>>()
            .map_err(bad)?;
        let words: Vec<&str> = words.iter().map(String::as_str).collect();
        let (descending, rest) = match words.split_first() {
            Some((&"ASC", rest)) => (false, rest),
            Some((&"DESC", rest)) => (true, rest),
            _ => (false, &words[..]),
        };
        let nulls_first = match rest {
            [] => descending,
            ["NULLS", "FIRST"] => true,
            ["NULLS", "LAST"] => false,
            _ => {
                return Err(bad(format!(
                    "after column '{column}' expected [ASC|DESC] [NULLS FIRST|LAST], found '{}'",
                    rest.join(" ")
                )))
            }
        };
        keys.push(SortKey {
            column: column.clone(),
            descending,
            nulls_first,
        });
    }
    Ok(keys)
}

/// Replaces each key's column by the schema's spelling of it.
pub fn resolve_columns(keys: &mut [SortKey], schema: &Schema) -> Result<(), PipelineError> {
    for key in keys {
        if schema.column_with_name(&key.column).is_some() {
            continue;
        }
        let folded: Vec<&str> = schema
            .fields()
            .iter()
            .map(|f| f.name().as_str())
            .filter(|name| name.eq_ignore_ascii_case(&key.column))
            .collect();
        match folded.as_slice() {
            [one] => key.column = one.to_string(),
            _ => {
                return Err(PipelineError::UnknownColumn {
                    column: key.column.clone(),
                    available: schema
                        .fields()
                        .iter()
                        .map(|f| f.name().as_str())
                        .collect::<Vec<_>>()
                        .join(", "),
                })
            }
        }
    }
    Ok(())
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    /// A bare word or a quoted name.
    Name(String),
    /// A quoted name (never a keyword).
    Quoted(String),
    Comma,
}

impl Token {
    /// The upper-cased keyword this token spells.
    fn word(&self) -> Result<String, String> {
        match self {
            Token::Name(w) => Ok(w.to_ascii_uppercase()),
            other => Err(format!(
                "expected ASC, DESC or NULLS FIRST|LAST, found {other}"
            )),
        }
    }
}

impl std::fmt::Display for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Token::Name(w) => write!(f, "'{w}'"),
            Token::Quoted(w) => write!(f, "\"{w}\""),
            Token::Comma => write!(f, "','"),
        }
    }
}

fn tokenize(text: &str) -> Result<Vec<Token>, String> {
    let mut tokens = Vec::new();
    let mut chars = text.chars().peekable();
    while let Some(&c) = chars.peek() {
        if c.is_whitespace() {
            chars.next();
        } else if c == ',' {
            chars.next();
            tokens.push(Token::Comma);
        } else if c == '"' {
            chars.next();
            let mut name = String::new();
            loop {
                match chars.next() {
                    None => return Err("unterminated quoted column name".into()),
                    Some('"') if chars.peek() == Some(&'"') => {
                        chars.next();
                        name.push('"');
                    }
                    Some('"') => break,
                    Some(c) => name.push(c),
                }
            }
            tokens.push(Token::Quoted(name));
        } else if is_word_char(c) {
            let mut word = String::new();
            while let Some(&c) = chars.peek().filter(|c| is_word_char(**c)) {
                word.push(c);
                chars.next();
            }
            tokens.push(Token::Name(word));
        } else {
            return Err(format!(
                "unexpected character '{c}' (quote the column name?)"
            ));
        }
    }
    // Where a column name is expected a quoted name is one; elsewhere it stays quoted, so
    // `"DESC"` is never a keyword.
    let mut expect_name = true;
    for token in &mut tokens {
        if let (true, Token::Quoted(name)) = (expect_name, &mut *token) {
            *token = Token::Name(std::mem::take(name));
        }
        expect_name = *token == Token::Comma;
    }
    Ok(tokens)
}

fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || matches!(c, '_' | '$' | '.' | '-')
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::datatypes::{DataType, Field};

    fn key(column: &str, descending: bool, nulls_first: bool) -> SortKey {
        SortKey {
            column: column.into(),
            descending,
            nulls_first,
        }
    }

    #[test]
    fn parses_directions_nulls_and_quotes() {
        let keys =
            parse_order_by(r#"k, ts desc, "Weird ""name"", x" ASC NULLS FIRST, v Desc nulls LAST"#)
                .unwrap();
        assert_eq!(
            keys,
            vec![
                key("k", false, false),
                key("ts", true, true),
                key("Weird \"name\", x", false, true),
                key("v", true, false),
            ]
        );
    }

    #[test]
    fn rejects_malformed_text_with_reasons() {
        for (text, reason) in [
            ("", "empty sort key"),
            ("a,,b", "empty sort key"),
            ("a ASCENDING", "expected [ASC|DESC]"),
            ("a NULLS", "expected [ASC|DESC]"),
            ("a DESC DESC", "expected [ASC|DESC]"),
            ("\"a", "unterminated"),
            ("a + b", "unexpected character '+'"),
            ("a \"DESC\"", "expected ASC, DESC"),
        ] {
            let err = parse_order_by(text).unwrap_err().to_string();
            assert!(err.contains(reason), "{text:?}: {err}");
        }
    }

    #[test]
    fn resolves_exact_then_unambiguous_case_insensitive_names() {
        let schema = Schema::new(vec![
            Field::new("Ts", DataType::Int64, true),
            Field::new("a", DataType::Int64, true),
            Field::new("A", DataType::Int64, true),
        ]);
        let mut keys = parse_order_by("ts, a, A").unwrap();
        resolve_columns(&mut keys, &schema).unwrap();
        let names: Vec<_> = keys.iter().map(|k| k.column.as_str()).collect();
        assert_eq!(names, ["Ts", "a", "A"]);
        let mut missing = parse_order_by("nope").unwrap();
        let err = resolve_columns(&mut missing, &schema)
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "unknown column 'nope' in --by; the inputs have: Ts, a, A"
        );
    }
}
