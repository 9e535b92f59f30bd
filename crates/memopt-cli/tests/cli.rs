//! The `memopt` binary end to end: every subcommand's text and JSON, training, benches and
//! charts. Plans are in `plans.rs`, bad input in `bad_inputs.rs`.

mod common;

use common::*;
use serde_json::Value;

#[test]
fn help_teaches_the_commands_and_strategies() {
    let top = ok(&["--help"]);
    for needle in [
        "profile",
        "optimize",
        "train",
        "bench",
        "plot",
        "models",
        "Examples:",
        "Meta",
        "bit-identical",
    ] {
        assert!(top.contains(needle), "--help lacks '{needle}':\n{top}");
    }
    let opt = ok(&["optimize", "--help"]);
    for needle in [
        "max-overhead",
        "memonger",
        "min-memory",
        "--budget",
        "--verify",
        "bit-identical",
        "--level",
    ] {
        assert!(opt.contains(needle), "optimize --help lacks '{needle}'");
    }
    assert!(
        ok(&["models", "--help"]).contains("\"residual\""),
        "models --help documents custom models"
    );
    // No subcommand: usage on stderr, exit 2.
    let o = memopt(&[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("Usage"));
}

#[test]
fn models_lists_the_zoo_with_sizes() {
    let text = ok(&["models"]);
    for name in [
        "cifar10dvs-vgg",
        "sew-resnet18",
        "spiking-resnet18",
        "spiking-vgg11-bn",
        "spikformer-cifar10",
        "spike-driven-transformer",
        "toy-if",
        "spiking-mlp",
    ] {
        assert!(text.contains(name), "{text}");
    }
    assert!(
        text.contains("T=4 2x48x48 K=10") && text.contains("T=10 2x48x48 K=10"),
        "{text}"
    );
    let v = json(&["models", "--json"]);
    let rows = v.as_array().expect("a list");
    assert_eq!(rows.len(), 8);
    let mlp = rows
        .iter()
        .find(|r| r["name"] == "spiking-mlp")
        .expect("spiking-mlp");
    assert_eq!(u(&mlp["small"], "parameters"), 16 * 32 + 32 + 32 * 10 + 10);
    assert_eq!(mlp["small"]["sample"], serde_json::json!([16]));
}

#[test]
fn profile_reports_modules_peak_and_holders() {
    let text = ok(&["profile", "-m", "spiking-mlp"]);
    for needle in [
        "peak:",
        "by kind at the peak",
        "saved_for_backward",
        "per module and phase",
        "LIFNode",
        "step time",
    ] {
        assert!(text.contains(needle), "profile lacks '{needle}':\n{text}");
    }
    let cpu = json(&["profile", "-m", "spiking-mlp", "--json"]);
    let peak = u(&cpu, "peak_bytes");
    let by_kind: u64 = cpu["by_kind"]
        .as_object()
        .expect("by_kind")
        .values()
        .filter_map(Value::as_u64)
        .sum();
    assert_eq!(by_kind, peak, "the kinds add up to the peak");
    let modules = cpu["modules"].as_array().expect("modules");
    let lif = modules
        .iter()
        .find(|m| m["path"] == "1" && m["phase"] == "forward")
        .expect("the LIF forward row");
    assert_eq!(lif["type"], "LIFNode");
    assert!(u(lif, "saved_bytes") > 0 && f(lif, "time_ms") >= 0.0);
    assert!(f(&cpu, "step_ms") > 0.0);
    // Meta computes the same memory without data or time.
    let meta = json(&["profile", "-m", "spiking-mlp", "--device", "meta", "--json"]);
    assert_eq!(u(&meta, "peak_bytes"), peak);
    assert_eq!(meta["by_kind"], cpu["by_kind"]);
    assert!(meta["step_ms"].is_null() && meta["modules"][0]["time_ms"].is_null());
}

#[test]
fn train_reports_progress_loss_and_the_measured_peak() {
    let o = memopt(&["train", "-m", "spiking-mlp", "--steps", "12"]);
    assert!(o.status.success());
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        out.contains("measured peak:") && out.contains("loss:") && out.contains("steps/s"),
        "{out}"
    );
    // Not a terminal: plain progress lines, the last one complete.
    assert!(
        err.lines()
            .any(|l| l.contains("12/12") && l.contains("steps/s") && l.contains("peak")),
        "{err}"
    );
    assert!(!err.contains('\r'));
    let t = json(&["train", "-m", "spiking-mlp", "--steps", "30", "--json"]);
    let losses: Vec<f64> = t["losses"]
        .as_array()
        .expect("losses")
        .iter()
        .filter_map(Value::as_f64)
        .collect();
    assert_eq!(losses.len(), 30);
    assert!(losses[29] < losses[0], "the loss falls: {losses:?}");
    let p = json(&["profile", "-m", "spiking-mlp", "--device", "meta", "--json"]);
    assert_eq!(
        u(&t, "peak_bytes"),
        u(&p, "peak_bytes"),
        "every step peaks where profile says"
    );
    let meta = json(&[
        "train",
        "-m",
        "spiking-mlp",
        "--steps",
        "2",
        "--device",
        "meta",
        "--json",
    ]);
    assert_eq!(u(&meta, "peak_bytes"), u(&p, "peak_bytes"));
    assert!(meta["losses"].as_array().expect("losses").is_empty());
}

#[test]
fn bench_compares_every_strategy() {
    let v = json(&["bench", "-m", "toy-if", "--steps", "1", "--json"]);
    assert_eq!(v["model"], "toy-if");
    assert_eq!(u(&v, "batch"), 4);
    assert_eq!(u(&v, "timesteps"), 4);
    let rows = v["rows"].as_array().expect("rows");
    let names: Vec<&str> = rows.iter().filter_map(|r| r["strategy"].as_str()).collect();
    assert_eq!(
        names,
        [
            "baseline",
            "pipeline",
            "memonger",
            "budget",
            "max-overhead",
            "min-memory"
        ]
    );
    for r in rows {
        assert!(u(r, "peak_bytes") > 0 && f(r, "step_ms") > 0.0 && f(r, "planning_ms") >= 0.0);
        assert!(r["overhead"].is_f64());
        assert_eq!(u(r, "measured_peak_bytes"), u(r, "peak_bytes"), "{r}");
        assert_eq!(r["grads_identical"], Value::Bool(true), "{r}");
    }
    let text = ok(&["bench", "-m", "spiking-mlp", "--steps", "1"]);
    assert!(
        text.contains("min-memory") && text.contains("every measured CPU peak equals"),
        "{text}"
    );
}

/// A small well-formedness check: balanced tags, quoted attributes, escaped text, one `<svg>`
/// root with the SVG namespace.
fn check_svg(svg: &str) {
    let mut stack: Vec<String> = Vec::new();
    let mut rest = svg;
    let mut roots = 0;
    while let Some(start) = rest.find('<') {
        let text = &rest[..start];
        assert!(!text.contains('>'), "stray '>' in text: {text}");
        for (i, _) in text.match_indices('&') {
            let entity = &text[i..];
            assert!(
                ["&amp;", "&lt;", "&gt;", "&quot;"]
                    .iter()
                    .any(|e| entity.starts_with(e)),
                "unescaped '&' in {text}"
            );
        }
        let end = rest[start..].find('>').expect("tag closed") + start;
        let tag = &rest[start + 1..end];
        assert_eq!(tag.matches('"').count() % 2, 0, "unbalanced quotes in <{tag}>");
        if let Some(name) = tag.strip_prefix('/') {
            assert_eq!(stack.pop().as_deref(), Some(name.trim()), "mismatched </{name}>");
        } else if !tag.ends_with('/') {
            let name = tag.split_whitespace().next().expect("tag name").to_string();
            if stack.is_empty() {
                roots += 1;
                assert_eq!(name, "svg");
                assert!(tag.contains(r#"xmlns="http://www.w3.org/2000/svg""#), "{tag}");
            }
            stack.push(name);
        }
        rest = &rest[end + 1..];
    }
    assert!(stack.is_empty(), "unclosed: {stack:?}");
    assert_eq!(roots, 1);
    assert!(rest.trim().is_empty());
}

#[test]
fn charts_parse_as_svg_and_hold_both_series() {
    let plot = temp("plot.svg");
    let text = ok(&["plot", "-m", EXAMPLE, "--strategy", "min-memory", "-o", s(&plot)]);
    assert!(
        text.contains("baseline peak") && text.contains("planned peak"),
        "{text}"
    );
    let svg = std::fs::read_to_string(&plot).expect("svg written");
    check_svg(&svg);
    for id in [
        r#"id="baseline""#,
        r#"id="planned""#,
        r#"id="bars-baseline""#,
        r#"id="bars-planned""#,
        r#"id="legend""#,
    ] {
        assert!(svg.contains(id), "no {id}");
    }
    for kind in [
        "kind-parameter",
        "kind-saved_for_backward",
        "kind-gradient",
        "kind-packed",
    ] {
        assert!(svg.contains(kind), "the planned step has a {kind} area");
    }
    assert!(svg.contains("<polyline"), "the baseline total");
    // optimize --svg and profile --svg (baseline only) write charts too.
    let opt = temp("optimize.svg");
    ok(&["optimize", "-m", "spiking-mlp", "--svg", s(&opt)]);
    let svg = std::fs::read_to_string(&opt).expect("svg written");
    check_svg(&svg);
    assert!(svg.contains(r#"id="baseline""#) && svg.contains(r#"id="planned""#));
    let prof = temp("profile.svg");
    ok(&[
        "profile",
        "-m",
        "spiking-mlp",
        "--device",
        "meta",
        "--svg",
        s(&prof),
    ]);
    let svg = std::fs::read_to_string(&prof).expect("svg written");
    check_svg(&svg);
    assert!(svg.contains(r#"id="baseline""#) && !svg.contains(r#"id="planned""#));
    // The caching allocator's levels: the reserved line, the fragmentation band under it and
    // the three peaks with the fragmentation at the reserved peak, as the JSON reports them.
    for id in [
        r#"id="allocator-levels""#,
        r#"id="fragmentation-baseline""#,
        r#"id="reserved-baseline""#,
    ] {
        assert!(svg.contains(id), "no {id}");
    }
    let v = json(&["profile", "-m", "spiking-mlp", "--device", "meta", "--json"]);
    let a = &v["allocator"];
    let b = |key: &str| memopt_cli::format::bytes(a[key].as_u64().expect(key));
    let reserved = a["at_reserved_peak"]["reserved_bytes"].as_u64().unwrap();
    let allocated = a["at_reserved_peak"]["allocated_bytes"].as_u64().unwrap();
    assert!(
        reserved > allocated,
        "spiking-mlp fragments its one 2 MiB segment"
    );
    let line = format!(
        "baseline peaks: requested {}, allocated {}, reserved {}; fragmentation at the reserved peak {}",
        b("requested_peak_bytes"),
        b("allocated_peak_bytes"),
        b("reserved_peak_bytes"),
        memopt_cli::format::bytes(reserved - allocated)
    );
    assert!(svg.contains(&line), "{line}");
    assert!(
        svg.contains("baseline reserved peak"),
        "the reserved peak is marked"
    );
}

/// A model too small for the chain model's bookkeeping to be exact still gets plans decided on
/// exact peaks: storing everything is feasible, never reported infeasible.
#[test]
fn a_one_layer_model_is_planned_and_benched() {
    let tiny = temp("one-linear.json");
    std::fs::write(
        &tiny,
        r#"{"name": "one-linear", "input": {"time_steps": 1, "sample": [4], "classes": 3}, "layers": [{"type": "linear", "out": 3}]}"#,
    )
    .expect("write");
    let v = json(&["optimize", "-m", s(&tiny), "--budget", "100%", "--json"]);
    assert_eq!(u(&v, "planned_peak_bytes"), u(&v, "baseline_peak_bytes"));
    let out = ok(&["bench", "-m", s(&tiny), "--steps", "1"]);
    assert!(out.contains("every measured CPU peak equals its exact"), "{out}");
}

#[test]
fn the_shipped_transformer_example_plans_from_any_directory() {
    // The tests run in crates/memopt-cli, where this relative path does not exist: the copy
    // shipped in the binary is read.
    let v = json(&["optimize", "-m", "examples/models/spikformer-tiny.json", "--json"]);
    assert_eq!(v["model"], "spikformer-tiny");
    let (base, planned) = (u(&v, "baseline_peak_bytes"), u(&v, "planned_peak_bytes"));
    assert!(planned < base, "{planned} >= {base}");
}
