//! The service catalog of a Keystone token, and endpoint selection as
//! keystoneauth does it: by service type (with Cinder's aliases), region,
//! and an ordered list of interfaces.

use serde::Deserialize;

/// The services the engine calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ServiceKind {
    Compute,
    BlockStorage,
}

impl ServiceKind {
    /// The catalog types to accept, the official one first, then the
    /// aliases in priority order (os-service-types).
    pub fn catalog_types(self) -> &'static [&'static str] {
        match self {
            Self::Compute => &["compute"],
            Self::BlockStorage => &[
                "block-storage",
                "volumev3",
                "volumev2",
                "volume",
                "block-store",
            ],
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Compute => "nova",
            Self::BlockStorage => "cinder",
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct CatalogEntry {
    #[serde(rename = "type")]
    pub service_type: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub endpoints: Vec<Endpoint>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct Endpoint {
    #[serde(default)]
    pub interface: String,
    #[serde(default)]
    pub region_id: Option<String>,
    #[serde(default)]
    pub region: Option<String>,
    #[serde(default)]
    pub url: String,
}

/// `publicURL` and friends are spelled the v2 way in old configurations.
pub fn normalise_interface(interface: &str) -> String {
    interface
        .trim()
        .trim_end_matches("URL")
        .to_ascii_lowercase()
}

/// Why no endpoint could be chosen.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "no {service} endpoint in the catalog for interfaces {interfaces:?}{}",
    region.as_ref().map(|r| format!(" in region {r}")).unwrap_or_default()
)]
pub struct NoEndpoint {
    pub service: String,
    pub interfaces: Vec<String>,
    pub region: Option<String>,
}

/// The URL of `kind` in `catalog`, preferring the interfaces in order.
pub fn select_endpoint(
    catalog: &[CatalogEntry],
    kind: ServiceKind,
    interfaces: &[String],
    region: Option<&str>,
) -> Result<String, NoEndpoint> {
    select_typed_endpoint(catalog, kind.catalog_types(), interfaces, region).map_err(|e| {
        NoEndpoint {
            service: kind.name().to_owned(),
            ..e
        }
    })
}

/// The URL of the first of `service_types` in `catalog` (any service, such
/// as the CLI's `instance-ha-grpc`), preferring the interfaces in order;
/// the error names the first type.
pub fn select_typed_endpoint(
    catalog: &[CatalogEntry],
    service_types: &[&str],
    interfaces: &[String],
    region: Option<&str>,
) -> Result<String, NoEndpoint> {
    let interfaces: Vec<String> = if interfaces.is_empty() {
        vec!["public".to_owned()]
    } else {
        interfaces.iter().map(|i| normalise_interface(i)).collect()
    };
    for interface in &interfaces {
        // Exact type first, then the aliases in priority order.
        for service_type in service_types {
            for entry in catalog.iter().filter(|e| e.service_type == *service_type) {
                let found = entry.endpoints.iter().find(|e| {
                    !e.url.is_empty()
                        && normalise_interface(&e.interface) == *interface
                        && region.is_none_or(|r| {
                            e.region_id.as_deref().or(e.region.as_deref()) == Some(r)
                        })
                });
                if let Some(endpoint) = found {
                    return Ok(endpoint.url.trim_end_matches('/').to_owned());
                }
            }
        }
    }
    Err(NoEndpoint {
        service: service_types
            .first()
            .copied()
            .unwrap_or_default()
            .to_owned(),
        interfaces,
        region: region.map(str::to_owned),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(service_type: &str, endpoints: &[(&str, &str, &str)]) -> CatalogEntry {
        CatalogEntry {
            service_type: service_type.into(),
            name: String::new(),
            endpoints: endpoints
                .iter()
                .map(|(interface, region, url)| Endpoint {
                    interface: (*interface).into(),
                    region_id: Some((*region).into()),
                    region: Some((*region).into()),
                    url: (*url).into(),
                })
                .collect(),
        }
    }

    #[test]
    fn interfaces_are_tried_in_order_and_regions_filter() {
        let catalog = vec![
            entry(
                "compute",
                &[
                    ("public", "RegionOne", "https://nova.pub/v2.1/"),
                    ("internal", "RegionOne", "http://nova.int/v2.1"),
                    ("internal", "RegionTwo", "http://nova2.int/v2.1"),
                ],
            ),
            entry(
                "volumev3",
                &[("public", "RegionOne", "https://cinder/v3/p")],
            ),
        ];
        let prefs = vec!["internal".to_owned(), "publicURL".to_owned()];
        assert_eq!(
            select_endpoint(&catalog, ServiceKind::Compute, &prefs, Some("RegionOne")).unwrap(),
            "http://nova.int/v2.1"
        );
        assert_eq!(
            select_endpoint(&catalog, ServiceKind::Compute, &prefs, Some("RegionTwo")).unwrap(),
            "http://nova2.int/v2.1"
        );
        // Cinder has only a public endpoint, under an alias.
        assert_eq!(
            select_endpoint(
                &catalog,
                ServiceKind::BlockStorage,
                &prefs,
                Some("RegionOne")
            )
            .unwrap(),
            "https://cinder/v3/p"
        );
        let err =
            select_endpoint(&catalog, ServiceKind::Compute, &prefs, Some("Nowhere")).unwrap_err();
        assert!(err.to_string().contains("Nowhere"), "{err}");
    }

    #[test]
    fn the_official_type_wins_over_aliases() {
        let catalog = vec![
            entry("volume", &[("public", "R", "http://old")]),
            entry("block-storage", &[("public", "R", "http://new")]),
        ];
        assert_eq!(
            select_endpoint(&catalog, ServiceKind::BlockStorage, &[], None).unwrap(),
            "http://new"
        );
    }
}
