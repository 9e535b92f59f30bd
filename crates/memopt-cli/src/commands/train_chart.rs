//! The loss/accuracy chart of `memopt train --data --chart`: two panels over the epochs,
//! training and test curves, as a standalone SVG.

use memopt_data::training::EpochMetrics;
use std::fmt::Write;

const W: f64 = 720.0;
const PANEL_H: f64 = 220.0;
const LEFT: f64 = 60.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 40.0;
const GAP: f64 = 50.0;

fn polyline(points: &[(f64, f64)], color: &str, dashed: bool) -> String {
    let pts: Vec<String> = points.iter().map(|(x, y)| format!("{x:.1},{y:.1}")).collect();
    format!(
        "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"2\"{} points=\"{}\"/>",
        if dashed { " stroke-dasharray=\"6 4\"" } else { "" },
        pts.join(" ")
    )
}

/// One panel: `series` of (label, color, dashed, values per epoch), y from 0 to `y_max`.
fn panel(
    svg: &mut String,
    top: f64,
    title: &str,
    y_max: f64,
    epochs: usize,
    series: &[(&str, &str, bool, Vec<f64>)],
) {
    let plot_w = W - LEFT - RIGHT;
    let x = |i: usize| {
        LEFT + if epochs > 1 {
            plot_w * i as f64 / (epochs - 1) as f64
        } else {
            plot_w / 2.0
        }
    };
    let y = |v: f64| top + PANEL_H - PANEL_H * (v / y_max).clamp(0.0, 1.0);
    let _ = write!(
        svg,
        "<rect x=\"{LEFT}\" y=\"{top}\" width=\"{plot_w}\" height=\"{PANEL_H}\" fill=\"none\" stroke=\"#999\"/>\
         <text x=\"{LEFT}\" y=\"{:.1}\" font-size=\"13\">{title}</text>",
        top - 8.0
    );
    for k in 0..=4 {
        let v = y_max * k as f64 / 4.0;
        let _ = write!(
            svg,
            "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"10\" text-anchor=\"end\">{v:.3}</text>",
            LEFT - 6.0,
            y(v) + 3.0
        );
    }
    for (i, (label, color, dashed, values)) in series.iter().enumerate() {
        let pts: Vec<(f64, f64)> = values
            .iter()
            .enumerate()
            .filter(|(_, v)| v.is_finite())
            .map(|(e, &v)| (x(e), y(v)))
            .collect();
        if !pts.is_empty() {
            svg.push_str(&polyline(&pts, color, *dashed));
        }
        let lx = LEFT + plot_w - 150.0;
        let ly = top + 16.0 + 16.0 * i as f64;
        let _ = write!(
            svg,
            "<text x=\"{lx:.1}\" y=\"{ly:.1}\" font-size=\"11\" fill=\"{color}\">{label}</text>"
        );
    }
}

/// The chart of `history` (one entry per epoch run) as SVG text.
pub fn render(model: &str, history: &[EpochMetrics]) -> String {
    let h = TOP + 2.0 * PANEL_H + GAP + 40.0;
    // The model's name is the user's: escaped like every name in memopt's charts.
    let model = crate::svg::esc(model);
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{h}\" font-family=\"sans-serif\">\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\
         <text x=\"{LEFT}\" y=\"20\" font-size=\"14\">{model}: loss and accuracy per epoch (epochs {}..{})</text>",
        history.first().map_or(0, |m| m.epoch + 1),
        history.last().map_or(0, |m| m.epoch + 1)
    );
    let test = |f: fn(&memopt_data::training::SplitMetrics) -> f64| -> Vec<f64> {
        history
            .iter()
            .map(|m| m.test.as_ref().map_or(f64::NAN, f))
            .collect()
    };
    let train_loss: Vec<f64> = history.iter().map(|m| m.train.loss).collect();
    let test_loss = test(|t| t.loss);
    let loss_max = train_loss
        .iter()
        .chain(&test_loss)
        .filter(|v| v.is_finite())
        .fold(0f64, |a, &b| a.max(b))
        .max(1e-9)
        * 1.05;
    panel(
        &mut svg,
        TOP,
        "loss (cross-entropy of the time-averaged output)",
        loss_max,
        history.len(),
        &[
            ("train", "#1f77b4", false, train_loss),
            ("test", "#d62728", true, test_loss),
        ],
    );
    let train_acc: Vec<f64> = history.iter().map(|m| m.train.accuracy).collect();
    panel(
        &mut svg,
        TOP + PANEL_H + GAP,
        "accuracy",
        1.0,
        history.len(),
        &[
            ("train", "#1f77b4", false, train_acc),
            ("test", "#d62728", true, test(|t| t.accuracy)),
        ],
    );
    svg.push_str("</svg>\n");
    svg
}
