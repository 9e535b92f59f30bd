//! Every example printed by `memopt --help` and by every subcommand's `--help` runs as written:
//! in order (a later example may read a file an earlier one wrote), from a fresh directory
//! outside the repository (so relative model paths must work from anywhere).

use std::path::Path;
use std::process::Command;

fn memopt(dir: &Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_memopt"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("the memopt binary runs")
}

/// The subcommands, from `memopt --help`'s command list.
fn subcommands(help: &str) -> Vec<String> {
    help.split("Commands:")
        .nth(1)
        .expect("memopt --help lists its commands")
        .lines()
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .filter(|c| c != "help")
        .collect()
}

/// The example command lines of one help text: the lines under `Examples:` that start with
/// `memopt`, cut at the comment (two or more spaces after the command).
fn examples(help: &str) -> Vec<Vec<String>> {
    let Some(section) = help.split("Examples:").nth(1) else {
        return Vec::new();
    };
    section
        .lines()
        .map(str::trim_start)
        .filter(|l| l.starts_with("memopt "))
        .map(|l| {
            let command = l.split("  ").next().unwrap_or(l);
            command.split_whitespace().skip(1).map(str::to_string).collect()
        })
        .collect()
}

/// A fresh directory, removed with everything in it when dropped (also when the test fails).
fn scratch_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("memopt-help-examples-")
        .tempdir()
        .expect("a scratch directory")
}

#[test]
fn every_help_example_runs_from_any_directory() {
    let scratch = scratch_dir();
    let dir = scratch.path();
    let top = memopt(dir, &["--help"]);
    assert!(top.status.success());
    let top = String::from_utf8(top.stdout).expect("utf-8 help");
    let mut helps = vec![("memopt --help".to_string(), top.clone())];
    for c in subcommands(&top) {
        let o = memopt(dir, &[c.as_str(), "--help"]);
        assert!(o.status.success(), "memopt {c} --help failed");
        helps.push((
            format!("memopt {c} --help"),
            String::from_utf8(o.stdout).expect("utf-8 help"),
        ));
    }
    assert!(helps.len() >= 7, "memopt --help lists the subcommands: {top}");
    let mut ran = 0;
    for (source, help) in &helps {
        for args in examples(help) {
            let refs: Vec<&str> = args.iter().map(String::as_str).collect();
            let started = std::time::Instant::now();
            let o = memopt(dir, &refs);
            let stderr = String::from_utf8_lossy(&o.stderr);
            assert!(
                o.status.success(),
                "the example `memopt {}` from `{source}` failed in {}:\n{stderr}",
                args.join(" "),
                dir.display()
            );
            assert!(!stderr.contains("panicked"), "{stderr}");
            eprintln!(
                "ok: memopt {} ({:.1} s)",
                args.join(" "),
                started.elapsed().as_secs_f64()
            );
            ran += 1;
        }
    }
    // memopt --help alone prints eight examples; a parser that finds fewer is broken.
    assert!(ran >= 8, "found only {ran} examples");
    // The files the examples say they write exist.
    assert!(dir.join("plan.json").is_file());
    assert!(dir.join("memory.svg").is_file());
}
