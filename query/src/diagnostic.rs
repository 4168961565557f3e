//! Errors in a rules file, with where they are and how to show them: `file:line:col: what`, the
//! line, and a caret under the offending text.

use std::fmt::Write as _;

/// A byte range in the source.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Span {
    /// Offset of the first byte.
    pub start: u32,
    /// Offset one past the last byte.
    pub end: u32,
}

impl Span {
    /// The span of bytes `start..end`.
    pub fn new(start: usize, end: usize) -> Self {
        Span { start: start as u32, end: end as u32 }
    }

    /// The smallest span covering both.
    pub fn to(self, other: Span) -> Span {
        Span { start: self.start.min(other.start), end: self.end.max(other.end) }
    }
}

/// One error in a rules file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    /// The text the error is about.
    pub span: Span,
    /// What is wrong, in a sentence.
    pub message: String,
}

impl Diagnostic {
    /// An error about the text at `span`.
    pub fn new(span: Span, message: impl Into<String>) -> Self {
        Diagnostic { span, message: message.into() }
    }

    /// 1-based line and column (in characters) of the span's start.
    pub fn line_col(&self, source: &str) -> (usize, usize) {
        let start = (self.span.start as usize).min(source.len());
        let before = &source[..start];
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |at| at + 1);
        (line, source[line_start..start].chars().count() + 1)
    }

    /// `path:line:col: message`, the source line and a caret line under the span.
    pub fn render(&self, source: &str, path: &str) -> String {
        let (line, col) = self.line_col(source);
        let start = (self.span.start as usize).min(source.len());
        let line_start = source[..start].rfind('\n').map_or(0, |at| at + 1);
        let line_end = source[start..].find('\n').map_or(source.len(), |at| start + at);
        let end = (self.span.end as usize).clamp(start, line_end);
        // A long line is shown around the caret only (a line of junk can be megabytes).
        let skipped = (col - 1).saturating_sub(SHOWN_LINE_CHARS / 2);
        let text: String = source[line_start..line_end].chars().skip(skipped).take(SHOWN_LINE_CHARS).collect();
        let width = source[start..end].chars().count().clamp(1, SHOWN_LINE_CHARS);
        let gutter = line.to_string().len();
        let mut out = String::new();
        let _ = writeln!(out, "{path}:{line}:{col}: {}", shown(&self.message));
        let _ = writeln!(out, "{:gutter$} |", "");
        let _ = writeln!(out, "{line} | {}{text}", if skipped > 0 { "..." } else { "" });
        let indent = col - 1 - skipped + if skipped > 0 { 3 } else { 0 };
        let _ = write!(out, "{:gutter$} | {}{}", "", " ".repeat(indent), "^".repeat(width));
        out
    }
}

/// How many errors a rules file's report shows (then only their count): a file of junk
/// makes an error per character, and the report must stay a report.
pub const MAX_RENDERED: usize = 100;

/// The longest stretch of a source line shown under an error, around its caret.
const SHOWN_LINE_CHARS: usize = 120;

/// The longest message shown: one quoting a megabyte-long token says so, not all of it.
const SHOWN_MESSAGE_CHARS: usize = 200;

/// `message`, cut at [`SHOWN_MESSAGE_CHARS`].
fn shown(message: &str) -> std::borrow::Cow<'_, str> {
    match message.char_indices().nth(SHOWN_MESSAGE_CHARS) {
        Some((at, _)) => format!("{}... ({} bytes in all)", &message[..at], message.len()).into(),
        None => message.into(),
    }
}

/// Every error of a rules file, ready to print.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.render())]
pub struct RulesError {
    /// The file's path as given (or `built-in:...`).
    pub path: String,
    /// The file's text, to show the offending lines.
    pub source_text: String,
    /// The errors, in the order of their place in the file.
    pub diagnostics: Vec<Diagnostic>,
}

impl RulesError {
    /// The first [`MAX_RENDERED`] diagnostics, each rendered, then a count line.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for diagnostic in self.diagnostics.iter().take(MAX_RENDERED) {
            out.push_str(&diagnostic.render(&self.source_text, &self.path));
            out.push_str("\n\n");
        }
        let n = self.diagnostics.len();
        let _ = write!(out, "{}: {n} error{}", self.path, if n == 1 { "" } else { "s" });
        if n > MAX_RENDERED {
            let _ = write!(out, " (the first {MAX_RENDERED} shown)");
        }
        out
    }
}

impl RulesError {
    /// The first error on one line (`path:line:col: message`), and how many more there are.
    pub fn first_line(&self) -> String {
        let Some(first) = self.diagnostics.first() else { return format!("{}: no errors", self.path) };
        let (line, column) = first.line_col(&self.source_text);
        let more = match self.diagnostics.len() - 1 {
            0 => String::new(),
            n if n < MAX_RENDERED => format!(" (and {n} more: `cep rules check {}` shows them all)", self.path),
            n => format!(" (and {n} more: `cep rules check {}` shows the first {MAX_RENDERED})", self.path),
        };
        format!("{}:{line}:{column}: {}{more}", self.path, shown(&first.message))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_line_column_and_caret() {
        let source = "SELECT a\nFROM StockTick\n  HAVING perx(price) > 1";
        let at = source.find("perx").unwrap();
        let diagnostic = Diagnostic::new(Span::new(at, at + 4), "unknown function `perx`");
        assert_eq!(diagnostic.line_col(source), (3, 10));
        assert_eq!(
            diagnostic.render(source, "r.rules"),
            "r.rules:3:10: unknown function `perx`\n  |\n3 |   HAVING perx(price) > 1\n  |          ^^^^"
        );
    }

    #[test]
    fn a_span_at_the_end_still_gets_a_caret() {
        let source = "SELECT";
        let diagnostic = Diagnostic::new(Span::new(6, 6), "expected FROM");
        assert!(diagnostic.render(source, "f").ends_with("1 | SELECT\n  |       ^"));
    }
}
