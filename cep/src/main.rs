//! Thin entry point: parse, start telemetry, dispatch.

use clap::Parser;

fn main() {
    let cli = cep::cli::Cli::parse();
    cep::telemetry::init();
    if let Err(error) = cep::cli::dispatch(cli) {
        eprintln!("error: {}", cep::telemetry::one_line(&error));
        // A mistake found before anything started exits as clap's own usage errors do.
        std::process::exit(if error.is::<cep::launcher::Usage>() { 2 } else { 1 });
    }
}
