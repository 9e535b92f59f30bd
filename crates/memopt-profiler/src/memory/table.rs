//! The memory report as a text table.

use super::MemoryReport;
use crate::format::{bytes, path};
use std::fmt::{self, Write};

impl MemoryReport {
    /// The peak, its breakdown by kind, the top `top` modules at the peak and, with
    /// `modules`, every module's figures.
    pub fn table(&self, top: usize, modules: bool) -> String {
        let mut s = String::new();
        // Writing to a String never fails.
        let _ = self.write_table(&mut s, top, modules);
        s
    }

    fn write_table(&self, s: &mut String, top: usize, modules: bool) -> fmt::Result {
        writeln!(
            s,
            "memory of one step: {} on {} (plan: {} entries{})",
            self.workload,
            self.device,
            self.plan.entries.len(),
            if self.data_dependent_sizes {
                ", data-dependent sizes: a Meta estimate is an upper bound"
            } else {
                ""
            }
        )?;
        writeln!(
            s,
            "peak: {} bytes ({}) in {} at {}",
            self.peak_bytes,
            bytes(self.peak_bytes),
            self.peak_phase,
            path(&self.peak_path)
        )?;
        if self.baseline_bytes > 0 {
            writeln!(s, "held before recording: {} bytes", self.baseline_bytes)?;
        }
        let a = &self.allocator;
        writeln!(
            s,
            "caching allocator peaks: requested {} ({}), allocated {} ({}), reserved {} ({}); \
             fragmentation at the reserved peak {} (reserved - allocated)",
            a.requested_peak_bytes,
            bytes(a.requested_peak_bytes),
            a.allocated_peak_bytes,
            bytes(a.allocated_peak_bytes),
            a.reserved_peak_bytes,
            bytes(a.reserved_peak_bytes),
            bytes(a.fragmentation_bytes())
        )?;
        writeln!(s, "\nby kind at the peak:")?;
        for (kind, b) in self.by_kind.iter().filter(|(_, b)| *b > 0) {
            writeln!(
                s,
                "  {:<20} {:>14} {:>12} {:>6.1}%",
                kind.name(),
                b,
                bytes(b),
                100.0 * b as f64 / self.peak_bytes.max(1) as f64
            )?;
        }
        writeln!(s, "\ntop {top} modules at the peak:")?;
        for h in self.top_modules(top) {
            let main: Vec<String> = h
                .by_kind
                .iter()
                .filter(|(_, b)| *b > 0)
                .map(|(k, b)| format!("{} {}", k.name(), bytes(b)))
                .collect();
            writeln!(
                s,
                "  {:<32} {:>14} {:>12}  {}",
                path(&h.path),
                h.bytes,
                bytes(h.bytes),
                main.join(", ")
            )?;
        }
        if modules {
            writeln!(
                s,
                "\n  {:<32} {:<10} {:>6} {:>12} {:>12} {:>12} {:>12}",
                "module", "phase", "visits", "allocated", "held@exit", "peak", "saved"
            )?;
            for m in &self.modules {
                writeln!(
                    s,
                    "  {:<32} {:<10} {:>6} {:>12} {:>12} {:>12} {:>12}",
                    path(&m.path),
                    m.phase.name(),
                    m.visits,
                    bytes(m.allocated_bytes),
                    bytes(m.held_at_exit_bytes),
                    bytes(m.peak_bytes),
                    bytes(m.saved_bytes)
                )?;
            }
        }
        Ok(())
    }
}

impl fmt::Display for MemoryReport {
    /// The table with the top five modules and every module's figures.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.table(5, true))
    }
}
