//! A training progress line on stderr: redrawn in place with `\r` on a terminal, plain lines
//! (about ten per run) otherwise, so logs stay readable.

use crate::format::bytes;
use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

/// Progress of `total` steps.
pub struct Progress {
    total: usize,
    started: Instant,
    last_draw: Option<Instant>,
    terminal: bool,
    enabled: bool,
}

/// What one step reports.
#[derive(Debug, Clone, Copy)]
pub struct StepStatus {
    /// Steps done.
    pub done: usize,
    /// The step's loss (`None` on Meta).
    pub loss: Option<f32>,
    /// Bytes held now.
    pub current_bytes: u64,
    /// Most bytes held so far.
    pub peak_bytes: u64,
}

impl Progress {
    /// A progress display for `total` steps; `enabled = false` draws nothing (`--json`,
    /// `--quiet`).
    pub fn new(total: usize, enabled: bool) -> Progress {
        Progress {
            total,
            started: Instant::now(),
            last_draw: None,
            terminal: std::io::stderr().is_terminal(),
            enabled,
        }
    }

    /// The line for `s`: bar, steps, steps/s, loss, current and peak memory.
    pub fn line(&self, s: &StepStatus) -> String {
        let width = 24;
        let filled = (width * s.done)
            .checked_div(self.total)
            .unwrap_or(width)
            .min(width);
        let elapsed = self.started.elapsed().as_secs_f64();
        let rate = if elapsed > 0.0 {
            s.done as f64 / elapsed
        } else {
            0.0
        };
        let loss = s.loss.map_or("n/a (meta)".to_string(), |l| format!("{l:.4}"));
        format!(
            "[{}{}] {}/{} {:.2} steps/s  loss {}  mem {} (peak {})",
            "=".repeat(filled),
            " ".repeat(width - filled),
            s.done,
            self.total,
            rate,
            loss,
            bytes(s.current_bytes),
            bytes(s.peak_bytes)
        )
    }

    /// Reports a finished step.
    pub fn update(&mut self, s: &StepStatus) {
        if !self.enabled {
            return;
        }
        let last = s.done == self.total;
        let mut err = std::io::stderr().lock();
        if self.terminal {
            let due = self
                .last_draw
                .is_none_or(|t| t.elapsed() >= Duration::from_millis(100));
            if due || last {
                let _ = write!(err, "\r{}\x1b[K", self.line(s));
                if last {
                    let _ = writeln!(err);
                }
                let _ = err.flush();
                self.last_draw = Some(Instant::now());
            }
        } else {
            let every = self.total.div_ceil(10).max(1);
            if s.done.is_multiple_of(every) || last || s.done == 1 {
                let _ = writeln!(err, "{}", self.line(s));
            }
        }
    }
}
