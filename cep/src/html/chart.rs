//! SVG charts for the reports (plotters' SVG backend) with axes people can read:
//! linear axes start at zero, so heights compare; log axes are labelled at decades (1, 10,
//! 100, 1k, or 1 µs, 10 µs, ... 1 ms); counts of things (workers) get whole ticks; the legend
//! sits under the plot, never on the data; every bar carries its name and its value.

use plotters::prelude::*;

/// Line and bar colours (the usual tab10 order: blue, orange, green, red, purple, brown).
pub const COLORS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];

const WIDTH: u32 = 960;
const FONT: &str = "sans-serif";
const LABEL_PX: u32 = 15;
const LEGEND_PX: u32 = 34;

/// Axis scale.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scale {
    Linear,
    Log,
}

/// What an axis's numbers are, which decides its tick labels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    /// A quantity whose unit the axis title names (events/s, outputs, MB/s): 0, 500k, 1M.
    Number,
    /// A whole number of things (workers): whole ticks only, and the axis spans the data.
    Whole,
    /// Microseconds, labelled in µs, ms or s.
    Micros,
    /// x = 1 / (1 - quantile), a percentile spectrum's axis, labelled as percentiles.
    Percentile,
}

/// One axis: its title, scale and unit.
#[derive(Clone, Debug)]
pub struct Axis {
    pub title: String,
    pub scale: Scale,
    pub unit: Unit,
    /// A linear axis starts at zero (heights compare) unless it only places points (x).
    pub zero: bool,
}

impl Axis {
    pub fn linear(title: &str, unit: Unit) -> Self {
        Axis { title: title.to_string(), scale: Scale::Linear, unit, zero: unit != Unit::Whole }
    }

    pub fn log(title: &str, unit: Unit) -> Self {
        Axis { title: title.to_string(), scale: Scale::Log, unit, zero: false }
    }

    /// A linear axis that spans only the data: for an x axis that places points, where no
    /// length is compared (rates asked for, 20k to 80k).
    pub fn spanning_data(mut self) -> Self {
        self.zero = false;
        self
    }

    /// A value's position on the axis (log10 on a log axis; `None` where it cannot be drawn).
    fn position(&self, value: f64) -> Option<f64> {
        let position = match self.scale {
            Scale::Linear => value,
            Scale::Log if value > 0.0 => value.log10(),
            Scale::Log => return None,
        };
        position.is_finite().then_some(position)
    }

    /// The range to draw and its ticks, from the values the axis shows.
    pub fn ticks(&self, values: impl Iterator<Item = f64>) -> Ticks {
        let positions: Vec<f64> = values.filter_map(|v| self.position(v)).collect();
        let low = positions.iter().copied().fold(f64::INFINITY, f64::min);
        let high = positions.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        match self.scale {
            Scale::Log => log_ticks(low, high),
            Scale::Linear if self.unit == Unit::Whole => whole_ticks(low, high),
            Scale::Linear if self.zero => linear_ticks(low, high),
            Scale::Linear => spanning_ticks(low, high),
        }
    }

    /// The label of the tick at axis position `position`.
    pub fn label(&self, position: f64) -> String {
        let value = match self.scale {
            Scale::Linear => position,
            Scale::Log => 10f64.powf(position),
        };
        match self.unit {
            Unit::Number | Unit::Whole => number(value),
            Unit::Micros => micros(value),
            Unit::Percentile if value >= 1.0 => format!("{}%", trim(100.0 * (1.0 - 1.0 / value), 6)),
            Unit::Percentile => String::new(),
        }
    }
}

/// An axis's drawn range and tick positions (log10 of the values on a log axis): labelled
/// `major` ticks and unlabelled `minor` grid lines.
#[derive(Clone, Debug, PartialEq)]
pub struct Ticks {
    pub low: f64,
    pub high: f64,
    pub major: Vec<f64>,
    pub minor: Vec<f64>,
}

/// A plotters coordinate with these ticks: mesh lines and labels exactly where they are.
impl plotters::coord::ranged1d::Ranged for Ticks {
    type FormatOption = plotters::coord::ranged1d::DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        let share = (value - self.low) / (self.high - self.low);
        limit.0 + (share * (limit.1 - limit.0) as f64).round() as i32
    }

    fn key_points<Hint: plotters::coord::ranged1d::KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        if hint.weight().allow_light_points() {
            self.minor.clone()
        } else {
            self.major.clone()
        }
    }

    fn range(&self) -> std::ops::Range<f64> {
        self.low..self.high
    }
}

/// From zero (or the lowest negative value) to the first round step above the highest value.
fn linear_ticks(low: f64, high: f64) -> Ticks {
    let (low, high) = if low.is_finite() { (low.min(0.0), high.max(0.0)) } else { (0.0, 1.0) };
    let high = if high - low < 1e-300 { low + 1.0 } else { high };
    let step = nice_step((high - low) / 5.0, &[1.0, 2.0, 2.5, 5.0]);
    let (first, last) = ((low / step).floor() as i64, (high / step).ceil() as i64);
    let major: Vec<f64> = (first..=last).map(|k| k as f64 * step).collect();
    let minor = (first..last).map(|k| (k as f64 + 0.5) * step).collect();
    Ticks { low: first as f64 * step, high: last as f64 * step, major, minor }
}

/// Round steps over the data's span and a little more, so no point sits on the frame.
fn spanning_ticks(low: f64, high: f64) -> Ticks {
    if !low.is_finite() {
        return linear_ticks(low, high);
    }
    let pad = if high - low > 1e-300 { (high - low) * 0.06 } else { (low.abs() * 0.1).max(1.0) };
    let (low, high) = (low - pad, high + pad);
    let step = nice_step((high - low) / 5.0, &[1.0, 2.0, 2.5, 5.0]);
    let major = ((low / step).ceil() as i64..=(high / step).floor() as i64).map(|k| k as f64 * step).collect();
    Ticks { low, high, major, minor: Vec::new() }
}

/// Whole numbers only, the data's span with half a step either side (1 to 3 workers: 0.5 to 3.5).
fn whole_ticks(low: f64, high: f64) -> Ticks {
    let (low, high) = if low.is_finite() { (low.floor(), high.ceil()) } else { (0.0, 1.0) };
    let step = nice_step((high - low) / 8.0, &[1.0, 2.0, 5.0]).max(1.0);
    let (first, last) = ((low / step).floor() as i64, (high / step).ceil() as i64);
    let major = (first..=last).map(|k| k as f64 * step).collect();
    Ticks { low: first as f64 * step - step / 2.0, high: last as f64 * step + step / 2.0, major, minor: Vec::new() }
}

/// Whole decades around the data; 2 and 5 labelled too when the axis spans two decades or
/// less (so it has at least three labels), 2..9 as grid lines.
fn log_ticks(low: f64, high: f64) -> Ticks {
    let (first, mut last) = if low.is_finite() { (low.floor() as i32, high.ceil() as i32) } else { (0, 1) };
    if last == first {
        last += 1;
    }
    let dense = last - first <= 2;
    let (mut major, mut minor) = (Vec::new(), Vec::new());
    for decade in first..=last {
        major.push(decade as f64);
        if decade == last {
            break;
        }
        for k in 2..=9 {
            let at = decade as f64 + (k as f64).log10();
            if dense && (k == 2 || k == 5) {
                major.push(at);
            } else {
                minor.push(at);
            }
        }
    }
    Ticks { low: first as f64, high: last as f64, major, minor }
}

/// The smallest of `steps` x 10^k that is at least `raw`.
fn nice_step(raw: f64, steps: &[f64]) -> f64 {
    if !(raw.is_finite() && raw > 0.0) {
        return 1.0;
    }
    let magnitude = 10f64.powf(raw.log10().floor());
    steps.iter().map(|s| s * magnitude).find(|s| *s >= raw * (1.0 - 1e-9)).unwrap_or(10.0 * magnitude)
}

/// `value` with at most `decimals` decimals, trailing zeros dropped.
fn trim(value: f64, decimals: usize) -> String {
    let text = format!("{value:.decimals$}");
    let text = if text.contains('.') { text.trim_end_matches('0').trim_end_matches('.') } else { &text };
    if text == "-0" {
        "0".to_string()
    } else {
        text.to_string()
    }
}

/// 0, 0.5, 12, 500, 1k, 2.5k, 1M, 1.5G.
pub fn number(value: f64) -> String {
    let magnitude = value.abs();
    for (scale, suffix) in [(1e9, "G"), (1e6, "M"), (1e3, "k")] {
        if magnitude >= scale * (1.0 - 1e-9) {
            return format!("{}{suffix}", trim(value / scale, 2));
        }
    }
    trim(value, 3)
}

/// 0, 250 µs, 1 ms, 1.5 s.
pub fn micros(value: f64) -> String {
    let magnitude = value.abs();
    if magnitude == 0.0 {
        "0".to_string()
    } else if magnitude >= 1e6 * (1.0 - 1e-9) {
        format!("{} s", number(value / 1e6))
    } else if magnitude >= 1e3 * (1.0 - 1e-9) {
        format!("{} ms", trim(value / 1e3, 2))
    } else if magnitude >= 10.0 {
        format!("{} µs", trim(value, 1))
    } else {
        format!("{} µs", trim(value, 3))
    }
}

/// One line of a line chart.
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

impl Series {
    pub fn new(name: &str, points: Vec<(f64, f64)>) -> Self {
        Series { name: name.to_string(), points }
    }
}

fn text_style(px: u32) -> TextStyle<'static> {
    (FONT, px).into_font().color(&BLACK)
}

/// Text that starts at its anchor and is centred on it vertically.
fn left_middle(px: u32) -> TextStyle<'static> {
    use plotters::style::text_anchor::{HPos, Pos, VPos};
    text_style(px).pos(Pos::new(HPos::Left, VPos::Center))
}

/// Draws a legend as one row of entries (a coloured mark, then the name).
fn legend(area: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>, entries: &[(String, RGBColor, bool)], left: i32) {
    let mut x = left;
    let y = LEGEND_PX as i32 / 2;
    for (name, color, is_line) in entries {
        let color = *color;
        let _ = if *is_line {
            area.draw(&PathElement::new(vec![(x, y), (x + 24, y)], color.stroke_width(3)))
                .and_then(|_| area.draw(&Circle::new((x + 12, y), 4, color.filled())))
        } else {
            area.draw(&Rectangle::new([(x, y - 7), (x + 20, y + 7)], color.filled()))
        };
        let _ = area.draw(&Text::new(name.clone(), (x + 32, y), left_middle(LABEL_PX)));
        // The backend cannot measure text; this is its own estimate, with room to spare.
        x += 32 + (name.chars().count() as f64 * LABEL_PX as f64 * 0.52) as i32 + 24;
    }
}

/// A moment marked across a chart with a dashed vertical line and a short label at its top
/// (a rescale, a failover, a collector restart).
pub struct Mark {
    pub at: f64,
    pub label: String,
}

/// A line chart with its points marked, as an SVG string.
pub fn line_chart(title: &str, x: &Axis, y: &Axis, series: &[Series]) -> String {
    line_chart_marked(title, x, y, series, &[])
}

/// A line chart with moments marked on its x axis ([`Mark`]).
pub fn line_chart_marked(title: &str, x: &Axis, y: &Axis, series: &[Series], marks: &[Mark]) -> String {
    let mut svg = String::new();
    {
        let height = if series.len() > 1 { 440 + LEGEND_PX } else { 440 };
        let root = SVGBackend::with_string(&mut svg, (WIDTH, height)).into_drawing_area();
        let _ = root.fill(&WHITE);
        let (plot, below) = root.split_vertically(440);
        let all = || series.iter().flat_map(|s| s.points.iter());
        let xt = x.ticks(all().map(|p| p.0).chain(marks.iter().map(|m| m.at)));
        let yt = y.ticks(all().map(|p| p.1));
        let (y_low, y_high) = (yt.low, yt.high);
        let chart = ChartBuilder::on(&plot)
            .caption(title, (FONT, 20))
            .margin(14)
            .margin_right(28)
            .x_label_area_size(52)
            .y_label_area_size(84)
            .build_cartesian_2d(xt, yt);
        let Ok(mut chart) = chart else { return String::new() };
        let _ = chart
            .configure_mesh()
            .x_desc(x.title.as_str())
            .y_desc(y.title.as_str())
            .label_style(text_style(LABEL_PX))
            .axis_desc_style(text_style(LABEL_PX + 1))
            .bold_line_style(RGBColor(200, 200, 200))
            .light_line_style(RGBColor(236, 236, 236))
            .x_label_formatter(&|v| x.label(*v))
            .y_label_formatter(&|v| y.label(*v))
            .draw();
        for (i, s) in series.iter().enumerate() {
            let color = COLORS[i % COLORS.len()];
            let points: Vec<(f64, f64)> =
                s.points.iter().filter_map(|p| Some((x.position(p.0)?, y.position(p.1)?))).collect();
            let _ = chart.draw_series(LineSeries::new(points.clone(), color.stroke_width(2)));
            let _ = chart.draw_series(points.into_iter().map(|p| Circle::new(p, 4, color.filled())));
        }
        let grey = RGBColor(90, 90, 90);
        for mark in marks {
            let Some(at) = x.position(mark.at) else { continue };
            let dashes = (0..40).map(|k| y_low + (y_high - y_low) * k as f64 / 40.0);
            let _ = chart.draw_series(
                dashes
                    .step_by(2)
                    .map(|from| PathElement::new(vec![(at, from), (at, from + (y_high - y_low) / 40.0)], grey)),
            );
            let _ = chart.draw_series(std::iter::once(
                EmptyElement::at((at, y_high)) + Text::new(mark.label.clone(), (4, 8), left_middle(LABEL_PX - 2)),
            ));
        }
        if series.len() > 1 {
            let entries: Vec<(String, RGBColor, bool)> =
                series.iter().enumerate().map(|(i, s)| (s.name.clone(), COLORS[i % COLORS.len()], true)).collect();
            legend(&below, &entries, 112);
        }
        let _ = root.present();
    }
    svg
}

/// One bar of a bar chart: its name, its length, its group (the colour, named in the legend)
/// and the text written at its end.
pub struct Bar {
    pub name: String,
    pub value: f64,
    pub group: usize,
    pub text: String,
}

/// Horizontal bars, top to bottom in the given order, each named on the left and with its
/// text at its end, coloured by group (`groups` names them in the legend). On a linear axis
/// bars start at zero; on a log axis (latencies from µs to tens of ms) at the axis's first
/// decade, so a short bar beside a long one still shows.
pub fn bar_chart(title: &str, value_axis: &Axis, bars: &[Bar], groups: &[&str]) -> String {
    let mut svg = String::new();
    {
        let rows = bars.len().max(1);
        let plot_height = 110 + 34 * rows as u32;
        let shown = (0..groups.len()).filter(|i| bars.iter().any(|b| b.group == *i)).count();
        let legend_height = if shown > 1 { LEGEND_PX } else { 0 };
        let root = SVGBackend::with_string(&mut svg, (WIDTH, plot_height + legend_height)).into_drawing_area();
        let _ = root.fill(&WHITE);
        let (plot, below) = root.split_vertically(plot_height);
        let longest = bars.iter().map(|b| b.name.chars().count()).max().unwrap_or(0);
        let name_width = (longest as f64 * LABEL_PX as f64 * 0.55) as u32 + 24;
        // Room on the right for the longest bar's text.
        let widest_text = bars.iter().map(|b| b.text.chars().count()).max().unwrap_or(0) as f64;
        let plot_width = (WIDTH - name_width - 40) as f64;
        let text_share = (widest_text * LABEL_PX as f64 * 0.55 + 16.0) / plot_width;
        let room = 1.0 / (1.0 - text_share.min(0.6));
        let top = bars.iter().map(|b| b.value).fold(0.0, f64::max);
        // Bars start at zero on a linear axis, at the first decade on a log one.
        let (vt, start) = match value_axis.scale {
            Scale::Linear => (value_axis.ticks([0.0, top * room].into_iter()), 0.0),
            Scale::Log => {
                // The text's room is a share of the axis's span in decades, not of the value.
                let lowest = bars.iter().map(|b| b.value).filter(|v| *v > 0.0).fold(f64::INFINITY, f64::min);
                let span = if lowest.is_finite() { top.log10() - lowest.log10().floor() } else { 1.0 };
                let vt = value_axis.ticks([lowest, top * 10f64.powf(span.max(1.0) * (room - 1.0))].into_iter());
                let low = vt.low;
                (vt, low)
            }
        };
        let end = |value: f64| value_axis.position(value).unwrap_or(start).max(start);
        let n = rows as f64;
        let row_of = |position: f64| -> Option<usize> {
            let row = (n - position).floor();
            (row >= 0.0 && row < n).then_some(row as usize)
        };
        let name_ticks: Vec<f64> = (0..rows).map(|i| n - i as f64 - 0.5).collect();
        let chart = ChartBuilder::on(&plot)
            .caption(title, (FONT, 20))
            .margin(14)
            .margin_right(26)
            .x_label_area_size(52)
            .y_label_area_size(name_width)
            .build_cartesian_2d(vt, Ticks { low: 0.0, high: n, major: name_ticks, minor: Vec::new() });
        let Ok(mut chart) = chart else { return String::new() };
        let _ = chart
            .configure_mesh()
            .disable_y_mesh()
            .x_desc(value_axis.title.as_str())
            .label_style(text_style(LABEL_PX))
            .axis_desc_style(text_style(LABEL_PX + 1))
            .bold_line_style(RGBColor(200, 200, 200))
            .light_line_style(RGBColor(236, 236, 236))
            .x_label_formatter(&|v| value_axis.label(*v))
            .y_label_formatter(&|v| row_of(*v).and_then(|i| bars.get(i)).map(|b| b.name.clone()).unwrap_or_default())
            .draw();
        for (i, bar) in bars.iter().enumerate() {
            let color = COLORS[bar.group % COLORS.len()];
            let middle = n - i as f64 - 0.5;
            let _ = chart.draw_series(std::iter::once(Rectangle::new(
                [(start, middle - 0.32), (end(bar.value), middle + 0.32)],
                color.filled(),
            )));
            // The text starts a few pixels after the bar's end.
            let _ = chart.draw_series(std::iter::once(
                EmptyElement::at((end(bar.value), middle)) + Text::new(bar.text.clone(), (6, 0), left_middle(LABEL_PX)),
            ));
        }
        // Only the groups this chart shows, each in the colour it has in every chart.
        let entries: Vec<(String, RGBColor, bool)> = groups
            .iter()
            .enumerate()
            .filter(|(i, _)| bars.iter().any(|b| b.group == *i))
            .map(|(i, g)| (g.to_string(), COLORS[i % COLORS.len()], false))
            .collect();
        if entries.len() > 1 {
            // Under the names and bars both: the bars' names may take half the width.
            legend(&below, &entries, 24);
        }
        let _ = root.present();
    }
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(axis: &Axis, values: &[f64]) -> Vec<String> {
        axis.ticks(values.iter().copied()).major.iter().map(|p| axis.label(*p)).collect()
    }

    #[test]
    fn log_axes_are_labelled_at_decades() {
        let rate = Axis::log("events/s", Unit::Number);
        assert_eq!(labels(&rate, &[3.2, 45_000.0]), ["1", "10", "100", "1k", "10k", "100k"]);
        assert_eq!(labels(&rate, &[2e6, 1.2e8]), ["1M", "10M", "100M", "1G"]);
        let latency = Axis::log("latency", Unit::Micros);
        assert_eq!(
            labels(&latency, &[0.9, 31_000.0]),
            ["0.1 µs", "1 µs", "10 µs", "100 µs", "1 ms", "10 ms", "100 ms"]
        );
        // Two decades or less: 2 and 5 labelled too.
        assert_eq!(labels(&latency, &[600.0, 7000.0]), ["100 µs", "200 µs", "500 µs", "1 ms", "2 ms", "5 ms", "10 ms"]);
        let spectrum = Axis::log("percentile", Unit::Percentile);
        assert_eq!(labels(&spectrum, &[1.0, 2e4]), ["0%", "90%", "99%", "99.9%", "99.99%", "99.999%"]);
    }

    #[test]
    fn linear_axes_start_at_zero_and_counts_of_things_are_whole() {
        let p99 = Axis::linear("p99", Unit::Micros);
        let ticks = p99.ticks([17_465.0, 44_957.0, 32_079.0].into_iter());
        assert_eq!((ticks.low, ticks.high), (0.0, 50_000.0));
        assert_eq!(labels(&p99, &[17_465.0, 44_957.0]), ["0", "10 ms", "20 ms", "30 ms", "40 ms", "50 ms"]);
        let rate = Axis::linear("ticks/s", Unit::Number);
        assert_eq!(labels(&rate, &[3.85e6, 2.75e6]), ["0", "1M", "2M", "3M", "4M"]);
        let workers = Axis::linear("workers", Unit::Whole);
        assert!(!workers.zero);
        let ticks = workers.ticks([1.0, 2.0, 3.0].into_iter());
        assert_eq!((ticks.low, ticks.high, ticks.major), (0.5, 3.5, vec![1.0, 2.0, 3.0]));
        assert_eq!(labels(&workers, &[1.0]), ["1"]);
        assert_eq!(labels(&workers, &[1.0, 16.0]), ["0", "2", "4", "6", "8", "10", "12", "14", "16"]);
    }

    #[test]
    fn an_x_axis_that_places_points_spans_the_data() {
        let rate = Axis::linear("target rate", Unit::Number).spanning_data();
        let ticks = rate.ticks([20_000.0, 40_000.0, 80_000.0].into_iter());
        assert!(ticks.low < 20_000.0 && ticks.low > 15_000.0 && ticks.high > 80_000.0 && ticks.high < 85_000.0);
        assert_eq!(labels(&rate, &[20_000.0, 80_000.0]), ["20k", "40k", "60k", "80k"]);
        assert_eq!(micros(62.655), "62.7 µs");
        assert_eq!(micros(1.25), "1.25 µs");
    }

    #[test]
    fn empty_and_flat_data_still_give_an_axis() {
        assert_eq!(Axis::linear("x", Unit::Number).ticks(std::iter::empty()).major.first(), Some(&0.0));
        assert_eq!(labels(&Axis::log("x", Unit::Number), &[]), ["1", "2", "5", "10"]);
        assert_eq!(labels(&Axis::log("x", Unit::Number), &[100.0, 100.0]), ["100", "200", "500", "1k"]);
        assert_eq!(labels(&Axis::linear("x", Unit::Number), &[0.0]), ["0", "0.2", "0.4", "0.6", "0.8", "1"]);
    }

    #[test]
    fn bars_on_a_log_axis_start_at_its_first_decade() {
        let bars = vec![
            Bar { name: "p50".into(), value: 78.0, group: 0, text: "78 µs".into() },
            Bar { name: "p99".into(), value: 30_000.0, group: 1, text: "30 ms".into() },
        ];
        let svg = bar_chart("latency", &Axis::log("latency", Unit::Micros), &bars, &["p50", "p99"]);
        // Decade labels from 10 µs up, and both bars' texts.
        for label in ["10 µs", "100 µs", "1 ms", "10 ms", "78 µs", "30 ms"] {
            assert!(svg.contains(&format!(">\n{label}\n<")), "{label}");
        }
        assert!(!svg.contains(">\n0\n<"), "a log axis has no zero");
    }

    #[test]
    fn marks_are_drawn_with_their_labels() {
        let svg = line_chart_marked(
            "ticks per second",
            &Axis::linear("seconds", Unit::Number),
            &Axis::linear("ticks/s", Unit::Number),
            &[Series::new("ticks", vec![(1.0, 100.0), (2.0, 120.0), (3.0, 90.0)])],
            &[Mark { at: 2.5, label: "failover worker-1".into() }],
        );
        assert!(svg.contains(">\nfailover worker-1\n<"), "{svg}");
    }

    #[test]
    fn every_bar_is_named_and_carries_its_text() {
        let bars: Vec<Bar> = (0..13)
            .map(|i| Bar { name: format!("rule set {i}"), value: i as f64, group: i % 2, text: format!("{i} ev/s") })
            .collect();
        let svg = bar_chart("t", &Axis::linear("events/s", Unit::Number), &bars, &["compiled", "hand-written"]);
        for i in 0..13 {
            assert_eq!(svg.matches(&format!(">\nrule set {i}\n<")).count(), 1, "rule set {i}");
            assert!(svg.contains(&format!(">\n{i} ev/s\n<")), "{i}");
        }
        assert!(svg.contains(">\ncompiled\n<") && svg.contains(">\nhand-written\n<"));
    }
}
