//! The `tacos` command line tool.

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    // Die quietly when the reader of stdout goes away (`tacos bench | head`), as shell
    // tools do, instead of failing on a broken pipe.
    // SAFETY: restoring the default disposition of a signal before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = tacos::cli::Cli::parse();
    match tacos::cli::run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
