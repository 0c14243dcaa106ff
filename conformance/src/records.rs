//! Nova's, Cinder's and Placement's own records, read and written over
//! plain REST as an operator's tools would, independent of the engine's
//! `openstack-client`: what a test sets up (flavor, servers, volumes) and
//! the truth it checks the engine's outcome against.

use std::time::Duration;

use instanceha_testkit::eventually;
use reqwest::Method;
use serde_json::{Value, json};

use crate::stack::Stack;

/// The compute microversion of the records: `locked_reason` (2.73),
/// `host` on create (2.74), a server's state kept across evacuation
/// (up to 2.94, as the engine asks).
pub const COMPUTE: &str = "compute 2.94";
const VOLUME: &str = "volume 3.44";
const PLACEMENT: &str = "placement 1.28";
/// How often a server's or a volume's state is read again while waited for.
const POLL: Duration = Duration::from_millis(300);

/// An admin session on the real cloud (or, for what it shares with it,
/// on the simulator: Nova and Cinder).
#[derive(Clone)]
pub struct Records {
    http: reqwest::Client,
    auth_url: String,
    body: Value,
    token: std::sync::Arc<std::sync::Mutex<String>>,
    pub project_id: String,
    compute: String,
    volume: String,
    /// Placement's endpoint, when the catalog has one.
    placement: Option<String>,
}

/// A server as Nova shows it.
#[derive(Clone, Debug)]
pub struct Server {
    pub id: String,
    pub name: String,
    pub status: String,
    pub host: String,
    pub task_state: Option<String>,
    pub locked: bool,
    pub locked_reason: Option<String>,
}

impl Server {
    fn from(v: &Value) -> Server {
        let s = |k: &str| v[k].as_str().map(str::to_owned);
        Server {
            id: s("id").unwrap_or_default(),
            name: s("name").unwrap_or_default(),
            status: s("status").unwrap_or_default(),
            host: s("OS-EXT-SRV-ATTR:host").unwrap_or_default(),
            task_state: s("OS-EXT-STS:task_state"),
            locked: v["locked"].as_bool().unwrap_or(false),
            locked_reason: s("locked_reason"),
        }
    }
}

impl Records {
    /// Logs in as the stack's admin.
    pub async fn login(stack: &Stack) -> Records {
        let records = Self::login_at(
            stack.var("OS_AUTH_URL"),
            (stack.var("OS_USERNAME"), stack.var("OS_PASSWORD")),
            stack.var("OS_USER_DOMAIN_NAME"),
            (
                stack.var("OS_PROJECT_NAME"),
                stack.var("OS_PROJECT_DOMAIN_NAME"),
            ),
        )
        .await;
        assert!(
            records.placement.is_some(),
            "no public placement endpoint in the catalog"
        );
        records
    }

    /// Logs in at any Keystone (the stack's, or the simulator's, which
    /// has no Placement) as `(user, password)` of `user_domain`, scoped to
    /// `(project, project_domain)`.
    pub async fn login_at(
        auth_url: &str,
        (user, password): (&str, &str),
        user_domain: &str,
        (project, project_domain): (&str, &str),
    ) -> Records {
        // The workspace's one crypto library, as the services install it.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(120))
            .build()
            .expect("an http client");
        let body = json!({"auth": {
            "identity": {"methods": ["password"], "password": {"user": {
                "name": user, "password": password, "domain": {"name": user_domain}}}},
            "scope": {"project": {"name": project, "domain": {"name": project_domain}}}}});
        let auth_url = auth_url.trim_end_matches('/').to_owned();
        let (token, reply) = token(&http, &auth_url, &body).await;
        let endpoint = |kind: &str| -> Option<String> {
            reply["token"]["catalog"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|s| s["type"] == kind)
                .flat_map(|s| s["endpoints"].as_array().cloned().unwrap_or_default())
                .find(|e| e["interface"] == "public")
                .and_then(|e| e["url"].as_str().map(str::to_owned))
        };
        let needed = |kind: &str| {
            endpoint(kind).unwrap_or_else(|| panic!("no public {kind} endpoint in the catalog"))
        };
        Records {
            project_id: reply["token"]["project"]["id"].as_str().unwrap().to_owned(),
            compute: needed("compute"),
            volume: needed("volumev3"),
            placement: endpoint("placement"),
            http,
            auth_url,
            body,
            token: std::sync::Arc::new(std::sync::Mutex::new(token)),
        }
    }

    /// The public endpoints of Nova and Cinder, as the catalog gives them.
    pub fn endpoints(&self) -> (&str, &str) {
        (&self.compute, &self.volume)
    }

    /// One call; `Err` with the status and body for anything but 2xx, or
    /// with the transport error (a stopped service refuses).
    pub async fn call(
        &self,
        method: Method,
        url: &str,
        version: Option<&str>,
        body: Option<Value>,
    ) -> Result<Value, String> {
        for attempt in 0..2 {
            let token = self.token.lock().unwrap().clone();
            let mut req = self
                .http
                .request(method.clone(), url)
                .header("X-Auth-Token", token)
                .header("Accept", "application/json");
            if let Some(v) = version {
                req = req.header("OpenStack-API-Version", v);
            }
            if let Some(b) = &body {
                req = req.json(b);
            }
            let resp = req
                .send()
                .await
                .map_err(|e| format!("{method} {url}: {e}"))?;
            let status = resp.status();
            let text = resp.text().await.unwrap_or_default();
            if status.as_u16() == 401 && attempt == 0 {
                let (fresh, _) = token_result(&self.http, &self.auth_url, &self.body).await?;
                *self.token.lock().unwrap() = fresh;
                continue;
            }
            if !status.is_success() {
                return Err(format!("{method} {url} answered {status}: {text}"));
            }
            return Ok(if text.is_empty() {
                Value::Null
            } else {
                serde_json::from_str(&text).map_err(|e| format!("{url}: {e}: {text}"))?
            });
        }
        unreachable!("the second attempt returns")
    }

    pub async fn nova(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value, String> {
        let url = format!("{}{path}", self.compute);
        self.call(method, &url, Some(COMPUTE), body).await
    }

    pub async fn cinder(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value, String> {
        let url = format!("{}{path}", self.volume);
        self.call(method, &url, Some(VOLUME), body).await
    }

    pub async fn placement(&self, path: &str) -> Result<Value, String> {
        let base = self
            .placement
            .as_deref()
            .ok_or_else(|| "no placement endpoint".to_owned())?;
        let url = format!("{base}{path}");
        self.call(Method::GET, &url, Some(PLACEMENT), None).await
    }

    /// The flavor `ha.tiny` (1 vCPU, 128 MiB, 1 GiB), created once.
    pub async fn flavor(&self) -> String {
        let flavors = self.nova(Method::GET, "/flavors", None).await.unwrap();
        if let Some(f) = flavors["flavors"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["name"] == "ha.tiny")
        {
            return f["id"].as_str().unwrap().to_owned();
        }
        let body = json!({"flavor": {"name": "ha.tiny", "vcpus": 1, "ram": 128, "disk": 1}});
        let f = self
            .nova(Method::POST, "/flavors", Some(body))
            .await
            .unwrap();
        f["flavor"]["id"].as_str().unwrap().to_owned()
    }

    /// A 1 GiB bootable volume, available.
    pub async fn volume(&self, name: &str) -> String {
        let v = self
            .cinder(
                Method::POST,
                "/volumes",
                Some(json!({"volume": {"size": 1, "name": name}})),
            )
            .await
            .unwrap();
        let id = v["volume"]["id"].as_str().unwrap().to_owned();
        self.volume_status(&id, "available", Duration::from_secs(60))
            .await;
        self.cinder(
            Method::POST,
            &format!("/volumes/{id}/action"),
            Some(json!({"os-set_bootable": {"bootable": true}})),
        )
        .await
        .unwrap();
        id
    }

    pub async fn volume_status(&self, id: &str, wanted: &str, within: Duration) -> Value {
        eventually(&format!("volume {id} {wanted}"), within, POLL, || async {
            let v = self
                .cinder(Method::GET, &format!("/volumes/{id}"), None)
                .await?;
            if v["volume"]["status"] == wanted {
                Ok(v["volume"].clone())
            } else {
                Err(format!("status {}", v["volume"]["status"]))
            }
        })
        .await
    }

    /// Boots `name` on `host` (no network: the stack has no Neutron), from
    /// the stand-in image or from `volume`; `ha` sets `HA_Enabled=True`.
    /// Returns its id once ACTIVE.
    pub async fn boot(
        &self,
        name: &str,
        host: &str,
        image: &str,
        volume: Option<&str>,
        ha: bool,
    ) -> String {
        let flavor = self.flavor().await;
        let mut server = json!({
            "name": name, "flavorRef": flavor, "networks": "none", "host": host,
            "metadata": if ha { json!({"HA_Enabled": "True"}) } else { json!({}) },
        });
        match volume {
            Some(v) => {
                server["block_device_mapping_v2"] = json!([{"boot_index": 0, "uuid": v,
                    "source_type": "volume", "destination_type": "volume",
                    "delete_on_termination": false}]);
            }
            None => server["imageRef"] = json!(image),
        }
        let created = self
            .nova(Method::POST, "/servers", Some(json!({ "server": server })))
            .await
            .unwrap();
        let id = created["server"]["id"].as_str().unwrap().to_owned();
        self.server_state(&id, "ACTIVE", Duration::from_secs(120))
            .await;
        id
    }

    pub async fn server(&self, id: &str) -> Result<Server, String> {
        let v = self
            .nova(Method::GET, &format!("/servers/{id}"), None)
            .await?;
        Ok(Server::from(&v["server"]))
    }

    /// Waits for `status` with no task.
    pub async fn server_state(&self, id: &str, status: &str, within: Duration) -> Server {
        eventually(&format!("server {id} {status}"), within, POLL, || async {
            let s = self.server(id).await?;
            if s.status == "ERROR" && status != "ERROR" {
                panic!("server {id} went ERROR");
            }
            if s.status == status && s.task_state.is_none() {
                Ok(s)
            } else {
                Err(format!("{} task {:?}", s.status, s.task_state))
            }
        })
        .await
    }

    pub async fn stop_server(&self, id: &str) {
        self.nova(
            Method::POST,
            &format!("/servers/{id}/action"),
            Some(json!({"os-stop": null})),
        )
        .await
        .unwrap();
        self.server_state(id, "SHUTOFF", Duration::from_secs(60))
            .await;
    }

    pub async fn servers(&self) -> Vec<Server> {
        let v = self
            .nova(
                Method::GET,
                "/servers/detail?all_tenants=1&limit=1000",
                None,
            )
            .await
            .unwrap();
        v["servers"]
            .as_array()
            .unwrap()
            .iter()
            .map(Server::from)
            .collect()
    }

    /// nova-compute services by host: (id, status, state, forced_down).
    pub async fn compute_services(&self) -> Vec<ComputeService> {
        let v = self
            .nova(Method::GET, "/os-services?binary=nova-compute", None)
            .await
            .unwrap();
        v["services"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| ComputeService {
                id: s["id"].as_str().unwrap_or_default().to_owned(),
                host: s["host"].as_str().unwrap_or_default().to_owned(),
                enabled: s["status"] == "enabled",
                up: s["state"] == "up",
                forced_down: s["forced_down"].as_bool().unwrap_or(false),
                updated_at: s["updated_at"].as_str().map(str::to_owned),
            })
            .collect()
    }

    pub async fn compute_service(&self, host: &str) -> ComputeService {
        self.compute_services()
            .await
            .into_iter()
            .find(|s| s.host == host)
            .unwrap_or_else(|| panic!("no nova-compute on {host}"))
    }

    /// The evacuation records of `server`, oldest first.
    pub async fn evacuations(&self, server: &str) -> Vec<Value> {
        let v = self
            .nova(
                Method::GET,
                &format!("/os-migrations?instance_uuid={server}&migration_type=evacuation"),
                None,
            )
            .await
            .unwrap();
        let mut m = v["migrations"].as_array().cloned().unwrap_or_default();
        m.sort_by_key(|m| m["id"].as_i64());
        m
    }

    /// The resource providers `server` holds allocations against, by name.
    pub async fn allocation_hosts(&self, server: &str) -> Vec<String> {
        let a = self
            .placement(&format!("/allocations/{server}"))
            .await
            .unwrap();
        let mut hosts = Vec::new();
        for rp in a["allocations"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, _)| k)
        {
            let p = self
                .placement(&format!("/resource_providers/{rp}"))
                .await
                .unwrap();
            hosts.push(p["name"].as_str().unwrap_or_default().to_owned());
        }
        hosts.sort();
        hosts
    }

    /// `volume`'s attachment records: (id, status, instance, host of the
    /// connector).
    pub async fn attachments(&self, volume: &str) -> Vec<Value> {
        let v = self
            .cinder(
                Method::GET,
                &format!("/attachments/detail?volume_id={volume}"),
                None,
            )
            .await
            .unwrap();
        v["attachments"].as_array().cloned().unwrap_or_default()
    }

    /// Deletes every server and every volume and waits until they are
    /// gone.
    pub async fn delete_everything(&self) {
        for s in self.servers().await {
            let _ = self
                .nova(Method::DELETE, &format!("/servers/{}", s.id), None)
                .await;
        }
        eventually(
            "every server deleted",
            Duration::from_secs(120),
            Duration::from_millis(500),
            || async {
                let left = self.servers().await.len();
                if left == 0 {
                    Ok(())
                } else {
                    Err(format!("{left} left"))
                }
            },
        )
        .await;
        let volumes = self
            .cinder(Method::GET, "/volumes?all_tenants=1", None)
            .await
            .unwrap();
        for v in volumes["volumes"].as_array().into_iter().flatten() {
            let id = v["id"].as_str().unwrap();
            // A volume stuck in an attachment state is reset first.
            let _ = self
                .cinder(Method::POST, &format!("/volumes/{id}/action"),
                    Some(json!({"os-reset_status": {"status": "available", "attach_status": "detached"}})))
                .await;
            let _ = self
                .cinder(Method::DELETE, &format!("/volumes/{id}?cascade=true"), None)
                .await;
        }
        eventually(
            "every volume deleted",
            Duration::from_secs(120),
            Duration::from_millis(500),
            || async {
                let v = self
                    .cinder(Method::GET, "/volumes?all_tenants=1", None)
                    .await?;
                let left = v["volumes"].as_array().map_or(0, Vec::len);
                if left == 0 {
                    Ok(())
                } else {
                    Err(format!("{left} left"))
                }
            },
        )
        .await;
    }

    /// Puts `host`'s nova-compute back in service: not forced down (Nova
    /// refuses that until the restarted compute has cleaned up its
    /// evacuated guests), enabled, and up.
    pub async fn restore_compute(&self, host: &str) {
        let id = self.compute_service(host).await.id;
        eventually(
            &format!("{host} not forced down"),
            Duration::from_secs(120),
            Duration::from_secs(1),
            || async {
                self.nova(
                    Method::PUT,
                    &format!("/os-services/{id}"),
                    Some(json!({"forced_down": false})),
                )
                .await
                .map(|_| ())
            },
        )
        .await;
        self.nova(
            Method::PUT,
            &format!("/os-services/{id}"),
            Some(json!({"status": "enabled"})),
        )
        .await
        .unwrap();
        eventually(
            &format!("{host} up"),
            Duration::from_secs(90),
            Duration::from_secs(1),
            || async {
                let s = self.compute_service(host).await;
                if s.up && s.enabled && !s.forced_down {
                    Ok(())
                } else {
                    Err(format!("{s:?}"))
                }
            },
        )
        .await;
        // Placement keeps COMPUTE_STATUS_DISABLED for a while after the
        // compute is enabled again; until then every boot there fails with
        // "No valid host".
        eventually(
            &format!("{host} schedulable in placement"),
            Duration::from_secs(120),
            Duration::from_secs(1),
            || async {
                let providers = self
                    .placement(&format!("/resource_providers?name={host}"))
                    .await?;
                let uuid = providers["resource_providers"][0]["uuid"]
                    .as_str()
                    .ok_or("no resource provider")?
                    .to_owned();
                let traits = self
                    .placement(&format!("/resource_providers/{uuid}/traits"))
                    .await?;
                let disabled = traits["traits"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|t| t == "COMPUTE_STATUS_DISABLED");
                if disabled {
                    Err("COMPUTE_STATUS_DISABLED".to_owned())
                } else {
                    Ok(())
                }
            },
        )
        .await;
    }
}

/// A nova-compute service as Nova shows it.
#[derive(Clone, Debug)]
pub struct ComputeService {
    pub id: String,
    pub host: String,
    pub enabled: bool,
    pub up: bool,
    pub forced_down: bool,
    /// When the service last changed: every heartbeat of its process,
    /// every update.
    pub updated_at: Option<String>,
}

async fn token(http: &reqwest::Client, auth_url: &str, body: &Value) -> (String, Value) {
    token_result(http, auth_url, body)
        .await
        .unwrap_or_else(|e| panic!("keystone login: {e}"))
}

async fn token_result(
    http: &reqwest::Client,
    auth_url: &str,
    body: &Value,
) -> Result<(String, Value), String> {
    let url = format!("{auth_url}/auth/tokens");
    let resp = http
        .post(&url)
        .json(body)
        .send()
        .await
        .map_err(|e| format!("{url}: {e}"))?;
    if !resp.status().is_success() {
        return Err(format!("{url}: {}", resp.status()));
    }
    let token = resp.headers()["X-Subject-Token"]
        .to_str()
        .unwrap()
        .to_owned();
    Ok((token, resp.json().await.map_err(|e| e.to_string())?))
}
