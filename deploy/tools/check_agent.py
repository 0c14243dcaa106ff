#!/usr/bin/env python3
"""Validates the agent's deployment files offline: the Kubernetes
kustomization deploy/kubernetes/agent (rendered by kustomize_render.py)
and the systemd unit deploy/systemd/instanceha-agent.service.

  * every rendered document against kubernetes-validate's strict schemas,
    for each Kubernetes version asked for;
  * the DaemonSet: host networking (the agents heartbeat on the node's
    network under the node's name), an unprivileged, read-only, hardened
    container with resources, a tagged image, volumes that name a rendered
    ConfigMap and an example Secret, no INSTANCEHA_* variables (the API's
    settings prefix; the agent is configured by its file);
  * the agent's TOML (in the ConfigMap) against the Rust settings structs
    of agent/src/config.rs, read by check_config.py; each fencing device
    names a known driver, its required keys, and password files inside the
    mounted Secret whose keys the example Secret has;
  * the systemd unit: the sections and keys it must have.

Usage: check_agent.py REPO --k8s 1.29.0,1.37.0
"""

from __future__ import annotations

import argparse
import configparser
import subprocess
import sys
import tomllib
from pathlib import Path

import kubernetes_validate
import yaml

sys.path.insert(0, str(Path(__file__).parent))
import check_config  # noqa: E402

NAMESPACE = "instanceha-agent"
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding"}
DEVICE_KEYS = {
    "redfish": ({"driver", "url"}, {"system", "username", "password", "ca_file", "insecure"}),
    "ipmi": ({"driver", "address", "username"}, {"port", "password", "interface", "ipmitool"}),
}


def check_settings(repo: Path, text: str, secret_dir: str, secret_keys: set[str], errors: list[str]):
    check_config.ROOTS["agent"] = ("agent/src/config.rs", "INSTANCEHA_AGENT_", "INSTANCEHA_AGENT_CONFIG")
    check_config.PENDING["agent"] = {}
    schema = check_config.Schema(repo, "agent")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        errors.append(f"agent TOML: {e}")
        return
    # Maps of devices are beyond check_config's struct reader: checked here.
    devices = (data.get("fencing") or {}).pop("devices", {})
    found: list[str] = []
    check_config.check_table(schema, schema.root, data, "", found, {})
    errors += [f"agent TOML: {e}" for e in found]
    for host, device in devices.items():
        where = f"agent TOML: fencing.devices.{host}"
        driver = device.get("driver")
        if driver not in DEVICE_KEYS:
            errors.append(f"{where}: driver {driver!r} is neither redfish nor ipmi")
            continue
        required, optional = DEVICE_KEYS[driver]
        for key in sorted(required - set(device)):
            errors.append(f"{where}: {key} is required")
        for key in sorted(set(device) - required - optional):
            errors.append(f"{where}: {key} is no setting of a {driver} device")
        password = device.get("password") or {}
        if set(password) - {"file", "env"}:
            errors.append(f"{where}.password: only file or env")
        path = password.get("file")
        if path:
            if not path.startswith(secret_dir + "/"):
                errors.append(f"{where}.password.file {path} is not in the mounted Secret ({secret_dir})")
            elif path.rsplit("/", 1)[1] not in secret_keys:
                errors.append(f"{where}.password.file: the example Secret has no key {path.rsplit('/', 1)[1]}")
    files = {
        "api.token_file": (data.get("api") or {}).get("token_file"),
        "host.heartbeat.key.file": (((data.get("host") or {}).get("heartbeat") or {}).get("key") or {}).get("file"),
    }
    for setting, path in files.items():
        if path and path.startswith(secret_dir + "/") and path.rsplit("/", 1)[1] not in secret_keys:
            errors.append(f"agent TOML: {setting}: the example Secret has no key {path.rsplit('/', 1)[1]}")


def check_daemonset(ds: dict, docs: list[dict], examples: dict[str, set[str]], errors: list[str]) -> tuple[str, str]:
    where = f"DaemonSet/{ds['metadata']['name']}"
    spec = ds["spec"]["template"]["spec"]
    if spec.get("hostNetwork") is not True:
        errors.append(f"{where}: hostNetwork must be true (heartbeats and the node's name)")
    if spec.get("dnsPolicy") != "ClusterFirstWithHostNet":
        errors.append(f"{where}: dnsPolicy must be ClusterFirstWithHostNet to resolve the API's Service")
    psc = spec.get("securityContext") or {}
    if psc.get("runAsNonRoot") is not True or psc.get("runAsUser") in (0, None):
        errors.append(f"{where}: the pod must run as a non-root uid")
    if (psc.get("seccompProfile") or {}).get("type") != "RuntimeDefault":
        errors.append(f"{where}: seccompProfile RuntimeDefault")
    cms = {d["metadata"]["name"] for d in docs if d["kind"] == "ConfigMap"}
    volumes = {v["name"]: v for v in spec.get("volumes") or []}
    config_text, secret_dir = "", ""
    for c in spec.get("containers") or []:
        cw = f"{where} container {c['name']}"
        sc = c.get("securityContext") or {}
        if sc.get("allowPrivilegeEscalation") is not False or sc.get("readOnlyRootFilesystem") is not True:
            errors.append(f"{cw}: allowPrivilegeEscalation false and readOnlyRootFilesystem true")
        if sc.get("privileged") or "ALL" not in ((sc.get("capabilities") or {}).get("drop") or []):
            errors.append(f"{cw}: unprivileged, capabilities drop ALL")
        res = c.get("resources") or {}
        for part in ("requests", "limits"):
            for r in ("cpu", "memory"):
                if r not in (res.get(part) or {}):
                    errors.append(f"{cw}: resources.{part}.{r} missing")
        image = c.get("image", "")
        if ":" not in image.rsplit("/", 1)[-1] and "@" not in image:
            errors.append(f"{cw}: image {image!r} has no tag or digest")
        for env in c.get("env") or []:
            # The heartbeat address is the node's own, known only from the
            # downward API: the one setting that may come from a variable.
            if env["name"] == "INSTANCEHA_AGENT_HOST__HEARTBEAT__LISTEN":
                if env.get("value") != "$(HOST_IP):15871":
                    errors.append(f"{cw}: {env['name']}: must be \"$(HOST_IP):15871\" (status.hostIP)")
                continue
            if env["name"].startswith("INSTANCEHA_"):
                errors.append(f"{cw}: {env['name']}: configure the agent in its file, not INSTANCEHA_* variables")
        for m in c.get("volumeMounts") or []:
            v = volumes.get(m["name"])
            if v is None:
                errors.append(f"{cw}: mounts unknown volume {m['name']}")
                continue
            if "configMap" in v:
                if v["configMap"]["name"] not in cms:
                    errors.append(f"{cw}: ConfigMap {v['configMap']['name']} is not rendered")
                else:
                    cm = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == v["configMap"]["name"])
                    config_text = (cm.get("data") or {}).get("instanceha-agent.toml", "")
            if "secret" in v:
                name = v["secret"]["secretName"]
                if name not in examples:
                    errors.append(f"{cw}: Secret {name} has no example in kubernetes/examples/")
                secret_dir = m["mountPath"].rstrip("/")
        args = c.get("args") or []
        if "--config" not in args:
            errors.append(f"{cw}: no --config argument")
    if not config_text:
        errors.append(f"{where}: no instanceha-agent.toml mounted from a ConfigMap")
    return config_text, secret_dir


def check_unit(path: Path, errors: list[str]):
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str
    try:
        parser.read_string(path.read_text())
    except configparser.Error as e:
        errors.append(f"{path.name}: {e}")
        return
    for section, keys in {
        "Unit": ["Description", "After"],
        "Service": ["ExecStart", "Restart", "StateDirectory"],
        "Install": ["WantedBy"],
    }.items():
        if section not in parser:
            errors.append(f"{path.name}: no [{section}]")
            continue
        for key in keys:
            if key not in parser[section]:
                errors.append(f"{path.name}: [{section}] has no {key}")
    exec_start = parser.get("Service", "ExecStart", fallback="")
    if "instanceha-agent" not in exec_start or "--config" not in exec_start:
        errors.append(f"{path.name}: ExecStart must run instanceha-agent --config")


def main(argv) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("repo")
    ap.add_argument("--k8s", required=True)
    args = ap.parse_args(argv[1:])
    repo = Path(args.repo).resolve()
    deploy = repo / "deploy"
    tools = Path(__file__).parent
    rendered = subprocess.run(
        [sys.executable, str(tools / "kustomize_render.py"), str(deploy / "kubernetes/agent")],
        capture_output=True, text=True,
    )
    errors: list[str] = []
    if rendered.returncode != 0:
        print(f"  ERROR: rendering deploy/kubernetes/agent: {rendered.stderr.strip()}")
        return 1
    docs = [d for d in yaml.safe_load_all(rendered.stdout) if d]
    examples: dict[str, set[str]] = {}
    for path in sorted((deploy / "kubernetes/examples").glob("*.example.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") == "Secret":
                examples[doc["metadata"]["name"]] = set((doc.get("stringData") or {}).keys())
    for d in docs:
        ident = f"{d['kind']}/{d['metadata']['name']}"
        for version in args.k8s.split(","):
            try:
                kubernetes_validate.validate(d, version, strict=True)
            except kubernetes_validate.ValidationError as e:
                errors.append(f"{ident}: Kubernetes {version} schema: {'.'.join(map(str, e.path))}: {e.message}")
        if d["kind"] not in CLUSTER_SCOPED and d["metadata"].get("namespace") != NAMESPACE:
            errors.append(f"{ident}: metadata.namespace must be {NAMESPACE}")
    daemonsets = [d for d in docs if d["kind"] == "DaemonSet"]
    if len(daemonsets) != 1:
        errors.append(f"expected one DaemonSet, rendered {len(daemonsets)}")
    else:
        text, secret_dir = check_daemonset(daemonsets[0], docs, examples, errors)
        if text:
            check_settings(repo, text, secret_dir, examples.get("instanceha-agent", set()), errors)
    check_unit(deploy / "systemd/instanceha-agent.service", errors)
    example_errors: list[str] = []
    check_config.ROOTS["agent"] = ("agent/src/config.rs", "INSTANCEHA_AGENT_", "INSTANCEHA_AGENT_CONFIG")
    schema = check_config.Schema(repo, "agent")
    for toml in (repo / "agent/instanceha-agent.example.toml", deploy / "systemd/instanceha-agent.toml"):
        data = tomllib.loads(toml.read_text())
        (data.get("fencing") or {}).pop("devices", None)
        check_config.check_table(schema, schema.root, data, "", example_errors, {})
        errors += [f"{toml.relative_to(repo)}: {e}" for e in example_errors]
        example_errors.clear()
    for e in errors:
        print(f"  ERROR: {e}")
    print(f"  agent: {len(docs)} resources (Kubernetes {args.k8s} strict schemas), DaemonSet rules, "
          f"agent TOML against agent/src/config.rs, systemd unit")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
