//! Thin entry point: parse, start telemetry, dispatch.

use clap::Parser;

fn main() {
    let cli = cep::cli::Cli::parse();
    cep::telemetry::init();
    if let Err(error) = cep::cli::dispatch(cli) {
        eprintln!("error: {}", cep::telemetry::one_line(&error));
        std::process::exit(1);
    }
}
