//! The syntax tree of a rules file, as written (before names and types are checked).

use crate::diagnostic::Span;

/// One query: `@name('x') SELECT ... FROM ... [WHERE] [PARTITION BY] [RETAIN] [HAVING]`.
#[derive(Clone, Debug, PartialEq)]
pub struct Statement {
    pub name: Option<(String, Span)>,
    /// From the first token of the statement to its last.
    pub span: Span,
    pub select: Vec<SelectItem>,
    pub select_span: Span,
    pub from: (String, Span),
    pub filter: Option<Expr>,
    pub partition: Option<(String, Span)>,
    pub retain: Option<(WindowSpec, Span)>,
    pub having: Option<Expr>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum SelectItem {
    /// `*`: the event's symbol and price, the price as the value.
    Star(Span),
    Expr {
        expr: Expr,
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

#[derive(Clone, Debug, PartialEq)]
pub struct Expr {
    pub kind: ExprKind,
    pub span: Span,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnaryOp {
    Neg,
    Not,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinaryOp {
    Or,
    And,
    Eq,
    NotEq,
    Lt,
    LtEq,
    Gt,
    GtEq,
    Add,
    Sub,
    Mul,
    Div,
    Rem,
}

impl BinaryOp {
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

#[derive(Clone, Debug, PartialEq)]
pub enum ExprKind {
    Number(f64),
    Str(String),
    Bool(bool),
    /// A field of the event (`symbol`, `price`).
    Field(String),
    /// `name(args)`; `count(*)` has `star`.
    Call {
        name: String,
        name_span: Span,
        args: Vec<Expr>,
        star: bool,
    },
    Unary(UnaryOp, Box<Expr>),
    Binary(BinaryOp, Box<Expr>, Box<Expr>),
    /// `expr [NOT] IN (a, b, ...)`.
    In {
        expr: Box<Expr>,
        list: Vec<Expr>,
        negated: bool,
    },
}
