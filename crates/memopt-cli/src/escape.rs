//! Names from files (a model's name, a plan's paths) may hold control characters; these
//! functions keep them from reaching a terminal or an SVG file as anything but visible text.
//!
//! [`TerminalSafe`] wraps the writer every command reports to (see [`crate::run`]), and the
//! binary escapes its error line with [`terminal`], so no path to the terminal is missed.

use std::io::Write;

/// `s` with every control character except newline and tab written as `\u{1b}`.
pub fn terminal(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if c.is_control() && c != '\n' && c != '\t' {
            out.push_str(&c.escape_unicode().to_string());
        } else {
            out.push(c);
        }
    }
    out
}

/// `s` with every control character written as `\u{..}` (for one-line text: SVG labels).
pub fn visible(s: &str) -> String {
    terminal(s).replace('\n', "\\u{a}").replace('\t', "\\u{9}")
}

/// `s` as one shell word: unchanged when it holds only safe characters, else single-quoted.
pub fn shell_word(s: &str) -> String {
    let safe = |c: char| c.is_ascii_alphanumeric() || "-_./:=+%,@".contains(c);
    if !s.is_empty() && s.chars().all(safe) {
        s.to_string()
    } else {
        format!("'{}'", visible(s).replace('\'', r"'\''"))
    }
}

/// A writer that passes text through with ASCII control characters other than newline and tab
/// (escape sequences, carriage returns, backspaces) written as `\u{1b}`.
pub struct TerminalSafe<'a> {
    inner: &'a mut dyn Write,
}

impl<'a> TerminalSafe<'a> {
    /// Wraps `inner`.
    pub fn new(inner: &'a mut dyn Write) -> Self {
        TerminalSafe { inner }
    }
}

impl Write for TerminalSafe<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let unsafe_byte = |b: u8| (b < 0x20 && b != b'\n' && b != b'\t') || b == 0x7f;
        let mut start = 0;
        for (i, &b) in buf.iter().enumerate() {
            if unsafe_byte(b) {
                self.inner.write_all(&buf[start..i])?;
                write!(self.inner, "\\u{{{b:x}}}")?;
                start = i + 1;
            }
        }
        self.inner.write_all(&buf[start..])?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_become_visible() {
        assert_eq!(terminal("a\x1b[31mb\r\nc\td"), "a\\u{1b}[31mb\\u{d}\nc\td");
        assert_eq!(terminal("\u{9b}x"), "\\u{9b}x");
        assert_eq!(visible("a\nb"), "a\\u{a}b");
        assert_eq!(shell_word("sew-resnet18"), "sew-resnet18");
        assert_eq!(shell_word("my model.json"), "'my model.json'");
        assert_eq!(shell_word("it's"), r"'it'\''s'");
        let mut out = Vec::new();
        writeln!(TerminalSafe::new(&mut out), "x\x1b[2Jy\x07").unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "x\\u{1b}[2Jy\\u{7}\n");
    }
}
