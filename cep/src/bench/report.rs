//! A self-contained HTML report: tables and inline SVG charts (plotters' SVG backend), no
//! scripts, no network needed to open it.

use plotters::prelude::*;
use std::fmt::Write;

/// One chart's data: named series of (x, y) points.
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// Axis scale.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Scale {
    Linear,
    Log,
}

const COLORS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];

fn axis(value: f64, scale: Scale) -> f64 {
    match scale {
        Scale::Linear => value,
        Scale::Log => value.max(1e-9).log10(),
    }
}

fn label(value: f64, scale: Scale) -> String {
    let v = match scale {
        Scale::Linear => value,
        Scale::Log => 10f64.powf(value),
    };
    if v.abs() >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if v.abs() >= 1e3 {
        format!("{:.1}k", v / 1e3)
    } else if v.abs() >= 10.0 || v == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

fn range(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (mut low, mut high) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in values.filter(|v| v.is_finite()) {
        low = low.min(v);
        high = high.max(v);
    }
    if !low.is_finite() {
        return (0.0, 1.0);
    }
    if high - low < 1e-12 {
        return (low - 0.5, high + 0.5);
    }
    let pad = (high - low) * 0.05;
    (low - pad, high + pad)
}

/// A line chart (points marked) as an SVG string.
pub fn line_chart(
    title: &str,
    x_desc: &str,
    y_desc: &str,
    series: &[Series],
    x_scale: Scale,
    y_scale: Scale,
) -> String {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (760, 420)).into_drawing_area();
        let _ = root.fill(&WHITE);
        let all = || series.iter().flat_map(|s| s.points.iter());
        let (x0, x1) = range(all().map(|p| axis(p.0, x_scale)));
        let (y0, y1) = range(all().map(|p| axis(p.1, y_scale)));
        let y0 = if y_scale == Scale::Linear { y0.min(0.0) } else { y0 };
        let chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(x0..x1, y0..y1);
        let Ok(mut chart) = chart else { return String::new() };
        let _ = chart
            .configure_mesh()
            .x_desc(x_desc)
            .y_desc(y_desc)
            .x_label_formatter(&|v| label(*v, x_scale))
            .y_label_formatter(&|v| label(*v, y_scale))
            .draw();
        for (i, s) in series.iter().enumerate() {
            let color = COLORS[i % COLORS.len()];
            let points: Vec<(f64, f64)> = s.points.iter().map(|p| (axis(p.0, x_scale), axis(p.1, y_scale))).collect();
            if let Ok(drawn) = chart.draw_series(LineSeries::new(points.clone(), color.stroke_width(2))) {
                drawn.label(s.name.clone()).legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], color));
            }
            let _ = chart.draw_series(points.into_iter().map(|p| Circle::new(p, 3, color.filled())));
        }
        if series.len() > 1 {
            let _ = chart.configure_series_labels().border_style(BLACK).background_style(WHITE.mix(0.8)).draw();
        }
        let _ = root.present();
    }
    svg
}

/// A bar chart of named values as an SVG string.
pub fn bar_chart(title: &str, y_desc: &str, bars: &[(String, f64)]) -> String {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (760, 380)).into_drawing_area();
        let _ = root.fill(&WHITE);
        let top = bars.iter().map(|b| b.1).fold(0.0, f64::max).max(1e-9) * 1.1;
        let chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d((0..bars.len()).into_segmented(), 0f64..top);
        let Ok(mut chart) = chart else { return String::new() };
        let _ = chart
            .configure_mesh()
            .disable_x_mesh()
            .y_desc(y_desc)
            .y_label_formatter(&|v| label(*v, Scale::Linear))
            .x_label_formatter(&|segment| match segment {
                SegmentValue::CenterOf(i) => bars.get(*i).map(|b| b.0.clone()).unwrap_or_default(),
                _ => String::new(),
            })
            .draw();
        let _ = chart.draw_series(bars.iter().enumerate().map(|(i, (_, value))| {
            let mut bar = Rectangle::new(
                [(SegmentValue::Exact(i), 0.0), (SegmentValue::Exact(i + 1), *value)],
                COLORS[0].filled(),
            );
            bar.set_margin(0, 0, 12, 12);
            bar
        }));
        let _ = root.present();
    }
    svg
}

/// An HTML table.
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut html = String::from("<table><thead><tr>");
    for h in headers {
        let _ = write!(html, "<th>{}</th>", escape(h));
    }
    html.push_str("</tr></thead><tbody>");
    for row in rows {
        html.push_str("<tr>");
        for cell in row {
            let _ = write!(html, "<td>{}</td>", escape(cell));
        }
        html.push_str("</tr>");
    }
    html.push_str("</tbody></table>");
    html
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// A report page: a title, notes, then sections of HTML (tables, charts).
pub struct Report {
    title: String,
    notes: Vec<String>,
    sections: Vec<(String, String)>,
}

impl Report {
    pub fn new(title: &str) -> Self {
        Report { title: title.to_string(), notes: Vec::new(), sections: Vec::new() }
    }

    pub fn note(&mut self, text: &str) -> &mut Self {
        self.notes.push(text.to_string());
        self
    }

    pub fn section(&mut self, heading: &str, html: String) -> &mut Self {
        self.sections.push((heading.to_string(), html));
        self
    }

    pub fn to_html(&self) -> String {
        let mut html = String::new();
        let _ = write!(
            html,
            "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>{0}</title><style>\
             body{{font-family:sans-serif;margin:2em;max-width:1100px}}\
             table{{border-collapse:collapse;margin:1em 0}}td,th{{border:1px solid #ccc;padding:4px 8px;text-align:right}}\
             th{{background:#f3f3f3}}svg{{display:block;margin:1em 0}}</style></head><body><h1>{0}</h1>",
            escape(&self.title)
        );
        for note in &self.notes {
            let _ = write!(html, "<p>{}</p>", escape(note));
        }
        for (heading, body) in &self.sections {
            let _ = write!(html, "<h2>{}</h2>{body}", escape(heading));
        }
        html.push_str("</body></html>\n");
        html
    }

    pub fn write(&self, dir: &std::path::Path) -> anyhow::Result<()> {
        std::fs::write(dir.join("report.html"), self.to_html())?;
        Ok(())
    }
}

fn read_csv(path: &std::path::Path) -> Vec<Vec<f64>> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .skip(1)
        .map(|line| line.split(',').map(|f| f.parse().unwrap_or(f64::NAN)).collect())
        .collect()
}

/// The latency charts of one pipeline run, from its results folder: the end-to-end histogram
/// on a linear and on a log scale (the Oracle white paper's figures 8 and 9), the percentile
/// spectrum, and latency over time.
pub fn pipeline_charts(run: &std::path::Path, title: &str) -> Vec<(String, String)> {
    let buckets: Vec<(f64, f64)> =
        read_csv(&run.join("latency_histogram.csv")).iter().filter(|r| r.len() == 2).map(|r| (r[0], r[1])).collect();
    let nonzero: Vec<(f64, f64)> = buckets.iter().copied().filter(|b| b.1 > 0.0).collect();
    let spectrum: Vec<(f64, f64)> = read_csv(&run.join("percentiles.csv"))
        .iter()
        .filter(|r| r.len() == 3 && r[0] < 100.0)
        // x = 1 / (1 - percentile): the usual HdrHistogram plot, spreading the tail.
        .map(|r| (1.0 / (1.0 - r[0] / 100.0), r[1]))
        .collect();
    let intervals = read_csv(&run.join("intervals.csv"));
    let over_time = |column: usize| -> Vec<(f64, f64)> {
        intervals.iter().filter(|r| r.len() == 7).map(|r| (r[0], r[column])).collect()
    };
    let single = |name: &str, points: Vec<(f64, f64)>| vec![Series { name: name.to_string(), points }];
    vec![
        (
            format!("{title}: end-to-end latency histogram (linear)"),
            line_chart(
                "latency histogram",
                "latency (us)",
                "outputs",
                &single("count", nonzero.clone()),
                Scale::Linear,
                Scale::Linear,
            ),
        ),
        (
            format!("{title}: end-to-end latency histogram (log)"),
            line_chart(
                "latency histogram",
                "latency (us)",
                "outputs",
                &single("count", nonzero),
                Scale::Log,
                Scale::Log,
            ),
        ),
        (
            format!("{title}: percentile spectrum"),
            line_chart(
                "percentile spectrum",
                "1/(1-percentile): 10 = p90, 100 = p99, 1000 = p99.9",
                "latency (us)",
                &single("latency", spectrum),
                Scale::Log,
                Scale::Log,
            ),
        ),
        (
            format!("{title}: latency over time"),
            line_chart(
                "latency per second",
                "seconds since start",
                "latency (us)",
                &[
                    Series { name: "p50".into(), points: over_time(3) },
                    Series { name: "p99".into(), points: over_time(4) },
                    Series { name: "max".into(), points: over_time(6) },
                ],
                Scale::Linear,
                Scale::Log,
            ),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charts_are_svg_and_the_page_holds_them() {
        let line = line_chart(
            "t",
            "x",
            "y",
            &[Series { name: "a".into(), points: vec![(1.0, 10.0), (10.0, 1000.0)] }],
            Scale::Log,
            Scale::Log,
        );
        assert!(line.starts_with("<svg") && line.contains("<polyline"), "{}", &line[..100.min(line.len())]);
        let bars = bar_chart("b", "ev/s", &[("one".into(), 3.0), ("two".into(), 5.0)]);
        assert!(bars.contains("<rect") && bars.contains(">\none\n<"), "{bars}");
        let mut report = Report::new("R & D");
        report.note("latency from the intended send time").section("chart", line);
        let html = report.to_html();
        assert!(html.contains("<h1>R &amp; D</h1>") && html.contains("<svg") && html.ends_with("</html>\n"));
    }
}
