//! Query strings as Masakari's controllers read them (webob's `params`):
//! repeatable keys, the last value of a key winning where one is expected,
//! and oslo's strict boolean spelling for boolean filters.

use axum::extract::{FromRequestParts, Query};
use axum::http::request::Parts;

use super::error::RestError;

/// The query string's `(key, value)` pairs, in order.
#[derive(Clone, Debug, Default)]
pub struct Params(Vec<(String, String)>);

impl<S: Send + Sync> FromRequestParts<S> for Params {
    type Rejection = RestError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        let Query(pairs) = Query::<Vec<(String, String)>>::try_from_uri(&parts.uri)
            .map_err(|e| RestError::BadRequest(format!("Malformed query string: {e}")))?;
        Ok(Self(pairs))
    }
}

impl Params {
    #[cfg(test)]
    pub fn from_pairs(pairs: &[(&str, &str)]) -> Self {
        Self(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    /// The last value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Every value of `key`, in order.
    pub fn all(&self, key: &str) -> Vec<&str> {
        self.0
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .collect()
    }

    /// A boolean filter: oslo's `bool_from_string(strict=True)`.
    pub fn bool(&self, key: &str) -> Result<Option<bool>, RestError> {
        let Some(value) = self.get(key) else {
            return Ok(None);
        };
        match value.trim().to_ascii_lowercase().as_str() {
            "1" | "t" | "true" | "on" | "y" | "yes" => Ok(Some(true)),
            "0" | "f" | "false" | "off" | "n" | "no" => Ok(Some(false)),
            _ => Err(RestError::BadRequest(format!(
                "Invalid value for {key}: Unrecognized value '{value}', acceptable values are: '0', '1', 'f', 'false', 'n', 'no', 'off', 'on', 't', 'true', 'y', 'yes'"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_value_wins_and_all_are_kept() {
        let p = Params::from_pairs(&[("sort_key", "name"), ("sort_key", "id"), ("x", "1")]);
        assert_eq!(p.get("sort_key"), Some("id"));
        assert_eq!(p.all("sort_key"), vec!["name", "id"]);
        assert_eq!(p.get("y"), None);
    }

    #[test]
    fn booleans_are_strict() {
        let p = Params::from_pairs(&[("a", "True"), ("b", " no "), ("c", "maybe")]);
        assert_eq!(p.bool("a").unwrap(), Some(true));
        assert_eq!(p.bool("b").unwrap(), Some(false));
        assert!(
            p.bool("c")
                .unwrap_err()
                .to_string()
                .starts_with("Invalid value for c")
        );
        assert_eq!(p.bool("d").unwrap(), None);
    }
}
