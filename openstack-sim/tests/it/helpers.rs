//! Test harness: starts a simulator on 127.0.0.1:0 and talks to it with reqwest.

use std::time::Duration;

use openstack_sim::scenario::{HostSpec, InstanceSpec, Settings, VolumeSpec};
use openstack_sim::{Scenario, Sim};
use reqwest::header::HeaderMap;
use reqwest::{Client, Method};
use serde_json::{Value, json};

/// A running simulator and a client.
pub struct Harness {
    pub sim: Sim,
    pub client: Client,
}

/// An answer: status, headers and JSON body (Null when empty or not JSON).
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Value,
    pub text: String,
}

impl Answer {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

pub fn client() -> Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .expect("client")
}

/// Settings for precise tests: durations in whole simulated seconds and a nearly frozen clock
/// (speed 0.001), so tests move time with `advance` and never race it.
pub fn manual_settings() -> Settings {
    let mut s = Settings {
        speed: 0.001,
        seed: 7,
        ..Settings::default()
    };
    s.rpc_response_timeout = 0.0;
    s.durations.schedule = 1.0;
    s.durations.claim = 1.0;
    s.durations.block_device_mapping = 2.0;
    s.durations.spawn = 3.0;
    s.durations.finish = 1.0;
    s.durations.stop = 2.0;
    s.durations.start = 2.0;
    s.durations.host_boot = 10.0;
    s
}

/// Two computes and a spare, with a mix of servers on compute-01.
pub fn two_hosts(settings: Settings) -> Scenario {
    Scenario::builder()
        .settings(settings)
        .host(HostSpec::new("compute-01"))
        .host(HostSpec::new("compute-02"))
        .host(HostSpec::new("compute-03"))
        .instance(InstanceSpec::new("web-1", "compute-01").ha(true))
        .instance(
            InstanceSpec::new("db-1", "compute-01")
                .ha(true)
                .stale_attachment(),
        )
        .instance(
            InstanceSpec::new("app-1", "compute-01")
                .ha(true)
                .boot_from_volume(),
        )
        .instance(
            InstanceSpec::new("batch-1", "compute-01")
                .ha(true)
                .vm_state("stopped"),
        )
        .instance(
            InstanceSpec::new("broken-1", "compute-01")
                .ha(true)
                .vm_state("error"),
        )
        .instance(InstanceSpec::new("stuck-1", "compute-01").root_attach_status("detaching"))
        .instance(InstanceSpec::new("own-1", "compute-02").project("admin"))
        .volume(VolumeSpec::new("web-1-data").attached_to("web-1"))
        .build()
        .expect("valid scenario")
}

pub async fn start(scenario: Scenario) -> Harness {
    let sim = Sim::start(scenario, "127.0.0.1:0".parse().unwrap())
        .await
        .expect("sim starts");
    Harness {
        sim,
        client: client(),
    }
}

impl Harness {
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.sim.base_url())
    }

    /// A project-scoped password token.
    pub async fn token(&self, user: &str, password: &str, project: &str) -> String {
        let body = json!({"auth": {
            "identity": {"methods": ["password"], "password": {"user": {"name": user, "domain": {"name": "Default"}, "password": password}}},
            "scope": {"project": {"name": project, "domain": {"name": "Default"}}}}});
        let a = self
            .send(Method::POST, "/identity/v3/auth/tokens", &[], Some(body))
            .await;
        assert_eq!(a.status, 201, "login of {user}: {}", a.text);
        a.header("x-subject-token")
            .expect("token header")
            .to_string()
    }

    pub async fn admin(&self) -> String {
        self.token("admin", "secret", "admin").await
    }

    pub async fn send(
        &self,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<Value>,
    ) -> Answer {
        let mut req = self.client.request(method, self.url(path));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.expect("request sent");
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let text = resp.text().await.unwrap_or_default();
        let body = serde_json::from_str(&text).unwrap_or(Value::Null);
        Answer {
            status,
            headers,
            body,
            text,
        }
    }

    /// A Nova call at a microversion.
    pub async fn nova(
        &self,
        token: &str,
        version: &str,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> Answer {
        let mv = format!("compute {version}");
        self.send(
            method,
            &format!("/compute/v2.1{path}"),
            &[("X-Auth-Token", token), ("OpenStack-API-Version", &mv)],
            body,
        )
        .await
    }

    /// A Cinder call at a microversion, in the admin project.
    pub async fn cinder(
        &self,
        token: &str,
        version: &str,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> Answer {
        self.cinder_with(token, version, method, path, body, &[])
            .await
    }

    pub async fn cinder_with(
        &self,
        token: &str,
        version: &str,
        method: Method,
        path: &str,
        body: Option<Value>,
        extra: &[(&str, &str)],
    ) -> Answer {
        let project = self.sim.project_id("admin").expect("admin project");
        let mv = format!("volume {version}");
        let mut headers = vec![
            ("X-Auth-Token", token),
            ("OpenStack-API-Version", mv.as_str()),
        ];
        headers.extend_from_slice(extra);
        self.send(
            method,
            &format!("/volume/v3/{project}{path}"),
            &headers,
            body,
        )
        .await
    }

    pub fn id_of(&self, name: &str) -> String {
        self.sim
            .snapshot()
            .instance_by_name(name)
            .expect("instance")
            .id
            .clone()
    }

    /// Powers a host off and forces its service down (as a fencing HA engine would).
    pub async fn fail_host(&self, token: &str, host: &str) {
        self.sim.power_off(host).unwrap();
        let snapshot = self.sim.snapshot();
        let uuid = snapshot.host(host).unwrap().host.service_uuid.clone();
        let a = self
            .nova(
                token,
                "2.53",
                Method::PUT,
                &format!("/os-services/{uuid}"),
                Some(json!({"forced_down": true})),
            )
            .await;
        assert_eq!(a.status, 200, "{}", a.text);
    }

    pub async fn evacuate(&self, token: &str, version: &str, server: &str, body: Value) -> Answer {
        self.nova(
            token,
            version,
            Method::POST,
            &format!("/servers/{server}/action"),
            Some(json!({"evacuate": body})),
        )
        .await
    }

    pub async fn server(&self, token: &str, version: &str, id: &str) -> Value {
        let a = self
            .nova(token, version, Method::GET, &format!("/servers/{id}"), None)
            .await;
        assert_eq!(a.status, 200, "{}", a.text);
        a.body["server"].clone()
    }
}
