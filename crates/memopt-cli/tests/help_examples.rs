//! Every example printed by `memopt --help` and by every subcommand's `--help` runs as written:
//! in order where a later example may read a file an earlier one wrote (it names the same file),
//! otherwise concurrently, from a fresh directory outside the repository (so relative model
//! paths must work from anywhere).

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

/// The files an example names: its arguments that are no option and hold a dot or a slash
/// (`plan.json`, `examples/models/small-snn.json`; model names and budgets have neither).
fn files_named(args: &[String]) -> Vec<&str> {
    args.iter()
        .map(String::as_str)
        .filter(|a| !a.starts_with('-') && (a.contains('.') || a.contains('/')))
        .collect()
}

/// `examples` split into lanes that may run at the same time: an example goes into the lane of
/// the first earlier example naming one of its files (merging the lanes it links), so that
/// every lane keeps the help's order and no file is read in one lane and written in another.
fn lanes<T: Clone>(examples: &[(T, Vec<String>)]) -> Vec<Vec<(T, Vec<String>)>> {
    let mut lanes: Vec<Vec<usize>> = Vec::new();
    for (i, (_, args)) in examples.iter().enumerate() {
        let files = files_named(args);
        let (linked, mut rest): (Vec<Vec<usize>>, Vec<Vec<usize>>) = lanes.into_iter().partition(|lane| {
            lane.iter()
                .any(|&j| files_named(&examples[j].1).iter().any(|f| files.contains(f)))
        });
        let mut lane: Vec<usize> = linked.into_iter().flatten().collect();
        lane.push(i);
        lane.sort_unstable();
        rest.push(lane);
        lanes = rest;
    }
    lanes.sort_by_key(|lane| lane[0]);
    lanes
        .into_iter()
        .map(|lane| lane.into_iter().map(|i| examples[i].clone()).collect())
        .collect()
}

#[test]
fn examples_that_name_the_same_file_share_a_lane_in_order() {
    let ex = |args: &str| {
        (
            (),
            args.split_whitespace().map(str::to_string).collect::<Vec<_>>(),
        )
    };
    let all = [
        ex("optimize --budget 80%"),
        ex("optimize -m sew-resnet18 --out plan.json"),
        ex("plot -m examples/models/small-snn.json -o memory.svg"),
        ex("train -m sew-resnet18 --plan plan.json"),
        ex("profile --plan plan.json -m x.json"),
        ex("models -m x.json"),
    ];
    let got: Vec<Vec<String>> = lanes(&all)
        .into_iter()
        .map(|lane| lane.into_iter().map(|(_, a)| a.join(" ")).collect())
        .collect();
    assert_eq!(
        got,
        vec![
            vec!["optimize --budget 80%".to_string()],
            vec![
                "optimize -m sew-resnet18 --out plan.json".to_string(),
                "train -m sew-resnet18 --plan plan.json".to_string(),
                "profile --plan plan.json -m x.json".to_string(),
                "models -m x.json".to_string(),
            ],
            vec!["plot -m examples/models/small-snn.json -o memory.svg".to_string()],
        ]
    );
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
    let all: Vec<(String, Vec<String>)> = helps
        .iter()
        .flat_map(|(source, help)| examples(help).into_iter().map(|args| (source.clone(), args)))
        .collect();
    // Each lane in its own thread; the checks run here, in the help's order.
    let results: Vec<(String, Vec<String>, std::process::Output, f64)> = std::thread::scope(|s| {
        let handles: Vec<_> = lanes(&all)
            .into_iter()
            .map(|lane| {
                s.spawn(move || {
                    lane.into_iter()
                        .map(|(source, args)| {
                            let refs: Vec<&str> = args.iter().map(String::as_str).collect();
                            let started = std::time::Instant::now();
                            let o = memopt(dir, &refs);
                            let secs = started.elapsed().as_secs_f64();
                            (source, args, o, secs)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("a lane of examples ran"))
            .collect()
    });
    let mut ran = 0;
    for (source, args) in &all {
        let (_, _, o, secs) = results
            .iter()
            .find(|r| &r.0 == source && &r.1 == args)
            .expect("every example ran in a lane");
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(
            o.status.success(),
            "the example `memopt {}` from `{source}` failed in {}:\n{stderr}",
            args.join(" "),
            dir.display()
        );
        assert!(!stderr.contains("panicked"), "{stderr}");
        eprintln!("ok: memopt {} ({secs:.1} s)", args.join(" "));
        ran += 1;
    }
    // memopt --help alone prints eight examples; a parser that finds fewer is broken.
    assert!(ran >= 8, "found only {ran} examples");
    // The files the examples say they write exist.
    assert!(dir.join("plan.json").is_file());
    assert!(dir.join("memory.svg").is_file());
}
