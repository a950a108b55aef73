//! Canonical JSON: object keys sorted, no whitespace. Hashes are taken over this form so that
//! key order or formatting in a campaign file never changes a spec hash.

use serde_json::Value;
use sha2::{Digest, Sha256};

/// Writes `value` canonically into `out`.
pub fn write(value: &Value, out: &mut String) {
    out.push_str(&to_string(value));
}

/// The canonical string of `value`: serde_json's compact form. Its objects are maps ordered
/// by key (serde_json's `preserve_order` feature is off, which
/// `objects_are_written_in_key_order` checks), so one pass writes the canonical form, without
/// sorting and without a string per key or scalar. Every claim reads its task's payload back
/// through this, and payloads can be kilobytes.
pub fn to_string(value: &Value) -> String {
    serde_json::to_string(value).expect("a JSON value always serializes")
}

/// Lowercase hex of sha256(bytes).
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// Lowercase hex of any byte string.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[(b >> 4) as usize] as char);
        s.push(DIGITS[(b & 15) as usize] as char);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_order_does_not_matter() {
        let a: Value = serde_json::from_str(r#"{"b":1,"a":{"y":[1,2],"x":"s"}}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{ "a": {"x":"s","y":[1, 2]}, "b": 1 }"#).unwrap();
        assert_eq!(to_string(&a), to_string(&b));
        assert_eq!(to_string(&a), r#"{"a":{"x":"s","y":[1,2]},"b":1}"#);
    }

    #[test]
    fn objects_are_written_in_key_order() {
        // With serde_json's `preserve_order` on (a dependency could turn it on for the whole
        // build), maps would keep their insertion order and every hash would change.
        let mut m = serde_json::Map::new();
        m.insert("b".into(), Value::from(1));
        m.insert("a".into(), Value::from(2));
        m.insert("B".into(), Value::from(3));
        m.insert("é".into(), Value::from(4));
        assert_eq!(
            to_string(&Value::Object(m)),
            r#"{"B":3,"a":2,"b":1,"é":4}"#,
            "keys in byte order"
        );
        // The same text as the sorting writer this replaced, escapes and numbers included.
        fn sorted(value: &Value, out: &mut String) {
            match value {
                Value::Object(map) => {
                    let mut keys: Vec<&String> = map.keys().collect();
                    keys.sort_unstable();
                    out.push('{');
                    for (i, k) in keys.into_iter().enumerate() {
                        out.push_str(if i > 0 { "," } else { "" });
                        out.push_str(&Value::String(k.clone()).to_string());
                        out.push(':');
                        sorted(&map[k], out);
                    }
                    out.push('}');
                }
                Value::Array(items) => {
                    out.push('[');
                    for (i, v) in items.iter().enumerate() {
                        out.push_str(if i > 0 { "," } else { "" });
                        sorted(v, out);
                    }
                    out.push(']');
                }
                scalar => out.push_str(&scalar.to_string()),
            }
        }
        let v: Value = serde_json::from_str(
            r#"{"q":"a\"b\n\u0001/\u2028","n":[1.5,-0.0,1e300,7,-3,0.1],"z":{"y":null,"x":[true,{"d":{},"c":[]}]}}"#,
        )
        .unwrap();
        let mut reference = String::new();
        sorted(&v, &mut reference);
        assert_eq!(to_string(&v), reference);
        assert_eq!(
            reference,
            "{\"n\":[1.5,-0.0,1e+300,7,-3,0.1],\"q\":\"a\\\"b\\n\\u0001/\u{2028}\",\"z\":{\"x\":[true,{\"c\":[],\"d\":{}}],\"y\":null}}"
        );
    }

    #[test]
    fn sha256_of_empty() {
        assert_eq!(
            sha256_hex(b""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }
}
