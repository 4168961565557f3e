//! A query's conditions and output columns, lowered once more for the per-event loop: the
//! shapes rules are almost always written in (an aggregate compared with a constant, ORed or
//! ANDed; a column that is the price or one aggregate) run as flat loops without walking an
//! expression tree; anything else falls back to the plan's evaluator.

use cep_query::plan::{CmpOp, Expr, Row};

/// An aggregate compared with a constant.
#[derive(Clone, Copy, Debug)]
pub struct Comparison {
    aggregate: usize,
    op: CmpOp,
    constant: f64,
}

impl Comparison {
    /// Whether it holds; a null (NaN) aggregate never does (unknown).
    #[inline(always)]
    fn holds(self, aggregates: &[f64]) -> bool {
        let a = aggregates[self.aggregate];
        let b = self.constant;
        match self.op {
            CmpOp::Eq => a == b,
            CmpOp::NotEq => a != b && !a.is_nan(),
            CmpOp::Lt => a < b,
            CmpOp::LtEq => a <= b,
            CmpOp::Gt => a > b,
            CmpOp::GtEq => a >= b,
        }
    }

    /// `aggregate op constant` (or the mirror image), if the expression is that.
    fn of(expr: &Expr) -> Option<Comparison> {
        let Expr::CompareNumbers(op, left, right) = expr else { return None };
        match (&**left, &**right) {
            (Expr::Aggregate(aggregate), Expr::Number(constant)) => {
                Some(Comparison { aggregate: *aggregate, op: *op, constant: *constant })
            }
            (Expr::Number(constant), Expr::Aggregate(aggregate)) => {
                let op = match op {
                    CmpOp::Lt => CmpOp::Gt,
                    CmpOp::LtEq => CmpOp::GtEq,
                    CmpOp::Gt => CmpOp::Lt,
                    CmpOp::GtEq => CmpOp::LtEq,
                    same => *same,
                };
                Some(Comparison { aggregate: *aggregate, op, constant: *constant })
            }
            _ => None,
        }
    }
}

/// A condition that fires only when true (unknown counts as not).
#[derive(Clone, Debug)]
pub enum Condition {
    /// At least one comparison holds.
    AnyOf(Vec<Comparison>),
    /// Every comparison holds.
    AllOf(Vec<Comparison>),
    General(Expr),
}

impl Condition {
    pub fn new(expr: &Expr) -> Condition {
        let mut parts = Vec::new();
        if collect(expr, true, &mut parts) {
            return Condition::AnyOf(parts);
        }
        parts.clear();
        if collect(expr, false, &mut parts) {
            return Condition::AllOf(parts);
        }
        Condition::General(expr.clone())
    }

    #[inline(always)]
    pub fn fires(&self, row: &Row<'_>) -> bool {
        match self {
            Condition::AnyOf(parts) => parts.iter().any(|c| c.holds(row.aggregates)),
            Condition::AllOf(parts) => parts.iter().all(|c| c.holds(row.aggregates)),
            Condition::General(expr) => expr.truth(row) == Some(true),
        }
    }
}

/// Flattens a tree of ORs (`any`) or ANDs of comparisons; false if it is not one.
fn collect(expr: &Expr, any: bool, out: &mut Vec<Comparison>) -> bool {
    match (expr, any) {
        (Expr::Or(a, b), true) | (Expr::And(a, b), false) => collect(a, any, out) && collect(b, any, out),
        _ => Comparison::of(expr).map(|c| out.push(c)).is_some(),
    }
}

/// An output column.
#[derive(Clone, Debug)]
pub enum Column {
    Price,
    Aggregate(usize),
    General(Expr),
}

impl Column {
    pub fn new(expr: &Expr) -> Column {
        match expr {
            Expr::Price => Column::Price,
            Expr::Aggregate(index) => Column::Aggregate(*index),
            other => Column::General(other.clone()),
        }
    }

    #[inline(always)]
    pub fn value(&self, row: &Row<'_>) -> f64 {
        match self {
            Column::Price => row.price,
            Column::Aggregate(index) => row.aggregates[*index],
            Column::General(expr) => expr.number(row),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(text: &str) -> cep_query::Query {
        let source = format!("@name('q') SELECT symbol, price, {text};");
        cep_query::compile(&source, "t").unwrap().queries.remove(0)
    }

    #[test]
    fn common_shapes_are_flattened_and_agree_with_the_plan() {
        let q = plan("perc(price) AS value FROM StockTick PARTITION BY symbol RETAIN 2 EVENTS HAVING perc(price) > 2 OR 2 > perc(price)");
        let having = Condition::new(q.having.as_ref().unwrap());
        assert!(matches!(&having, Condition::AnyOf(parts) if parts.len() == 2));
        let q2 = plan("avg(price) AS value FROM StockTick PARTITION BY symbol RETAIN 2 EVENTS HAVING avg(price) >= 1 AND count(*) != 2");
        let all = Condition::new(q2.having.as_ref().unwrap());
        assert!(matches!(&all, Condition::AllOf(parts) if parts.len() == 2));
        let q3 = plan(
            "avg(price) AS value FROM StockTick PARTITION BY symbol RETAIN 2 EVENTS HAVING avg(price) > 1 OR price < 3",
        );
        assert!(matches!(Condition::new(q3.having.as_ref().unwrap()), Condition::General(_)));
        for aggregates in [[3.0, 2.0], [1.0, 2.0], [f64::NAN, 1.0], [2.0, f64::NAN], [0.5, 5.0]] {
            let row = Row { symbol: "S", price: 2.5, aggregates: &aggregates };
            for (condition, query) in [(&having, &q), (&all, &q2)] {
                let expr = query.having.as_ref().unwrap();
                assert_eq!(condition.fires(&row), expr.truth(&row) == Some(true), "{aggregates:?} {expr:?}");
            }
        }
    }
}
