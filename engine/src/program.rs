//! A query's conditions and output columns, lowered once more for the per-event loop: the
//! shapes rules are almost always written in (an aggregate compared with a constant, ORed or
//! ANDed; a column that is the price or one aggregate) run as flat loops without walking an
//! expression tree; anything else falls back to the plan's evaluator.

use cep_query::plan::{Aggregate, CmpOp, Expr, Query, Row};

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

impl Comparison {
    /// The closed interval of values for which it holds; None for `!=` (two intervals).
    /// Strict bounds become the neighbouring float, so `x > 2` is `[next_up(2), inf]` and
    /// holds for exactly the same floats.
    fn interval(self) -> Option<(f64, f64)> {
        let c = self.constant;
        Some(match self.op {
            CmpOp::Eq => (c, c),
            CmpOp::NotEq => return None,
            CmpOp::Lt => (f64::NEG_INFINITY, c.next_down()),
            CmpOp::LtEq => (f64::NEG_INFINITY, c),
            CmpOp::Gt => (c.next_up(), f64::INFINITY),
            CmpOp::GtEq => (c, f64::INFINITY),
        })
    }
}

/// A HAVING on a query's only aggregate, as at most two compares of its value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Test {
    /// No HAVING.
    Always,
    /// Fires when `lo <= value <= hi`.
    Between(f64, f64),
    /// Fires when `value <= below || value >= above` (outside a gap, as `perc > 2 OR perc < -2`).
    Beyond(f64, f64),
}

impl Test {
    /// The test equal to a flattened condition, if it is one interval or the outside of one.
    fn of(condition: &Condition) -> Option<Test> {
        let (parts, any) = match condition {
            Condition::AnyOf(parts) => (parts, true),
            Condition::AllOf(parts) => (parts, false),
            Condition::General(_) => return None,
        };
        // Infinite constants (from folding) would meet the infinite ends of the intervals.
        if parts.iter().any(|c| !c.constant.is_finite()) {
            return None;
        }
        let mut intervals = parts.iter().map(|c| c.interval()).collect::<Option<Vec<_>>>()?;
        if !any {
            let lo = intervals.iter().map(|i| i.0).fold(f64::NEG_INFINITY, f64::max);
            let hi = intervals.iter().map(|i| i.1).fold(f64::INFINITY, f64::min);
            return Some(Test::Between(lo, hi));
        }
        intervals.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut union: Vec<(f64, f64)> = Vec::new();
        for (lo, hi) in intervals {
            match union.last_mut() {
                Some(last) if lo <= last.1.next_up() => last.1 = last.1.max(hi),
                _ => union.push((lo, hi)),
            }
        }
        match union[..] {
            [(lo, hi)] => Some(Test::Between(lo, hi)),
            [(f64::NEG_INFINITY, below), (above, f64::INFINITY)] => Some(Test::Beyond(below, above)),
            _ => None,
        }
    }

    /// Whether the aggregate's value passes.
    #[inline(always)]
    pub fn passes(self, value: f64) -> bool {
        match self {
            Test::Always => true,
            Test::Between(lo, hi) => lo <= value && value <= hi,
            Test::Beyond(below, above) => value <= below || value >= above,
        }
    }
}

/// An output column of a [`Single`] query.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Pick {
    /// The event's price.
    Price,
    /// The aggregate's value.
    Value,
}

/// The commonest query shape, run without the general evaluator: one aggregate, a HAVING (if
/// any) that compares it with constants, and output columns that are the price or it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Single {
    /// The one aggregate.
    pub aggregate: Aggregate,
    /// The HAVING, as a test of the aggregate's value.
    pub test: Test,
    /// What the output's price column holds.
    pub price: Pick,
    /// What the output's value column holds.
    pub value: Pick,
}

impl Single {
    /// The query in this shape, if it has it.
    pub fn of(query: &Query) -> Option<Single> {
        let [aggregate] = query.aggregates[..] else { return None };
        let pick = |column: &Expr| match column {
            Expr::Price => Some(Pick::Price),
            Expr::Aggregate(0) => Some(Pick::Value),
            _ => None,
        };
        let test = match &query.having {
            None => Test::Always,
            Some(having) => Test::of(&Condition::new(having))?,
        };
        Some(Single { aggregate, test, price: pick(&query.price)?, value: pick(&query.value)? })
    }

    /// The HAVING and the output, given the aggregate's value.
    #[inline(always)]
    pub fn decide(&self, price: f64, value: f64, emit: impl FnOnce(f64, f64)) {
        if self.test.passes(value) {
            let pick = |column| if column == Pick::Price { price } else { value };
            emit(pick(self.price), pick(self.value));
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
    /// Anything else, through the plan's evaluator.
    General(Expr),
}

impl Condition {
    /// Lowers a condition to the flattest shape that computes it.
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

    /// Whether the condition is true on the row (unknown is not).
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
    /// The event's price.
    Price,
    /// The aggregate with this index.
    Aggregate(usize),
    /// Any other expression, through the plan's evaluator.
    General(Expr),
}

impl Column {
    /// Lowers an output column.
    pub fn new(expr: &Expr) -> Column {
        match expr {
            Expr::Price => Column::Price,
            Expr::Aggregate(index) => Column::Aggregate(*index),
            other => Column::General(other.clone()),
        }
    }

    /// The column's value on the row (NaN for null).
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

    /// Values around every constant a test is built from, and the special ones.
    fn probes(constants: &[f64]) -> Vec<f64> {
        let mut values = vec![f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 0.0, -0.0, f64::MAX, f64::MIN];
        for &c in constants {
            values.extend([c, c.next_up(), c.next_down(), c + 1.0, c - 1.0, -c]);
        }
        values
    }

    #[test]
    fn single_tests_fire_exactly_when_their_conditions_do() {
        let cases = [
            "perc(price) > 2.0 OR perc(price) < -2.0",
            "perc(price) > 2 OR 2 > perc(price)",
            "perc(price) >= 2 OR perc(price) <= -2",
            "perc(price) > 2",
            "perc(price) <= 0",
            "perc(price) = 1.5",
            "perc(price) > -1 AND perc(price) < 3",
            "perc(price) >= 0 AND perc(price) <= 0",
            "perc(price) > 3 AND perc(price) < 1",
            "perc(price) > 1 OR perc(price) > 5",
            "perc(price) < 1 OR perc(price) > 0",
            "perc(price) < 1 OR perc(price) >= 1",
            "perc(price) = 1 OR perc(price) = 2 OR perc(price) > 5",
            "perc(price) != 1",
            "perc(price) > 0 OR perc(price) < 0",
        ];
        let mut lowered = 0;
        for case in cases {
            let q =
                plan(&format!("perc(price) AS value FROM StockTick PARTITION BY symbol RETAIN 2 EVENTS HAVING {case}"));
            let condition = Condition::new(q.having.as_ref().unwrap());
            let Some(single) = Single::of(&q) else { continue };
            lowered += 1;
            let constants: Vec<f64> = match &condition {
                Condition::AnyOf(parts) | Condition::AllOf(parts) => parts.iter().map(|c| c.constant).collect(),
                Condition::General(_) => unreachable!("a general condition is not lowered"),
            };
            for value in probes(&constants) {
                let row = Row { symbol: "S", price: 1.0, aggregates: &[value] };
                assert_eq!(single.test.passes(value), condition.fires(&row), "{case} at {value:e}");
            }
        }
        // All but the three-piece union and `!=`.
        assert_eq!(lowered, cases.len() - 2);
        let reference = crate::reference_rules();
        let tests: Vec<Option<Test>> = reference.queries.iter().map(|q| Single::of(q).map(|s| s.test)).collect();
        assert_eq!(
            tests,
            [
                Some(Test::Beyond((-2.0f64).next_down(), 2.0f64.next_up())),
                Some(Test::Between(2.0f64.next_up(), f64::INFINITY)),
                Some(Test::Always)
            ]
        );
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
