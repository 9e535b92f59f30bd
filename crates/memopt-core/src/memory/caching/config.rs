//! How the caching allocator gets its memory: fixed segments, or expandable segments that grow
//! in place (PyTorch's `expandable_segments` option). Chosen per tracker when it is created:
//! from this thread's installed configuration, else the process default.

use crate::{CoreError, Result};
use serde::{Deserialize, Serialize};
use std::cell::RefCell;
use std::sync::atomic::{AtomicU8, Ordering};

/// The caching allocator's options, named as in PyTorch's `PYTORCH_CUDA_ALLOC_CONF`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct AllocatorConfig {
    /// Whether each pool is one address range whose pages are mapped as it grows and unmapped
    /// by `empty_cache`, instead of separate segments. Page sizes are rules of the target
    /// ([`crate::memory::caching::rules::expandable_page_bytes`]).
    pub expandable_segments: bool,
}

impl Default for AllocatorConfig {
    /// Expandable segments: they reserve less than fixed segments for every plan measured
    /// (docs/allocator.md) at no measured cost in step time.
    fn default() -> Self {
        AllocatorConfig::EXPANDABLE
    }
}

/// Process default: 0 unset (use [`AllocatorConfig::default`]), 1 fixed, 2 expandable.
static PROCESS_DEFAULT: AtomicU8 = AtomicU8::new(0);

thread_local! {
    static INSTALLED: RefCell<Vec<AllocatorConfig>> = const { RefCell::new(Vec::new()) };
}

impl AllocatorConfig {
    /// The environment variable the CLI and the benchmarks read, in PyTorch's syntax:
    /// `MEMOPT_ALLOC_CONF=expandable_segments:False`.
    pub const ENV: &'static str = "MEMOPT_ALLOC_CONF";

    /// Fixed segments, PyTorch's default.
    pub const FIXED: AllocatorConfig = AllocatorConfig {
        expandable_segments: false,
    };

    /// Expandable segments.
    pub const EXPANDABLE: AllocatorConfig = AllocatorConfig {
        expandable_segments: true,
    };

    /// Parses PyTorch's syntax: comma-separated `key:value` pairs. The one key memopt knows is
    /// `expandable_segments` (`True`/`False`, any case, or `1`/`0`); options of this
    /// configuration that are absent keep their default. An empty text is the default.
    pub fn parse(text: &str) -> Result<AllocatorConfig> {
        let mut config = AllocatorConfig::default();
        for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let Some((key, value)) = item.split_once(':') else {
                return Err(bad_option(format!(
                    "`{item}` is not a `key:value` pair (valid: `expandable_segments:True` or \
                     `expandable_segments:False`)"
                )));
            };
            match key.trim() {
                "expandable_segments" => {
                    config.expandable_segments = match value.trim().to_ascii_lowercase().as_str() {
                        "true" | "1" => true,
                        "false" | "0" => false,
                        other => {
                            return Err(bad_option(format!(
                                "expandable_segments takes True or False, not `{other}`"
                            )));
                        }
                    }
                }
                other => {
                    return Err(bad_option(format!(
                        "unknown option `{other}` (memopt's allocator has one: expandable_segments)"
                    )));
                }
            }
        }
        Ok(config)
    }

    /// The configuration [`AllocatorConfig::ENV`] asks for, `None` when it is unset; an error
    /// naming the variable when its text does not parse.
    pub fn from_env() -> Result<Option<AllocatorConfig>> {
        match std::env::var(Self::ENV) {
            Ok(text) => Self::parse(&text).map(Some).map_err(|e| match e {
                CoreError::InvalidArgument { message, .. } => {
                    CoreError::invalid("MEMOPT_ALLOC_CONF", message)
                }
                other => other,
            }),
            Err(std::env::VarError::NotPresent) => Ok(None),
            Err(std::env::VarError::NotUnicode(_)) => {
                Err(bad_option(format!("{} is not valid UTF-8", Self::ENV)))
            }
        }
    }

    /// Makes `self` the configuration of trackers created from now on in this process, on
    /// threads without an installed one ([`AllocatorConfig::install`]).
    pub fn set_process_default(self) {
        PROCESS_DEFAULT.store(if self.expandable_segments { 2 } else { 1 }, Ordering::Relaxed);
    }

    /// The configuration of trackers created now on this thread: the one installed last, else
    /// the process default, else [`AllocatorConfig::default`].
    pub fn current() -> AllocatorConfig {
        if let Some(c) = INSTALLED.with(|s| s.borrow().last().copied()) {
            return c;
        }
        match PROCESS_DEFAULT.load(Ordering::Relaxed) {
            1 => AllocatorConfig::FIXED,
            2 => AllocatorConfig::EXPANDABLE,
            _ => AllocatorConfig::default(),
        }
    }

    /// Makes `self` the configuration of trackers created on this thread until the guard drops
    /// (tests and tools that compare both). Trackers created before keep theirs.
    pub fn install(self) -> AllocatorConfigGuard {
        let depth = INSTALLED.with(|s| {
            let mut s = s.borrow_mut();
            s.push(self);
            s.len() - 1
        });
        AllocatorConfigGuard { depth }
    }

    /// `"expandable"` or `"fixed"`, as reports print it.
    pub fn segments_name(self) -> &'static str {
        if self.expandable_segments {
            "expandable"
        } else {
            "fixed"
        }
    }
}

fn bad_option(message: String) -> CoreError {
    CoreError::invalid("allocator configuration", message)
}

/// Restores the configuration installed before when dropped.
#[must_use = "the configuration is uninstalled when the guard is dropped"]
pub struct AllocatorConfigGuard {
    depth: usize,
}

impl Drop for AllocatorConfigGuard {
    fn drop(&mut self) {
        INSTALLED.with(|s| s.borrow_mut().truncate(self.depth));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_pytorch_syntax_and_names_what_is_wrong() {
        assert_eq!(
            AllocatorConfig::parse("expandable_segments:True").unwrap(),
            AllocatorConfig::EXPANDABLE
        );
        assert_eq!(
            AllocatorConfig::parse(" expandable_segments : false ,").unwrap(),
            AllocatorConfig::FIXED
        );
        assert_eq!(AllocatorConfig::parse("").unwrap(), AllocatorConfig::default());
        let e = AllocatorConfig::parse("expandable_segments:yes")
            .unwrap_err()
            .to_string();
        assert!(e.contains("True or False"), "{e}");
        let e = AllocatorConfig::parse("max_split_size_mb:128")
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown option `max_split_size_mb`"), "{e}");
        let e = AllocatorConfig::parse("expandable_segments")
            .unwrap_err()
            .to_string();
        assert!(e.contains("key:value"), "{e}");
    }

    #[test]
    fn an_installed_configuration_holds_on_its_thread_until_dropped() {
        let before = AllocatorConfig::current();
        {
            let _fixed = AllocatorConfig::FIXED.install();
            assert_eq!(AllocatorConfig::current(), AllocatorConfig::FIXED);
            {
                let _exp = AllocatorConfig::EXPANDABLE.install();
                assert_eq!(AllocatorConfig::current(), AllocatorConfig::EXPANDABLE);
            }
            assert_eq!(AllocatorConfig::current(), AllocatorConfig::FIXED);
        }
        assert_eq!(AllocatorConfig::current(), before);
    }
}
