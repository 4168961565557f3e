//! The rule language: EPL-style queries over the tick stream.
//!
//! ```text
//! @name('perc')
//! SELECT symbol, price, perc(price) AS value
//! FROM StockTick PARTITION BY symbol RETAIN 2 EVENTS
//! HAVING perc(price) > 2.0 OR perc(price) < -2.0;
//! ```
//!
//! - [`lexer`], [`parser`]: text to a syntax tree ([`ast`]), every error with its span.
//! - [`check`]: names, types and clause rules; lowering to [`plan`]s the engine executes.
//! - [`diagnostic`]: errors as `file:line:col`, the line, and a caret under the text.
//! - [`generate`]: generated rule files (the Oracle 400-query workload).
//!
//! `docs/RULES.md` is the language reference.

pub mod ast;
pub mod check;
pub mod diagnostic;
pub mod generate;
pub mod lexer;
pub mod parser;
pub mod plan;

pub use diagnostic::{Diagnostic, RulesError, Span};
pub use plan::{Query, RuleSet};

/// `rules/reference.rules`: the reference workload, R1 (perc), R2 (trend) and R3 (volatility);
/// the default rules.
pub const REFERENCE: &str = include_str!("../../rules/reference.rules");
/// `rules/oracle-400.rules`: the Oracle white paper's 400 queries.
pub const ORACLE_400: &str = include_str!("../../rules/oracle-400.rules");

/// Checks a rules file's text; `path` names it in errors. Returns the plans, or every error.
pub fn compile(source: &str, path: &str) -> Result<RuleSet, RulesError> {
    let (tokens, mut diagnostics) = lexer::tokenize(source);
    let (statements, parse_errors) = parser::parse(&tokens);
    diagnostics.extend(parse_errors);
    let (rules, check_errors) = check::check(&statements);
    diagnostics.extend(check_errors);
    if statements.is_empty() && diagnostics.is_empty() {
        diagnostics.push(Diagnostic::new(
            Span::default(),
            "no queries in the file: write at least one `@name('...') SELECT ... FROM StockTick`",
        ));
    }
    if diagnostics.is_empty() {
        return Ok(rules);
    }
    diagnostics.sort_by_key(|d| (d.span.start, d.span.end));
    diagnostics.dedup();
    Err(RulesError { path: path.to_string(), source_text: source.to_string(), diagnostics })
}

/// A rules file as a node hands it on: where it came from and its text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RulesSource {
    /// A path, or `built-in:reference` for the default.
    pub origin: String,
    /// The rules file's text.
    pub text: String,
}

impl RulesSource {
    /// The built-in reference rules (`rules/reference.rules`).
    pub fn reference() -> Self {
        RulesSource { origin: "built-in:reference".into(), text: REFERENCE.into() }
    }

    /// Reads a rules file; `None` is the built-in reference rules.
    pub fn load(path: Option<&std::path::Path>) -> Result<Self, String> {
        match path {
            None => Ok(RulesSource::reference()),
            Some(path) => {
                let bytes = std::fs::read(path)
                    .map_err(|error| format!("cannot read the rules file {}: {error}", path.display()))?;
                let text = String::from_utf8(bytes).map_err(|error| {
                    let valid = &error.as_bytes()[..error.utf8_error().valid_up_to()];
                    let line = valid.iter().filter(|&&byte| byte == b'\n').count() + 1;
                    let line_start = valid.iter().rposition(|&byte| byte == b'\n').map_or(0, |at| at + 1);
                    let column = String::from_utf8_lossy(&valid[line_start..]).chars().count() + 1;
                    format!("{}:{line}:{column}: not UTF-8 text (a rules file is UTF-8)", path.display())
                })?;
                Ok(RulesSource { origin: path.display().to_string(), text })
            }
        }
    }

    /// Checks the text (see [`compile`]).
    pub fn compile(&self) -> Result<RuleSet, RulesError> {
        compile(&self.text, &self.origin)
    }
}
