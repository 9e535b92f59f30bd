//! The one way model descriptions and plans are read from JSON: a UTF-8 byte-order mark is
//! accepted, a key repeated in any object (at any depth) is an error naming the key and its
//! line, and then the text is deserialised (whose types reject unknown fields).
//!
//! serde's derived types already reject a repeated field of a struct, but not a repeat inside
//! free-form parts (the layer objects of a model are read as [`serde_json::Value`], which keeps
//! the last value): the check here covers every level at once, before any type sees the text.

use serde::de::{self, DeserializeOwned, Deserializer, MapAccess, SeqAccess, Visitor};
use std::collections::HashSet;
use std::fmt;

/// Parses `text` into `T` after dropping a leading byte-order mark and checking that no object
/// repeats a key. The error is serde_json's message (with line and column).
pub fn from_str<T: DeserializeOwned>(text: &str) -> std::result::Result<T, String> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut de = serde_json::Deserializer::from_str(text);
    de.deserialize_any(UniqueKeys).map_err(|e| e.to_string())?;
    de.end().map_err(|e| e.to_string())?;
    serde_json::from_str(text).map_err(|e| e.to_string())
}

/// Walks any JSON value, failing on a repeated key.
struct UniqueKeys;

impl<'de> de::Deserialize<'de> for UniqueKeys {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        d.deserialize_any(UniqueKeys)
    }
}

impl<'de> Visitor<'de> for UniqueKeys {
    type Value = UniqueKeys;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> std::result::Result<Self, E> {
        Ok(UniqueKeys)
    }
    fn visit_i64<E>(self, _: i64) -> std::result::Result<Self, E> {
        Ok(UniqueKeys)
    }
    fn visit_u64<E>(self, _: u64) -> std::result::Result<Self, E> {
        Ok(UniqueKeys)
    }
    fn visit_f64<E>(self, _: f64) -> std::result::Result<Self, E> {
        Ok(UniqueKeys)
    }
    fn visit_str<E>(self, _: &str) -> std::result::Result<Self, E> {
        Ok(UniqueKeys)
    }
    fn visit_unit<E>(self) -> std::result::Result<Self, E> {
        Ok(UniqueKeys)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<Self, A::Error> {
        while seq.next_element::<UniqueKeys>()?.is_some() {}
        Ok(UniqueKeys)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<Self, A::Error> {
        let mut seen = HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            if !seen.insert(key.clone()) {
                return Err(de::Error::custom(format_args!(
                    "duplicate key {} in one object; each key may appear once",
                    serde_json::Value::String(key)
                )));
            }
            map.next_value::<UniqueKeys>()?;
        }
        Ok(UniqueKeys)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::de::IgnoredAny;

    #[test]
    fn repeated_keys_are_errors_at_any_depth() {
        assert!(from_str::<IgnoredAny>(r#"{"a": 1, "b": {"c": [ {"d": 1, "e": 2} ]}}"#).is_ok());
        for text in [
            r#"{"a": 1, "a": 2}"#,
            r#"{"a": {"b": 1, "b": 1}}"#,
            r#"[{"x": [ {"type": "lif", "type": "if"} ]}]"#,
        ] {
            let e = from_str::<IgnoredAny>(text).unwrap_err();
            assert!(e.contains("duplicate key") && e.contains("line 1"), "{text}: {e}");
        }
    }

    #[test]
    fn a_byte_order_mark_is_accepted() {
        let v: serde_json::Value = from_str("\u{feff}{\"a\": 1}").unwrap();
        assert_eq!(v["a"], 1);
    }
}
