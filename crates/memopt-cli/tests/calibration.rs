//! `memopt calibrate` end to end: the file it writes is what `optimize` and `bench` predict
//! with (and say so), bench rows carry predicted and measured overhead side by side with the
//! largest gap, and a file that does not apply here is refused with the reason.

mod common;

use common::*;
use serde_json::Value;

/// Calibrates toy-if (one timed round: this checks the plumbing, not the figures) into a
/// temporary file.
fn calibrated() -> TempPath {
    let file = temp("cal.json");
    let text = ok(&["calibrate", "-m", "toy-if", "--steps", "1", "-o", s(&file)]);
    for needle in [
        "module type",
        "Linear",
        "IFNode",
        "(overall)",
        "bit_spike",
        "storing everything",
        "every leaf checkpointed",
        "calibration written to",
    ] {
        assert!(text.contains(needle), "calibrate lacks '{needle}':\n{text}");
    }
    file
}

#[test]
fn optimize_and_bench_predict_with_the_calibration_and_say_so() {
    let file = calibrated();
    let cal: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(cal["format"], 1);
    assert_eq!(cal["device"], "cpu");
    assert!(
        cal["measured_on"]["workload"]
            .as_str()
            .unwrap()
            .starts_with("toy-if")
    );
    assert!(cal["factors"]["Linear"]["recompute_last"].as_f64().unwrap() > 0.0);
    assert!(
        cal["codecs"]["bit_spike"]["compress_bytes_per_s"]
            .as_f64()
            .unwrap()
            > 0.0
    );

    let planned = json(&["optimize", "-m", "toy-if", "--calibration", s(&file), "--json"]);
    assert_eq!(planned["cost_model"]["calibration"].as_str(), Some(s(&file)));
    assert!(
        planned["cost_model"].get("unmeasured_types").is_none(),
        "{planned}"
    );
    let uncalibrated = json(&["optimize", "-m", "toy-if", "--json"]);
    assert_eq!(uncalibrated["cost_model"], serde_json::json!({}));
    // The least-peak plan recomputes: its predicted overhead is the calibration's, not the
    // guesses'.
    let least = |extra: &[&str]| {
        let mut args = vec![
            "optimize",
            "-m",
            "toy-if",
            "-n",
            "64",
            "-t",
            "8",
            "--input",
            "512",
            "--strategy",
            "min-memory",
            "--json",
        ];
        args.extend(extra);
        f(&json(&args), "predicted_overhead")
    };
    let (calibrated, guessed) = (least(&["--calibration", s(&file)]), least(&[]));
    assert!(
        calibrated > 0.0 && guessed > 0.0 && calibrated != guessed,
        "{calibrated} {guessed}"
    );
    let text = ok(&["optimize", "-m", "toy-if", "--calibration", s(&file)]);
    assert!(
        text.contains("cost model: calibrated by") && text.contains("measured on toy-if"),
        "{text}"
    );
    assert!(ok(&["optimize", "-m", "toy-if"]).contains("cost model: uncalibrated"));
    // Another model: the types the calibration never ran are named.
    let vgg = ok(&["optimize", "--calibration", s(&file)]);
    assert!(
        vgg.contains("the calibration never measured") && vgg.contains("Conv2d") && vgg.contains("LIFNode"),
        "{vgg}"
    );

    let v = json(&[
        "bench",
        "-m",
        "toy-if",
        "--steps",
        "1",
        "--calibration",
        s(&file),
        "--json",
    ]);
    assert_eq!(v["cost_model"]["calibration"].as_str(), Some(s(&file)));
    for r in v["rows"].as_array().expect("rows") {
        assert!(r["overhead"].is_f64() && r["predicted_overhead"].is_f64(), "{r}");
        assert!(r["predicted_overhead_uncalibrated"].is_f64(), "{r}");
    }
    for gap in ["largest_gap", "largest_gap_uncalibrated"] {
        let g = &v[gap];
        let points = (f(g, "predicted_overhead") - f(g, "overhead")) * 100.0;
        assert!((f(g, "points") - points).abs() < 1e-9, "{g}");
        assert!(g["strategy"].is_string());
    }
    let text = ok(&["bench", "-m", "toy-if", "--steps", "1", "--calibration", s(&file)]);
    for needle in [
        "uncalib.",
        "gap",
        "largest gap between predicted and measured overhead (calibrated)",
        "largest gap, uncalibrated",
    ] {
        assert!(text.contains(needle), "bench lacks '{needle}':\n{text}");
    }
}

#[test]
fn bench_rows_show_the_gap_and_an_unmet_budget_is_a_rejected_row() {
    let v = json(&[
        "bench", "-m", "toy-if", "--steps", "1", "--budget", "1%", "--json",
    ]);
    let rows = v["rows"].as_array().expect("rows");
    let budget = rows
        .iter()
        .find(|r| r["strategy"] == "budget")
        .expect("budget row");
    let why = budget["rejected"].as_str().expect("rejected");
    assert!(why.contains("no plan fits a budget"), "{why}");
    // The other rows are measured; uncalibrated, no uncalibrated column is repeated.
    assert!(rows.iter().filter(|r| r["rejected"].is_null()).count() == 5);
    assert!(
        rows.iter()
            .all(|r| r.get("predicted_overhead_uncalibrated").is_none())
    );
    assert!(v["largest_gap"]["strategy"].is_string() && v.get("largest_gap_uncalibrated").is_none());
    let text = ok(&["bench", "-m", "toy-if", "--steps", "1"]);
    for needle in [
        "cost model: uncalibrated",
        "predicted",
        "gap",
        "largest gap between predicted and measured overhead:",
    ] {
        assert!(text.contains(needle), "bench lacks '{needle}':\n{text}");
    }
    assert!(!text.contains("uncalib."), "{text}");
}

#[test]
fn calibrations_that_do_not_apply_here_are_refused() {
    let file = calibrated();
    let good = std::fs::read_to_string(&file).unwrap();
    let edited = temp("edited.json");
    let refused = |from: &str, to: &str, args: &[&str]| -> String {
        assert!(good.contains(from), "{from} not in {good}");
        std::fs::write(&edited, good.replacen(from, to, 1)).unwrap();
        let mut all = args.to_vec();
        all.extend(["--calibration", s(&edited)]);
        fails(&all, 1)
    };
    let e = refused("\"threads\": ", "\"threads\": 1", &["optimize", "-m", "toy-if"]);
    assert!(
        e.contains("measured on another host or build") && e.contains("memopt calibrate --device cpu"),
        "{e}"
    );
    let e = refused(
        "\"device\": \"cpu\"",
        "\"device\": \"cuda:0\"",
        &["bench", "-m", "toy-if", "--steps", "1"],
    );
    assert!(
        e.contains("measured on cuda:0") && e.contains("this plan is for cpu"),
        "{e}"
    );
    let e = refused("\"format\": 1", "\"format\": 7", &["optimize", "-m", "toy-if"]);
    assert!(e.contains("format 7 is not supported"), "{e}");
    let e = refused("{", "", &["optimize", "-m", "toy-if"]);
    assert!(
        e.contains("not a calibration file") && e.contains(s(&edited)),
        "{e}"
    );
    let missing = fails(&["optimize", "--calibration", "/nonexistent/cal.json"], 1);
    assert!(missing.contains("/nonexistent/cal.json"), "{missing}");
    let e = fails(&["calibrate", "-m", "toy-if", "--device", "meta"], 2);
    assert!(e.contains("calibrate times real steps"), "{e}");
}

#[test]
fn bench_adds_a_row_for_a_plan_file_made_at_another_size() {
    let plan = temp("plan.json");
    ok(&[
        "optimize",
        "-m",
        "toy-if",
        "-n",
        "128",
        "--input",
        "512",
        "--strategy",
        "min-memory",
        "-o",
        s(&plan),
    ]);
    let o = memopt(&[
        "bench",
        "-m",
        "toy-if",
        "--steps",
        "1",
        "--plan",
        s(&plan),
        "--json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains("made for toy-if T=4 N=128"),
        "the other size is said: {stderr}"
    );
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let rows = v["rows"].as_array().expect("rows");
    let row = rows.last().unwrap();
    assert_eq!(
        (row["strategy"].as_str(), row["setting"].as_str()),
        (Some("plan file"), Some(s(&plan)))
    );
    assert!(u(row, "entries") > 0 && row["rejected"].is_null(), "{row}");
    assert!(
        f(row, "predicted_overhead") > 0.0 && row["overhead"].is_f64(),
        "{row}"
    );
    assert_eq!(u(row, "measured_peak_bytes"), u(row, "peak_bytes"), "{row}");
}
