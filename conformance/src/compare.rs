//! What two recordings of the engine's calls ([`crate::recorder`]) have in
//! common and where they differ: each call reduced to what does not depend
//! on the cloud's addresses, ids and host names ([`Call`]: service, method,
//! path template, action, query keys, microversion, status), grouped by
//! the instance it concerns, and each response reduced to its shape (every
//! key path and the JSON types seen at it, [`Shape`]).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde_json::Value;

use crate::recorder::Exchange;

/// A call without its cloud's particulars.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Call {
    /// identity, compute or volume.
    pub service: String,
    pub method: String,
    /// The path below the service's endpoint, ids as `{id}`.
    pub template: String,
    /// The action of a `POST …/action` (`evacuate`, `os-force_detach`).
    pub action: Option<String>,
    pub query_keys: Vec<String>,
    pub microversion: Option<String>,
    pub status: Option<u16>,
}

impl Call {
    /// Whether the call changes something (not a read).
    pub fn writes(&self) -> bool {
        self.method != "GET" && !(self.service == "identity" && self.template == "/v3/auth/tokens")
    }

    /// The call without its status: the key its responses' shapes are
    /// compared under is `(endpoint(), status)`.
    pub fn endpoint(&self) -> String {
        let mut s = format!("{} {} {}", self.service, self.method, self.template);
        if let Some(a) = &self.action {
            s.push_str(&format!(" [{a}]"));
        }
        s
    }
}

impl fmt::Display for Call {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.endpoint())?;
        if !self.query_keys.is_empty() {
            write!(f, " ?{}", self.query_keys.join("&"))?;
        }
        if let Some(v) = &self.microversion {
            write!(f, " ({v})")?;
        }
        match self.status {
            Some(s) => write!(f, " -> {s}"),
            None => write!(f, " -> no answer"),
        }
    }
}

/// The service and the path below its endpoint: by the upstream's label
/// (`keystone`, `nova`, `cinder`), or, for the simulator (one address for
/// all), by its path prefix (`/identity`, `/compute`, `/volume`).
fn service_path(e: &Exchange) -> (String, String) {
    let by_label = match e.upstream.as_str() {
        "keystone" => Some("identity"),
        "nova" => Some("compute"),
        "cinder" => Some("volume"),
        _ => None,
    };
    if let Some(service) = by_label {
        return (service.to_owned(), e.path.clone());
    }
    for service in ["identity", "compute", "volume"] {
        let prefix = format!("/{service}");
        if let Some(rest) = e.path.strip_prefix(&prefix)
            && (rest.is_empty() || rest.starts_with('/'))
        {
            let rest = if rest.is_empty() { "/" } else { rest };
            return (service.to_owned(), rest.to_owned());
        }
    }
    ("other".to_owned(), e.path.clone())
}

/// A UUID (with or without dashes) or a request id (`req-<uuid>`).
fn is_id(segment: &str) -> bool {
    let hex = segment.strip_prefix("req-").unwrap_or(segment);
    let digits = hex.chars().filter(|c| *c != '-').count();
    let shaped = match hex.len() {
        36 => hex
            .char_indices()
            .all(|(i, c)| matches!(i, 8 | 13 | 18 | 23) == (c == '-')),
        32 => true,
        _ => false,
    };
    shaped && digits == 32 && hex.chars().all(|c| c == '-' || c.is_ascii_hexdigit())
}

fn template(path: &str) -> String {
    let t = path
        .split('/')
        .map(|s| if is_id(s) { "{id}" } else { s })
        .collect::<Vec<_>>()
        .join("/");
    if t.len() > 1 {
        t.trim_end_matches('/').to_owned()
    } else {
        t
    }
}

/// The keys of a query string, sorted, each once.
fn query_keys(query: Option<&str>) -> Vec<String> {
    let keys: BTreeSet<String> = query
        .into_iter()
        .flat_map(|q| q.split('&'))
        .filter(|p| !p.is_empty())
        .map(|p| p.split_once('=').map_or(p, |(k, _)| k).to_owned())
        .collect();
    keys.into_iter().collect()
}

impl From<&Exchange> for Call {
    fn from(e: &Exchange) -> Call {
        let (service, path) = service_path(e);
        let template = template(&path);
        let action = (e.method == "POST" && template.ends_with("/action"))
            .then(|| {
                e.request
                    .as_ref()?
                    .as_object()?
                    .keys()
                    .next()
                    .map(String::to_owned)
            })
            .flatten();
        Call {
            service,
            method: e.method.clone(),
            template,
            action,
            query_keys: query_keys(e.query.as_deref()),
            microversion: e.microversion.clone(),
            status: e.status,
        }
    }
}

/// Query parameters, decoded enough for ids (which need no decoding).
fn query_value<'a>(query: Option<&'a str>, key: &str) -> Option<&'a str> {
    query?
        .split('&')
        .filter_map(|p| p.split_once('='))
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v)
}

/// Which instance each call concerns, from what the responses said: a
/// server's volumes (`os-extended-volumes:volumes_attached`), an
/// attachment's volume.
#[derive(Debug, Default)]
pub struct Owners {
    pub instances: BTreeSet<String>,
    volume_instance: BTreeMap<String, String>,
    attachment_volume: BTreeMap<String, String>,
}

impl Owners {
    pub fn learn(exchanges: &[Exchange]) -> Owners {
        let mut owners = Owners::default();
        for e in exchanges {
            let Some(body) = &e.response else { continue };
            let servers: Vec<&Value> = match (body.get("server"), body.get("servers")) {
                (Some(s), _) => vec![s],
                (_, Some(Value::Array(list))) => list.iter().collect(),
                _ => Vec::new(),
            };
            for s in servers {
                let Some(id) = s["id"].as_str() else { continue };
                owners.instances.insert(id.to_owned());
                for v in s["os-extended-volumes:volumes_attached"]
                    .as_array()
                    .into_iter()
                    .flatten()
                {
                    if let Some(vid) = v["id"].as_str() {
                        owners.volume_instance.insert(vid.to_owned(), id.to_owned());
                    }
                }
            }
            for a in body["attachments"].as_array().into_iter().flatten() {
                if let (Some(id), Some(volume)) = (a["id"].as_str(), a["volume_id"].as_str()) {
                    owners
                        .attachment_volume
                        .insert(id.to_owned(), volume.to_owned());
                }
            }
        }
        owners
    }

    /// The instance `e` concerns, if any.
    pub fn of(&self, e: &Exchange) -> Option<String> {
        let segments: Vec<&str> = e.path.split('/').collect();
        for pair in segments.windows(2) {
            let (kind, id) = (pair[0], pair[1]);
            let found = match kind {
                "servers" if self.instances.contains(id) => Some(id.to_owned()),
                "volumes" => self.volume_instance.get(id).cloned(),
                "attachments" => self
                    .attachment_volume
                    .get(id)
                    .and_then(|v| self.volume_instance.get(v))
                    .cloned(),
                _ => None,
            };
            if found.is_some() {
                return found;
            }
        }
        let q = e.query.as_deref();
        if let Some(id) = query_value(q, "instance_uuid").filter(|i| self.instances.contains(*i)) {
            return Some(id.to_owned());
        }
        query_value(q, "volume_id").and_then(|v| self.volume_instance.get(v).cloned())
    }

    /// The volumes of the instances.
    pub fn volumes(&self) -> impl Iterator<Item = &str> {
        self.volume_instance.keys().map(String::as_str)
    }

    /// Whether the instance boots from (or has) a volume.
    pub fn has_volume(&self, instance: &str) -> bool {
        self.volume_instance.values().any(|i| i == instance)
    }
}

/// Every key path of a JSON document and the types seen at it: `server`
/// → {object}, `server.locked` → {boolean}, `servers[].id` → {string}.
/// Under the keys in [`OPAQUE`] (maps whose keys are data, not schema)
/// only the object is recorded.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Shape(pub BTreeMap<String, BTreeSet<&'static str>>);

/// The response headers the engine reads (request ids, the microversion
/// echoed, Keystone's token, `Retry-After`) and the content type.
pub const HEADERS_READ: [&str; 7] = [
    "x-openstack-request-id",
    "x-compute-request-id",
    "openstack-api-version",
    "x-subject-token",
    "retry-after",
    "content-type",
    "vary",
];

/// Objects whose keys are data: metadata, addresses, extra specs.
pub const OPAQUE: [&str; 5] = [
    "metadata",
    "addresses",
    "extra_specs",
    "volume_image_metadata",
    "connection_info",
];

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

impl Shape {
    pub fn add(&mut self, v: &Value) {
        self.walk("", v);
    }

    /// Records which of [`HEADERS_READ`] an answer had, as `(header) name`.
    pub fn add_headers(&mut self, names: &[String]) {
        for name in names.iter().filter(|n| HEADERS_READ.contains(&n.as_str())) {
            self.0
                .entry(format!("(header) {name}"))
                .or_default()
                .insert("string");
        }
    }

    fn walk(&mut self, at: &str, v: &Value) {
        if !at.is_empty() {
            self.0.entry(at.to_owned()).or_default().insert(kind(v));
        }
        let leaf = at.rsplit(['.', ']']).next().unwrap_or(at);
        match v {
            Value::Object(map) if !OPAQUE.contains(&leaf) => {
                for (k, child) in map {
                    let path = if at.is_empty() {
                        k.clone()
                    } else {
                        format!("{at}.{k}")
                    };
                    self.walk(&path, child);
                }
            }
            Value::Array(items) => {
                for item in items {
                    self.walk(&format!("{at}[]"), item);
                }
            }
            _ => {}
        }
    }
}

/// How one key path differs between the two clouds.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum FieldDifference {
    /// The real cloud answers it, the simulator never did.
    MissingInSim,
    /// The simulator answers it, the real cloud never did.
    OnlyInSim,
    /// Types that never overlap (null overlaps only when one side never
    /// showed anything else): real, then simulator.
    Types(String, String),
    /// The same types, but only one side ever showed null there: real,
    /// then simulator.
    Nullable(String, String),
}

/// The differences of two shapes, by key path.
pub fn shape_differences(real: &Shape, sim: &Shape) -> BTreeMap<String, FieldDifference> {
    let mut out = BTreeMap::new();
    let paths: BTreeSet<&String> = real.0.keys().chain(sim.0.keys()).collect();
    for path in paths {
        let difference = match (real.0.get(path), sim.0.get(path)) {
            (Some(_), None) => Some(FieldDifference::MissingInSim),
            (None, Some(_)) => Some(FieldDifference::OnlyInSim),
            (Some(r), Some(s)) => {
                let non_null = |t: &BTreeSet<&'static str>| -> BTreeSet<&'static str> {
                    t.iter().copied().filter(|k| *k != "null").collect()
                };
                let (rn, sn) = (non_null(r), non_null(s));
                let both = !rn.is_empty() && !sn.is_empty();
                let show = |t: &BTreeSet<&str>| t.iter().copied().collect::<Vec<_>>().join("|");
                if r.is_disjoint(s) || (both && rn.is_disjoint(&sn)) {
                    Some(FieldDifference::Types(show(r), show(s)))
                } else if both && r.contains("null") != s.contains("null") {
                    Some(FieldDifference::Nullable(show(r), show(s)))
                } else {
                    None
                }
            }
            (None, None) => None,
        };
        if let Some(d) = difference {
            out.insert(path.clone(), d);
        }
    }
    out
}

/// A recording, reduced.
#[derive(Debug, Default)]
pub struct Reduced {
    /// The calls about no one instance, in order.
    pub cloud_calls: Vec<Call>,
    /// The calls about each instance, in order, by instance id.
    pub instance_calls: BTreeMap<String, Vec<Call>>,
    /// The instances with a volume.
    pub with_volume: BTreeSet<String>,
    /// The shape of every response, by call endpoint and status.
    pub shapes: BTreeMap<(String, Option<u16>), Shape>,
}

impl Reduced {
    pub fn of(exchanges: &[Exchange]) -> Reduced {
        let owners = Owners::learn(exchanges);
        let mut reduced = Reduced::default();
        reduced.add_shapes(exchanges);
        for e in exchanges {
            let call = Call::from(e);
            match owners.of(e) {
                Some(instance) => {
                    if owners.has_volume(&instance) {
                        reduced.with_volume.insert(instance.clone());
                    }
                    reduced
                        .instance_calls
                        .entry(instance)
                        .or_default()
                        .push(call);
                }
                None => reduced.cloud_calls.push(call),
            }
        }
        reduced
    }

    /// Adds the shapes of `exchanges`' answers (reads made besides the
    /// engine's, for the answers it did not need this time).
    pub fn add_shapes(&mut self, exchanges: &[Exchange]) {
        for e in exchanges {
            let call = Call::from(e);
            if e.status.is_none() {
                continue;
            }
            let shape = self
                .shapes
                .entry((call.endpoint(), call.status))
                .or_default();
            shape.add_headers(&e.response_headers);
            if let Some(body) = &e.response {
                shape.add(body);
            }
        }
    }

    /// The distinct calls of the instances with (`true`) or without a
    /// volume.
    pub fn instance_call_set(&self, with_volume: bool) -> BTreeSet<Call> {
        self.instance_calls
            .iter()
            .filter(|(id, _)| self.with_volume.contains(*id) == with_volume)
            .flat_map(|(_, calls)| calls.iter().cloned())
            .collect()
    }

    /// The writes of each instance with (`true`) or without a volume, in
    /// order, each sequence once.
    pub fn instance_writes(&self, with_volume: bool) -> BTreeSet<Vec<Call>> {
        self.instance_calls
            .iter()
            .filter(|(id, _)| self.with_volume.contains(*id) == with_volume)
            .map(|(_, calls)| writes(calls))
            .collect()
    }
}

/// The writes among `calls`, in order.
pub fn writes(calls: &[Call]) -> Vec<Call> {
    calls.iter().filter(|c| c.writes()).cloned().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn exchange(upstream: &str, method: &str, path: &str, query: Option<&str>) -> Exchange {
        Exchange {
            upstream: upstream.into(),
            method: method.into(),
            path: path.into(),
            query: query.map(str::to_owned),
            microversion: Some("compute 2.94".into()),
            request: None,
            status: Some(200),
            response: None,
            response_headers: Vec::new(),
        }
    }

    #[test]
    fn paths_become_templates_of_their_service() {
        let id = "6c1b6f3e-4a0c-4b9e-9c7a-1f5d3c2b0a01";
        let sim = Call::from(&exchange(
            "sim",
            "GET",
            &format!("/compute/v2.1/servers/{id}/os-instance-actions/req-{id}"),
            None,
        ));
        let real = Call::from(&exchange(
            "nova",
            "GET",
            &format!("/v2.1/servers/{id}/os-instance-actions/req-{id}"),
            None,
        ));
        assert_eq!(sim, real);
        assert_eq!(sim.template, "/v2.1/servers/{id}/os-instance-actions/{id}");
        let volume = Call::from(&exchange(
            "sim",
            "GET",
            "/volume/v3/0123456789abcdef0123456789abcdef/volumes/x",
            Some("b=1&a=2&b=3"),
        ));
        assert_eq!(
            (volume.service.as_str(), volume.template.as_str()),
            ("volume", "/v3/{id}/volumes/x")
        );
        assert_eq!(volume.query_keys, ["a", "b"]);
        assert_eq!(
            Call::from(&exchange("sim", "GET", "/volume/", None)).template,
            "/"
        );
    }

    #[test]
    fn shapes_differ_by_key_and_by_type() {
        let mut real = Shape::default();
        real.add(
            &json!({"server": {"a": 1, "b": null, "c": "x", "f": null, "metadata": {"k": "v"}}}),
        );
        real.add(&json!({"server": {"a": 1, "b": "s", "c": "y", "f": "t"}}));
        let mut sim = Shape::default();
        sim.add(
            &json!({"server": {"a": "1", "b": null, "d": [{"e": true}], "f": "t", "metadata": {}}}),
        );
        let d = shape_differences(&real, &sim);
        assert_eq!(
            d["server.a"],
            FieldDifference::Types("number".into(), "string".into())
        );
        assert!(!d.contains_key("server.b"), "null and string overlap");
        assert_eq!(
            d["server.f"],
            FieldDifference::Nullable("null|string".into(), "string".into())
        );
        assert_eq!(d["server.c"], FieldDifference::MissingInSim);
        assert_eq!(d["server.d"], FieldDifference::OnlyInSim);
        assert_eq!(d["server.d[].e"], FieldDifference::OnlyInSim);
        assert!(!d.contains_key("server.metadata.k"), "metadata is opaque");
    }
}
