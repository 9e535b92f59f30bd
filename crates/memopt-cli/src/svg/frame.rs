//! The chart's drawing primitives: the plot area and its axes' scales ([`Frame`]), the points
//! of a timeline that are drawn, the path of a band between two curves, and XML escaping.

use crate::format::mib;
use crate::timeline::KindTimeline;
use std::fmt::Write;

pub(super) const PLOT_LEFT: f64 = 80.0;
pub(super) const PLOT_RIGHT: f64 = 760.0;
pub(super) const PLOT_TOP: f64 = 60.0;
pub(super) const PLOT_BOTTOM: f64 = 400.0;
/// Most points drawn per series; longer timelines keep each bucket's highest point.
const MAX_POINTS: usize = 1600;
/// Escapes text for XML content and attributes; control characters (which XML 1.0 cannot
/// hold, even as references) are shown as `\u{..}`.
pub(crate) fn esc(s: &str) -> String {
    crate::escape::visible(s)
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Indices of the points drawn: all of them, or each bucket's highest total when there are
/// more than [`MAX_POINTS`] (so peaks survive), always keeping the first and last.
pub(crate) fn sample(t: &KindTimeline) -> Vec<usize> {
    let n = t.points.len();
    if n <= MAX_POINTS {
        return (0..n).collect();
    }
    let per = n.div_ceil(MAX_POINTS);
    let mut out: Vec<usize> = (0..n)
        .step_by(per)
        .map(|start| {
            (start..(start + per).min(n))
                .max_by_key(|&i| t.total(i))
                .unwrap_or(start)
        })
        .collect();
    if out.first() != Some(&0) {
        out.insert(0, 0);
    }
    if out.last() != Some(&(n - 1)) {
        out.push(n - 1);
    }
    out
}

/// The plot area: axis positions up to `x_max` across, bytes up to `y_max_mib` MiB up.
pub(crate) struct Frame {
    x_max: f64,
    y_max_mib: f64,
}

impl Frame {
    /// The frame of a plot `x_max` positions wide and `y_max_mib` MiB high.
    pub(crate) fn new(x_max: f64, y_max_mib: f64) -> Self {
        Frame { x_max, y_max_mib }
    }

    /// Position `pos` of the common axis ([`crate::align::Axis`]) in pixels.
    pub(crate) fn x(&self, pos: f64) -> f64 {
        PLOT_LEFT + (PLOT_RIGHT - PLOT_LEFT) * pos / self.x_max.max(1.0)
    }
    /// `b` bytes in pixels.
    pub(crate) fn y(&self, b: u64) -> f64 {
        PLOT_BOTTOM - (PLOT_BOTTOM - PLOT_TOP) * mib(b) / self.y_max_mib
    }
}

/// The SVG path of the band between two curves, given as (axis position, upper bytes, lower
/// bytes) per point: along the upper curve, back along the lower one.
pub(crate) fn band_path(f: &Frame, corners: &[(f64, u64, u64)]) -> String {
    let mut d = String::new();
    for (j, (x, upper, _)) in corners.iter().enumerate() {
        let _ = write!(
            d,
            "{}{:.1},{:.1} ",
            if j == 0 { "M" } else { "L" },
            f.x(*x),
            f.y(*upper)
        );
    }
    for (x, _, lower) in corners.iter().rev() {
        let _ = write!(d, "L{:.1},{:.1} ", f.x(*x), f.y(*lower));
    }
    d.push('Z');
    d
}

#[cfg(test)]
mod tests {
    use super::*;
    use memopt_core::MemoryKind;

    #[test]
    fn escaping_makes_text_xml() {
        assert_eq!(esc("a<b&\"c\">"), "a&lt;b&amp;&quot;c&quot;&gt;");
        assert_eq!(esc("x\u{1b}[31m\u{0}"), "x\\u{1b}[31m\\u{0}");
    }

    #[test]
    fn sampling_keeps_the_peak_and_the_ends() {
        let mut t = KindTimeline::default();
        for i in 0..10_000u64 {
            let mut p = [0u64; MemoryKind::COUNT];
            p[0] = if i == 4321 { 1_000_000 } else { i };
            t.points.push(p);
        }
        let idx = sample(&t);
        assert!(idx.len() <= MAX_POINTS + 2);
        assert!(idx.contains(&4321));
        assert_eq!(idx.first(), Some(&0));
        assert_eq!(idx.last(), Some(&9999));
        assert!(idx.windows(2).all(|w| w[0] < w[1]));
    }
}
