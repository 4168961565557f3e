//! A self-contained HTML report: notes, tables and inline SVG charts ([`super::chart`]), each
//! chart under a sentence or two saying what it shows and how it was measured; no scripts,
//! no network needed to open it.

use super::chart::{line_chart, Axis, Series, Unit};
use std::fmt::Write;

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
            // Figures align on the right, words on the left.
            let numeric = cell.trim_start_matches(['-', '+']).starts_with(|c: char| c.is_ascii_digit());
            let class = if numeric { " class=\"n\"" } else { "" };
            let _ = write!(html, "<td{class}>{}</td>", escape(cell));
        }
        html.push_str("</tr>");
    }
    html.push_str("</tbody></table>");
    html
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// One part of a page: a heading, what it shows (plain text), then its HTML.
struct Section {
    heading: String,
    about: Option<String>,
    body: String,
}

/// A report page: a title, notes, then sections (tables, charts).
pub struct Report {
    title: String,
    notes: Vec<String>,
    sections: Vec<Section>,
}

impl Report {
    pub fn new(title: &str) -> Self {
        Report { title: title.to_string(), notes: Vec::new(), sections: Vec::new() }
    }

    pub fn note(&mut self, text: &str) -> &mut Self {
        self.notes.push(text.to_string());
        self
    }

    /// A section without a description (a table whose headers say it all).
    pub fn section(&mut self, heading: &str, html: String) -> &mut Self {
        self.sections.push(Section { heading: heading.to_string(), about: None, body: html });
        self
    }

    /// A chart or table with one or two sentences on what it shows and how it was measured.
    pub fn chart(&mut self, heading: &str, about: &str, html: String) -> &mut Self {
        self.sections.push(Section { heading: heading.to_string(), about: Some(about.to_string()), body: html });
        self
    }

    pub fn to_html(&self) -> String {
        let mut html = String::new();
        let _ = write!(
            html,
            "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>{0}</title><style>\
             body{{font-family:sans-serif;margin:2em;max-width:1000px;line-height:1.4}}\
             table{{border-collapse:collapse;margin:1em 0}}td,th{{border:1px solid #ccc;padding:4px 8px;text-align:left}}\
             td.n{{text-align:right;font-variant-numeric:tabular-nums}}th{{background:#f3f3f3}}\
             p.about{{color:#333;margin:0.3em 0}}svg{{display:block;margin:0.5em 0 1.5em;max-width:100%;height:auto}}\
             </style></head><body><h1>{0}</h1>",
            escape(&self.title)
        );
        for note in &self.notes {
            let _ = write!(html, "<p>{}</p>", escape(note));
        }
        for section in &self.sections {
            let _ = write!(html, "<h2>{}</h2>", escape(&section.heading));
            if let Some(about) = &section.about {
                let _ = write!(html, "<p class=\"about\">{}</p>", escape(about));
            }
            html.push_str(&section.body);
        }
        html.push_str("</body></html>\n");
        html
    }

    pub fn write(&self, dir: &std::path::Path) -> anyhow::Result<()> {
        std::fs::write(dir.join("report.html"), self.to_html())?;
        Ok(())
    }
}

/// The rows of a CSV file of numbers under a header line (a field that is not a number: NaN;
/// a missing file: no rows).
pub fn read_csv(path: &std::path::Path) -> Vec<Vec<f64>> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .skip(1)
        .map(|line| line.split(',').map(|f| f.parse().unwrap_or(f64::NAN)).collect())
        .collect()
}

/// How a pipeline run's latency is measured, for the charts' descriptions.
const MEASURED: &str = "Latency runs from each tick's intended send time to the output's arrival at the collector, one value per output (not per tick), warm-up excluded.";

/// The latency charts of one pipeline run, from its results folder (`latency_histogram.csv`,
/// `percentiles.csv`, `intervals.csv`): the end-to-end histogram on a linear and on a log
/// scale (the Oracle white paper's figures 8 and 9), the percentile spectrum, and latency
/// over time. Each is (heading, what it shows, SVG).
pub fn pipeline_charts(run: &std::path::Path, title: &str) -> Vec<(String, String, String)> {
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
    let latency = |scale_log: bool| {
        if scale_log {
            Axis::log("end-to-end latency", Unit::Micros)
        } else {
            Axis::linear("end-to-end latency", Unit::Micros)
        }
    };
    let count = |scale_log: bool| {
        let title = "outputs in the bucket";
        if scale_log {
            Axis::log(title, Unit::Number)
        } else {
            Axis::linear(title, Unit::Number)
        }
    };
    let single = |name: &str, points: Vec<(f64, f64)>| vec![Series::new(name, points)];
    vec![
        (
            format!("{title}: end-to-end latency histogram (linear)"),
            format!("Outputs per latency bucket (each bucket 25 % wider than the one before, from latency_histogram.csv), both axes linear: the body of the distribution. {MEASURED}"),
            line_chart("latency histogram", &latency(false), &count(false), &single("outputs", nonzero.clone())),
        ),
        (
            format!("{title}: end-to-end latency histogram (log)"),
            "The same buckets on log axes, so the rare slow outputs of the tail show.".to_string(),
            line_chart("latency histogram, log axes", &latency(true), &count(true), &single("outputs", nonzero)),
        ),
        (
            format!("{title}: percentile spectrum"),
            format!("Latency at each percentile (from percentiles.csv; x is 1/(1 - percentile), so each decade to the right is one more nine). {MEASURED}"),
            line_chart(
                "percentile spectrum",
                &Axis::log("percentile", Unit::Percentile),
                &latency(true),
                &single("latency", spectrum),
            ),
        ),
        (
            format!("{title}: latency over time"),
            "p50, p99 and max of the outputs that reached the collector in each second of the run (intervals.csv), log scale: a stall shows as a step.".to_string(),
            line_chart(
                "latency per second",
                &Axis::linear("seconds since the start", Unit::Number),
                &latency(true),
                &[Series::new("p50", over_time(3)), Series::new("p99", over_time(4)), Series::new("max", over_time(6))],
            ),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_holds_its_charts_with_their_descriptions() {
        let line = line_chart(
            "t",
            &Axis::log("x", Unit::Number),
            &Axis::log("y", Unit::Micros),
            &[Series::new("a", vec![(1.0, 10.0), (10.0, 1000.0)])],
        );
        assert!(line.starts_with("<svg") && line.contains("<polyline"), "{}", &line[..100.min(line.len())]);
        let mut report = Report::new("R & D");
        report.note("latency from the intended send time").chart("chart", "what it shows <b>", line);
        let html = report.to_html();
        assert!(html.contains("<h1>R &amp; D</h1>") && html.contains("<svg") && html.ends_with("</html>\n"));
        assert!(html.contains("<h2>chart</h2><p class=\"about\">what it shows &lt;b&gt;</p><svg"), "{html}");
    }
}
