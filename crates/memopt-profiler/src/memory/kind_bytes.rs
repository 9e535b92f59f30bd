//! Bytes per memory kind.

use memopt_core::MemoryKind;
use serde::de::{Deserializer, MapAccess, Visitor};
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};

/// Bytes of each [`MemoryKind`]. Serialises as an object with every kind's snake_case name
/// (`{"parameter": 1024, "buffer": 0, ..., "workspace": 0}`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KindBytes([u64; MemoryKind::COUNT]);

impl KindBytes {
    /// Bytes of `kind`.
    pub fn get(&self, kind: MemoryKind) -> u64 {
        self.0[kind.index()]
    }

    /// Adds `bytes` to `kind`.
    pub fn add(&mut self, kind: MemoryKind, bytes: u64) {
        self.0[kind.index()] += bytes;
    }

    /// Removes `bytes` from `kind` (never below zero).
    pub fn sub(&mut self, kind: MemoryKind, bytes: u64) {
        let v = &mut self.0[kind.index()];
        *v = v.saturating_sub(bytes);
    }

    /// Sum over all kinds, in bytes.
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }

    /// Every kind with its bytes, in [`MemoryKind::ALL`] order.
    pub fn iter(&self) -> impl Iterator<Item = (MemoryKind, u64)> + '_ {
        MemoryKind::ALL.iter().map(|&k| (k, self.get(k)))
    }

    /// Kind-wise sum.
    pub fn plus(&self, other: &KindBytes) -> KindBytes {
        let mut out = *self;
        for (k, b) in other.iter() {
            out.add(k, b);
        }
        out
    }
}

impl From<&memopt_core::memory::MemoryStats> for KindBytes {
    /// The current bytes of each kind.
    fn from(s: &memopt_core::memory::MemoryStats) -> Self {
        let mut out = KindBytes::default();
        for k in MemoryKind::ALL {
            out.add(k, s.kind(k).current);
        }
        out
    }
}

impl Serialize for KindBytes {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(MemoryKind::COUNT))?;
        for (k, b) in self.iter() {
            map.serialize_entry(k.name(), &b)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for KindBytes {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = KindBytes;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object of memory kind names to bytes")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<KindBytes, A::Error> {
                let mut out = KindBytes::default();
                while let Some((name, bytes)) = map.next_entry::<String, u64>()? {
                    let kind = MemoryKind::ALL
                        .into_iter()
                        .find(|k| k.name() == name)
                        .ok_or_else(|| serde::de::Error::custom(format!("unknown memory kind '{name}'")))?;
                    out.add(kind, bytes);
                }
                Ok(out)
            }
        }
        deserializer.deserialize_map(V)
    }
}
