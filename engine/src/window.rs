//! Incremental, numerically stable moments of a sliding window (count, sum, mean, population
//! and sample standard deviation), O(1) amortised per value.
//!
//! Sums are kept of deviations from an anchor close to the window's mean, so the
//! `E[x^2] - E[x]^2` subtraction does not cancel catastrophically. Adding and removing values
//! leaves rounding in the sums, at most a few ulps of the squared deviations that passed
//! through them; the sums are rebuilt exactly (passes over the window, re-anchored at the
//! value nearest the mean) when that rounding could reach 1e-10 of the variance: after very
//! many removals, or at once when values far from the rest leave (a window of equal prices
//! then has a stddev of exactly 0, not 1e-9). A rebuild resets the account, so windows of
//! (nearly) equal values do not rebuild again until different values have come and gone:
//! O(1) amortised.

use crate::handoff::{Reader, StateError, Writer};

/// Sums of a window's non-null values, kept as deviations from an anchor near their mean.
/// The window's owner stores the values and hands them back for [`Moments::rebuild`].
#[derive(Clone, Debug, Default)]
#[repr(C)]
pub struct Moments {
    /// Non-null values counted (u32 keeps the state small; no window holds 4 billion).
    pub n: u32,
    /// The squared deviations of the values removed since the last rebuild, summed: a bound
    /// on the rounding left in the sums, not a figure to compute with (f32 keeps the state in
    /// 32 bytes, a time window's in one cache line).
    removed_sq: f32,
    anchor: f64,
    sum: f64,
    sum_sq: f64,
}

impl Moments {
    /// Adds a value (NaN, SQL's null, is not counted).
    #[inline]
    pub fn add(&mut self, value: f64) {
        if value.is_nan() {
            return;
        }
        if self.n == 0 {
            self.anchor = value;
            self.sum = 0.0;
            self.sum_sq = 0.0;
            self.removed_sq = 0.0;
        }
        self.n += 1;
        let d = value - self.anchor;
        self.sum += d;
        self.sum_sq += d * d;
    }

    /// Removes a value that was added (NaN is ignored, as in [`Self::add`]).
    #[inline]
    pub fn remove(&mut self, value: f64) {
        if value.is_nan() {
            return;
        }
        self.n -= 1;
        let d = value - self.anchor;
        self.sum -= d;
        self.sum_sq -= d * d;
        // Never 0 after a removal, even of a value equal to the anchor: the anchor may have
        // left, and the others' deviations from it cancel in the variance.
        self.removed_sq = (self.removed_sq as f64 + d * d).clamp(f32::MIN_POSITIVE as f64, f32::MAX as f64) as f32;
    }

    /// Whether [`Self::rebuild`] from the window's values is due: the rounding the sums may
    /// hold (a few ulps of what was removed since the last rebuild and of what is there) could
    /// reach 1e-10 of the variance (`sum_sq n - sum^2` is the variance times n^2). Nothing
    /// removed, nothing to fix: until then the anchor is one of the window's own values and
    /// nothing cancelled.
    #[inline]
    pub fn needs_rebuild(&self) -> bool {
        let n = self.n as f64;
        let spread = self.sum_sq * n - self.sum * self.sum;
        // Sums of exact zeros (equal values, one of them the anchor) hold no rounding.
        self.removed_sq > 0.0
            && self.sum_sq > 0.0
            && spread * 1e-10 < f64::EPSILON * (2.0 * self.removed_sq as f64 + self.sum_sq) * n
    }

    /// Recomputes the sums exactly from the window's values, re-anchored near their mean.
    pub fn rebuild(&mut self, values: impl Iterator<Item = f64> + Clone) {
        let live = values.filter(|v| !v.is_nan());
        let n = self.n as f64;
        let mean = live.clone().sum::<f64>() / n;
        // The value nearest the mean: as good an anchor, and values equal to it deviate by
        // exactly 0 (a mean computed by division may differ from all of them).
        let anchor = live
            .clone()
            .reduce(|best, v| if (v - mean).abs() < (best - mean).abs() { v } else { best })
            .unwrap_or(mean);
        self.anchor = anchor;
        self.sum = 0.0;
        self.sum_sq = 0.0;
        for value in live {
            let d = value - anchor;
            self.sum += d;
            self.sum_sq += d * d;
        }
        self.removed_sq = 0.0;
    }

    /// Sum of the values; NaN (null) when there are none.
    #[inline]
    pub fn sum(&self) -> f64 {
        if self.n == 0 {
            return f64::NAN;
        }
        self.anchor * self.n as f64 + self.sum
    }

    /// Mean of the values; NaN (null) when there are none.
    #[inline]
    pub fn mean(&self) -> f64 {
        if self.n == 0 {
            return f64::NAN;
        }
        self.anchor + self.sum / self.n as f64
    }

    /// Population standard deviation (0 when empty, as the reference rule R3 has it).
    #[inline]
    pub fn stddev_pop(&self) -> f64 {
        let n = self.n as f64;
        if n == 0.0 {
            return 0.0;
        }
        let mean = self.sum / n;
        (self.sum_sq / n - mean * mean).max(0.0).sqrt()
    }

    /// Sample standard deviation; NaN (null) below two values.
    #[inline]
    pub fn stddev_samp(&self) -> f64 {
        if self.n < 2 {
            return f64::NAN;
        }
        let n = self.n as f64;
        ((self.sum_sq - self.sum * self.sum / n) / (n - 1.0)).max(0.0).sqrt()
    }
}

impl Moments {
    /// Writes the sums as they are (the hand-off format, [`crate::handoff`]).
    pub(crate) fn write(&self, w: &mut Writer) {
        w.u32(self.n);
        w.f32(self.removed_sq);
        w.f64(self.anchor);
        w.f64(self.sum);
        w.f64(self.sum_sq);
    }

    /// Reads what [`Self::write`] wrote; the caller checks `n` against the window.
    pub(crate) fn read(r: &mut Reader<'_>) -> Result<Self, StateError> {
        Ok(Moments { n: r.u32()?, removed_sq: r.f32()?, anchor: r.f64()?, sum: r.f64()?, sum_sq: r.f64()? })
    }
}

/// Two-pass population stddev, the reference the window is checked against.
pub fn two_pass_stddev(values: &[f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    (values.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n).sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    /// A long window of equal prices with a rare other one: rebuilt when the other leaves,
    /// not on every value.
    #[test]
    fn nearly_equal_windows_rebuild_rarely() {
        let mut moments = Moments::default();
        let mut window: VecDeque<f64> = VecDeque::new();
        let mut rebuilds = 0;
        for i in 0..200_000u32 {
            let price = if i % 25_000 == 7 { 50_000.01 } else { 50_000.0 };
            if window.len() == 10_000 {
                moments.remove(window.pop_front().unwrap());
            }
            window.push_back(price);
            moments.add(price);
            if moments.needs_rebuild() {
                rebuilds += 1;
                moments.rebuild(window.iter().copied());
            }
            let want = two_pass_stddev(window.make_contiguous());
            assert!(
                (moments.stddev_pop() - want).abs() <= 1e-9 * want.max(1e-6),
                "{i}: {} vs {want}",
                moments.stddev_pop()
            );
        }
        // At most one per rare price leaving the window (8 of them), not one per value.
        assert!(rebuilds <= 16, "{rebuilds} rebuilds");
    }
}
