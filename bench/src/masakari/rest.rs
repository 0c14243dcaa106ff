//! A client of Masakari's REST API (`/v1`), authenticated with a Keystone
//! token of the admin account (every Masakari policy is admin only): the
//! calls the benchmark makes as an operator and as a monitor would.

use std::sync::Arc;

use anyhow::{Context as _, anyhow, bail};
use chrono::{DateTime, NaiveDateTime, Utc};
use reqwest::{Method, StatusCode};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::sync::RwLock;

use super::runner::CloudAccess;

/// A notification as Masakari shows it (microversion 1.0).
#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct Notification {
    /// The row id: what Masakari's list takes as `marker`.
    pub id: i64,
    pub notification_uuid: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub status: String,
    pub source_host_uuid: String,
    #[serde(default)]
    pub payload: Value,
    pub created_at: String,
    pub updated_at: Option<String>,
    pub message: Option<String>,
}

impl Notification {
    pub fn is_final(&self) -> bool {
        matches!(self.status.as_str(), "finished" | "failed" | "ignored")
    }
}

/// A vmove (microversion 1.3).
#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct VMove {
    pub instance_uuid: String,
    pub instance_name: Option<String>,
    pub source_host: Option<String>,
    pub dest_host: Option<String>,
    pub start_time: Option<String>,
    pub end_time: Option<String>,
    pub status: String,
    pub message: Option<String>,
}

/// A time as Masakari writes it: UTC without a zone
/// (`2026-12-02T14:09:59.664998`; `created_at` and `updated_at` in whole
/// seconds).
pub fn parse_time(text: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(text)
        .map(|t| t.with_timezone(&Utc))
        .ok()
        .or_else(|| {
            NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S%.f")
                .ok()
                .map(|t| t.and_utc())
        })
}

/// Masakari's API with an admin token, renewed when refused.
#[derive(Clone)]
pub struct MasakariRest {
    http: reqwest::Client,
    url: String,
    cloud: Arc<CloudAccess>,
    token: Arc<RwLock<String>>,
}

/// What a create call answered (intake counts every outcome).
#[derive(Debug)]
pub struct Answer {
    pub status: StatusCode,
    pub body: Value,
}

impl MasakariRest {
    /// A client of the API at `url` (`http://127.0.0.1:PORT`), logged in.
    pub async fn connect(url: &str, cloud: &CloudAccess, pool: usize) -> anyhow::Result<Self> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .no_proxy()
            .pool_max_idle_per_host(pool)
            .tcp_nodelay(true)
            .timeout(std::time::Duration::from_secs(120))
            .build()
            .context("building the HTTP client")?;
        let client = Self {
            http,
            url: url.trim_end_matches('/').to_owned(),
            cloud: Arc::new(cloud.clone()),
            token: Arc::new(RwLock::new(String::new())),
        };
        client.login().await?;
        Ok(client)
    }

    /// A project-scoped password token from Keystone.
    async fn login(&self) -> anyhow::Result<()> {
        let c = &self.cloud;
        let base = c.auth_url.trim_end_matches('/');
        let url = if base.ends_with("/v3") {
            format!("{base}/auth/tokens")
        } else {
            format!("{base}/v3/auth/tokens")
        };
        let body = json!({"auth": {
            "identity": {"methods": ["password"], "password": {"user": {
                "name": c.username,
                "domain": {"name": c.user_domain_name},
                "password": c.password,
            }}},
            "scope": {"project": {"name": c.project_name, "domain": {"name": c.project_domain_name}}},
        }});
        let response = self
            .http
            .post(&url)
            .json(&body)
            .send()
            .await
            .with_context(|| format!("logging in at {url}"))?;
        if response.status() != StatusCode::CREATED {
            bail!("logging in at {url}: {}", response.status());
        }
        let token = response
            .headers()
            .get("x-subject-token")
            .and_then(|v| v.to_str().ok())
            .ok_or_else(|| anyhow!("Keystone answered without X-Subject-Token"))?
            .to_owned();
        *self.token.write().await = token;
        Ok(())
    }

    /// One call; on 401 a new token and one more try.
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        microversion: Option<&str>,
        body: Option<&Value>,
    ) -> anyhow::Result<Answer> {
        for attempt in 0..2 {
            let token = self.token.read().await.clone();
            let mut request = self
                .http
                .request(method.clone(), format!("{}{path}", self.url))
                .header("x-auth-token", token);
            if let Some(v) = microversion {
                request = request.header("openstack-api-version", format!("instance-ha {v}"));
            }
            if let Some(body) = body {
                request = request.json(body);
            }
            let response = request
                .send()
                .await
                .with_context(|| format!("{method} {path}"))?;
            let status = response.status();
            if status == StatusCode::UNAUTHORIZED && attempt == 0 {
                self.login().await?;
                continue;
            }
            let text = response.text().await.unwrap_or_default();
            let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
            return Ok(Answer { status, body });
        }
        unreachable!("the loop returns on its second pass")
    }

    async fn expect(
        &self,
        method: Method,
        path: &str,
        microversion: Option<&str>,
        body: Option<&Value>,
    ) -> anyhow::Result<Value> {
        let answer = self.call(method.clone(), path, microversion, body).await?;
        if !answer.status.is_success() {
            bail!("{method} {path}: {}: {}", answer.status, answer.body);
        }
        Ok(answer.body)
    }

    /// Creates a segment (recovery method `auto`); returns its uuid.
    pub async fn create_segment(&self, name: &str) -> anyhow::Result<String> {
        let body = json!({"segment": {
            "name": name, "service_type": "COMPUTE", "recovery_method": "auto",
        }});
        let answer = self
            .expect(Method::POST, "/v1/segments", None, Some(&body))
            .await?;
        answer["segment"]["uuid"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| anyhow!("a segment without uuid: {answer}"))
    }

    /// Registers a compute host (Masakari checks with Nova that it is one).
    pub async fn create_host(&self, segment: &str, name: &str) -> anyhow::Result<String> {
        let body = json!({"host": {
            "name": name, "type": "COMPUTE", "control_attributes": "SSH",
        }});
        let answer = self
            .expect(
                Method::POST,
                &format!("/v1/segments/{segment}/hosts"),
                None,
                Some(&body),
            )
            .await?;
        answer["host"]["uuid"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| anyhow!("a host without uuid: {answer}"))
    }

    /// Takes a host out of maintenance: Masakari puts a host in
    /// maintenance when it starts recovering it, and refuses (409) the
    /// next report about it until an operator takes it out.
    pub async fn end_maintenance(&self, segment: &str, host: &str) -> anyhow::Result<()> {
        let body = json!({"host": {"on_maintenance": false}});
        self.expect(
            Method::PUT,
            &format!("/v1/segments/{segment}/hosts/{host}"),
            None,
            Some(&body),
        )
        .await?;
        Ok(())
    }

    /// One notification.
    pub async fn notification(&self, uuid: &str) -> anyhow::Result<Notification> {
        let answer = self
            .expect(
                Method::GET,
                &format!("/v1/notifications/{uuid}"),
                None,
                None,
            )
            .await?;
        serde_json::from_value(answer["notification"].clone())
            .with_context(|| format!("reading notification {uuid}"))
    }

    /// `POST /v1/notifications`, whatever it answers.
    pub async fn create_notification(
        &self,
        kind: &str,
        hostname: &str,
        generated_time: DateTime<Utc>,
        payload: Value,
    ) -> anyhow::Result<Answer> {
        let body = json!({"notification": {
            "type": kind,
            "hostname": hostname,
            "generated_time": generated_time.format("%Y-%m-%dT%H:%M:%S%.6f").to_string(),
            "payload": payload,
        }});
        self.call(Method::POST, "/v1/notifications", None, Some(&body))
            .await
    }

    /// Every notification (pages of 1,000, Masakari's `osapi_max_limit`;
    /// the marker is the row id).
    pub async fn notifications(&self) -> anyhow::Result<Vec<Notification>> {
        let mut all: Vec<Notification> = Vec::new();
        loop {
            let mut path = "/v1/notifications?limit=1000&sort_key=id&sort_dir=asc".to_owned();
            if let Some(last) = all.last() {
                path.push_str(&format!("&marker={}", last.id));
            }
            let answer = self.expect(Method::GET, &path, None, None).await?;
            let page: Vec<Notification> = serde_json::from_value(answer["notifications"].clone())
                .context("reading the notification list")?;
            let full = page.len() == 1000;
            all.extend(page);
            if !full {
                return Ok(all);
            }
        }
    }

    /// The vmoves of a host notification.
    pub async fn vmoves(&self, notification: &str) -> anyhow::Result<Vec<VMove>> {
        let mut all: Vec<VMove> = Vec::new();
        let mut marker: Option<i64> = None;
        loop {
            let mut path = format!(
                "/v1/notifications/{notification}/vmoves?limit=1000&sort_key=id&sort_dir=asc"
            );
            if let Some(m) = &marker {
                path.push_str(&format!("&marker={m}"));
            }
            let answer = self.expect(Method::GET, &path, Some("1.3"), None).await?;
            let raw = answer["vmoves"].as_array().cloned().unwrap_or_default();
            // The list's marker is the row id, not the uuid.
            marker = raw.last().and_then(|v| v["id"].as_i64());
            let full = raw.len() == 1000;
            for v in raw {
                all.push(serde_json::from_value(v).context("reading a vmove")?);
            }
            if !full {
                return Ok(all);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masakari_times_are_utc() {
        let t = parse_time("2026-12-02T14:09:59.664998").unwrap();
        assert_eq!(t.timestamp_subsec_micros(), 664_998);
        assert_eq!(
            parse_time("2026-12-02T14:06:58.000000")
                .unwrap()
                .timestamp(),
            parse_time("2026-12-02T14:06:58Z").unwrap().timestamp()
        );
        assert!(parse_time("yesterday").is_none());
    }
}
