//! The `memopt` binary: parses the command line, runs the command, and turns any error into one
//! line on stderr and a non-zero exit status (2 for usage errors, 1 otherwise).

use clap::Parser;
use memopt_cli::{Cli, CliError};
use std::io::Write;

fn main() {
    // A panic is a bug; still, report it as one line instead of a trace.
    std::panic::set_hook(Box::new(|info| {
        let msg = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_default();
        let at = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        eprintln!("error: internal error (a bug in memopt, please report it): {msg}{at}");
    }));
    let cli = Cli::parse();
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let result = memopt_cli::run(cli, &mut out).and_then(|()| out.flush().map_err(CliError::Output));
    match result {
        Ok(()) => {}
        // `memopt ... | head`: the reader has what it wanted.
        Err(CliError::Output(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
        Err(e) => {
            drop(out);
            eprintln!("error: {}", memopt_cli::escape::terminal(&e.to_string()));
            std::process::exit(e.exit_code());
        }
    }
}
