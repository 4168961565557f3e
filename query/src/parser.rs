//! Tokens to statements, by recursive descent. A statement with a syntax error is reported
//! and skipped up to its `;`, so one run finds the errors of every statement.

use crate::ast::*;
use crate::diagnostic::{Diagnostic, Span};
use crate::lexer::{Token, TokenKind};

/// Words that end an expression or start a clause; never taken as a field name.
const RESERVED: &[&str] =
    &["select", "from", "where", "partition", "by", "retain", "having", "and", "or", "not", "in", "as", "tumbling"];

/// Parses tokens (ending with `Eof`) into statements; a statement with an error is reported
/// and left out, and parsing goes on after its `;`.
pub fn parse(tokens: &[Token]) -> (Vec<Statement>, Vec<Diagnostic>) {
    let mut parser = Parser { tokens, at: 0, depth: 0, tree: 0 };
    let mut statements = Vec::new();
    let mut errors = Vec::new();
    loop {
        while parser.eat(&TokenKind::Semicolon) {}
        if parser.peek().kind == TokenKind::Eof {
            break;
        }
        match parser.statement() {
            Ok(statement) => {
                statements.push(statement);
                let next = parser.peek();
                if next.kind == TokenKind::Eof {
                    // Every query ends with `;` (docs/RULES.md), the last one too: the caret
                    // goes just after its last word.
                    let end = parser.previous_span().end as usize;
                    errors.push(Diagnostic::new(
                        Span::new(end, end),
                        "expected `;` after the query, found the end of the file",
                    ));
                } else if next.kind != TokenKind::Semicolon {
                    errors.push(Diagnostic::new(
                        next.span,
                        format!(
                            "expected `;` or a clause (WHERE, PARTITION BY, RETAIN, HAVING), found {}",
                            next.describe()
                        ),
                    ));
                    parser.skip_statement();
                }
            }
            Err(error) => {
                errors.push(error);
                parser.skip_statement();
            }
        }
    }
    (statements, errors)
}

struct Parser<'a> {
    tokens: &'a [Token],
    at: usize,
    /// Expressions (and unary operators) entered and not yet left: bounded by [`MAX_NESTING`],
    /// so no file can run the parser out of stack.
    depth: usize,
    /// How deep the tree being built is on this path: each level above, and each operator of
    /// a chain (`a + b + c` is `(a + b) + c`), bounded by [`MAX_TREE_DEPTH`], so that the
    /// checker's walk and the tree's drop cannot run out of stack either.
    tree: usize,
}

/// How deep expressions may nest (parentheses, function arguments, `-`, `NOT`).
pub const MAX_NESTING: usize = 64;

/// How deep an expression's tree may be, chains of operators included (`a OR b OR ...`).
pub const MAX_TREE_DEPTH: usize = 512;

type Parsed<T> = Result<T, Diagnostic>;

impl<'a> Parser<'a> {
    fn peek(&self) -> &'a Token {
        &self.tokens[self.at.min(self.tokens.len() - 1)]
    }

    fn peek_at(&self, ahead: usize) -> &'a Token {
        &self.tokens[(self.at + ahead).min(self.tokens.len() - 1)]
    }

    fn bump(&mut self) -> &'a Token {
        let token = self.peek();
        if token.kind != TokenKind::Eof {
            self.at += 1;
        }
        token
    }

    fn previous_span(&self) -> Span {
        self.tokens[self.at.saturating_sub(1)].span
    }

    fn eat(&mut self, kind: &TokenKind) -> bool {
        if &self.peek().kind == kind {
            self.bump();
            true
        } else {
            false
        }
    }

    fn eat_keyword(&mut self, word: &str) -> bool {
        if self.peek().is_keyword(word) {
            self.bump();
            true
        } else {
            false
        }
    }

    fn expected(&self, what: &str) -> Diagnostic {
        let token = self.peek();
        Diagnostic::new(token.span, format!("expected {what}, found {}", token.describe()))
    }

    fn expect(&mut self, kind: &TokenKind, what: &str) -> Parsed<Span> {
        if &self.peek().kind == kind {
            Ok(self.bump().span)
        } else {
            Err(self.expected(what))
        }
    }

    fn expect_keyword(&mut self, word: &str) -> Parsed<Span> {
        if self.peek().is_keyword(word) {
            Ok(self.bump().span)
        } else {
            Err(self.expected(&word.to_ascii_uppercase()))
        }
    }

    fn identifier(&mut self, what: &str) -> Parsed<(String, Span)> {
        match &self.peek().kind {
            TokenKind::Ident(name) => {
                let span = self.bump().span;
                Ok((name.clone(), span))
            }
            _ => Err(self.expected(what)),
        }
    }

    /// Skips to just after the next `;` (or to the end).
    fn skip_statement(&mut self) {
        loop {
            match self.bump().kind {
                TokenKind::Semicolon | TokenKind::Eof => return,
                _ => {}
            }
        }
    }

    fn statement(&mut self) -> Parsed<Statement> {
        let start = self.peek().span;
        let mut name = None;
        while self.eat(&TokenKind::At) {
            let (annotation, annotation_span) = self.identifier("an annotation name after `@`")?;
            if !annotation.eq_ignore_ascii_case("name") {
                return Err(Diagnostic::new(
                    annotation_span,
                    format!("unknown annotation `@{annotation}`: the one annotation is @name('...')"),
                ));
            }
            self.expect(&TokenKind::LParen, "`(` after @name")?;
            let token = self.bump();
            let TokenKind::Str(text) = &token.kind else {
                return Err(Diagnostic::new(token.span, "expected the query's name in quotes, as in @name('perc')"));
            };
            if name.is_some() {
                return Err(Diagnostic::new(annotation_span, "a query has one @name"));
            }
            name = Some((text.clone(), token.span));
            self.expect(&TokenKind::RParen, "`)` after the name")?;
        }
        self.expect_keyword("select")?;
        let select_start = self.peek().span;
        let mut select = Vec::new();
        loop {
            if self.peek().kind == TokenKind::Star {
                select.push(SelectItem::Star(self.bump().span));
            } else {
                let expr = self.expr()?;
                let alias =
                    if self.eat_keyword("as") { Some(self.identifier("a column name after AS")?) } else { None };
                select.push(SelectItem::Expr { expr, alias });
            }
            if !self.eat(&TokenKind::Comma) {
                break;
            }
        }
        let select_span = select_start.to(self.previous_span());
        self.expect_keyword("from")?;
        let from = self.identifier("a stream name after FROM")?;
        let mut statement = Statement {
            name,
            span: start,
            select,
            select_span,
            from,
            filter: None,
            partition: None,
            retain: None,
            having: None,
        };
        // Clauses may come in any order, each once.
        loop {
            let token = self.peek();
            let duplicate = |present: bool, clause: &str| -> Parsed<()> {
                if present {
                    Err(Diagnostic::new(token.span, format!("a query has one {clause} clause")))
                } else {
                    Ok(())
                }
            };
            if token.is_keyword("where") {
                duplicate(statement.filter.is_some(), "WHERE")?;
                self.bump();
                statement.filter = Some(self.expr()?);
            } else if token.is_keyword("having") {
                duplicate(statement.having.is_some(), "HAVING")?;
                self.bump();
                statement.having = Some(self.expr()?);
            } else if token.is_keyword("partition") {
                duplicate(statement.partition.is_some(), "PARTITION BY")?;
                self.bump();
                self.expect_keyword("by")?;
                statement.partition = Some(self.identifier("the field to partition by")?);
            } else if token.is_keyword("retain") {
                duplicate(statement.retain.is_some(), "RETAIN")?;
                let retain = self.bump().span;
                statement.retain = Some(self.window(retain)?);
            } else {
                break;
            }
        }
        statement.span = start.to(self.previous_span());
        Ok(statement)
    }

    /// After RETAIN (at `start`): `n EVENTS`, a duration, or `TUMBLING` and a duration.
    fn window(&mut self, start: Span) -> Parsed<(WindowSpec, Span)> {
        let tumbling = self.eat_keyword("tumbling");
        let number_token = self.bump();
        let TokenKind::Number(n) = number_token.kind else {
            return Err(Diagnostic::new(
                number_token.span,
                format!(
                    "expected a window size after RETAIN (`2 EVENTS`, `10 SECONDS`, `TUMBLING 1 MINUTE`), found {}",
                    number_token.describe()
                ),
            ));
        };
        let (unit, unit_span) = self.identifier("a unit after the window size (EVENTS, SECONDS, MS, ...)")?;
        let span = start.to(unit_span);
        let unit = unit.to_ascii_lowercase();
        if unit == "events" || unit == "event" || unit == "rows" {
            if tumbling {
                return Err(Diagnostic::new(span, "tumbling windows are windows of time: RETAIN TUMBLING 10 SECONDS"));
            }
            if n < 1.0 || n.fract() != 0.0 || n > 1e9 {
                return Err(Diagnostic::new(
                    number_token.span,
                    "an event window holds a whole number of events, 1 or more",
                ));
            }
            return Ok((WindowSpec::Events(n as u64), span));
        }
        let Some(unit_ns) = unit_nanos(&unit) else {
            return Err(Diagnostic::new(
                unit_span,
                format!("unknown unit `{unit}`: use EVENTS or a time unit (ns, us, ms, s, sec, seconds, min, minutes, h, hours)"),
            ));
        };
        let ns = n * unit_ns;
        if !(1.0..=1e18).contains(&ns) {
            return Err(Diagnostic::new(span, "a window of time lasts from 1 ns to about 30 years"));
        }
        let ns = ns.round() as u64;
        Ok((if tumbling { WindowSpec::Tumbling(ns) } else { WindowSpec::Time(ns) }, span))
    }

    fn expr(&mut self) -> Parsed<Expr> {
        self.nested(Self::or)
    }

    /// Runs `parse` one level deeper, refusing to go past [`MAX_NESTING`] or [`MAX_TREE_DEPTH`].
    fn nested(&mut self, parse: fn(&mut Self) -> Parsed<Expr>) -> Parsed<Expr> {
        if self.depth >= MAX_NESTING || self.tree >= MAX_TREE_DEPTH {
            return Err(self.too_deep());
        }
        self.depth += 1;
        self.tree += 1;
        let parsed = parse(self);
        self.depth -= 1;
        self.tree -= 1;
        parsed
    }

    fn too_deep(&self) -> Diagnostic {
        Diagnostic::new(
            self.peek().span,
            format!(
                "the expression is too deep: at most {MAX_NESTING} levels of parentheses, calls, `-` and NOT, \
                 and {MAX_TREE_DEPTH} in all with the operators of chains"
            ),
        )
    }

    fn binary_chain(
        &mut self,
        next: fn(&mut Self) -> Parsed<Expr>,
        op_of: fn(&Token) -> Option<BinaryOp>,
    ) -> Parsed<Expr> {
        let mut left = next(self)?;
        // Each operator of a chain nests the tree one level deeper (`a + b + c` is `(a + b) + c`):
        // counted toward the tree's depth, so the checker's walk and the tree's drop stay shallow.
        let tree = self.tree;
        while let Some(op) = op_of(self.peek()) {
            if self.tree >= MAX_TREE_DEPTH {
                let error = self.too_deep();
                self.tree = tree;
                return Err(error);
            }
            self.tree += 1;
            self.bump();
            let right = match next(self) {
                Ok(right) => right,
                Err(error) => {
                    self.tree = tree;
                    return Err(error);
                }
            };
            let span = left.span.to(right.span);
            left = Expr { kind: ExprKind::Binary(op, Box::new(left), Box::new(right)), span };
        }
        self.tree = tree;
        Ok(left)
    }

    fn or(&mut self) -> Parsed<Expr> {
        self.binary_chain(Self::and, |t| t.is_keyword("or").then_some(BinaryOp::Or))
    }

    fn and(&mut self) -> Parsed<Expr> {
        self.binary_chain(Self::not, |t| t.is_keyword("and").then_some(BinaryOp::And))
    }

    fn not(&mut self) -> Parsed<Expr> {
        if self.peek().is_keyword("not") {
            let start = self.bump().span;
            let operand = self.nested(Self::not)?;
            let span = start.to(operand.span);
            return Ok(Expr { kind: ExprKind::Unary(UnaryOp::Not, Box::new(operand)), span });
        }
        self.comparison()
    }

    fn comparison(&mut self) -> Parsed<Expr> {
        let left = self.additive()?;
        let negated_in = self.peek().is_keyword("not") && self.peek_at(1).is_keyword("in");
        if self.peek().is_keyword("in") || negated_in {
            if negated_in {
                self.bump();
            }
            self.bump();
            self.expect(&TokenKind::LParen, "`(` and a list after IN")?;
            let mut list = vec![self.additive()?];
            while self.eat(&TokenKind::Comma) {
                list.push(self.additive()?);
            }
            let end = self.expect(&TokenKind::RParen, "`,` or `)` in the IN list")?;
            let span = left.span.to(end);
            return Ok(Expr { kind: ExprKind::In { expr: Box::new(left), list, negated: negated_in }, span });
        }
        let op = match self.peek().kind {
            TokenKind::Eq => BinaryOp::Eq,
            TokenKind::NotEq => BinaryOp::NotEq,
            TokenKind::Lt => BinaryOp::Lt,
            TokenKind::LtEq => BinaryOp::LtEq,
            TokenKind::Gt => BinaryOp::Gt,
            TokenKind::GtEq => BinaryOp::GtEq,
            _ => return Ok(left),
        };
        self.bump();
        let right = self.additive()?;
        let span = left.span.to(right.span);
        Ok(Expr { kind: ExprKind::Binary(op, Box::new(left), Box::new(right)), span })
    }

    fn additive(&mut self) -> Parsed<Expr> {
        self.binary_chain(Self::multiplicative, |t| match t.kind {
            TokenKind::Plus => Some(BinaryOp::Add),
            TokenKind::Minus => Some(BinaryOp::Sub),
            _ => None,
        })
    }

    fn multiplicative(&mut self) -> Parsed<Expr> {
        self.binary_chain(Self::unary, |t| match t.kind {
            TokenKind::Star => Some(BinaryOp::Mul),
            TokenKind::Slash => Some(BinaryOp::Div),
            TokenKind::Percent => Some(BinaryOp::Rem),
            _ => None,
        })
    }

    fn unary(&mut self) -> Parsed<Expr> {
        if self.peek().kind == TokenKind::Minus {
            let start = self.bump().span;
            let operand = self.nested(Self::unary)?;
            let span = start.to(operand.span);
            return Ok(Expr { kind: ExprKind::Unary(UnaryOp::Neg, Box::new(operand)), span });
        }
        if self.eat(&TokenKind::Plus) {
            return self.nested(Self::unary);
        }
        self.primary()
    }

    fn primary(&mut self) -> Parsed<Expr> {
        let token = self.peek();
        let span = token.span;
        let kind = match &token.kind {
            TokenKind::Number(value) => {
                self.bump();
                ExprKind::Number(*value)
            }
            TokenKind::Str(text) => {
                self.bump();
                ExprKind::Str(text.clone())
            }
            TokenKind::LParen => {
                self.bump();
                let inner = self.expr()?;
                let end = self.expect(&TokenKind::RParen, "`)`")?;
                return Ok(Expr { kind: inner.kind, span: span.to(end) });
            }
            TokenKind::Ident(name) if token.is_keyword("true") || token.is_keyword("false") => {
                self.bump();
                ExprKind::Bool(name.eq_ignore_ascii_case("true"))
            }
            TokenKind::Ident(name) if !RESERVED.iter().any(|word| name.eq_ignore_ascii_case(word)) => {
                self.bump();
                if self.peek().kind != TokenKind::LParen {
                    return Ok(Expr { kind: ExprKind::Field(name.clone()), span });
                }
                self.bump();
                let mut args = Vec::new();
                let mut star = false;
                if self.peek().kind == TokenKind::Star && self.peek_at(1).kind == TokenKind::RParen {
                    self.bump();
                    star = true;
                } else if self.peek().kind != TokenKind::RParen {
                    args.push(self.expr()?);
                    while self.eat(&TokenKind::Comma) {
                        args.push(self.expr()?);
                    }
                }
                let end = self.expect(&TokenKind::RParen, "`,` or `)` after the function's arguments")?;
                return Ok(Expr {
                    kind: ExprKind::Call { name: name.to_ascii_lowercase(), name_span: span, args, star },
                    span: span.to(end),
                });
            }
            _ => return Err(self.expected("an expression")),
        };
        Ok(Expr { kind, span })
    }
}

/// Nanoseconds per unit, for window lengths.
fn unit_nanos(unit: &str) -> Option<f64> {
    Some(match unit {
        "ns" | "nanosecond" | "nanoseconds" => 1.0,
        "us" | "microsecond" | "microseconds" => 1e3,
        "ms" | "msec" | "millisecond" | "milliseconds" => 1e6,
        "s" | "sec" | "secs" | "second" | "seconds" => 1e9,
        "m" | "min" | "mins" | "minute" | "minutes" => 60e9,
        "h" | "hour" | "hours" => 3600e9,
        _ => return None,
    })
}
