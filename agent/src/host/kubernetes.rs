//! The Kubernetes driver, for OpenStack on Kubernetes: reads the nodes'
//! `Ready` condition from the Kubernetes API every interval. The API
//! server (backed by etcd's quorum) is the quorum: a view exists only when
//! it answers. A node is alive while `Ready` is `True`; the incident of a
//! node not ready is the condition's `lastTransitionTime`, the same for
//! every agent.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use super::{Detector, Error, Transitions, View};
use crate::config::KubernetesSettings;

/// The nodes' readiness: name → (ready, the Ready condition's last
/// transition time).
pub fn parse_nodes(list: &Value) -> Result<BTreeMap<String, (bool, String)>, Error> {
    let items = list
        .get("items")
        .and_then(Value::as_array)
        .ok_or_else(|| Error::Kubernetes("not a NodeList".to_owned()))?;
    let mut out = BTreeMap::new();
    for item in items {
        let Some(name) = item.pointer("/metadata/name").and_then(Value::as_str) else {
            continue;
        };
        let ready = item
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .and_then(|c| {
                c.iter()
                    .find(|c| c.get("type").and_then(Value::as_str) == Some("Ready"))
            });
        let status = ready.and_then(|c| c.get("status")).and_then(Value::as_str);
        let since = ready
            .and_then(|c| c.get("lastTransitionTime"))
            .and_then(Value::as_str)
            .unwrap_or_default();
        out.insert(name.to_owned(), (status == Some("True"), since.to_owned()));
    }
    Ok(out)
}

fn err(e: impl std::fmt::Display) -> Error {
    Error::Kubernetes(e.to_string())
}

pub struct KubernetesDetector {
    http: reqwest::Client,
    url: String,
    token_file: std::path::PathBuf,
    interval: tokio::time::Interval,
    transitions: Transitions,
}

impl KubernetesDetector {
    pub fn new(settings: &KubernetesSettings) -> Result<Self, Error> {
        crate::install_crypto_provider();
        let api = match &settings.api_url {
            Some(url) => url.trim_end_matches('/').to_owned(),
            None => {
                let host = std::env::var("KUBERNETES_SERVICE_HOST").map_err(|_| {
                    err("host.kubernetes.api_url is unset and KUBERNETES_SERVICE_HOST too")
                })?;
                let port =
                    std::env::var("KUBERNETES_SERVICE_PORT").unwrap_or_else(|_| "443".to_owned());
                format!("https://{host}:{port}")
            }
        };
        let mut url = format!("{api}/api/v1/nodes");
        if let Some(selector) = &settings.label_selector {
            url = format!("{url}?labelSelector={selector}");
        }
        let mut http = reqwest::Client::builder().timeout(Duration::from_secs(10));
        if let Some(ca) = settings
            .ca_file
            .as_deref()
            .filter(|p| Path::new(p).exists())
        {
            let pem = std::fs::read(ca).map_err(err)?;
            for cert in reqwest::Certificate::from_pem_bundle(&pem).map_err(err)? {
                http = http.add_root_certificate(cert);
            }
        }
        let mut ticker = tokio::time::interval(settings.interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        Ok(Self {
            http: http.build().map_err(err)?,
            url,
            token_file: settings.token_file.clone(),
            interval: ticker,
            transitions: Transitions::default(),
        })
    }
}

impl Detector for KubernetesDetector {
    fn name(&self) -> &'static str {
        "kubernetes"
    }

    async fn next(&mut self) -> Result<View, Error> {
        self.interval.tick().await;
        let mut request = self.http.get(&self.url);
        // The projected token rotates: read it each time.
        if let Ok(token) = std::fs::read_to_string(&self.token_file) {
            request = request.bearer_auth(token.trim());
        }
        let response = request.send().await.map_err(err)?;
        if !response.status().is_success() {
            return Err(err(format!("GET {}: HTTP {}", self.url, response.status())));
        }
        let nodes = parse_nodes(&response.json::<Value>().await.map_err(err)?)?;
        let all: BTreeSet<String> = nodes.keys().cloned().collect();
        let online: BTreeSet<String> = nodes
            .iter()
            .filter(|(_, (r, _))| *r)
            .map(|(n, _)| n.clone())
            .collect();
        Ok(self.transitions.update(true, &online, &all, |node| {
            format!(
                "k8s-{}",
                nodes.get(node).map(|(_, t)| t.as_str()).unwrap_or_default()
            )
        }))
    }

    fn announce(&mut self, _host: &str, _incident: &str) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn ready_conditions_decide_who_is_alive() {
        let list = json!({"kind": "NodeList", "items": [
            {"metadata": {"name": "compute-01"}, "status": {"conditions": [
                {"type": "MemoryPressure", "status": "False"},
                {"type": "Ready", "status": "True", "lastTransitionTime": "2026-12-01T10:00:00Z"}]}},
            {"metadata": {"name": "compute-02"}, "status": {"conditions": [
                {"type": "Ready", "status": "Unknown", "lastTransitionTime": "2026-12-02T10:00:00Z",
                 "reason": "NodeStatusUnknown"}]}},
            {"metadata": {"name": "compute-03"}, "status": {}}
        ]});
        let nodes = parse_nodes(&list).unwrap();
        assert!(nodes["compute-01"].0);
        assert_eq!(
            nodes["compute-02"],
            (false, "2026-12-02T10:00:00Z".to_owned())
        );
        assert!(!nodes["compute-03"].0);
        assert!(parse_nodes(&json!({})).is_err());
    }
}
