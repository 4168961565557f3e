//! Self-contained HTML reports (no scripts, no network): charts as inline SVG and the page
//! around them, for the bench reports and every run's report.html.

pub mod chart;
pub mod report;
