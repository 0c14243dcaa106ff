#!/usr/bin/env python3
"""Checks deploy/compose beyond what the compose tools see.

  * every bind-mounted file or directory and every build context and
    Dockerfile exists;
  * every service the stack's own images run is hardened (read_only,
    cap_drop ALL, no-new-privileges) and publishes only on 127.0.0.1;
  * the ports the services' TOML files listen on (gRPC, the API's REST
    API unless disabled, metrics) are on 0.0.0.0 and published, the API's
    engine_url and the clouds.yaml auth_url name services of the
    stack on their ports, OTLP goes to the collector;
  * otel-collector.yaml: every pipeline's receivers, processors and
    exporters are defined, traces go to Jaeger and metrics to a Prometheus
    exporter, every defined extension is enabled;
  * prometheus.yaml: every scrape target is a service:port of the stack.

Usage: check_compose.py DEPLOY_DIR
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path
from urllib.parse import urlparse

import yaml

OWN = {"instanceha-api", "instanceha-engine", "openstack-sim"}


def main(argv) -> int:
    deploy = Path(argv[1]).resolve()
    cdir = deploy / "compose"
    compose = yaml.safe_load((cdir / "compose.yaml").read_text())
    services = compose["services"]
    errors: list[str] = []

    def err(msg):
        errors.append(msg)

    # files
    for name, svc in services.items():
        for vol in svc.get("volumes", []) or []:
            src = vol.split(":")[0] if isinstance(vol, str) else vol.get("source", "")
            if src.startswith((".", "/")) and not (cdir / src).exists():
                err(f"service {name}: bind mount {src} does not exist")
        build = svc.get("build")
        if build:
            ctx = cdir / build.get("context", ".")
            if not ctx.is_dir():
                err(f"service {name}: build context {ctx} does not exist")
            elif not (ctx / build.get("dockerfile", "Dockerfile")).is_file():
                err(f"service {name}: no Dockerfile {build.get('dockerfile')}")
        for p in svc.get("ports", []) or []:
            if not str(p).startswith("127.0.0.1:"):
                err(f"service {name}: port {p} is published on every interface (use 127.0.0.1:)")
        if name in OWN:
            if svc.get("read_only") is not True:
                err(f"service {name}: read_only must be true")
            if "ALL" not in (svc.get("cap_drop") or []):
                err(f"service {name}: cap_drop must contain ALL")
            if "no-new-privileges:true" not in (svc.get("security_opt") or []):
                err(f"service {name}: security_opt must contain no-new-privileges:true")

    def published(name):
        return {str(p).rsplit(":", 1)[-1] for p in services[name].get("ports", []) or []}

    # service settings
    api = tomllib.loads((cdir / "instanceha-api.toml").read_text())
    engine = tomllib.loads((cdir / "instanceha-engine.toml").read_text())
    for name, cfg in (("instanceha-api", api), ("instanceha-engine", engine)):
        listeners = [("listen", cfg["listen"])]
        # [rest] is on by default, on loopback: it must be set to be reached.
        rest = cfg.get("rest") or {}
        if name == "instanceha-api" and rest.get("enabled", True):
            if "listen" not in rest:
                err(f"{name}: [rest] is enabled but listens on its default, loopback (set rest.listen)")
            else:
                listeners.append(("rest.listen", rest["listen"]))
        metrics = (cfg.get("telemetry") or {}).get("prometheus_listen")
        if metrics:
            listeners.append(("telemetry.prometheus_listen", metrics))
        for key, addr in listeners:
            port = addr.rsplit(":", 1)[1]
            if not addr.startswith("0.0.0.0:"):
                err(f"{name}: {key} {addr} is not reachable from other containers (use 0.0.0.0)")
            if port not in published(name):
                err(f"{name}: {key} is on {port}, which compose does not publish")
        env = services[name].get("environment") or {}
        endpoint = urlparse(env.get("OTEL_EXPORTER_OTLP_ENDPOINT", ""))
        if endpoint.hostname != "otel-collector":
            err(f"{name}: OTEL_EXPORTER_OTLP_ENDPOINT does not point at the collector")
    engine_url = urlparse(api["dispatch"]["engine_url"])
    if engine_url.hostname != "instanceha-engine" or str(engine_url.port) != engine["listen"].rsplit(":", 1)[1]:
        err(f"instanceha-api.toml: dispatch.engine_url {api['dispatch']['engine_url']} is not the engine service")
    clouds = yaml.safe_load((cdir / "clouds.yaml").read_text())
    cloud = services["instanceha-engine"]["environment"].get("OS_CLOUD")
    if cloud not in (clouds.get("clouds") or {}):
        err(f"clouds.yaml has no cloud {cloud!r} (OS_CLOUD of the engine)")
    else:
        auth_url = urlparse(clouds["clouds"][cloud]["auth"]["auth_url"])
        sim_port = services["openstack-sim"]["environment"]["OPENSTACK_SIM_LISTEN"].rsplit(":", 1)[1]
        if auth_url.hostname != "openstack-sim" or str(auth_url.port) != sim_port or not auth_url.path.endswith("/identity/v3"):
            err(f"clouds.yaml: auth_url {auth_url.geturl()} is not the simulator's Keystone")
    keystone = (api.get("auth") or {}).get("keystone") or {}
    if keystone.get("auth_url") and urlparse(keystone["auth_url"]).hostname != "openstack-sim":
        err("instanceha-api.toml: auth.keystone.auth_url is not the simulator's Keystone")

    # collector
    col = yaml.safe_load((cdir / "otel-collector.yaml").read_text())
    pipelines = col["service"]["pipelines"]
    for kind in ("receivers", "processors", "exporters"):
        defined = set(col.get(kind) or {})
        used = {c for p in pipelines.values() for c in p.get(kind, [])}
        for c in used - defined:
            err(f"otel-collector.yaml: pipeline uses undefined {kind[:-1]} {c}")
        for c in defined - used:
            err(f"otel-collector.yaml: {kind[:-1]} {c} is defined but in no pipeline")
    for e in set(col.get("extensions") or {}) ^ set(col["service"].get("extensions") or []):
        err(f"otel-collector.yaml: extension {e} is defined but not enabled, or enabled but not defined")
    if not any(e.startswith("otlp") and "jaeger" in str(col["exporters"][e].get("endpoint", ""))
               for e in pipelines.get("traces", {}).get("exporters", [])):
        err("otel-collector.yaml: the traces pipeline does not export to Jaeger over OTLP")
    if "prometheus" not in pipelines.get("metrics", {}).get("exporters", []):
        err("otel-collector.yaml: the metrics pipeline has no prometheus exporter")
    for proto in ("grpc", "http"):
        if proto not in col["receivers"]["otlp"]["protocols"]:
            err(f"otel-collector.yaml: OTLP {proto} receiver missing")

    # prometheus
    prom = yaml.safe_load((cdir / "prometheus.yaml").read_text())
    targets = 0
    for job in prom["scrape_configs"]:
        for sc in job.get("static_configs", []):
            for t in sc["targets"]:
                targets += 1
                host, _, port = t.rpartition(":")
                if host not in services:
                    err(f"prometheus.yaml: job {job['job_name']}: {t} is not a service of the stack")
                elif host in ("instanceha-api", "instanceha-engine"):
                    cfg = api if host == "instanceha-api" else engine
                    if (cfg.get("telemetry") or {}).get("prometheus_listen", "").rsplit(":", 1)[-1] != port:
                        err(f"prometheus.yaml: {t} is not where {host} serves metrics")
                elif host == "otel-collector" and not col["exporters"]["prometheus"]["endpoint"].endswith(":" + port):
                    err(f"prometheus.yaml: {t} is not the collector's Prometheus exporter")

    for e in errors:
        print(f"  ERROR: {e}")
    print(f"  compose: {len(services)} services, files/ports/hardening/wiring; collector: "
          f"{len(pipelines)} pipelines; prometheus: {targets} targets")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
