#!/usr/bin/env python3
"""Validates rendered Kubernetes manifests offline.

For every document of every rendered target (base, overlays) and of the
example Secrets:

  * Kubernetes kinds: kubernetes-validate's bundled JSON schemas, strict
    (unknown fields are errors), for each Kubernetes version asked for;
  * service-mesh kinds (Istio, Linkerd, Gateway API): the partial schemas
    of crd-schemas.yaml (hand-written; see that file) plus
    apiVersion/kind/metadata checks; any other kind is an error;
  * project rules, the things a schema cannot say: pod and container
    hardening, probes, resources, ServiceAccounts, references to
    ConfigMaps/Secrets/ports, selectors that select something, the
    NetworkPolicy that keeps everyone but the API off the engine, the
    listeners of each service's TOML (all interfaces, a container port a
    Service targets, allowed by an ingress policy), and the mesh settings
    of each overlay.

Usage: check_manifests.py --k8s 1.29.0,1.37.0 --crds crd-schemas.yaml \
           --examples EXAMPLES_DIR NAME=RENDERED.yaml...
"""

from __future__ import annotations

import argparse
import ipaddress
import sys
import tomllib
from pathlib import Path

import jsonschema
import kubernetes_validate
import yaml

NAMESPACE = "instance-ha"
API, ENGINE = "instanceha-api", "instanceha-engine"
API_SA = "instanceha-api"
# Where each service's TOML names a listener: (key path, when it is on).
# Every default is loopback, unreachable from outside the pod, so a
# listener that is on must be set. "rest.enabled": on unless that is false
# (the API's Masakari-compatible REST API is on by default).
LISTENERS = {
    API: [("listen", "always"), ("rest.listen", "rest.enabled"), ("telemetry.prometheus_listen", "if set")],
    ENGINE: [("listen", "always"), ("telemetry.prometheus_listen", "if set")],
}
ENV_PREFIX = {API: "INSTANCEHA_", ENGINE: "INSTANCEHA_ENGINE_"}
CORE_GROUPS = {"", "apps", "policy", "networking.k8s.io", "batch", "rbac.authorization.k8s.io", "autoscaling"}
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding"}


class Report:
    def __init__(self):
        self.errors: list[str] = []
        self.count = 0

    def error(self, where: str, msg: str):
        self.errors.append(f"{where}: {msg}")


def ident(doc: dict) -> str:
    md = doc.get("metadata") or {}
    return f"{doc.get('kind')}/{md.get('name')}"


def group_of(doc: dict) -> str:
    return doc["apiVersion"].rpartition("/")[0]


# --- schemas -----------------------------------------------------------------


def validate_schema(doc: dict, where: str, versions: list[str], crds: dict, rep: Report):
    for field in ("apiVersion", "kind", "metadata"):
        if field not in doc:
            rep.error(where, f"no {field}")
            return
    if not (doc["metadata"] or {}).get("name"):
        rep.error(where, "no metadata.name")
        return
    group = group_of(doc)
    if group in CORE_GROUPS:
        for v in versions:
            try:
                kubernetes_validate.validate(doc, v, strict=True)
            except kubernetes_validate.ValidationError as e:
                path = ".".join(str(p) for p in e.path) or "(top)"
                rep.error(where, f"Kubernetes {v} schema: {path}: {e.message}")
            except kubernetes_validate.SchemaNotFoundError:
                rep.error(where, f"Kubernetes {v} has no {doc['apiVersion']} {doc['kind']}")
        return
    key = f"{doc['apiVersion']}/{doc['kind']}"
    schema = crds["kinds"].get(key)
    if schema is None:
        rep.error(where, f"{key}: neither a Kubernetes kind nor a mesh kind with a schema in crd-schemas.yaml")
        return
    unknown = set(doc) - {"apiVersion", "kind", "metadata", "spec"}
    if unknown:
        rep.error(where, f"unexpected top-level fields {sorted(unknown)}")
    if not isinstance(doc.get("spec"), dict):
        rep.error(where, "spec must be a mapping")
        return
    full = dict(schema)
    full["$defs"] = crds["$defs"]
    for err in jsonschema.Draft202012Validator(full).iter_errors(doc["spec"]):
        path = ".".join(str(p) for p in err.path) or "(spec)"
        rep.error(where, f"{key} (partial schema): spec.{path}: {err.message}")


# --- helpers for the rules ---------------------------------------------------


def selects(selector: dict | None, labels: dict) -> bool:
    if not selector:
        return True
    if set(selector) - {"matchLabels"}:
        return False  # matchExpressions not used here
    return all(labels.get(k) == v for k, v in (selector.get("matchLabels") or {}).items())


def pods(docs):
    for d in docs:
        if d["kind"] == "Deployment":
            yield d, d["spec"]["template"]


def container_ports(template) -> dict:
    out = {}
    for c in template["spec"].get("containers", []):
        for p in c.get("ports", []) or []:
            out[p.get("name") or p["containerPort"]] = p["containerPort"]
            out[p["containerPort"]] = p["containerPort"]
    return out


def by_kind(docs, kind):
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


# --- the rules ---------------------------------------------------------------


def check_pod_hardening(name: str, dep: dict, docs, rep: Report):
    where = f"Deployment/{name}"
    spec = dep["spec"]["template"]["spec"]
    psc = spec.get("securityContext") or {}
    if psc.get("runAsNonRoot") is not True:
        rep.error(where, "pod securityContext.runAsNonRoot must be true")
    if (psc.get("seccompProfile") or {}).get("type") != "RuntimeDefault":
        rep.error(where, "pod securityContext.seccompProfile.type must be RuntimeDefault")
    if psc.get("runAsUser") in (0, None):
        rep.error(where, "pod securityContext.runAsUser must be a non-zero uid")
    for host in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(host):
            rep.error(where, f"{host} must not be set")
    if spec.get("automountServiceAccountToken") is not False:
        rep.error(where, "automountServiceAccountToken must be false")
    sa = spec.get("serviceAccountName")
    sas = by_kind(docs, "ServiceAccount")
    if not sa or sa not in sas:
        rep.error(where, f"serviceAccountName {sa!r} is not a ServiceAccount of the render")
    elif sas[sa].get("automountServiceAccountToken") is not False:
        rep.error(f"ServiceAccount/{sa}", "automountServiceAccountToken must be false")
    if dep["spec"].get("replicas", 1) < 2:
        rep.error(where, "needs at least 2 replicas")
    ports = container_ports(dep["spec"]["template"])
    for c in spec.get("containers", []):
        cw = f"{where} container {c['name']}"
        sc = c.get("securityContext") or {}
        if sc.get("allowPrivilegeEscalation") is not False:
            rep.error(cw, "securityContext.allowPrivilegeEscalation must be false")
        if sc.get("readOnlyRootFilesystem") is not True:
            rep.error(cw, "securityContext.readOnlyRootFilesystem must be true")
        if sc.get("privileged"):
            rep.error(cw, "must not be privileged")
        if sc.get("runAsNonRoot", psc.get("runAsNonRoot")) is not True:
            rep.error(cw, "securityContext.runAsNonRoot must be true")
        if "ALL" not in ((sc.get("capabilities") or {}).get("drop") or []):
            rep.error(cw, "securityContext.capabilities.drop must contain ALL")
        if (sc.get("capabilities") or {}).get("add"):
            rep.error(cw, "must not add capabilities")
        seccomp = (sc.get("seccompProfile") or psc.get("seccompProfile") or {}).get("type")
        if seccomp != "RuntimeDefault":
            rep.error(cw, "seccompProfile.type must be RuntimeDefault")
        res = c.get("resources") or {}
        for part in ("requests", "limits"):
            for r in ("cpu", "memory"):
                if r not in (res.get(part) or {}):
                    rep.error(cw, f"resources.{part}.{r} missing")
        image = c.get("image", "")
        if ":" not in image.rsplit("/", 1)[-1] and "@" not in image:
            rep.error(cw, f"image {image!r} has no tag or digest")
        for probe in ("readinessProbe", "livenessProbe"):
            p = c.get(probe)
            if not p or "grpc" not in p:
                rep.error(cw, f"{probe} must use the native grpc probe (grpc.health.v1)")
            elif p["grpc"].get("port") not in ports:
                rep.error(cw, f"{probe}.grpc.port {p['grpc'].get('port')} is not a container port")


def check_references(docs, examples: dict, rep: Report):
    cms = by_kind(docs, "ConfigMap")
    for name, dep in by_kind(docs, "Deployment").items():
        where = f"Deployment/{name}"
        spec = dep["spec"]["template"]["spec"]
        volumes = {v["name"]: v for v in spec.get("volumes", []) or []}
        for v in volumes.values():
            if "configMap" in v and v["configMap"]["name"] not in cms:
                rep.error(where, f"volume {v['name']}: ConfigMap {v['configMap']['name']} is not rendered")
            if "secret" in v:
                sec = v["secret"]["secretName"]
                keys = examples.get(sec)
                if keys is None:
                    rep.error(where, f"volume {v['name']}: Secret {sec} has no example in examples/")
                else:
                    for item in v["secret"].get("items", []) or []:
                        if item["key"] not in keys:
                            rep.error(where, f"volume {v['name']}: Secret {sec} example has no key {item['key']}")
        for c in spec.get("containers", []):
            for m in c.get("volumeMounts", []) or []:
                if m["name"] not in volumes:
                    rep.error(where, f"container {c['name']} mounts unknown volume {m['name']}")
                elif not m.get("readOnly"):
                    rep.error(where, f"container {c['name']}: mount {m['mountPath']} should be readOnly")
            for env in c.get("env", []) or []:
                ref = (env.get("valueFrom") or {}).get("secretKeyRef")
                if ref:
                    keys = examples.get(ref["name"])
                    if keys is None:
                        rep.error(where, f"env {env['name']}: Secret {ref['name']} has no example in examples/")
                    elif ref["key"] not in keys:
                        rep.error(where, f"env {env['name']}: Secret {ref['name']} example has no key {ref['key']}")
                ref = (env.get("valueFrom") or {}).get("configMapKeyRef")
                if ref and ref["name"] not in cms:
                    rep.error(where, f"env {env['name']}: ConfigMap {ref['name']} is not rendered")


def check_selectors(docs, rep: Report):
    deps = list(pods(docs))

    def selected(selector):
        return [d for d, t in deps if selects(selector, t["metadata"].get("labels") or {})]

    for svc in by_kind(docs, "Service").values():
        where = ident(svc)
        hits = selected({"matchLabels": svc["spec"].get("selector") or {}})
        if len(hits) != 1:
            rep.error(where, f"selector matches {len(hits)} Deployments (want 1)")
            continue
        ports = container_ports(hits[0]["spec"]["template"])
        for p in svc["spec"]["ports"]:
            if p.get("targetPort", p["port"]) not in ports:
                rep.error(where, f"port {p['name']}: targetPort {p.get('targetPort')} is not a container port")
            if p["name"] == "grpc" and p.get("appProtocol") != "grpc":
                rep.error(where, "port grpc must declare appProtocol: grpc")
            if p["name"].startswith("http") and p.get("appProtocol") != "http":
                rep.error(where, f"port {p['name']} must declare appProtocol: http")
            if "appProtocol" not in p:
                rep.error(where, f"port {p['name']} declares no appProtocol (a mesh would guess its protocol)")
    for pdb in by_kind(docs, "PodDisruptionBudget").values():
        hits = selected(pdb["spec"]["selector"])
        if len(hits) != 1:
            rep.error(ident(pdb), f"selector matches {len(hits)} Deployments (want 1)")
        elif pdb["spec"].get("minAvailable", 0) >= hits[0]["spec"].get("replicas", 1):
            rep.error(ident(pdb), "minAvailable must be below the replicas, or no pod can ever be evicted")
    for np in by_kind(docs, "NetworkPolicy").values():
        hits = selected(np["spec"]["podSelector"])
        if not hits:
            rep.error(ident(np), "podSelector selects no pods")
            continue
        for rule in np["spec"].get("ingress", []) or []:
            for p in rule.get("ports", []) or []:
                if isinstance(p.get("port"), str) and not all(
                    p["port"] in container_ports(h["spec"]["template"]) for h in hits
                ):
                    rep.error(ident(np), f"ingress port {p['port']} is not a port of every selected pod")
            for peer in rule.get("from", []) or []:
                if "podSelector" in peer and "namespaceSelector" not in peer and not selected(peer["podSelector"]):
                    rep.error(ident(np), "an ingress podSelector selects no pods of the render")


def lookup(cfg: dict, path: str):
    for part in path.split("."):
        if not isinstance(cfg, dict) or part not in cfg:
            return None
        cfg = cfg[part]
    return cfg


def check_listeners(docs, rep: Report):
    """Every listener a service's TOML turns on binds all interfaces, on a
    container port that a Service targets: a loopback or unexposed
    listener is a port no client can reach."""
    cms = by_kind(docs, "ConfigMap")
    services = list(by_kind(docs, "Service").values())
    for name, dep in by_kind(docs, "Deployment").items():
        if name not in LISTENERS:
            continue
        where = f"Deployment/{name}"
        tpl = dep["spec"]["template"]
        cfg = {}
        for v in tpl["spec"].get("volumes", []) or []:
            cm = cms.get((v.get("configMap") or {}).get("name"))
            for key, text in ((cm or {}).get("data") or {}).items():
                if key.endswith(".toml"):
                    try:
                        cfg.update(tomllib.loads(text))
                    except tomllib.TOMLDecodeError as e:
                        rep.error(f"ConfigMap/{cm['metadata']['name']}", f"{key}: {e}")
        env = {
            e["name"]: e.get("value")
            for c in tpl["spec"].get("containers", [])
            for e in c.get("env", []) or []
        }
        ports = container_ports(tpl)
        targeted = set()
        for svc in services:
            if selects({"matchLabels": svc["spec"].get("selector") or {}}, tpl["metadata"].get("labels") or {}):
                for p in svc["spec"]["ports"]:
                    targeted.add(ports.get(p.get("targetPort", p["port"])))
        for path, when in LISTENERS[name]:
            var = ENV_PREFIX[name] + path.upper().replace(".", "__")
            addr = env.get(var) or lookup(cfg, path)
            if when == "if set" and addr is None:
                continue
            if when not in ("always", "if set") and lookup(cfg, when) is False:
                continue
            if addr is None:
                rep.error(where, f"{path} is on but not set: its default is loopback, unreachable from outside the pod")
                continue
            host, _, port = str(addr).rpartition(":")
            try:
                port = int(port)
                unspecified = ipaddress.ip_address(host.strip("[]")).is_unspecified
            except ValueError:
                rep.error(where, f"{path} {addr!r} is not IP:PORT")
                continue
            if not unspecified:
                rep.error(where, f"{path} {addr} must bind all interfaces (0.0.0.0 or [::]) to be reachable")
            if port not in ports:
                rep.error(where, f"{path} {addr}: port {port} is not a container port")
            elif port not in targeted:
                rep.error(where, f"{path} {addr}: no Service targets port {port}")


def check_ingress_coverage(docs, rep: Report):
    """A pod selected by an ingress NetworkPolicy is reachable only on the
    ports some rule allows: every container port must be allowed by one."""
    policies = [
        np for np in by_kind(docs, "NetworkPolicy").values() if "Ingress" in np["spec"].get("policyTypes", [])
    ]
    for name, tpl in ((d["metadata"]["name"], t) for d, t in pods(docs)):
        labels = tpl["metadata"].get("labels") or {}
        mine = [np for np in policies if selects(np["spec"]["podSelector"], labels)]
        if not mine:
            continue
        ports = container_ports(tpl)
        allowed = set()
        for np in mine:
            for rule in np["spec"].get("ingress", []) or []:
                rule_ports = rule.get("ports")
                if not rule_ports:
                    allowed |= set(ports.values())
                for p in rule_ports or []:
                    allowed.add(ports.get(p.get("port")))
        for c in tpl["spec"].get("containers", []):
            for p in c.get("ports", []) or []:
                if p["containerPort"] not in allowed:
                    rep.error(f"Deployment/{name}", f"container port {p.get('name') or p['containerPort']} "
                              "is allowed by no ingress NetworkPolicy rule: nothing can reach it")


def check_engine_isolation(docs, rep: Report):
    """Only the API's pods may reach the engine's gRPC port."""
    engine = [t for d, t in pods(docs) if d["metadata"]["name"] == ENGINE]
    api = [t for d, t in pods(docs) if d["metadata"]["name"] == API]
    if not engine or not api:
        rep.error("render", "both Deployments must be present")
        return
    engine_labels = engine[0]["metadata"]["labels"]
    api_labels = api[0]["metadata"]["labels"]
    grpc_port = container_ports(engine[0])["grpc"]
    ingress_policies = [
        np
        for np in by_kind(docs, "NetworkPolicy").values()
        if selects(np["spec"]["podSelector"], engine_labels) and "Ingress" in np["spec"].get("policyTypes", [])
    ]
    if not ingress_policies:
        rep.error("NetworkPolicy", "no ingress policy selects the engine pods")
    for np in ingress_policies:
        for rule in np["spec"].get("ingress", []) or []:
            ports = [p.get("port") for p in rule.get("ports", []) or []]
            if ports and not any(p in ("grpc", grpc_port) for p in ports):
                continue
            peers = rule.get("from")
            if not peers:
                rep.error(ident(np), "an ingress rule opens the engine's gRPC port to everyone")
                continue
            for peer in peers:
                if set(peer) != {"podSelector"} or not selects(peer["podSelector"], api_labels) or any(
                    selects(peer["podSelector"], t["metadata"]["labels"])
                    for d, t in pods(docs)
                    if d["metadata"]["name"] != API
                ):
                    rep.error(ident(np), f"the engine's gRPC port is open to a peer other than the API pods: {peer}")
    egress = [
        np
        for np in by_kind(docs, "NetworkPolicy").values()
        if selects(np["spec"]["podSelector"], engine_labels) and "Egress" in np["spec"].get("policyTypes", [])
    ]
    if not egress:
        rep.error("NetworkPolicy", "no egress policy selects the engine pods")


def check_api_settings(docs, rep: Report):
    for name, dep in by_kind(docs, "Deployment").items():
        if name != API:
            continue
        env = {e["name"]: e for c in dep["spec"]["template"]["spec"]["containers"] for e in c.get("env", []) or []}
        rid = env.get("INSTANCEHA_DISPATCH__REPLICA_ID", {})
        if ((rid.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath") != "metadata.name":
            rep.error(f"Deployment/{name}", "INSTANCEHA_DISPATCH__REPLICA_ID must come from the pod name (fieldRef metadata.name)")
        if "secretKeyRef" not in (env.get("INSTANCEHA_DATABASE__URL", {}).get("valueFrom") or {}):
            rep.error(f"Deployment/{name}", "INSTANCEHA_DATABASE__URL must come from a Secret")


def check_namespaces(docs, rep: Report):
    for d in docs:
        if d["kind"] in CLUSTER_SCOPED:
            continue
        if (d["metadata"] or {}).get("namespace") != NAMESPACE:
            rep.error(ident(d), f"metadata.namespace must be {NAMESPACE}")


def check_istio(docs, rep: Report):
    ns = by_kind(docs, "Namespace").get(NAMESPACE, {})
    if (ns.get("metadata", {}).get("labels") or {}).get("istio-injection") != "enabled":
        rep.error("Namespace", "istio-injection: enabled label missing")
    pas = [d for d in docs if d["kind"] == "PeerAuthentication"]
    if not any(not d["spec"].get("selector") and d["spec"].get("mtls", {}).get("mode") == "STRICT" for d in pas):
        rep.error("PeerAuthentication", "no namespace-wide STRICT mTLS")
    host = f"{ENGINE}.{NAMESPACE}.svc.cluster.local"
    drs = [d for d in docs if d["kind"] == "DestinationRule" and d["spec"]["host"] == host]
    if not drs or drs[0]["spec"].get("trafficPolicy", {}).get("tls", {}).get("mode") != "ISTIO_MUTUAL":
        rep.error("DestinationRule", f"{host} needs trafficPolicy.tls.mode ISTIO_MUTUAL")
    aps = [d for d in docs if d["kind"] == "AuthorizationPolicy" and group_of(d) == "security.istio.io"]
    principal = f"cluster.local/ns/{NAMESPACE}/sa/{API_SA}"
    if not any(
        principal in s.get("source", {}).get("principals", [])
        for d in aps
        for r in d["spec"].get("rules", [])
        for s in r.get("from", [])
    ):
        rep.error("AuthorizationPolicy", f"no ALLOW rule for {principal} on the engine")
    for d in pas:
        sel = d["spec"].get("selector")
        levels = d["spec"].get("portLevelMtls") or {}
        if not levels:
            continue
        if not sel:
            rep.error(ident(d), "portLevelMtls needs a selector")
            continue
        hits = [(n, t) for n, t in ((dep["metadata"]["name"], t) for dep, t in pods(docs))
                if selects(sel, t["metadata"]["labels"])]
        for n, t in hits:
            ports = container_ports(t)
            for port in levels:
                if int(port) not in ports:
                    rep.error(ident(d), f"portLevelMtls port {port} is not a container port of {n}")
            if n == API:
                # gRPC and REST are one public API: one mTLS mode for both.
                public = {p for k, p in ports.items() if isinstance(k, str) and k != "metrics"}
                modes = {p: (levels.get(str(p)) or d["spec"].get("mtls") or {}).get("mode") for p in public}
                if len(set(modes.values())) > 1:
                    rep.error(ident(d), f"the API's public ports differ in mTLS mode: {modes}")
    if not any(d["kind"] == "Telemetry" and d["spec"].get("tracing") for d in docs):
        rep.error("Telemetry", "no tracing configuration")
    for d in docs:
        sel = (d.get("spec") or {}).get("selector") or (d.get("spec") or {}).get("workloadSelector")
        if d["kind"] in {"PeerAuthentication", "AuthorizationPolicy", "EnvoyFilter"} and sel:
            labels = sel.get("matchLabels") or sel.get("labels") or {}
            if not any(selects({"matchLabels": labels}, t["metadata"]["labels"]) for _, t in pods(docs)):
                rep.error(ident(d), "its selector selects no pods")


def check_linkerd(docs, rep: Report):
    for name, dep in by_kind(docs, "Deployment").items():
        ann = dep["spec"]["template"]["metadata"].get("annotations") or {}
        if ann.get("linkerd.io/inject") != "enabled":
            rep.error(f"Deployment/{name}", "pod template needs linkerd.io/inject: enabled")
    names = {(d["kind"], d["metadata"]["name"]) for d in docs}
    servers = by_kind(docs, "Server")
    engine_tpl = [t for d, t in pods(docs) if d["metadata"]["name"] == ENGINE][0]
    engine_servers = [
        s for s in servers.values() if selects(s["spec"]["podSelector"], engine_tpl["metadata"]["labels"])
        and s["spec"]["port"] in container_ports(engine_tpl)
    ]
    if not engine_servers:
        rep.error("Server", "no Server for the engine's gRPC port")
    for d in docs:
        spec = d.get("spec") or {}
        for ref in spec.get("parentRefs", []) or []:
            if (ref.get("kind"), ref["name"]) not in names:
                rep.error(ident(d), f"parentRef {ref.get('kind')}/{ref['name']} does not exist")
        if d["kind"] == "AuthorizationPolicy" and group_of(d) == "policy.linkerd.io":
            t = spec["targetRef"]
            if (t["kind"], t["name"]) not in names:
                rep.error(ident(d), f"targetRef {t['kind']}/{t['name']} does not exist")
            for a in spec["requiredAuthenticationRefs"]:
                if (a["kind"], a["name"]) not in names:
                    rep.error(ident(d), f"authentication {a['kind']}/{a['name']} does not exist")
    mtls_api = [
        d["metadata"]["name"]
        for d in docs
        if d["kind"] == "MeshTLSAuthentication"
        and any(r.get("kind") == "ServiceAccount" and r["name"] == API_SA for r in d["spec"].get("identityRefs", []))
    ]
    for s in engine_servers:
        ok = any(
            d["kind"] == "AuthorizationPolicy"
            and d["spec"]["targetRef"] == {"group": "policy.linkerd.io", "kind": "Server", "name": s["metadata"]["name"]}
            and {a["name"] for a in d["spec"]["requiredAuthenticationRefs"] if a["kind"] == "MeshTLSAuthentication"}
            & set(mtls_api)
            for d in docs
        )
        if not ok:
            rep.error(ident(s), f"no AuthorizationPolicy requiring mTLS identity of ServiceAccount {API_SA}")


RULESETS = {
    "base": [],
    "istio": [check_istio],
    "linkerd": [check_linkerd],
}


def load_examples(directory: Path, versions, crds, rep: Report) -> dict[str, set[str]]:
    out = {}
    for path in sorted(directory.glob("*.example.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc:
                continue
            rep.count += 1
            validate_schema(doc, f"{path.name} {ident(doc)}", versions, crds, rep)
            if doc.get("kind") == "Secret":
                keys = set((doc.get("stringData") or {}).keys()) | set((doc.get("data") or {}).keys())
                for k, v in (doc.get("stringData") or {}).items():
                    if "REPLACE_ME" not in str(v):
                        rep.error(path.name, f"key {k}: example values must carry the REPLACE_ME placeholder")
                out[doc["metadata"]["name"]] = keys
    return out


def main(argv) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--k8s", required=True)
    ap.add_argument("--crds", required=True)
    ap.add_argument("--examples", required=True)
    ap.add_argument("targets", nargs="+")
    args = ap.parse_args(argv[1:])
    versions = args.k8s.split(",")
    crds = yaml.safe_load(Path(args.crds).read_text())
    rep = Report()
    examples = load_examples(Path(args.examples), versions, crds, rep)
    summary = []
    for target in args.targets:
        name, _, file = target.partition("=")
        docs = [d for d in yaml.safe_load_all(Path(file).read_text()) if d]
        kinds = {}
        before = len(rep.errors)
        for d in docs:
            rep.count += 1
            validate_schema(d, f"{name}: {ident(d)}", versions, crds, rep)
            kinds[d["kind"]] = kinds.get(d["kind"], 0) + 1
        sub = Report()
        for dep_name, dep in by_kind(docs, "Deployment").items():
            check_pod_hardening(dep_name, dep, docs, sub)
        check_references(docs, examples, sub)
        check_selectors(docs, sub)
        check_listeners(docs, sub)
        check_ingress_coverage(docs, sub)
        check_engine_isolation(docs, sub)
        check_api_settings(docs, sub)
        check_namespaces(docs, sub)
        for rule in RULESETS.get(name, []):
            rule(docs, sub)
        rep.errors += [f"{name}: {e}" for e in sub.errors]
        mesh = sum(v for k, v in kinds.items() if k not in {
            "Namespace", "ServiceAccount", "ConfigMap", "Deployment", "Service", "PodDisruptionBudget", "NetworkPolicy"})
        summary.append(f"{name}: {len(docs)} resources ({mesh} mesh), {len(rep.errors) - before} problems")
    for e in rep.errors:
        print(f"  ERROR: {e}")
    for s in summary:
        print(f"  {s}")
    print(f"  {rep.count} documents validated (Kubernetes {', '.join(versions)} strict schemas; "
          f"mesh kinds against crd-schemas.yaml), {len(examples)} example Secrets")
    return 1 if rep.errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
