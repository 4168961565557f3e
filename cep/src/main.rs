//! Thin entry point: parse, start telemetry, dispatch.

use clap::Parser;

fn main() {
    let cli = match cep::cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => cep::cli::refuse_arguments(error),
    };
    let (role, id) = cli.command.identity();
    cep_telemetry::identity::set(&role, &id);
    // The roles of an in-process cluster log as their own processes would under `cep run`:
    // warnings only, unless RUST_LOG says otherwise; the launcher keeps its own lines.
    let in_process = cli.command.runs_roles_in_process();
    cep_telemetry::logging::init_with_default(
        cli.log_format,
        if in_process { "warn,cep::launcher=info,cep::inprocess=info,cep::bench=info" } else { "info" },
    );
    if let Err(error) = cep::cli::dispatch(cli) {
        // A run's failure is its verdict line, already printed.
        if !error.is::<cep::launcher::AlreadySaid>() {
            cep_telemetry::logging::fatal(&cep::telemetry::one_line(&error));
        }
        // A mistake found before anything started exits as clap's own usage errors do.
        std::process::exit(cep::cli::exit_status(&error));
    }
}
