//! One logging init for every process. Each line names its process (role and id, from
//! [`crate::identity`]), whichever thread wrote it. Text lines get colour only when stderr is
//! a terminal and `NO_COLOR` is unset; JSON lines are for log shippers:
//! `{"timestamp","level","role","id","target","message","fields":{...}}`.

use crate::args::LogFormat;
use crate::identity;
use serde::Serialize;
use std::fmt;
use std::io::IsTerminal;
use std::sync::OnceLock;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::{FormatEvent, FormatFields, Writer};
use tracing_subscriber::fmt::time::{FormatTime, SystemTime};
use tracing_subscriber::fmt::FmtContext;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::EnvFilter;

static FORMAT: OnceLock<LogFormat> = OnceLock::new();

/// Logs to stderr in `format`, filtered by `RUST_LOG` (default `info`). Name the process
/// with [`identity::set`] first (or any time later: each line reads the current name).
pub fn init(format: LogFormat) {
    init_with_default(format, "info");
}

/// Like [`init`], with `default` as the filter when `RUST_LOG` is not set.
pub fn init_with_default(format: LogFormat, default: &str) {
    let _ = FORMAT.set(format);
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let ansi = format == LogFormat::Text && colour_wanted();
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(ansi);
    let _ = match format {
        LogFormat::Text => builder.event_format(TextLine { ansi }).try_init(),
        LogFormat::Json => builder.event_format(JsonLine).try_init(),
    };
}

/// The format [`init`] chose (text before it ran), for a launcher to pass on.
pub fn format() -> LogFormat {
    FORMAT.get().copied().unwrap_or_default()
}

/// Colour only for a person at a terminal: never into a file, a pipe or the journal, and
/// never when `NO_COLOR` is set to anything (no-color.org).
fn colour_wanted() -> bool {
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|value| value.is_empty())
}

/// The one line a failing command ends with (`error: ...`), in the chosen format, whatever
/// `RUST_LOG` filters.
pub fn fatal(message: &str) {
    match format() {
        LogFormat::Text => crate::errln!("error: {message}"),
        LogFormat::Json => crate::errln!("{}", json_line(Level::ERROR, "cep", message.to_string(), Default::default())),
    }
}

/// A progress line (the collector's, once a second), shown whatever `RUST_LOG` filters:
/// `[progress] ...` as text, or a JSON line whose `fields.kind` is `progress`.
pub fn progress(line: fmt::Arguments<'_>) {
    match format() {
        LogFormat::Text => crate::errln!("[progress] {}: {line}", crate::identity::current().name()),
        LogFormat::Json => {
            let mut fields = serde_json::Map::new();
            fields.insert("kind".into(), "progress".into());
            crate::errln!("{}", json_line(Level::INFO, "cep::progress", line.to_string(), fields));
        }
    }
}

fn timestamp() -> String {
    let mut text = String::new();
    let _ = SystemTime.format_time(&mut Writer::new(&mut text));
    text
}

/// A text line: `2026-01-02T03:04:05.678901Z  INFO worker-1: message key=value`.
struct TextLine {
    ansi: bool,
}

impl<S, N> FormatEvent<S, N> for TextLine
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(&self, ctx: &FmtContext<'_, S, N>, mut writer: Writer<'_>, event: &Event<'_>) -> fmt::Result {
        SystemTime.format_time(&mut writer)?;
        let level = *event.metadata().level();
        let name = identity::current().name();
        if self.ansi {
            let colour = match level {
                Level::ERROR => "31",
                Level::WARN => "33",
                Level::INFO => "32",
                Level::DEBUG => "34",
                Level::TRACE => "35",
            };
            write!(writer, " \x1b[{colour}m{level:>5}\x1b[0m \x1b[1m{name}\x1b[0m: ")?;
        } else {
            write!(writer, " {level:>5} {name}: ")?;
        }
        ctx.field_format().format_fields(writer.by_ref(), event)?;
        writeln!(writer)
    }
}

/// A JSON line per event.
struct JsonLine;

impl<S, N> FormatEvent<S, N> for JsonLine
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(&self, _ctx: &FmtContext<'_, S, N>, mut writer: Writer<'_>, event: &Event<'_>) -> fmt::Result {
        let mut fields = Fields::default();
        event.record(&mut fields);
        let metadata = event.metadata();
        writeln!(writer, "{}", json_line(*metadata.level(), metadata.target(), fields.message, fields.rest))
    }
}

#[derive(Serialize)]
struct Line<'a> {
    timestamp: String,
    level: &'a str,
    role: &'a str,
    id: &'a str,
    target: &'a str,
    message: String,
    fields: serde_json::Map<String, serde_json::Value>,
}

fn json_line(
    level: Level,
    target: &str,
    message: String,
    fields: serde_json::Map<String, serde_json::Value>,
) -> String {
    let who = identity::current();
    let line =
        Line { timestamp: timestamp(), level: level.as_str(), role: &who.role, id: &who.id, target, message, fields };
    serde_json::to_string(&line).unwrap_or_else(|error| format!("{{\"message\":\"unloggable event: {error}\"}}"))
}

/// An event's message and its other fields, as JSON values.
#[derive(Default)]
struct Fields {
    message: String,
    rest: serde_json::Map<String, serde_json::Value>,
}

impl Fields {
    fn put(&mut self, field: &Field, value: serde_json::Value) {
        if field.name() == "message" {
            self.message = match value {
                serde_json::Value::String(text) => text,
                other => other.to_string(),
            };
        } else {
            self.rest.insert(field.name().to_string(), value);
        }
    }
}

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.put(field, format!("{value:?}").into());
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, value.into());
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.put(field, value.into());
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.put(field, value.into());
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.put(field, value.into());
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.put(field, value.into());
    }
    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.put(field, value.to_string().into());
    }
}
