//! Writing to the terminal, where a closed pipe is not an error: `cep rules check x.rules 2>&1 |
//! head -1` shows its first line and the command ends with its usual status, where `print!`
//! would panic (exit 101) on the reader that left. Any other failure to write standard output
//! (a full disk behind a redirection) ends the process with one line on standard error.

use std::fmt;
use std::io::{ErrorKind, Write};

/// Writes to standard output ([`out!`](crate::out), [`outln!`](crate::outln)).
pub fn out(text: fmt::Arguments<'_>) {
    // Flushed at once: a failure met at exit, writing a line's unterminated end, is told nowhere.
    let mut stdout = std::io::stdout().lock();
    if let Err(error) = stdout.write_fmt(text).and_then(|()| stdout.flush()) {
        if error.kind() != ErrorKind::BrokenPipe {
            err(format_args!("error: cannot write to standard output: {error}\n"));
            std::process::exit(1);
        }
    }
}

/// Writes to standard error ([`errln!`](crate::errln)); a failure there has nowhere to be told.
pub fn err(text: fmt::Arguments<'_>) {
    let _ = std::io::stderr().lock().write_fmt(text);
}

/// `print!` that takes a closed pipe quietly ([`out`]).
#[macro_export]
macro_rules! out {
    ($($arg:tt)*) => { $crate::console::out(format_args!($($arg)*)) };
}

/// `println!` that takes a closed pipe quietly ([`out`]).
#[macro_export]
macro_rules! outln {
    ($($arg:tt)*) => { $crate::console::out(format_args!("{}\n", format_args!($($arg)*))) };
}

/// `eprintln!` that takes a closed pipe quietly ([`err`]).
#[macro_export]
macro_rules! errln {
    ($($arg:tt)*) => { $crate::console::err(format_args!("{}\n", format_args!($($arg)*))) };
}
