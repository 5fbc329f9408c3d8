//! Strict JSON: the guard must read a body exactly as SGLang's orjson does, or
//! refuse it. Anything the two could read differently is refused: duplicate
//! keys at any depth (orjson keeps the last, smg refuses), a BOM, lone
//! surrogates, NaN/Infinity, trailing garbage. serde_json already refuses all
//! of those but duplicate keys, which the visitor below adds.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

use crate::errors::Reason;

/// Parses a request body into a `Value` (key order kept), refusing anything ambiguous.
pub fn parse_strict(body: &[u8]) -> Result<Value, Reason> {
    let mut de = serde_json::Deserializer::from_slice(body);
    let value = StrictSeed.deserialize(&mut de).map_err(classify)?;
    de.end().map_err(classify)?;
    Ok(value)
}

const DUPLICATE: &str = "duplicate key ";

fn classify(e: serde_json::Error) -> Reason {
    let text = e.to_string();
    match text.strip_prefix(DUPLICATE) {
        Some(rest) => {
            Reason::DuplicateKey(rest.split(" at line").next().unwrap_or(rest).to_string())
        }
        None => Reason::InvalidJson(text),
    }
}

/// The canonical bytes forwarded upstream: what SGLang parses is then exactly
/// the tree the guard counted, whatever escapes, spacing or number spellings
/// the client used.
pub fn canonical(value: &Value) -> bytes::Bytes {
    bytes::Bytes::from(serde_json::to_vec(value).expect("serialising a Value cannot fail"))
}

struct StrictSeed;

impl<'de> DeserializeSeed<'de> for StrictSeed {
    type Value = Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(StrictVisitor)
    }
}

struct StrictVisitor;

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| E::custom("non-finite number"))
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
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
        while let Some(v) = seq.next_element_seed(StrictSeed)? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if out.contains_key(&key) {
                return Err(de::Error::custom(format_args!("{DUPLICATE}{key:?}")));
            }
            let v = map.next_value_seed(StrictSeed)?;
            out.insert(key, v);
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(body: &str) -> &'static str {
        parse_strict(body.as_bytes()).unwrap_err().label()
    }

    #[test]
    fn duplicate_keys_are_refused_at_any_depth() {
        assert_eq!(
            reason(r#"{"messages":[],"messages":[{"role":"user","content":"x"}]}"#),
            "duplicate_key"
        );
        assert_eq!(
            reason(r#"{"messages":[{"role":"user","content":"a","content":"b"}]}"#),
            "duplicate_key"
        );
        assert_eq!(reason(r#"{"a":{"b":{"c":1,"c":2}}}"#), "duplicate_key");
        match parse_strict(br#"{"x":1,"x":2}"#).unwrap_err() {
            Reason::DuplicateKey(k) => assert_eq!(k, "\"x\""),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn what_orjson_refuses_is_refused() {
        assert_eq!(reason("\u{feff}{}"), "invalid_json");
        assert_eq!(reason(r#"{"a":"\ud800"}"#), "invalid_json");
        assert_eq!(reason(r#"{"a":NaN}"#), "invalid_json");
        assert_eq!(reason(r#"{"a":Infinity}"#), "invalid_json");
        assert_eq!(reason("{\"a\":\"\u{1}\"}"), "invalid_json");
        assert_eq!(reason("{} x"), "invalid_json");
        assert_eq!(reason(""), "invalid_json");
        assert!(parse_strict(b"{} \n").is_ok());
        assert!(parse_strict(br#"{"a":"\ud83d\ude00","b":"\u0000"}"#).is_ok());
    }

    #[test]
    fn canonical_keeps_order_and_meaning() {
        let v =
            parse_strict(br#"{ "z" : 1.0, "a" : "\u00e9\n", "n": 18446744073709551615 }"#).unwrap();
        assert_eq!(
            std::str::from_utf8(&canonical(&v)).unwrap(),
            "{\"z\":1.0,\"a\":\"\u{e9}\\n\",\"n\":18446744073709551615}"
        );
    }
}
