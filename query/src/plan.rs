//! What a checked query compiles to: typed expressions over the event and over the
//! query's aggregates, the window, and which per-partition state the engine must keep.
//! Engines execute plans; two plans that compare equal compute the same thing, which is how
//! a redeployed, unchanged query keeps its state.

/// A checked rules file.
#[derive(Clone, Debug, PartialEq)]
pub struct RuleSet {
    /// The queries, in file order; an output names its query by its index here.
    pub queries: Vec<Query>,
}

impl RuleSet {
    /// The queries' names, in order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.queries.iter().map(|q| q.name.as_str())
    }
}

/// The window of a query, per partition (symbol).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Window {
    /// The last n events; without RETAIN a query sees each event alone (n = 1).
    Events(u64),
    /// Events whose event time lies in `(ts - length, ts]`; evaluated on every event.
    Time(u64),
    /// Non-overlapping windows `[k length, (k+1) length)` of event time; evaluated once per
    /// window, when the first event of a later window arrives.
    Tumbling(u64),
}

/// The aggregate functions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AggregateKind {
    /// `count(*)`: events in the window.
    CountAll,
    /// `count(x)`: non-null values in the window.
    Count,
    /// `sum(x)`.
    Sum,
    /// `avg(x)`: the mean.
    Avg,
    /// `min(x)`.
    Min,
    /// `max(x)`.
    Max,
    /// `stddev`, `stddev_pop`: population standard deviation.
    StddevPop,
    /// `stddev_samp`: sample standard deviation (n - 1).
    StddevSamp,
    /// `first(x)`: the oldest value in the window.
    First,
    /// `last(x)`: the latest value.
    Last,
    /// `prev(n, x)`: the value n events before the latest one in the window.
    Prev,
    /// `perc(x)`: `(last - first) / first * 100` over the window.
    Perc,
    /// `trend(x)`: consecutive rises of x ending at the latest event (a property of the
    /// partition's sequence, not bounded by the window).
    Trend,
}

impl AggregateKind {
    /// The function's name in the language.
    pub fn from_name(name: &str) -> Option<AggregateKind> {
        use AggregateKind::*;
        Some(match name {
            "count" => Count,
            "sum" => Sum,
            "avg" => Avg,
            "min" => Min,
            "max" => Max,
            "stddev" | "stddev_pop" => StddevPop,
            "stddev_samp" => StddevSamp,
            "first" => First,
            "last" => Last,
            "prev" => Prev,
            "perc" => Perc,
            "trend" => Trend,
            _ => return None,
        })
    }

    /// Whether computing it needs the summed moments of its argument over the window.
    pub fn uses_moments(self) -> bool {
        use AggregateKind::*;
        matches!(self, Count | Sum | Avg | StddevPop | StddevSamp)
    }
}

/// One aggregate a query computes, over one of the query's arguments.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Aggregate {
    /// Which function.
    pub kind: AggregateKind,
    /// Index into [`Query::args`]; unused for `count(*)`.
    pub arg: usize,
    /// `prev`'s n.
    pub offset: u32,
}

/// One checked query.
#[derive(Clone, Debug, PartialEq)]
pub struct Query {
    /// The `@name`, which outputs and reports carry.
    pub name: String,
    /// The window kept per symbol.
    pub window: Window,
    /// The part of WHERE that depends on the symbol alone: decided once per symbol, so the
    /// query is attached only to the symbols it can match (filter indexing).
    pub symbol_filter: Option<Expr>,
    /// The rest of WHERE, decided per event before the event enters the window.
    pub event_filter: Option<Expr>,
    /// Distinct per-event values the aggregates take (e.g. `price`).
    pub args: Vec<Expr>,
    /// The aggregates, each over one of `args`; expressions refer to them by index.
    pub aggregates: Vec<Aggregate>,
    /// The HAVING condition.
    pub having: Option<Expr>,
    /// The output's price and value columns.
    pub price: Expr,
    /// The output's value column (see `price`).
    pub value: Expr,
}

impl Query {
    /// Whether the query emits only when a condition holds (HAVING, or WHERE on the event);
    /// `--csv alerts` writes these and leaves out queries that emit on every event.
    pub fn is_alert(&self) -> bool {
        self.having.is_some() || self.event_filter.is_some()
    }
}

/// An arithmetic operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArithOp {
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

/// A comparison of numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CmpOp {
    /// `=`.
    Eq,
    /// `!=`.
    NotEq,
    /// `<`.
    Lt,
    /// `<=`.
    LtEq,
    /// `>`.
    Gt,
    /// `>=`.
    GtEq,
}

/// A function of one number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Func {
    /// `abs(x)`.
    Abs,
    /// `sqrt(x)`.
    Sqrt,
    /// `ln(x)`, the natural logarithm.
    Ln,
    /// `exp(x)`.
    Exp,
    /// `floor(x)`.
    Floor,
    /// `ceil(x)`.
    Ceil,
    /// `round(x)`, half away from zero.
    Round,
}

impl Func {
    /// The function of this name in the language, if there is one.
    pub fn from_name(name: &str) -> Option<Func> {
        Some(match name {
            "abs" => Func::Abs,
            "sqrt" => Func::Sqrt,
            "ln" => Func::Ln,
            "exp" => Func::Exp,
            "floor" => Func::Floor,
            "ceil" => Func::Ceil,
            "round" => Func::Round,
            _ => return None,
        })
    }

    fn apply(self, x: f64) -> f64 {
        match self {
            Func::Abs => x.abs(),
            Func::Sqrt => x.sqrt(),
            Func::Ln => x.ln(),
            Func::Exp => x.exp(),
            Func::Floor => x.floor(),
            Func::Ceil => x.ceil(),
            Func::Round => x.round(),
        }
    }
}

/// A typed expression. Numbers are f64 with NaN as SQL's null; conditions are three-valued
/// (`None` is unknown), so a comparison with a null neither fires nor, negated, fires.
#[derive(Clone, Debug, PartialEq)]
pub enum Expr {
    /// A number constant.
    Number(f64),
    /// A text constant.
    Text(Box<str>),
    /// A condition constant.
    Bool(bool),
    /// The event's price.
    Price,
    /// The event's symbol.
    Symbol,
    /// The value of the query's aggregate with this index.
    Aggregate(usize),
    /// `-x`.
    Neg(Box<Expr>),
    /// `NOT c`.
    Not(Box<Expr>),
    /// Arithmetic on two numbers.
    Arith(ArithOp, Box<Expr>, Box<Expr>),
    /// A comparison of two numbers.
    CompareNumbers(CmpOp, Box<Expr>, Box<Expr>),
    /// `=` (true) or `!=` (false) on text.
    CompareText(bool, Box<Expr>, Box<Expr>),
    /// `a AND b`.
    And(Box<Expr>, Box<Expr>),
    /// `a OR b`.
    Or(Box<Expr>, Box<Expr>),
    /// `x [NOT] IN (numbers)`: the list, and true for `NOT IN`.
    InNumbers(Box<Expr>, Vec<f64>, bool),
    /// `x [NOT] IN (texts)`: the list, and true for `NOT IN`.
    InText(Box<Expr>, Vec<Box<str>>, bool),
    /// A function applied to a number.
    Call(Func, Box<Expr>),
}

/// What an expression is evaluated against: the current event (for a tumbling window, the
/// window's last event) and the query's aggregates.
#[derive(Clone, Copy, Debug)]
pub struct Row<'a> {
    /// The event's symbol.
    pub symbol: &'a str,
    /// The event's price.
    pub price: f64,
    /// The query's aggregates, by index ([`Expr::Aggregate`]).
    pub aggregates: &'a [f64],
}

impl Expr {
    /// A numeric expression's value (NaN for null).
    pub fn number(&self, row: &Row<'_>) -> f64 {
        match self {
            Expr::Number(value) => *value,
            Expr::Price => row.price,
            Expr::Aggregate(index) => row.aggregates[*index],
            Expr::Neg(operand) => -operand.number(row),
            Expr::Arith(op, left, right) => {
                let (a, b) = (left.number(row), right.number(row));
                match op {
                    ArithOp::Add => a + b,
                    ArithOp::Sub => a - b,
                    ArithOp::Mul => a * b,
                    ArithOp::Div => a / b,
                    ArithOp::Rem => a % b,
                }
            }
            Expr::Call(func, operand) => func.apply(operand.number(row)),
            _ => f64::NAN,
        }
    }

    /// A text expression's value.
    pub fn text<'a>(&'a self, row: &Row<'a>) -> &'a str {
        match self {
            Expr::Text(text) => text,
            Expr::Symbol => row.symbol,
            _ => "",
        }
    }

    /// A condition's value: true, false or unknown (`None`, from a null).
    pub fn truth(&self, row: &Row<'_>) -> Option<bool> {
        match self {
            Expr::Bool(value) => Some(*value),
            Expr::Not(operand) => operand.truth(row).map(|v| !v),
            Expr::And(left, right) => match (left.truth(row), right.truth(row)) {
                (Some(false), _) | (_, Some(false)) => Some(false),
                (Some(true), Some(true)) => Some(true),
                _ => None,
            },
            Expr::Or(left, right) => match left.truth(row) {
                Some(true) => Some(true),
                first => match (first, right.truth(row)) {
                    (_, Some(true)) => Some(true),
                    (Some(false), Some(false)) => Some(false),
                    _ => None,
                },
            },
            Expr::CompareNumbers(op, left, right) => {
                let (a, b) = (left.number(row), right.number(row));
                if a.is_nan() || b.is_nan() {
                    return None;
                }
                Some(match op {
                    CmpOp::Eq => a == b,
                    CmpOp::NotEq => a != b,
                    CmpOp::Lt => a < b,
                    CmpOp::LtEq => a <= b,
                    CmpOp::Gt => a > b,
                    CmpOp::GtEq => a >= b,
                })
            }
            Expr::CompareText(equal, left, right) => Some((left.text(row) == right.text(row)) == *equal),
            Expr::InNumbers(operand, list, negated) => {
                let value = operand.number(row);
                if value.is_nan() {
                    return None;
                }
                Some(list.contains(&value) != *negated)
            }
            Expr::InText(operand, list, negated) => {
                let value = operand.text(row);
                Some(list.iter().any(|item| &**item == value) != *negated)
            }
            _ => None,
        }
    }

    /// Whether the expression reads the event's price or an aggregate (anything beyond the
    /// symbol and constants).
    pub fn depends_on_event(&self) -> bool {
        match self {
            Expr::Number(_) | Expr::Text(_) | Expr::Bool(_) | Expr::Symbol => false,
            Expr::Price | Expr::Aggregate(_) => true,
            Expr::Neg(e) | Expr::Not(e) | Expr::Call(_, e) | Expr::InNumbers(e, ..) | Expr::InText(e, ..) => {
                e.depends_on_event()
            }
            Expr::Arith(_, a, b)
            | Expr::CompareNumbers(_, a, b)
            | Expr::CompareText(_, a, b)
            | Expr::And(a, b)
            | Expr::Or(a, b) => a.depends_on_event() || b.depends_on_event(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(price: f64) -> Row<'static> {
        Row { symbol: "S1", price, aggregates: &[] }
    }

    #[test]
    fn nulls_make_conditions_unknown_three_valued() {
        let gt = |a: f64| Expr::CompareNumbers(CmpOp::Gt, Box::new(Expr::Number(a)), Box::new(Expr::Number(1.0)));
        let null = gt(f64::NAN);
        assert_eq!(null.truth(&row(1.0)), None);
        assert_eq!(Expr::Not(Box::new(null.clone())).truth(&row(1.0)), None);
        assert_eq!(Expr::Or(Box::new(null.clone()), Box::new(gt(2.0))).truth(&row(1.0)), Some(true));
        assert_eq!(Expr::And(Box::new(null.clone()), Box::new(gt(0.0))).truth(&row(1.0)), Some(false));
        assert_eq!(Expr::Or(Box::new(null), Box::new(gt(0.0))).truth(&row(1.0)), None);
    }
}
