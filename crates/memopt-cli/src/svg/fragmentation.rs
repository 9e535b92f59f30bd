//! The caching allocator's levels in the memory chart: the reserved total over the step, the
//! fragmentation between it and the allocated total (reserved - allocated: cached free blocks
//! and split remainders), and the three levels at the peak in words.

use super::frame::{Frame, band_path, esc, sample};
use crate::format::bytes;
use crate::timeline::KindTimeline;
use memopt_profiler::MemoryReport;
use std::fmt::Write;

/// Fill of the fragmentation band.
pub(crate) const FRAGMENTATION: &str = "#fdb863";
/// Stroke of the reserved line.
pub(crate) const RESERVED: &str = "#8c510a";

/// The band between the allocated and the reserved totals of `t` (group
/// `fragmentation-{id}`) and the reserved total as a line (group `reserved-{id}`), at the
/// positions `xs`. Nothing is drawn for a timeline without allocator levels.
pub(crate) fn fragmentation_band(s: &mut String, f: &Frame, t: &KindTimeline, xs: &[f64], id: &str) {
    if t.reserved.len() != t.points.len() || t.allocated.len() != t.points.len() {
        return;
    }
    let idx = sample(t);
    let corners: Vec<(f64, u64, u64)> = idx
        .iter()
        .map(|&i| (xs[i], t.reserved[i], t.allocated[i]))
        .collect();
    let d = band_path(f, &corners);
    let _ = writeln!(
        s,
        r#"<g id="fragmentation-{id}" stroke="none"><path fill="{FRAGMENTATION}" fill-opacity="0.45" d="{}"><title>fragmentation: reserved - allocated ({id})</title></path></g>"#,
        d.trim_end()
    );
    let pts: Vec<String> = idx
        .iter()
        .map(|&i| format!("{:.1},{:.1}", f.x(xs[i]), f.y(t.reserved[i])))
        .collect();
    let _ = writeln!(
        s,
        r#"<g id="reserved-{id}"><polyline fill="none" stroke="{RESERVED}" stroke-width="1.2" points="{}"><title>reserved ({id})</title></polyline></g>"#,
        pts.join(" ")
    );
}

/// One line per step, from `y` down: its requested, allocated and reserved peaks and the
/// fragmentation (reserved - allocated) at its reserved peak (group `allocator-levels`).
/// Returns the height used, in pixels.
pub(crate) fn level_lines(s: &mut String, y: f64, steps: &[(&str, &MemoryReport)], left: f64) -> f64 {
    let _ = writeln!(s, r##"<g id="allocator-levels" fill="#333">"##);
    let mut dy = 0.0;
    for (label, report) in steps {
        let a = &report.allocator;
        let _ = writeln!(
            s,
            r#"<text x="{left}" y="{:.1}">{} peaks: requested {}, allocated {}, reserved {}; fragmentation at the reserved peak {}</text>"#,
            y + dy,
            esc(label),
            esc(&bytes(a.requested_peak_bytes)),
            esc(&bytes(a.allocated_peak_bytes)),
            esc(&bytes(a.reserved_peak_bytes)),
            esc(&bytes(a.fragmentation_bytes()))
        );
        dy += 16.0;
    }
    s.push_str("</g>\n");
    dy
}
