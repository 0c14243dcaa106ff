//! Request bodies as Masakari reads them: JSON (`application/json`, what
//! its clients send; any other type, or none, with a body is 415), at most
//! oslo's 114,688 bytes, and the shape its JSON schemas require
//! (`masakari/api/openstack/ha/schemas/`): one wrapping key, no unknown
//! properties, typed fields, and booleans that may be spelt as strings.
//! Only shapes are checked here; what a value may be is the domain's rule.

use std::collections::BTreeMap;

use axum::extract::{FromRequest, Request};
use axum::http::header;
use futures::StreamExt as _;
use serde_json::{Map, Value};

use super::error::RestError;

/// oslo.middleware's `max_request_body_size` default.
pub const MAX_BODY_BYTES: usize = 114_688;

/// The request body, parsed; `Null` when empty.
#[derive(Clone, Debug)]
pub struct JsonBody(pub Value);

impl<S: Send + Sync> FromRequest<S> for JsonBody {
    type Rejection = RestError;

    async fn from_request(request: Request, _state: &S) -> Result<Self, Self::Rejection> {
        let json = is_json(request.headers().get(header::CONTENT_TYPE));
        let bytes = read_bounded(request.into_body()).await?;
        if bytes.is_empty() {
            return Ok(Self(Value::Null));
        }
        // A body is read as JSON only when it says it is: a form or a
        // text/plain body (what a browser may send across origins without
        // asking first) is refused before it is parsed.
        if !json {
            return Err(RestError::UnsupportedMediaType(
                "Unsupported Content-Type: send application/json".to_owned(),
            ));
        }
        serde_json::from_slice(&bytes)
            .map(Self)
            .map_err(|_| RestError::BadRequest("Malformed request body".to_owned()))
    }
}

/// Whether a Content-Type names JSON: `application/json`, with parameters
/// (`; charset=utf-8`) or without, in any case.
fn is_json(content_type: Option<&axum::http::HeaderValue>) -> bool {
    content_type
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|essence| essence.trim().eq_ignore_ascii_case("application/json"))
}

/// How much of an oversized body is read and thrown away before the 413,
/// so that closing the connection does not reset it under the answer.
const DRAINED_BYTES: usize = 4 * 1024 * 1024;

/// The body, if it is at most [`MAX_BODY_BYTES`] long. An oversized one is
/// read to its end (up to [`DRAINED_BYTES`]) before it is refused: a server
/// that closes a connection with request bytes unread makes the kernel send
/// a reset, and the client may lose the 413 it was about to read.
async fn read_bounded(body: axum::body::Body) -> Result<Vec<u8>, RestError> {
    let too_large = || RestError::TooLarge("Request is too large.".to_owned());
    let mut stream = body.into_data_stream();
    let mut bytes = Vec::new();
    let mut seen = 0usize;
    while let Some(chunk) = stream.next().await {
        // A client that stops sending mid-body gets the same answer as
        // Masakari gives to a body it cannot read.
        let chunk =
            chunk.map_err(|_| RestError::BadRequest("Malformed request body".to_owned()))?;
        seen = seen.saturating_add(chunk.len());
        if seen <= MAX_BODY_BYTES {
            bytes.extend_from_slice(&chunk);
        } else if seen > DRAINED_BYTES {
            return Err(too_large());
        }
    }
    if seen > MAX_BODY_BYTES {
        return Err(too_large());
    }
    Ok(bytes)
}

/// The object under `key` in `{key: {...}}`, refusing anything else at the
/// top, and its properties checked against `allowed`.
pub fn resource(body: Value, key: &'static str, allowed: &[&str]) -> Result<Fields, RestError> {
    let Value::Object(mut top) = body else {
        return Err(RestError::BadRequest(format!(
            "{} is not of type 'object'",
            python_repr(&body)
        )));
    };
    if let Some(extra) = top.keys().find(|k| k.as_str() != key) {
        return Err(RestError::BadRequest(format!(
            "Additional properties are not allowed ('{extra}' was unexpected)"
        )));
    }
    let inner = top
        .remove(key)
        .ok_or_else(|| RestError::BadRequest(format!("'{key}' is a required property")))?;
    let Value::Object(map) = inner else {
        return Err(RestError::invalid(
            key,
            format!(
                "Value: {}. {} is not of type 'object'",
                python_repr(&inner),
                python_repr(&inner)
            ),
        ));
    };
    let fields = Fields { key, map };
    if let Some(extra) = fields.map.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err(fields.whole(format!(
            "Additional properties are not allowed ('{extra}' was unexpected)"
        )));
    }
    Ok(fields)
}

/// The properties of one resource in a request body.
#[derive(Clone, Debug)]
pub struct Fields {
    key: &'static str,
    map: Map<String, Value>,
}

impl Fields {
    /// An error about the whole object.
    fn whole(&self, message: String) -> RestError {
        RestError::invalid(
            self.key,
            format!(
                "Value: {}. {message}",
                python_repr(&Value::Object(self.map.clone()))
            ),
        )
    }

    fn wrong_type(field: &str, value: &Value, expected: &str) -> RestError {
        let repr = python_repr(value);
        RestError::invalid(
            field,
            format!("Value: {repr}. {repr} is not of type {expected}"),
        )
    }

    /// A property that must be present.
    fn required(&self, field: &str) -> Result<&Value, RestError> {
        self.map
            .get(field)
            .ok_or_else(|| self.whole(format!("'{field}' is a required property")))
    }

    /// Properties that must be present, whatever their values.
    pub fn required_present(&self, names: &[&str]) -> Result<(), RestError> {
        names
            .iter()
            .try_for_each(|name| self.required(name).map(drop))
    }

    /// A required string.
    pub fn string(&self, field: &str) -> Result<String, RestError> {
        match self.required(field)? {
            Value::String(s) => Ok(s.clone()),
            other => Err(Self::wrong_type(field, other, "'string'")),
        }
    }

    /// An optional string.
    pub fn optional_string(&self, field: &str) -> Result<Option<String>, RestError> {
        match self.map.get(field) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(Self::wrong_type(field, other, "'string'")),
        }
    }

    /// An optional string that may also be `null` (`Some(None)`).
    pub fn nullable_string(&self, field: &str) -> Result<Option<Option<String>>, RestError> {
        match self.map.get(field) {
            None => Ok(None),
            Some(Value::Null) => Ok(Some(None)),
            Some(Value::String(s)) => Ok(Some(Some(s.clone()))),
            Some(other) => Err(Self::wrong_type(field, other, "'string', 'null'")),
        }
    }

    /// An optional boolean: `true`/`false` or one of the strings
    /// Masakari's `parameter_types.boolean` lists.
    pub fn optional_bool(&self, field: &str) -> Result<Option<bool>, RestError> {
        let Some(value) = self.map.get(field) else {
            return Ok(None);
        };
        let parsed = match value {
            Value::Bool(b) => Some(*b),
            Value::String(s) => match s.as_str() {
                "True" | "TRUE" | "true" | "1" | "ON" | "On" | "on" | "YES" | "Yes" | "yes" => {
                    Some(true)
                }
                "False" | "FALSE" | "false" | "0" | "OFF" | "Off" | "off" | "NO" | "No" | "no" => {
                    Some(false)
                }
                _ => None,
            },
            _ => None,
        };
        parsed.map(Some).ok_or_else(|| {
            let repr = python_repr(value);
            RestError::invalid(
                field,
                format!(
                    "Value: {repr}. {repr} is not one of [True, 'True', 'TRUE', 'true', '1', 'ON', 'On', 'on', 'YES', 'Yes', 'yes', False, 'False', 'FALSE', 'false', '0', 'OFF', 'Off', 'off', 'NO', 'No', 'no']"
                ),
            )
        })
    }

    /// A required string among `allowed`.
    pub fn one_of(&self, field: &str, allowed: &[&str]) -> Result<String, RestError> {
        let value = self.required(field)?;
        match value {
            Value::String(s) if allowed.contains(&s.as_str()) => Ok(s.clone()),
            other => {
                let repr = python_repr(other);
                Err(RestError::invalid(
                    field,
                    format!(
                        "Value: {repr}. {repr} is not one of {}",
                        python_list(allowed)
                    ),
                ))
            }
        }
    }

    /// An optional string among `allowed`.
    pub fn optional_one_of(
        &self,
        field: &str,
        allowed: &[&str],
    ) -> Result<Option<String>, RestError> {
        if self.map.contains_key(field) {
            self.one_of(field, allowed).map(Some)
        } else {
            Ok(None)
        }
    }

    /// A required object of string values (a notification's payload).
    pub fn string_map(&self, field: &str) -> Result<BTreeMap<String, String>, RestError> {
        let value = self.required(field)?;
        let Value::Object(map) = value else {
            return Err(Self::wrong_type(field, value, "'object'"));
        };
        map.iter()
            .map(|(k, v)| match v {
                Value::String(s) => Ok((k.clone(), s.clone())),
                other => Err(Self::wrong_type(k, other, "'string'")),
            })
            .collect()
    }
}

/// How Python prints a JSON value, as Masakari's messages quote it.
pub fn python_repr(value: &Value) -> String {
    match value {
        Value::Null => "None".to_owned(),
        Value::Bool(true) => "True".to_owned(),
        Value::Bool(false) => "False".to_owned(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'")),
        Value::Array(items) => format!(
            "[{}]",
            items.iter().map(python_repr).collect::<Vec<_>>().join(", ")
        ),
        Value::Object(map) => format!(
            "{{{}}}",
            map.iter()
                .map(|(k, v)| format!("'{k}': {}", python_repr(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

fn python_list(items: &[&str]) -> String {
    format!(
        "[{}]",
        items
            .iter()
            .map(|s| format!("'{s}'"))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_wrapper_and_unknown_properties_are_checked() {
        assert!(resource(Value::Null, "segment", &[]).is_err());
        assert!(resource(json!({"segments": {}}), "segment", &[]).is_err());
        assert!(resource(json!({}), "segment", &[]).is_err());
        let err = resource(
            json!({"segment": {"name": "a", "x": 1}}),
            "segment",
            &["name"],
        )
        .unwrap_err();
        assert!(err.to_string().contains("'x' was unexpected"), "{err}");
        let fields = resource(json!({"segment": {"name": "a"}}), "segment", &["name"]).unwrap();
        assert_eq!(fields.string("name").unwrap(), "a");
        assert!(fields.string("missing").is_err());
    }

    #[test]
    fn booleans_may_be_strings() {
        let fields = resource(
            json!({"host": {"a": "True", "b": "no", "c": false, "d": "maybe", "e": 1}}),
            "host",
            &["a", "b", "c", "d", "e"],
        )
        .unwrap();
        assert_eq!(fields.optional_bool("a").unwrap(), Some(true));
        assert_eq!(fields.optional_bool("b").unwrap(), Some(false));
        assert_eq!(fields.optional_bool("c").unwrap(), Some(false));
        assert!(fields.optional_bool("d").is_err());
        assert!(fields.optional_bool("e").is_err());
        assert_eq!(fields.optional_bool("z").unwrap(), None);
    }

    #[test]
    fn payload_values_must_be_strings() {
        let fields = resource(
            json!({"n": {"ok": {"event": "STOPPED"}, "bad": {"event": 1}}}),
            "n",
            &["ok", "bad"],
        )
        .unwrap();
        assert_eq!(fields.string_map("ok").unwrap()["event"], "STOPPED");
        assert!(fields.string_map("bad").is_err());
    }

    #[test]
    fn only_json_is_json() {
        let value = |s: &str| axum::http::HeaderValue::from_str(s).unwrap();
        assert!(is_json(Some(&value("application/json"))));
        assert!(is_json(Some(&value("Application/JSON; charset=UTF-8"))));
        for other in [
            "text/plain",
            "",
            "application/x-www-form-urlencoded",
            "application/jsonx",
        ] {
            assert!(!is_json(Some(&value(other))), "{other}");
        }
        assert!(!is_json(None));
    }

    #[test]
    fn values_are_quoted_as_python_would() {
        assert_eq!(
            python_repr(&json!({"a": [true, null, "x'y"]})),
            "{'a': [True, None, 'x\\'y']}"
        );
    }
}
