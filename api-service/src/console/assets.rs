//! The console's script and style sheet, embedded in the binary and
//! served from `/console/assets/`: nothing is fetched from elsewhere. Their
//! URLs carry a digest of their content, so they are cached for good and
//! a new build's are fetched anew.

use std::sync::OnceLock;

use axum::extract::Path;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};

const CSS: &str = include_str!("assets/console.css");
const JS: &str = include_str!("assets/console.js");

fn digest(content: &str) -> String {
    Sha256::digest(content.as_bytes())
        .iter()
        .take(6)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// `/console/assets/console.css?v=DIGEST`.
pub fn css_path() -> String {
    static PATH: OnceLock<String> = OnceLock::new();
    PATH.get_or_init(|| format!("/console/assets/console.css?v={}", digest(CSS)))
        .clone()
}

/// `/console/assets/console.js?v=DIGEST`.
pub fn js_path() -> String {
    static PATH: OnceLock<String> = OnceLock::new();
    PATH.get_or_init(|| format!("/console/assets/console.js?v={}", digest(JS)))
        .clone()
}

/// `GET /console/assets/{name}`.
pub async fn serve(Path(name): Path<String>) -> Response {
    let (content_type, body) = match name.as_str() {
        "console.css" => ("text/css; charset=utf-8", CSS),
        "console.js" => ("text/javascript; charset=utf-8", JS),
        _ => return (StatusCode::NOT_FOUND, "no such asset").into_response(),
    };
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "public, max-age=31536000, immutable"),
        ],
        body,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn asset_urls_change_with_their_content() {
        assert!(css_path().starts_with("/console/assets/console.css?v="));
        assert_ne!(digest("a"), digest("b"));
        assert_eq!(digest(JS).len(), 12);
    }

    #[test]
    fn nothing_is_fetched_from_elsewhere() {
        for asset in [CSS, JS] {
            assert!(!asset.contains("http://") && !asset.contains("https://"));
            assert!(!asset.contains("eval(") && !asset.contains("new Function"));
        }
    }
}
