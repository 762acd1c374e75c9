//! The `tacos` command line tool.

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = tacos::cli::Cli::parse();
    match tacos::cli::run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
