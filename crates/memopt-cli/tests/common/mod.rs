//! Helpers shared by the CLI's integration tests: run the `memopt` binary and check how it
//! ended.
// Each test file uses its own subset of these helpers.
#![allow(dead_code)]

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The shipped custom-model example.
pub const EXAMPLE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../examples/models/small-snn.json"
);

/// Runs `memopt` with `args`.
pub fn memopt(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_memopt"))
        .args(args)
        .output()
        .expect("the memopt binary runs")
}

/// Runs a command that must succeed; returns its stdout.
pub fn ok(args: &[&str]) -> String {
    let o = memopt(args);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "memopt {args:?} failed: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    String::from_utf8(o.stdout).expect("utf-8 output")
}

pub fn json(args: &[&str]) -> Value {
    let text = ok(args);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("memopt {args:?} printed no JSON ({e}):\n{text}"))
}

/// Runs a command that must fail with `code`; returns its one-line error message.
pub fn fails(args: &[&str], code: i32) -> String {
    let o = memopt(args);
    let stderr = String::from_utf8_lossy(&o.stderr).to_string();
    assert_eq!(o.status.code(), Some(code), "memopt {args:?}: {stderr}");
    assert!(stderr.starts_with("error: "), "memopt {args:?}: {stderr}");
    assert!(
        !stderr.contains("panicked") && !stderr.contains("backtrace"),
        "{stderr}"
    );
    if code == 1 {
        assert_eq!(stderr.trim_end().lines().count(), 1, "one line: {stderr}");
    }
    stderr
}

/// A path named `name` in a fresh temporary directory that is removed, with everything in it,
/// when this is dropped (also when the test fails). Derefs to the path.
pub struct TempPath {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

impl std::ops::Deref for TempPath {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.path
    }
}

impl AsRef<Path> for TempPath {
    fn as_ref(&self) -> &Path {
        &self.path
    }
}

/// A fresh path named `name` (nothing is created there), valid while the result is held.
pub fn temp(name: &str) -> TempPath {
    let dir = tempfile::Builder::new()
        .prefix("memopt-cli-test-")
        .tempdir()
        .expect("temp dir");
    let path = dir.path().join(name);
    TempPath { _dir: dir, path }
}

pub fn s(p: &std::path::Path) -> &str {
    p.to_str().expect("utf-8 temp path")
}

pub fn u(v: &Value, field: &str) -> u64 {
    v[field]
        .as_u64()
        .unwrap_or_else(|| panic!("no integer '{field}' in {v}"))
}

pub fn f(v: &Value, field: &str) -> f64 {
    v[field]
        .as_f64()
        .unwrap_or_else(|| panic!("no number '{field}' in {v}"))
}
