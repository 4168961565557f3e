//! The syntax tree of a rules file, as written (before names and types are checked).

use crate::diagnostic::Span;

/// One query: `@name('x') SELECT ... FROM ... [WHERE] [PARTITION BY] [RETAIN] [HAVING]`.
#[derive(Clone, Debug, PartialEq)]
pub struct Statement {
    /// `@name('x')`: the name and where it was written; `None` without one.
    pub name: Option<(String, Span)>,
    /// From the first token of the statement to its last.
    pub span: Span,
    /// The SELECT list, in order.
    pub select: Vec<SelectItem>,
    /// From `SELECT` to the end of its list (where errors about the whole list point).
    pub select_span: Span,
    /// The event type after `FROM`.
    pub from: (String, Span),
    /// The WHERE condition.
    pub filter: Option<Expr>,
    /// The field after `PARTITION BY`.
    pub partition: Option<(String, Span)>,
    /// The RETAIN clause.
    pub retain: Option<(WindowSpec, Span)>,
    /// The HAVING condition.
    pub having: Option<Expr>,
}

/// One item of a SELECT list.
#[derive(Clone, Debug, PartialEq)]
pub enum SelectItem {
    /// `*`: the event's symbol and price, the price as the value.
    Star(Span),
    /// An expression, with its `AS` name if it has one.
    Expr {
        /// The expression.
        expr: Expr,
        /// The name after `AS`.
        alias: Option<(String, Span)>,
    },
}

/// A window as written.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum WindowSpec {
    /// `RETAIN n EVENTS`: the last n events of the partition.
    Events(u64),
    /// `RETAIN t`: the events whose event time lies in `(ts - t, ts]` (sliding).
    Time(u64),
    /// `RETAIN TUMBLING t`: consecutive, non-overlapping windows `[k t, (k+1) t)` of event time.
    Tumbling(u64),
}

/// An expression and where it was written.
#[derive(Clone, Debug, PartialEq)]
pub struct Expr {
    /// What it is.
    pub kind: ExprKind,
    /// From its first character to its last.
    pub span: Span,
}

/// A prefix operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnaryOp {
    /// `-x`.
    Neg,
    /// `NOT x`.
    Not,
}

/// An infix operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinaryOp {
    /// `OR`.
    Or,
    /// `AND`.
    And,
    /// `=`.
    Eq,
    /// `!=` (or `<>`).
    NotEq,
    /// `<`.
    Lt,
    /// `<=`.
    LtEq,
    /// `>`.
    Gt,
    /// `>=`.
    GtEq,
    /// `+`.
    Add,
    /// `-`.
    Sub,
    /// `*`.
    Mul,
    /// `/`.
    Div,
    /// `%`.
    Rem,
}

impl BinaryOp {
    /// The operator as written in the language (for error messages).
    pub fn symbol(self) -> &'static str {
        match self {
            BinaryOp::Or => "OR",
            BinaryOp::And => "AND",
            BinaryOp::Eq => "=",
            BinaryOp::NotEq => "!=",
            BinaryOp::Lt => "<",
            BinaryOp::LtEq => "<=",
            BinaryOp::Gt => ">",
            BinaryOp::GtEq => ">=",
            BinaryOp::Add => "+",
            BinaryOp::Sub => "-",
            BinaryOp::Mul => "*",
            BinaryOp::Div => "/",
            BinaryOp::Rem => "%",
        }
    }
}

/// The kinds of expression.
#[derive(Clone, Debug, PartialEq)]
pub enum ExprKind {
    /// A number literal.
    Number(f64),
    /// A string literal (`'IBM'`).
    Str(String),
    /// `TRUE` or `FALSE`.
    Bool(bool),
    /// A field of the event (`symbol`, `price`).
    Field(String),
    /// `name(args)`; `count(*)` has `star`.
    Call {
        /// The function's name, as written.
        name: String,
        /// Where the name was written.
        name_span: Span,
        /// The arguments.
        args: Vec<Expr>,
        /// Whether the argument list was `*`.
        star: bool,
    },
    /// A prefix operator and its operand.
    Unary(UnaryOp, Box<Expr>),
    /// An infix operator and its operands.
    Binary(BinaryOp, Box<Expr>, Box<Expr>),
    /// `expr [NOT] IN (a, b, ...)`.
    In {
        /// The expression tested.
        expr: Box<Expr>,
        /// The values it is compared with.
        list: Vec<Expr>,
        /// `NOT IN`.
        negated: bool,
    },
}
