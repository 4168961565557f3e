//! Source text to tokens, each with its byte span. Keywords are case-insensitive and are
//! told apart from identifiers by the parser, so a field may share a keyword's spelling.

use crate::diagnostic::{Diagnostic, Span};

/// What a token is.
#[derive(Clone, Debug, PartialEq)]
pub enum TokenKind {
    /// A word: a name, or a keyword (the parser tells them apart).
    Ident(String),
    /// A number (finite).
    Number(f64),
    /// A string in single or double quotes: its text, without them (a doubled quote is one).
    Str(String),
    /// `(`.
    LParen,
    /// `)`.
    RParen,
    /// `,`.
    Comma,
    /// `;`, the end of a statement.
    Semicolon,
    /// `*`.
    Star,
    /// `+`.
    Plus,
    /// `-`.
    Minus,
    /// `/`.
    Slash,
    /// `%`.
    Percent,
    /// `=`.
    Eq,
    /// `!=` or `<>`.
    NotEq,
    /// `<`.
    Lt,
    /// `<=`.
    LtEq,
    /// `>`.
    Gt,
    /// `>=`.
    GtEq,
    /// `@`, before an annotation such as `@name`.
    At,
    /// The end of the text.
    Eof,
}

/// One token and where it is.
#[derive(Clone, Debug, PartialEq)]
pub struct Token {
    /// What it is.
    pub kind: TokenKind,
    /// Its bytes in the source.
    pub span: Span,
}

impl Token {
    /// Whether this is the keyword `word` (any case).
    pub fn is_keyword(&self, word: &str) -> bool {
        matches!(&self.kind, TokenKind::Ident(name) if name.eq_ignore_ascii_case(word))
    }

    /// How the token reads in an error message.
    pub fn describe(&self) -> String {
        match &self.kind {
            TokenKind::Ident(name) => format!("`{name}`"),
            TokenKind::Number(_) => "a number".into(),
            TokenKind::Str(_) => "a string".into(),
            TokenKind::Eof => "the end of the file".into(),
            other => format!("`{}`", punctuation(other)),
        }
    }
}

fn punctuation(kind: &TokenKind) -> &'static str {
    match kind {
        TokenKind::LParen => "(",
        TokenKind::RParen => ")",
        TokenKind::Comma => ",",
        TokenKind::Semicolon => ";",
        TokenKind::Star => "*",
        TokenKind::Plus => "+",
        TokenKind::Minus => "-",
        TokenKind::Slash => "/",
        TokenKind::Percent => "%",
        TokenKind::Eq => "=",
        TokenKind::NotEq => "!=",
        TokenKind::Lt => "<",
        TokenKind::LtEq => "<=",
        TokenKind::Gt => ">",
        TokenKind::GtEq => ">=",
        TokenKind::At => "@",
        _ => "?",
    }
}

/// Splits `source` into tokens (ending with `Eof`). Every lexical error is reported; the
/// offending characters are skipped so that later errors are found too.
pub fn tokenize(source: &str) -> (Vec<Token>, Vec<Diagnostic>) {
    let bytes = source.as_bytes();
    let mut tokens = Vec::new();
    let mut errors = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        let start = i;
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        // Comments: `-- ...`, `// ...` to the end of the line, `/* ... */`.
        if (c == b'-' && bytes.get(i + 1) == Some(&b'-')) || (c == b'/' && bytes.get(i + 1) == Some(&b'/')) {
            while i < bytes.len() && bytes[i] != b'\n' {
                i += 1;
            }
            continue;
        }
        if c == b'/' && bytes.get(i + 1) == Some(&b'*') {
            match source[i + 2..].find("*/") {
                Some(end) => i += 2 + end + 2,
                None => {
                    errors
                        .push(Diagnostic::new(Span::new(start, start + 2), "unterminated comment: `/*` without `*/`"));
                    i = bytes.len();
                }
            }
            continue;
        }
        let kind = if c.is_ascii_alphabetic() || c == b'_' {
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                i += 1;
            }
            TokenKind::Ident(source[start..i].to_string())
        } else if c.is_ascii_digit() || (c == b'.' && bytes.get(i + 1).is_some_and(u8::is_ascii_digit)) {
            i = number_end(bytes, i);
            match source[start..i].parse::<f64>() {
                Ok(value) if value.is_finite() => TokenKind::Number(value),
                _ => {
                    errors
                        .push(Diagnostic::new(Span::new(start, i), format!("`{}` is not a number", &source[start..i])));
                    continue;
                }
            }
        } else if c == b'\'' || c == b'"' {
            match string_literal(source, i, c) {
                Ok((text, end)) => {
                    i = end;
                    TokenKind::Str(text)
                }
                Err(diagnostic) => {
                    // The rest of the line is the unterminated string.
                    i = diagnostic.span.end as usize;
                    errors.push(diagnostic);
                    continue;
                }
            }
        } else {
            let two = |next: u8| bytes.get(i + 1) == Some(&next);
            let (kind, len) = match c {
                b'(' => (TokenKind::LParen, 1),
                b')' => (TokenKind::RParen, 1),
                b',' => (TokenKind::Comma, 1),
                b';' => (TokenKind::Semicolon, 1),
                b'*' => (TokenKind::Star, 1),
                b'+' => (TokenKind::Plus, 1),
                b'-' => (TokenKind::Minus, 1),
                b'/' => (TokenKind::Slash, 1),
                b'%' => (TokenKind::Percent, 1),
                b'@' => (TokenKind::At, 1),
                b'=' if two(b'=') => (TokenKind::Eq, 2),
                b'=' => (TokenKind::Eq, 1),
                b'!' if two(b'=') => (TokenKind::NotEq, 2),
                b'<' if two(b'>') => (TokenKind::NotEq, 2),
                b'<' if two(b'=') => (TokenKind::LtEq, 2),
                b'<' => (TokenKind::Lt, 1),
                b'>' if two(b'=') => (TokenKind::GtEq, 2),
                b'>' => (TokenKind::Gt, 1),
                _ => {
                    let len = source[i..].chars().next().map_or(1, char::len_utf8);
                    errors.push(Diagnostic::new(
                        Span::new(start, start + len),
                        format!("unexpected character `{}`", &source[start..start + len]),
                    ));
                    i += len;
                    continue;
                }
            };
            i += len;
            kind
        };
        tokens.push(Token { kind, span: Span::new(start, i) });
    }
    tokens.push(Token { kind: TokenKind::Eof, span: Span::new(bytes.len(), bytes.len()) });
    (tokens, errors)
}

/// End of a number: digits, one fraction, one exponent. A unit written straight after it
/// (`10s`) is left for the next token.
fn number_end(bytes: &[u8], mut i: usize) -> usize {
    let digits = |i: &mut usize| {
        while *i < bytes.len() && bytes[*i].is_ascii_digit() {
            *i += 1;
        }
    };
    digits(&mut i);
    if bytes.get(i) == Some(&b'.') && bytes.get(i + 1).is_some_and(u8::is_ascii_digit) {
        i += 1;
        digits(&mut i);
    }
    if matches!(bytes.get(i), Some(b'e' | b'E')) {
        let sign = usize::from(matches!(bytes.get(i + 1), Some(b'+' | b'-')));
        if bytes.get(i + 1 + sign).is_some_and(u8::is_ascii_digit) {
            i += 1 + sign;
            digits(&mut i);
        }
    }
    i
}

/// A quoted string from `start` (the quote); a doubled quote stands for one.
fn string_literal(source: &str, start: usize, quote: u8) -> Result<(String, usize), Diagnostic> {
    let bytes = source.as_bytes();
    let mut text = String::new();
    let mut i = start + 1;
    let mut run = i;
    while i < bytes.len() {
        if bytes[i] == quote {
            text.push_str(&source[run..i]);
            if bytes.get(i + 1) == Some(&quote) {
                text.push(quote as char);
                i += 2;
                run = i;
                continue;
            }
            return Ok((text, i + 1));
        }
        if bytes[i] == b'\n' {
            break;
        }
        i += 1;
    }
    Err(Diagnostic::new(Span::new(start, i), "unterminated string: no closing quote on this line"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(source: &str) -> Vec<TokenKind> {
        let (tokens, errors) = tokenize(source);
        assert!(errors.is_empty(), "{errors:?}");
        tokens.into_iter().map(|t| t.kind).collect()
    }

    #[test]
    fn numbers_units_strings_and_comments() {
        use TokenKind::*;
        assert_eq!(
            kinds("10s 2.5e3 .5 'it''s' -- note\n<> /* x */ >= !="),
            vec![
                Number(10.0),
                Ident("s".into()),
                Number(2500.0),
                Number(0.5),
                Str("it's".into()),
                NotEq,
                GtEq,
                NotEq,
                Eof
            ]
        );
    }

    #[test]
    fn errors_carry_spans_and_lexing_goes_on() {
        let (tokens, errors) = tokenize("a # b $");
        assert_eq!(errors.len(), 2);
        assert_eq!(errors[0].span, Span::new(2, 3));
        assert_eq!(errors[1].span, Span::new(6, 7));
        assert_eq!(tokens.len(), 3);
        let (_, errors) = tokenize("x = 'open");
        assert_eq!(errors[0].message, "unterminated string: no closing quote on this line");
    }
}
