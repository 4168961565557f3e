//! Names, types and clause rules of parsed statements, and their lowering to plans. Every
//! error of every statement is collected; a statement with errors produces no plan.

use crate::ast::{self, BinaryOp, ExprKind, SelectItem, Statement, UnaryOp, WindowSpec};
use crate::diagnostic::{Diagnostic, Span};
use crate::plan::{Aggregate, AggregateKind, ArithOp, CmpOp, Expr, Func, Query, RuleSet, Window};
use std::collections::HashMap;

/// The one input stream.
pub const STREAM: &str = "StockTick";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Type {
    Number,
    Text,
    Bool,
}

impl Type {
    fn name(self) -> &'static str {
        match self {
            Type::Number => "a number",
            Type::Text => "text",
            Type::Bool => "a condition",
        }
    }
}

/// Where an expression sits, which decides what it may contain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Place {
    Where,
    /// SELECT and HAVING: aggregates allowed.
    Output,
    /// Inside an aggregate's argument.
    Argument,
}

/// Checks every statement and lowers the valid ones to plans, in order; returns the errors of
/// the others (all of them, not just the first).
pub fn check(statements: &[Statement]) -> (RuleSet, Vec<Diagnostic>) {
    let mut queries = Vec::new();
    let mut errors = Vec::new();
    let mut names: HashMap<String, Span> = HashMap::new();
    for statement in statements {
        let mut checker = Checker { errors: Vec::new(), args: Vec::new(), aggregates: Vec::new() };
        let query = checker.statement(statement);
        if let Some((name, span)) = &statement.name {
            if names.contains_key(name) {
                checker.errors.push(Diagnostic::new(*span, format!("a query named `{name}` is already defined above")));
            } else {
                names.insert(name.clone(), *span);
            }
        }
        if checker.errors.is_empty() {
            queries.extend(query);
        }
        errors.append(&mut checker.errors);
    }
    (RuleSet { queries }, errors)
}

struct Checker {
    errors: Vec<Diagnostic>,
    args: Vec<Expr>,
    aggregates: Vec<Aggregate>,
}

fn valid_name(name: &str) -> bool {
    !name.is_empty() && name.len() <= 64 && name.chars().all(|c| c.is_ascii_alphanumeric() || "_-.:".contains(c))
}

impl Checker {
    fn error(&mut self, span: Span, message: impl Into<String>) {
        self.errors.push(Diagnostic::new(span, message));
    }

    fn statement(&mut self, statement: &Statement) -> Option<Query> {
        let name = match &statement.name {
            Some((name, span)) => {
                if !valid_name(name) {
                    self.error(*span, "a query name is 1 to 64 letters, digits, `_`, `-`, `.` or `:`");
                }
                name.clone()
            }
            None => {
                self.error(
                    Span::new(statement.span.start as usize, statement.span.start as usize + 6),
                    "a query needs a name: put @name('...') before SELECT (it becomes the `rule` of its outputs)",
                );
                String::new()
            }
        };
        let (stream, stream_span) = &statement.from;
        if !stream.eq_ignore_ascii_case(STREAM) {
            self.error(*stream_span, format!("unknown stream `{stream}`: the input stream is {STREAM}"));
        }
        let window = match statement.retain {
            None => Window::Events(1),
            Some((WindowSpec::Events(n), _)) => Window::Events(n),
            Some((WindowSpec::Time(ns), _)) => Window::Time(ns),
            Some((WindowSpec::Tumbling(ns), _)) => Window::Tumbling(ns),
        };

        // WHERE: split into what depends on the symbol alone and what needs the event.
        let (mut symbol_parts, mut event_parts) = (Vec::new(), Vec::new());
        if let Some(filter) = &statement.filter {
            let mut conjuncts = Vec::new();
            split_and(filter, &mut conjuncts);
            for conjunct in conjuncts {
                if let Some(expr) = self.condition(conjunct, Place::Where, "WHERE") {
                    if expr.depends_on_event() {
                        event_parts.push(expr);
                    } else {
                        symbol_parts.push(expr);
                    }
                }
            }
        }
        let having = statement.having.as_ref().and_then(|having| self.condition(having, Place::Output, "HAVING"));
        let (price, value) = self.select(statement);

        let stateful = statement.retain.is_some()
            || self.aggregates.iter().any(|a| matches!(a.kind, AggregateKind::Trend | AggregateKind::Prev));
        match &statement.partition {
            Some((field, span)) if !field.eq_ignore_ascii_case("symbol") => self.error(
                *span,
                format!("cannot partition by `{field}`: the cluster partitions the stream by symbol (PARTITION BY symbol)"),
            ),
            None if stateful => self.error(
                statement.retain.map_or(statement.select_span, |(_, span)| span),
                "a query with state (RETAIN, trend, prev) needs PARTITION BY symbol: each symbol's events live on one worker",
            ),
            _ => {}
        }
        Some(Query {
            name,
            window,
            symbol_filter: conjunction(symbol_parts),
            event_filter: conjunction(event_parts),
            args: std::mem::take(&mut self.args),
            aggregates: std::mem::take(&mut self.aggregates),
            having,
            price: price?,
            value: value?,
        })
    }

    /// The output columns: symbol, price, value. Returns the price and value expressions.
    fn select(&mut self, statement: &Statement) -> (Option<Expr>, Option<Expr>) {
        let mut price = None;
        let mut value = None;
        let mut unnamed: Vec<(Expr, Span)> = Vec::new();
        let mut seen: HashMap<&'static str, Span> = HashMap::new();
        for item in &statement.select {
            let (column, expr, span): (&'static str, Expr, Span) = match item {
                SelectItem::Star(span) => {
                    for column in ["symbol", "price"] {
                        seen.entry(column).or_insert(*span);
                    }
                    price.get_or_insert(Expr::Price);
                    continue;
                }
                SelectItem::Expr { expr, alias } => {
                    let Some((checked, ty)) = self.expr(expr, Place::Output) else { continue };
                    let column = match (alias, &expr.kind) {
                        (Some((alias, alias_span)), _) => match alias.to_ascii_lowercase().as_str() {
                            "symbol" => "symbol",
                            "price" => "price",
                            "value" => "value",
                            _ => {
                                self.error(
                                    *alias_span,
                                    format!("an output has the columns symbol, price and value; `{alias}` is not one"),
                                );
                                continue;
                            }
                        },
                        (None, ExprKind::Field(field)) if field.eq_ignore_ascii_case("symbol") => "symbol",
                        (None, ExprKind::Field(field)) if field.eq_ignore_ascii_case("price") => "price",
                        (None, _) => {
                            if ty == Type::Number {
                                unnamed.push((checked, expr.span));
                            } else {
                                self.error(
                                    expr.span,
                                    format!("an output value must be a number, this is {}", ty.name()),
                                );
                            }
                            continue;
                        }
                    };
                    let wanted = if column == "symbol" { Type::Text } else { Type::Number };
                    if ty != wanted {
                        self.error(
                            expr.span,
                            format!("the {column} column must be {}, this is {}", wanted.name(), ty.name()),
                        );
                        continue;
                    }
                    if column == "symbol" && checked != Expr::Symbol {
                        self.error(expr.span, "the symbol column is the partition's symbol: select `symbol` itself");
                        continue;
                    }
                    (column, checked, expr.span)
                }
            };
            if seen.insert(column, span).is_some() {
                self.error(span, format!("the {column} column is selected twice"));
                continue;
            }
            match column {
                "price" => price = Some(expr),
                "value" => value = Some(expr),
                _ => {}
            }
        }
        match (value.is_some(), unnamed.len()) {
            (_, 0) => {}
            (false, 1) => value = unnamed.pop().map(|(expr, _)| expr),
            (true, _) | (false, _) => {
                for (_, span) in &unnamed[usize::from(value.is_none())..] {
                    self.error(*span, "an output has one value column: name it `AS value`, or drop it");
                }
            }
        }
        (Some(price.unwrap_or(Expr::Price)), Some(value.unwrap_or(Expr::Price)))
    }

    fn condition(&mut self, expr: &ast::Expr, place: Place, clause: &str) -> Option<Expr> {
        let (checked, ty) = self.expr(expr, place)?;
        if ty != Type::Bool {
            self.error(expr.span, format!("{clause} needs a condition, this is {}", ty.name()));
            return None;
        }
        Some(checked)
    }

    fn expect(&mut self, expr: &ast::Expr, place: Place, wanted: Type, context: &str) -> Option<Expr> {
        let (checked, ty) = self.expr(expr, place)?;
        if ty != wanted {
            self.error(expr.span, format!("{context} needs {}, this is {}", wanted.name(), ty.name()));
            return None;
        }
        Some(checked)
    }

    fn expr(&mut self, expr: &ast::Expr, place: Place) -> Option<(Expr, Type)> {
        Some(match &expr.kind {
            ExprKind::Number(value) => (Expr::Number(*value), Type::Number),
            ExprKind::Str(text) => (Expr::Text(text.as_str().into()), Type::Text),
            ExprKind::Bool(value) => (Expr::Bool(*value), Type::Bool),
            ExprKind::Field(name) => match name.to_ascii_lowercase().as_str() {
                "symbol" => (Expr::Symbol, Type::Text),
                "price" => (Expr::Price, Type::Number),
                _ => {
                    self.error(expr.span, format!("unknown field `{name}`: a {STREAM} has `symbol` and `price`"));
                    return None;
                }
            },
            ExprKind::Unary(UnaryOp::Neg, operand) => {
                let operand = self.expect(operand, place, Type::Number, "`-`")?;
                (fold(Expr::Neg(Box::new(operand))), Type::Number)
            }
            ExprKind::Unary(UnaryOp::Not, operand) => {
                let operand = self.expect(operand, place, Type::Bool, "NOT")?;
                (Expr::Not(Box::new(operand)), Type::Bool)
            }
            ExprKind::Binary(op, left, right) => return self.binary(*op, left, right, place),
            ExprKind::In { expr: operand, list, negated } => {
                let (checked, ty) = self.expr(operand, place)?;
                let mut numbers = Vec::new();
                let mut texts = Vec::new();
                for item in list {
                    match (&item.kind, ty) {
                        (ExprKind::Number(n), Type::Number) => numbers.push(*n),
                        (ExprKind::Unary(UnaryOp::Neg, inner), Type::Number)
                            if matches!(inner.kind, ExprKind::Number(_)) =>
                        {
                            if let ExprKind::Number(n) = inner.kind {
                                numbers.push(-n)
                            }
                        }
                        (ExprKind::Str(text), Type::Text) => texts.push(text.as_str().into()),
                        _ => {
                            self.error(
                                item.span,
                                format!("the IN list holds literals of the tested type ({})", ty.name()),
                            );
                            return None;
                        }
                    }
                }
                match ty {
                    Type::Number => (Expr::InNumbers(Box::new(checked), numbers, *negated), Type::Bool),
                    Type::Text => (Expr::InText(Box::new(checked), texts, *negated), Type::Bool),
                    Type::Bool => {
                        self.error(operand.span, "IN tests a number or text, not a condition");
                        return None;
                    }
                }
            }
            ExprKind::Call { name, name_span, args, star } => {
                return self.call(name, *name_span, args, *star, expr.span, place)
            }
        })
    }

    fn binary(&mut self, op: BinaryOp, left: &ast::Expr, right: &ast::Expr, place: Place) -> Option<(Expr, Type)> {
        let l = self.expr(left, place);
        let r = self.expr(right, place);
        let ((a, ta), (b, tb)) = (l?, r?);
        let mismatch = |checker: &mut Checker, wanted: Type| {
            for (ty, side) in [(ta, left), (tb, right)] {
                if ty != wanted {
                    checker.error(
                        side.span,
                        format!("`{}` needs {} on both sides, this is {}", op.symbol(), wanted.name(), ty.name()),
                    );
                }
            }
        };
        let (boxed_a, boxed_b) = (Box::new(a), Box::new(b));
        Some(match op {
            BinaryOp::And | BinaryOp::Or => {
                if ta != Type::Bool || tb != Type::Bool {
                    mismatch(self, Type::Bool);
                    return None;
                }
                let expr = if op == BinaryOp::And { Expr::And(boxed_a, boxed_b) } else { Expr::Or(boxed_a, boxed_b) };
                (expr, Type::Bool)
            }
            BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul | BinaryOp::Div | BinaryOp::Rem => {
                if ta != Type::Number || tb != Type::Number {
                    mismatch(self, Type::Number);
                    return None;
                }
                let op = match op {
                    BinaryOp::Add => ArithOp::Add,
                    BinaryOp::Sub => ArithOp::Sub,
                    BinaryOp::Mul => ArithOp::Mul,
                    BinaryOp::Div => ArithOp::Div,
                    _ => ArithOp::Rem,
                };
                (fold(Expr::Arith(op, boxed_a, boxed_b)), Type::Number)
            }
            _ => {
                let cmp = match op {
                    BinaryOp::Eq => CmpOp::Eq,
                    BinaryOp::NotEq => CmpOp::NotEq,
                    BinaryOp::Lt => CmpOp::Lt,
                    BinaryOp::LtEq => CmpOp::LtEq,
                    BinaryOp::Gt => CmpOp::Gt,
                    _ => CmpOp::GtEq,
                };
                if ta != tb {
                    self.error(left.span.to(right.span), format!("cannot compare {} with {}", ta.name(), tb.name()));
                    return None;
                }
                match ta {
                    Type::Number => (Expr::CompareNumbers(cmp, boxed_a, boxed_b), Type::Bool),
                    Type::Text if matches!(cmp, CmpOp::Eq | CmpOp::NotEq) => {
                        (Expr::CompareText(cmp == CmpOp::Eq, boxed_a, boxed_b), Type::Bool)
                    }
                    Type::Text => {
                        self.error(
                            left.span.to(right.span),
                            format!("text compares with = and != only, not `{}`", op.symbol()),
                        );
                        return None;
                    }
                    Type::Bool => {
                        self.error(
                            left.span.to(right.span),
                            "conditions combine with AND, OR and NOT, not comparisons",
                        );
                        return None;
                    }
                }
            }
        })
    }

    fn call(
        &mut self,
        name: &str,
        name_span: Span,
        args: &[ast::Expr],
        star: bool,
        span: Span,
        place: Place,
    ) -> Option<(Expr, Type)> {
        if let Some(func) = Func::from_name(name) {
            if star || args.len() != 1 {
                self.error(span, format!("{name}() takes one argument"));
                return None;
            }
            let operand = self.expect(&args[0], place, Type::Number, &format!("{name}()"))?;
            return Some((fold(Expr::Call(func, Box::new(operand))), Type::Number));
        }
        let Some(mut kind) = AggregateKind::from_name(name) else {
            self.error(
                name_span,
                format!(
                    "unknown function `{name}`: aggregates are count, sum, avg, min, max, stddev, stddev_samp, first, \
                     last, prev, perc, trend; scalar functions are abs, sqrt, ln, exp, floor, ceil, round"
                ),
            );
            return None;
        };
        match place {
            Place::Where => {
                self.error(
                    name_span,
                    format!("aggregate `{name}` is not allowed in WHERE: WHERE picks events before they enter the window; use HAVING"),
                );
                return None;
            }
            Place::Argument => {
                self.error(
                    name_span,
                    format!("aggregate `{name}` inside another aggregate: aggregates take per-event values"),
                );
                return None;
            }
            Place::Output => {}
        }
        let mut offset = 0;
        let operand = match (kind, star, args) {
            (AggregateKind::Count, true, []) => {
                kind = AggregateKind::CountAll;
                None
            }
            (_, true, _) => {
                self.error(span, format!("only count takes `*`: {name}(*) is not defined"));
                return None;
            }
            (AggregateKind::Prev, false, [n, operand]) => {
                match n.kind {
                    ExprKind::Number(value) if value >= 0.0 && value.fract() == 0.0 && value < 1e6 => {
                        offset = value as u32
                    }
                    _ => {
                        self.error(
                            n.span,
                            "prev's first argument is how many events back: a whole number literal, 0 or more",
                        );
                        return None;
                    }
                }
                Some(operand)
            }
            (AggregateKind::Prev, false, _) => {
                self.error(span, "prev takes two arguments: prev(n, expression), n events back in the window");
                return None;
            }
            (_, false, [operand]) => Some(operand),
            _ => {
                self.error(span, format!("{name}() takes one argument"));
                return None;
            }
        };
        let arg = match operand {
            Some(operand) => {
                let checked = self.expect(operand, Place::Argument, Type::Number, &format!("{name}()"))?;
                match self.args.iter().position(|existing| *existing == checked) {
                    Some(at) => at,
                    None => {
                        self.args.push(checked);
                        self.args.len() - 1
                    }
                }
            }
            None => 0,
        };
        let aggregate = Aggregate { kind, arg, offset };
        let index = match self.aggregates.iter().position(|existing| *existing == aggregate) {
            Some(at) => at,
            None => {
                self.aggregates.push(aggregate);
                self.aggregates.len() - 1
            }
        };
        Some((Expr::Aggregate(index), Type::Number))
    }
}

/// Top-level AND operands.
fn split_and<'a>(expr: &'a ast::Expr, out: &mut Vec<&'a ast::Expr>) {
    match &expr.kind {
        ExprKind::Binary(BinaryOp::And, left, right) => {
            split_and(left, out);
            split_and(right, out);
        }
        _ => out.push(expr),
    }
}

fn conjunction(parts: Vec<Expr>) -> Option<Expr> {
    parts.into_iter().reduce(|a, b| Expr::And(Box::new(a), Box::new(b)))
}

/// Computes arithmetic on constants once, at check time.
fn fold(expr: Expr) -> Expr {
    let row = crate::plan::Row { symbol: "", price: f64::NAN, aggregates: &[] };
    let constant = match &expr {
        Expr::Neg(e) | Expr::Call(_, e) => matches!(**e, Expr::Number(_)),
        Expr::Arith(_, a, b) => matches!(**a, Expr::Number(_)) && matches!(**b, Expr::Number(_)),
        _ => false,
    };
    if constant {
        Expr::Number(expr.number(&row))
    } else {
        expr
    }
}
