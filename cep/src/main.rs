//! Thin entry point: parse, start telemetry, dispatch.

use clap::Parser;

fn main() {
    let cli = match cep::cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => cep::cli::refuse_arguments(error),
    };
    let (role, id) = cli.command.identity();
    cep_telemetry::identity::set(&role, &id);
    cep_telemetry::logging::init(cli.log_format);
    if let Err(error) = cep::cli::dispatch(cli) {
        cep_telemetry::logging::fatal(&cep::telemetry::one_line(&error));
        // A mistake found before anything started exits as clap's own usage errors do.
        std::process::exit(if error.is::<cep::cli::Usage>() { 2 } else { 1 });
    }
}
