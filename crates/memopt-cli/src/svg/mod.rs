//! The memory chart of a step as a standalone SVG: the timeline (bytes held after each event,
//! the planned step stacked by kind, the baseline's total as a line) and a horizontal bar chart
//! of what each module holds at the peak, baseline and planned side by side, stacked by kind.

mod fragmentation;
mod frame;

use crate::align::{Stage, align, recompute_spans};
use crate::format::{bytes, mib, path};
use crate::timeline::KindTimeline;
use fragmentation::{FRAGMENTATION, RESERVED, fragmentation_band, level_lines};
pub(crate) use frame::esc;
use frame::{Frame, PLOT_BOTTOM, PLOT_LEFT, PLOT_RIGHT, PLOT_TOP, band_path, sample};
use memopt_core::MemoryKind;
use memopt_profiler::MemoryReport;
use std::collections::HashMap;
use std::fmt::Write;

/// One step to draw.
#[derive(Debug, Clone, Copy)]
pub struct Series<'a> {
    /// Bytes per kind after each event.
    pub timeline: &'a KindTimeline,
    /// The step's memory report (who holds what at the peak).
    pub report: &'a MemoryReport,
}

const WIDTH: f64 = 980.0;
/// Modules in the bar chart.
const BARS: usize = 12;
const BAR_HEIGHT: f64 = 11.0;
const BAR_LABEL_WIDTH: f64 = 220.0;
/// Colour of the recompute strip.
const RECOMPUTE: &str = "#b2182b";

/// Fill colour of each kind, in [`MemoryKind::ALL`] order.
fn colour(kind: MemoryKind) -> &'static str {
    match kind {
        MemoryKind::Parameter => "#4e79a7",
        MemoryKind::Buffer => "#a0cbe8",
        MemoryKind::Gradient => "#f28e2b",
        MemoryKind::OptimizerState => "#ffbe7d",
        MemoryKind::Input => "#59a14f",
        MemoryKind::Activation => "#e15759",
        MemoryKind::SavedForBackward => "#b07aa1",
        MemoryKind::Packed => "#76b7b2",
        MemoryKind::Offloaded => "#9c755f",
        MemoryKind::Workspace => "#bab0ac",
    }
}

/// A round axis step giving about `ticks` ticks up to `max`.
fn nice_step(max: f64, ticks: f64) -> f64 {
    let raw = (max / ticks).max(f64::MIN_POSITIVE);
    let mag = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 2.5, 5.0, 10.0]
        .into_iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag)
}

/// Renders the chart. `title` heads it; `planned` is drawn stacked by kind with `baseline`'s
/// total as a dashed line; without a plan the baseline itself is stacked. Groups carry the ids
/// `baseline`, `planned`, `bars-baseline` and `bars-planned`.
///
/// The x axis is the step phase by phase and module by module, the two steps aligned on the
/// same modules ([`crate::align`]); bands mark forward, backward and optimizer, a red strip
/// below the axis the planned step's recomputation. `module_types` labels the bars with each
/// module's type (`3 (Conv2d)`).
pub fn render(
    title: &str,
    baseline: Series<'_>,
    planned: Option<Series<'_>>,
    module_types: &HashMap<String, &str>,
) -> String {
    let top = bar_rows(baseline.report, planned.map(|p| p.report));
    let per_row = if planned.is_some() {
        2.0 * BAR_HEIGHT + 8.0
    } else {
        BAR_HEIGHT + 8.0
    };
    let bars_top = PLOT_BOTTOM + 90.0 + 16.0 * (1.0 + f64::from(u8::from(planned.is_some())));
    let height = bars_top + 40.0 + per_row * top.len() as f64 + 30.0;
    let mut s = String::new();
    // Writing to a String never fails; results are ignored below for that reason.
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height:.0}" viewBox="0 0 {WIDTH} {height:.0}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, "<title>{}</title>", esc(title));
    let _ = writeln!(
        s,
        r#"<rect x="0" y="0" width="{WIDTH}" height="{height:.0}" fill="white"/>"#
    );
    let _ = writeln!(
        s,
        r#"<text x="{PLOT_LEFT}" y="24" font-size="15" font-weight="bold">{}</text>"#,
        esc(title)
    );
    timeline_chart(&mut s, baseline, planned);
    let mut steps = vec![("baseline", baseline.report)];
    if let Some(p) = planned {
        steps.push(("planned", p.report));
    }
    level_lines(&mut s, PLOT_BOTTOM + 62.0, &steps, PLOT_LEFT);
    bar_chart(&mut s, &top, bars_top, baseline, planned, module_types);
    s.push_str("</svg>\n");
    s
}

fn timeline_chart(s: &mut String, baseline: Series<'_>, planned: Option<Series<'_>>) {
    let all: Vec<&KindTimeline> = std::iter::once(baseline.timeline)
        .chain(planned.map(|p| p.timeline))
        .collect();
    let axis = align(baseline.timeline, planned.map(|p| p.timeline));
    let x_max = axis.length.max(1.0);
    let peak = all
        .iter()
        .map(|t| t.peak().max(t.reserved_peak()))
        .max()
        .unwrap_or(0);
    let step = nice_step(mib(peak).max(1e-3) * 1.05, 5.0);
    let y_max_mib = (mib(peak) * 1.05 / step).ceil().max(1.0) * step;
    let f = Frame::new(x_max, y_max_mib);
    let _ = writeln!(
        s,
        r##"<text x="{PLOT_LEFT}" y="44" fill="#444">Memory held during one training step (computed on the Meta device, identical to the CPU event for event)</text>"##
    );
    // Grid and y axis.
    let _ = writeln!(s, r##"<g id="axes" stroke="#999" fill="#333">"##);
    let mut v = 0.0;
    while v <= y_max_mib + 1e-9 {
        let y = PLOT_BOTTOM - (PLOT_BOTTOM - PLOT_TOP) * v / y_max_mib;
        let _ = writeln!(
            s,
            r##"<line x1="{PLOT_LEFT}" y1="{y:.1}" x2="{PLOT_RIGHT}" y2="{y:.1}" stroke="#e5e5e5"/><text x="{:.1}" y="{:.1}" text-anchor="end" stroke="none">{}</text>"##,
            PLOT_LEFT - 6.0,
            y + 4.0,
            trim_number(v)
        );
        v += step;
    }
    let _ = writeln!(
        s,
        r#"<line x1="{PLOT_LEFT}" y1="{PLOT_BOTTOM}" x2="{PLOT_RIGHT}" y2="{PLOT_BOTTOM}"/><line x1="{PLOT_LEFT}" y1="{PLOT_TOP}" x2="{PLOT_LEFT}" y2="{PLOT_BOTTOM}"/>"#
    );
    let _ = writeln!(
        s,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle" stroke="none">the step, phase by phase and module by module (baseline and plan aligned on the same modules)</text>"#,
        (PLOT_LEFT + PLOT_RIGHT) / 2.0,
        PLOT_BOTTOM + 38.0
    );
    let _ = writeln!(
        s,
        r#"<text transform="translate(22 {:.1}) rotate(-90)" text-anchor="middle" stroke="none">MiB held on the device</text>"#,
        (PLOT_TOP + PLOT_BOTTOM) / 2.0
    );
    s.push_str("</g>\n");

    stage_bands(s, &f, &axis.stages);
    let (stacked, stacked_x, stacked_id, line) = match planned {
        Some(p) => (
            p,
            &axis.second,
            "planned",
            Some((baseline, &axis.first, "baseline")),
        ),
        None => (baseline, &axis.first, "baseline", None),
    };
    fragmentation_band(s, &f, stacked.timeline, stacked_x, stacked_id);
    stacked_areas(s, &f, stacked.timeline, stacked_x, stacked_id);
    if let Some((series, xs, id)) = line {
        total_line(s, &f, series.timeline, xs, id);
    }
    let recompute = recompute_spans(stacked.timeline, stacked_x);
    recompute_strip(s, &f, &recompute);
    // Peak markers.
    let mut marks = vec![(baseline.report.peak_bytes, "baseline peak", "#222")];
    if let Some(p) = planned {
        marks.push((p.report.peak_bytes, "planned peak", "#b2182b"));
    }
    let reserved_label = format!("{stacked_id} reserved peak");
    marks.push((
        stacked.report.allocator.reserved_peak_bytes,
        reserved_label.as_str(),
        RESERVED,
    ));
    // Labels of peaks closer than a line of text apart go on either side of their lines.
    // Labels sit just above their lines, top to bottom, each at least a line of text below
    // the one before.
    let mut order: Vec<usize> = (0..marks.len()).collect();
    order.sort_by(|&a, &b| f.y(marks[a].0).total_cmp(&f.y(marks[b].0)));
    let mut label_y = vec![0.0; marks.len()];
    let mut last = f64::NEG_INFINITY;
    for i in order {
        last = (f.y(marks[i].0) - 4.0).max(last + 14.0);
        label_y[i] = last;
    }
    let _ = writeln!(s, r#"<g id="peaks">"#);
    for (i, (b, label, col)) in marks.iter().enumerate() {
        let y = f.y(*b);
        let dy = label_y[i] - y;
        let _ = writeln!(
            s,
            r#"<line x1="{PLOT_LEFT}" y1="{y:.1}" x2="{PLOT_RIGHT}" y2="{y:.1}" stroke="{col}" stroke-dasharray="2 3"/><text x="{:.1}" y="{:.1}" text-anchor="end" fill="{col}">{label} {}</text>"#,
            PLOT_RIGHT - 4.0,
            y + dy,
            esc(&bytes(*b))
        );
    }
    s.push_str("</g>\n");
    legend(
        s,
        stacked.timeline,
        line.is_some(),
        !recompute.is_empty(),
        stacked_id,
    );
}

/// Light bands behind the curves for forward, backward and optimizer, named at the top.
fn stage_bands(s: &mut String, f: &Frame, stages: &[(Stage, f64, f64)]) {
    let _ = writeln!(s, r#"<g id="stages">"#);
    for (stage, from, to) in stages {
        let fill = match stage {
            Stage::Forward => "#eef4fa",
            Stage::Backward => "#fbf3ea",
            Stage::Optimizer => "#e9f3e6",
            Stage::Setup => "#f1f1f1",
        };
        let (x0, x1) = (f.x(*from), f.x(*to));
        let _ = writeln!(
            s,
            r##"<rect class="stage-{}" x="{x0:.1}" y="{PLOT_TOP}" width="{:.1}" height="{:.1}" fill="{fill}"/>"##,
            stage.name(),
            (x1 - x0).max(0.5),
            PLOT_BOTTOM - PLOT_TOP
        );
        if x1 - x0 > 40.0 {
            let _ = writeln!(
                s,
                r##"<text x="{:.1}" y="{:.1}" text-anchor="middle" fill="#666">{}</text>"##,
                (x0 + x1) / 2.0,
                PLOT_TOP + 14.0,
                stage.name()
            );
        }
    }
    s.push_str("</g>\n");
}

/// A red strip under the axis where the planned step recomputes.
fn recompute_strip(s: &mut String, f: &Frame, spans: &[(f64, f64)]) {
    let _ = writeln!(s, r#"<g id="recompute">"#);
    for (from, to) in spans {
        let (x0, x1) = (f.x(*from), f.x(*to));
        let _ = writeln!(
            s,
            r##"<rect x="{x0:.1}" y="{:.1}" width="{:.1}" height="6" fill="{RECOMPUTE}"><title>recompute</title></rect>"##,
            PLOT_BOTTOM + 2.0,
            (x1 - x0).max(1.0)
        );
    }
    s.push_str("</g>\n");
}

/// `12.0` -> `12`, `2.5` -> `2.5`.
fn trim_number(v: f64) -> String {
    let t = format!("{v:.2}");
    t.trim_end_matches('0').trim_end_matches('.').to_string()
}

fn stacked_areas(s: &mut String, f: &Frame, t: &KindTimeline, xs: &[f64], id: &str) {
    let idx = sample(t);
    let kinds = t.kinds_used();
    let _ = writeln!(s, r#"<g id="{id}" stroke="none">"#);
    let mut below: Vec<u64> = vec![0; idx.len()];
    for k in kinds {
        let above: Vec<u64> = idx
            .iter()
            .zip(&below)
            .map(|(&i, b)| b + t.points[i][k.index()])
            .collect();
        let corners: Vec<(f64, u64, u64)> = idx
            .iter()
            .enumerate()
            .map(|(j, &i)| (xs[i], above[j], below[j]))
            .collect();
        let d = band_path(f, &corners);
        let _ = writeln!(
            s,
            r#"<path class="kind-{}" fill="{}" fill-opacity="0.85" d="{}"><title>{} ({id})</title></path>"#,
            k.name(),
            colour(k),
            d.trim_end(),
            k.name()
        );
        below = above;
    }
    s.push_str("</g>\n");
}

fn total_line(s: &mut String, f: &Frame, t: &KindTimeline, xs: &[f64], id: &str) {
    let idx = sample(t);
    let pts: Vec<String> = idx
        .iter()
        .map(|&i| format!("{:.1},{:.1}", f.x(xs[i]), f.y(t.total(i))))
        .collect();
    let _ = writeln!(
        s,
        r##"<g id="{id}"><polyline fill="none" stroke="#222" stroke-width="1.6" stroke-dasharray="6 3" points="{}"><title>{id} total</title></polyline></g>"##,
        pts.join(" ")
    );
}

fn legend(s: &mut String, t: &KindTimeline, with_baseline: bool, with_recompute: bool, stacked_id: &str) {
    let x = PLOT_RIGHT + 20.0;
    let mut y = PLOT_TOP;
    let _ = writeln!(s, r#"<g id="legend">"#);
    let _ = writeln!(
        s,
        r#"<text x="{x}" y="{y:.1}" font-weight="bold">{stacked_id} step, by kind</text>"#
    );
    y += 8.0;
    for k in t.kinds_used() {
        y += 18.0;
        let _ = writeln!(
            s,
            r#"<rect x="{x}" y="{:.1}" width="14" height="12" fill="{}"/><text x="{:.1}" y="{y:.1}">{}</text>"#,
            y - 10.0,
            colour(k),
            x + 20.0,
            k.name()
        );
    }
    if with_baseline {
        y += 24.0;
        let _ = writeln!(
            s,
            r##"<line x1="{x}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="#222" stroke-width="1.6" stroke-dasharray="6 3"/><text x="{:.1}" y="{y:.1}">baseline total</text>"##,
            y - 4.0,
            x + 14.0,
            y - 4.0,
            x + 20.0
        );
    }
    y += 22.0;
    let _ = writeln!(
        s,
        r#"<rect x="{x}" y="{:.1}" width="14" height="12" fill="{FRAGMENTATION}" fill-opacity="0.45"/><line x1="{x}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="{RESERVED}" stroke-width="1.2"/><text x="{:.1}" y="{y:.1}">fragmentation, reserved</text>"#,
        y - 10.0,
        y - 10.0,
        x + 14.0,
        y - 10.0,
        x + 20.0
    );
    if with_recompute {
        y += 22.0;
        let _ = writeln!(
            s,
            r#"<rect x="{x}" y="{:.1}" width="14" height="6" fill="{RECOMPUTE}"/><text x="{:.1}" y="{y:.1}">recompute ({stacked_id})</text>"#,
            y - 7.0,
            x + 20.0
        );
    }
    s.push_str("</g>\n");
}

/// The modules drawn as bars: the largest holders at the peak of either step (memory held
/// before the recording started is left out; the root holds optimizer state, inputs and loss).
fn bar_rows(baseline: &MemoryReport, planned: Option<&MemoryReport>) -> Vec<String> {
    let mut paths: Vec<(String, u64)> = Vec::new();
    for r in std::iter::once(baseline).chain(planned) {
        for h in &r.holders {
            if h.path.starts_with('(') {
                continue;
            }
            match paths.iter_mut().find(|(p, _)| *p == h.path) {
                Some((_, b)) => *b = (*b).max(h.bytes),
                None => paths.push((h.path.clone(), h.bytes)),
            }
        }
    }
    paths.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    paths.into_iter().take(BARS).map(|(p, _)| p).collect()
}

fn bar_chart(
    s: &mut String,
    rows: &[String],
    top: f64,
    baseline: Series<'_>,
    planned: Option<Series<'_>>,
    module_types: &HashMap<String, &str>,
) {
    let _ = writeln!(
        s,
        r#"<text x="{PLOT_LEFT}" y="{:.1}" font-size="14" font-weight="bold">Held at the step's peak, by module (top {})</text>"#,
        top,
        rows.len()
    );
    let _ = writeln!(
        s,
        r##"<text x="{PLOT_LEFT}" y="{:.1}" fill="#444">{}</text>"##,
        top + 18.0,
        if planned.is_some() {
            "upper bar: baseline, lower bar: planned; coloured by kind as above"
        } else {
            "coloured by kind as above"
        }
    );
    let series: Vec<(&MemoryReport, &str)> = std::iter::once((baseline.report, "bars-baseline"))
        .chain(planned.map(|p| (p.report, "bars-planned")))
        .collect();
    let max = series
        .iter()
        .flat_map(|(r, _)| {
            r.holders
                .iter()
                .filter(|h| rows.contains(&h.path))
                .map(|h| h.bytes)
        })
        .max()
        .unwrap_or(1)
        .max(1);
    let x0 = 20.0 + BAR_LABEL_WIDTH;
    let width = WIDTH - x0 - 140.0;
    let per_row = series.len() as f64 * BAR_HEIGHT + 8.0;
    let first = top + 34.0;
    let _ = writeln!(s, r#"<g id="bar-labels">"#);
    for (r, p) in rows.iter().enumerate() {
        let y = first + per_row * r as f64 + BAR_HEIGHT * series.len() as f64 / 2.0 + 4.0;
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{y:.1}" text-anchor="end">{}</text>"#,
            x0 - 8.0,
            esc(&match module_types.get(p) {
                Some(t) if p.is_empty() => format!("(root: {t})"),
                Some(t) => format!("{} ({t})", path(p)),
                None => path(p).to_string(),
            })
        );
    }
    s.push_str("</g>\n");
    for (j, (report, id)) in series.iter().enumerate() {
        let _ = writeln!(s, r#"<g id="{id}">"#);
        for (r, p) in rows.iter().enumerate() {
            let y = first + per_row * r as f64 + BAR_HEIGHT * j as f64;
            let Some(h) = report.holders.iter().find(|h| &h.path == p) else {
                let _ = writeln!(
                    s,
                    r##"<text x="{x0:.1}" y="{:.1}" fill="#666" font-size="10">0 B</text>"##,
                    y + BAR_HEIGHT - 2.0
                );
                continue;
            };
            let mut x = x0;
            for (k, b) in h.by_kind.iter().filter(|(_, b)| *b > 0) {
                let w = width * b as f64 / max as f64;
                let _ = writeln!(
                    s,
                    r#"<rect x="{x:.1}" y="{y:.1}" width="{w:.2}" height="{:.1}" fill="{}"><title>{} {}: {}</title></rect>"#,
                    BAR_HEIGHT - 1.0,
                    colour(k),
                    esc(path(p)),
                    k.name(),
                    esc(&bytes(b))
                );
                x += w;
            }
            let _ = writeln!(
                s,
                r##"<text x="{:.1}" y="{:.1}" fill="#333" font-size="10">{}</text>"##,
                x + 4.0,
                y + BAR_HEIGHT - 2.0,
                esc(&bytes(h.bytes))
            );
        }
        s.push_str("</g>\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_are_round_and_cover_the_range() {
        assert_eq!(nice_step(100.0, 5.0), 20.0);
        assert_eq!(nice_step(7.0, 5.0), 2.0);
        assert_eq!(nice_step(0.3, 5.0), 0.1);
        assert_eq!(trim_number(12.0), "12");
        assert_eq!(trim_number(2.5), "2.5");
    }
}
