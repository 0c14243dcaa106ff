//! Microversion negotiation from `OpenStack-API-Version` (and Nova's legacy header).

use axum::http::HeaderMap;

/// A negotiated `major.minor` version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version {
    pub major: u32,
    pub minor: u32,
}

impl Version {
    pub const fn new(major: u32, minor: u32) -> Version {
        Version { major, minor }
    }

    /// True from `major.minor` on (same major).
    pub fn at_least(self, minor: u32) -> bool {
        self.minor >= minor
    }
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// Why a requested version was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// Outside the supported range: 406.
    #[error(
        "Version {requested} is not supported by the API. Minimum is {min} and maximum is {max}."
    )]
    NotAcceptable {
        requested: String,
        min: Version,
        max: Version,
    },
    /// Not `X.Y` or `latest`: 400.
    #[error("API Version String {0} is of invalid format. Must be of format MajorNum.MinorNum.")]
    Malformed(String),
}

fn parse(text: &str) -> Option<Version> {
    let (major, minor) = text.split_once('.')?;
    let ok = |s: &str| {
        !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) && (s == "0" || !s.starts_with('0'))
    };
    if !ok(major) || !ok(minor) {
        return None;
    }
    Some(Version::new(major.parse().ok()?, minor.parse().ok()?))
}

/// The version a request asks for: `OpenStack-API-Version: <service> X.Y` (several services may
/// be listed, comma-separated), else the legacy header, else the minimum.
pub fn negotiate(
    headers: &HeaderMap,
    service: &str,
    legacy_header: Option<&str>,
    min: Version,
    max: Version,
) -> Result<Version, Error> {
    let mut requested: Option<String> = None;
    for value in headers.get_all("openstack-api-version") {
        let Ok(text) = value.to_str() else { continue };
        for entry in text.split(',') {
            let mut parts = entry.split_whitespace();
            if parts
                .next()
                .is_some_and(|s| s.eq_ignore_ascii_case(service))
            {
                requested = Some(parts.collect::<Vec<_>>().join(" "));
            }
        }
    }
    if requested.is_none()
        && let Some(name) = legacy_header
        && let Some(value) = headers.get(name)
    {
        requested = Some(value.to_str().unwrap_or("").trim().to_string());
    }
    let Some(requested) = requested else {
        return Ok(min);
    };
    if requested.eq_ignore_ascii_case("latest") {
        return Ok(max);
    }
    let version = parse(&requested).ok_or_else(|| Error::Malformed(requested.clone()))?;
    if version < min || version > max {
        return Err(Error::NotAcceptable {
            requested,
            min,
            max,
        });
    }
    Ok(version)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: Version = Version::new(2, 1);
    const MAX: Version = Version::new(2, 104);

    fn ask(pairs: &[(&str, &str)]) -> Result<Version, Error> {
        let mut headers = HeaderMap::new();
        for (k, v) in pairs {
            headers.append(
                axum::http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        negotiate(
            &headers,
            "compute",
            Some("x-openstack-nova-api-version"),
            MIN,
            MAX,
        )
    }

    #[test]
    fn negotiates_headers_latest_and_defaults() {
        assert_eq!(ask(&[]), Ok(MIN));
        assert_eq!(
            ask(&[("openstack-api-version", "compute 2.53")]),
            Ok(Version::new(2, 53))
        );
        assert_eq!(
            ask(&[("openstack-api-version", "volume 3.44, compute 2.95")]),
            Ok(Version::new(2, 95))
        );
        assert_eq!(ask(&[("openstack-api-version", "volume 3.44")]), Ok(MIN));
        assert_eq!(ask(&[("openstack-api-version", "compute latest")]), Ok(MAX));
        assert_eq!(
            ask(&[("x-openstack-nova-api-version", "2.11")]),
            Ok(Version::new(2, 11))
        );
        assert_eq!(
            ask(&[
                ("openstack-api-version", "compute 2.60"),
                ("x-openstack-nova-api-version", "2.11")
            ]),
            Ok(Version::new(2, 60))
        );
    }

    #[test]
    fn refuses_out_of_range_and_malformed() {
        assert!(matches!(
            ask(&[("openstack-api-version", "compute 2.105")]),
            Err(Error::NotAcceptable { .. })
        ));
        assert!(matches!(
            ask(&[("openstack-api-version", "compute 3.0")]),
            Err(Error::NotAcceptable { .. })
        ));
        assert!(matches!(
            ask(&[("openstack-api-version", "compute 2.0")]),
            Err(Error::NotAcceptable { .. })
        ));
        assert!(matches!(
            ask(&[("openstack-api-version", "compute 2.x")]),
            Err(Error::Malformed(_))
        ));
        assert!(matches!(
            ask(&[("openstack-api-version", "compute 2.05")]),
            Err(Error::Malformed(_))
        ));
        assert!(matches!(
            ask(&[("openstack-api-version", "compute")]),
            Err(Error::Malformed(_))
        ));
    }
}
