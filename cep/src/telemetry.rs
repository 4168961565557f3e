//! Shutdown signals and the error line (logging and metrics are in `cep-telemetry`).

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// A flag raised by the first SIGINT or SIGTERM (graceful shutdown: results are still
/// written); a second one ends the process at once.
/// One flag per process: the handlers are installed once, however many runs ask (a bench
/// runs many in-process clusters).
pub fn shutdown_flag() -> anyhow::Result<Arc<AtomicBool>> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    static FLAG: std::sync::OnceLock<Arc<AtomicBool>> = std::sync::OnceLock::new();
    if let Some(flag) = FLAG.get() {
        return Ok(flag.clone());
    }
    let flag = Arc::new(AtomicBool::new(false));
    for signal in [SIGINT, SIGTERM] {
        signal_hook::flag::register_conditional_shutdown(signal, 130, flag.clone())?;
        signal_hook::flag::register(signal, flag.clone())?;
    }
    Ok(FLAG.get_or_init(|| flag).clone())
}

/// The stops of a process whose first SIGINT or SIGTERM is a graceful stop (an injector, a
/// launcher): the first raises `graceful`, the second `now`, a third ends the process at
/// once (exit status 130). One pair per process, however many runs ask.
pub fn stop_flags() -> anyhow::Result<cep_injector::Stop> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    static STOPS: std::sync::OnceLock<cep_injector::Stop> = std::sync::OnceLock::new();
    if let Some(stops) = STOPS.get() {
        return Ok(stops.clone());
    }
    let stops = cep_injector::Stop::default();
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])?;
    let raised = stops.clone();
    std::thread::Builder::new().name("signals".into()).spawn(move || {
        use std::sync::atomic::Ordering;
        for (count, _) in signals.forever().enumerate() {
            match count {
                0 => raised.graceful.store(true, Ordering::Relaxed),
                1 => raised.now.store(true, Ordering::Relaxed),
                _ => std::process::exit(130),
            }
        }
    })?;
    Ok(STOPS.get_or_init(|| stops).clone())
}

/// An error and its causes on one line, leaving out causes whose text a message already
/// includes (our error types quote their source).
pub fn one_line(error: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in error.chain() {
        let text = cause.to_string();
        if line.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}
