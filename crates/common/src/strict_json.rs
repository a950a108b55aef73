//! Client JSON read strictly. serde_json keeps the last value of a key an object repeats, without
//! a word: `{"id": "a", "id": "b"}` is a campaign `b`. Whatever a client sends as JSON (a
//! `spec_json`, a task's `payload_json`, a line of a tasks file) is read here instead, and a
//! repeated key, at any depth, is refused with the key and its path.

use std::cell::RefCell;
use std::fmt;

use serde::Deserializer;
use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// JSON text that is not a strict JSON value.
#[derive(Debug, thiserror::Error)]
pub enum JsonError {
    /// Not JSON at all (serde_json's message, with its line and column).
    #[error("{0}")]
    Syntax(serde_json::Error),
    /// An object with a key twice.
    #[error("duplicate key {key:?} {}: an object must not repeat a key (line {line}, column {column})", Place(.object))]
    DuplicateKey {
        /// The object's path (`arms[0].config`), empty for the top level.
        object: String,
        key: String,
        line: usize,
        column: usize,
    },
}

impl JsonError {
    /// The path of what is refused within the value: the repeated key (`arms[0].config.model`),
    /// or `None` for a syntax error.
    pub fn path(&self) -> Option<String> {
        match self {
            JsonError::Syntax(_) => None,
            JsonError::DuplicateKey { object, key, .. } if object.is_empty() => Some(key.clone()),
            JsonError::DuplicateKey { object, key, .. } => Some(format!("{object}.{key}")),
        }
    }
}

struct Place<'a>(&'a str);

impl fmt::Display for Place<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            f.write_str("at the top level")
        } else {
            write!(f, "in {}", self.0)
        }
    }
}

/// Reads `text` as one JSON value, refusing a repeated key.
pub fn from_str(text: &str) -> Result<Value, JsonError> {
    let mut de = serde_json::Deserializer::from_str(text);
    let dup = Duplicate::default();
    let value = match (Node(&dup)).deserialize(&mut de) {
        Ok(v) => v,
        Err(e) => return Err(dup.error(e)),
    };
    de.end().map_err(JsonError::Syntax)?;
    Ok(value)
}

/// For a `#[serde(deserialize_with)]` function: the JSON value at `path` (`payload`) of a larger
/// document, refusing a repeated key with its path (the document's deserializer adds its own
/// line and column).
pub fn deserialize_at<'de, D: Deserializer<'de>>(path: &str, d: D) -> Result<Value, D::Error> {
    let dup = Duplicate::default();
    match (Node(&dup)).deserialize(d) {
        Ok(v) => Ok(v),
        Err(e) => match dup.found.into_inner() {
            Some(mut found) => {
                found.path.push(Step::Key(path.to_owned()));
                Err(de::Error::custom(found.describe()))
            }
            None => Err(e),
        },
    }
}

/// A repeated key once found, and the path to it, collected as the error unwinds (so reading
/// a valid value costs nothing for paths).
#[derive(Default)]
struct Duplicate {
    found: RefCell<Option<Found>>,
}

struct Found {
    key: String,
    /// Innermost first.
    path: Vec<Step>,
}

enum Step {
    Key(String),
    Index(usize),
}

impl Found {
    fn object(&self) -> String {
        let mut out = String::new();
        for step in self.path.iter().rev() {
            match step {
                Step::Key(k) if out.is_empty() => out.push_str(k),
                Step::Key(k) => {
                    out.push('.');
                    out.push_str(k);
                }
                Step::Index(i) => out.push_str(&format!("[{i}]")),
            }
        }
        out
    }

    fn describe(&self) -> String {
        format!(
            "duplicate key {:?} {}: an object must not repeat a key",
            self.key,
            Place(&self.object())
        )
    }
}

impl Duplicate {
    /// Records the step through which an error came, when the error is a repeated key.
    fn through(&self, step: impl FnOnce() -> Step) {
        if let Some(found) = self.found.borrow_mut().as_mut() {
            found.path.push(step());
        }
    }

    fn error(self, e: serde_json::Error) -> JsonError {
        match self.found.into_inner() {
            Some(found) => JsonError::DuplicateKey {
                object: found.object(),
                key: found.key,
                line: e.line(),
                column: e.column(),
            },
            None => JsonError::Syntax(e),
        }
    }
}

/// One value of the document, read into a `serde_json::Value`.
#[derive(Clone, Copy)]
struct Node<'a>(&'a Duplicate);

impl<'de> DeserializeSeed<'de> for Node<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Node<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        // JSON text cannot spell one, but another format deserialized through here could.
        serde_json::Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| E::custom(format!("{v} is not a finite number")))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        self.deserialize(d)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1024));
        loop {
            match seq.next_element_seed(self) {
                Ok(Some(v)) => out.push(v),
                Ok(None) => return Ok(Value::Array(out)),
                Err(e) => {
                    self.0.through(|| Step::Index(out.len()));
                    return Err(e);
                }
            }
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if out.contains_key(&key) {
                let found = Found {
                    key,
                    path: Vec::new(),
                };
                let message = found.describe();
                *self.0.found.borrow_mut() = Some(found);
                return Err(de::Error::custom(message));
            }
            match map.next_value_seed(self) {
                Ok(v) => {
                    out.insert(key, v);
                }
                Err(e) => {
                    self.0.through(|| Step::Key(key));
                    return Err(e);
                }
            }
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_strict_value_is_what_serde_json_reads() {
        for text in [
            r#"{"a": [1, -2, 3.5, 1e300, true, null, "s"], "b": {"c": {}}, "d": []}"#,
            "[]",
            "0.1",
            "\"x\"",
            " null ",
            r#"{"big": 18446744073709551615, "neg": -9223372036854775808}"#,
        ] {
            let want: Value = serde_json::from_str(text).unwrap();
            assert_eq!(from_str(text).unwrap(), want, "{text}");
        }
    }

    #[test]
    fn a_repeated_key_is_refused_with_its_path() {
        let e = from_str(r#"{"id": "a", "id": "b"}"#).unwrap_err();
        assert_eq!(e.path().as_deref(), Some("id"));
        assert_eq!(
            e.to_string(),
            "duplicate key \"id\" at the top level: an object must not repeat a key \
             (line 1, column 16)"
        );
        let e = from_str("{\"arms\": [{}, {\"config\": {\"m\": 1,\n \"m\": 2}}]}").unwrap_err();
        assert_eq!(e.path().as_deref(), Some("arms[1].config.m"));
        assert!(
            e.to_string().contains("in arms[1].config") && e.to_string().contains("line 2"),
            "{e}"
        );
        // The same key in two objects is no repetition.
        assert!(from_str(r#"{"a": {"k": 1}, "b": {"k": 1}, "k": [{"k": 1}, {"k": 2}]}"#).is_ok());
    }

    #[test]
    fn syntax_errors_are_serde_json_s() {
        for text in ["{", "{\"a\": 1,}", "[1] [2]", "NaN", "1e999", ""] {
            match from_str(text) {
                Err(JsonError::Syntax(_)) => {}
                other => panic!("{text:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn inside_a_document_the_path_is_within_the_value() {
        #[derive(serde::Deserialize, Debug)]
        struct Line {
            #[serde(deserialize_with = "payload")]
            payload: Value,
        }
        fn payload<'de, D: Deserializer<'de>>(d: D) -> Result<Value, D::Error> {
            deserialize_at("payload", d)
        }
        let e = serde_json::from_str::<Line>(r#"{"payload": {"a": [{"k": 1, "k": 2}]}}"#)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("duplicate key \"k\" in payload.a[0]: an object must not repeat a key"),
            "{e}"
        );
        let e = serde_json::from_str::<Line>(r#"{"payload": {"k": 1, "k": 2}}"#).unwrap_err();
        assert!(
            e.to_string().starts_with("duplicate key \"k\" in payload:"),
            "{e}"
        );
        let ok = serde_json::from_str::<Line>(r#"{"payload": {"a": 1}}"#).unwrap();
        assert_eq!(ok.payload, serde_json::json!({"a": 1}));
    }
}
