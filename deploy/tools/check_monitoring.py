#!/usr/bin/env python3
"""Checks deploy/monitoring and the prometheus-operator overlay beyond what
promtool and the schemas see.

  * the metrics the services export: every "instanceha_*" name the Rust
    sources of the services register (counters get `_total`, histograms
    `_bucket`/`_sum`/`_count`; accepted with any of these), the process
    collector's `process_*`, and Prometheus's own `up`;
  * alerts.yaml: every rule's expression names only those metrics; every
    alert has a unit test in tests/ where it fires and a case where it does
    not, and the tests' input series are those metrics too;
  * grafana-dashboard.json: it parses, panels have unique ids and a
    position, every query names only those metrics (the Grafana variables
    `$__rate_interval`, `$__range`... aside);
  * the rendered overlay: each ServiceMonitor selects exactly one Service
    with the port it scrapes, each PodMonitor pods (of the agent's
    render) with the port it scrapes, in the namespaces it names.

Usage: check_monitoring.py REPO --overlay RENDER.yaml --agent RENDER.yaml
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import yaml

SERVICES = ["api-service/src", "engine-service/src", "agent/src", "openstack-client/src", "runtime/src"]
PROCESS = [
    "process_cpu_seconds_total", "process_open_fds", "process_max_fds", "process_virtual_memory_bytes",
    "process_virtual_memory_max_bytes", "process_resident_memory_bytes", "process_start_time_seconds",
    "process_threads",
]
PROMETHEUS = ["up", "scrape_duration_seconds", "ALERTS"]
SUFFIXES = ["", "_total", "_bucket", "_sum", "_count"]
KEYWORDS = {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "group_left",
            "group_right", "inf", "nan", "Inf", "NaN"}


def exported(repo: Path) -> set[str]:
    """The metric names the services can expose."""
    names = set(PROCESS) | set(PROMETHEUS)
    literal = re.compile(r'"(instanceha_[a-z0-9_]+)"')
    for folder in SERVICES:
        for path in (repo / folder).rglob("*.rs"):
            text = path.read_text(encoding="utf-8")
            # Unit tests' made-up instruments are not exported.
            text = text.split("#[cfg(test)]")[0]
            for base in literal.findall(text):
                names.update(base + s for s in SUFFIXES)
    return names


def metric_names(expr: str) -> list[str]:
    """The metric names a PromQL expression selects (label matchers,
    ranges, grouping clauses, strings, functions and keywords aside)."""
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    e = re.sub(r"\{[^}]*\}", " ", e)
    e = re.sub(r"\[[^\]]*\]", " ", e)
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", e)
    e = re.sub(r"\$\{?\w+\}?", " ", e)
    out = []
    for m in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", e):
        word, before = m.group(0), e[m.start() - 1] if m.start() else " "
        if before.isdigit() or before == ".":
            continue  # 1e3, 0.5
        if e[m.end():].lstrip().startswith("(") or word in KEYWORDS:
            continue
        out.append(word)
    return out


def check_rules(monitoring: Path, known: set[str], err) -> int:
    rules = yaml.safe_load((monitoring / "alerts.yaml").read_text())
    alerts = []
    for group in rules["groups"]:
        for rule in group["rules"]:
            name = rule.get("alert") or rule.get("record")
            alerts.append(name)
            for metric in metric_names(rule["expr"]):
                if metric not in known:
                    err(f"alerts.yaml {name}: {metric} is no metric the services export")
    fires, quiet = set(), set()
    for path in sorted((monitoring / "tests").glob("*.yaml")):
        test = yaml.safe_load(path.read_text())
        if "../alerts.yaml" not in test.get("rule_files", []):
            err(f"tests/{path.name}: does not load ../alerts.yaml")
        for case in test.get("tests", []):
            for series in case.get("input_series", []):
                metric = series["series"].split("{")[0]
                if metric not in known:
                    err(f"tests/{path.name}: input series {metric} is no metric the services export")
            for check in case.get("alert_rule_test", []):
                (fires if check.get("exp_alerts") else quiet).add(check["alertname"])
    for name in alerts:
        if name not in fires:
            err(f"alert {name}: no unit test in tests/ where it fires")
        if name not in quiet:
            err(f"alert {name}: no unit test in tests/ where it stays quiet")
    return len(alerts)


def check_dashboard(monitoring: Path, known: set[str], err) -> int:
    path = monitoring / "grafana-dashboard.json"
    try:
        dashboard = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        err(f"{path.name}: not JSON: {e}")
        return 0
    for key in ("title", "uid", "panels", "schemaVersion"):
        if key not in dashboard:
            err(f"{path.name}: no {key}")
    ids, queries = set(), 0
    for panel in dashboard.get("panels", []):
        where = f"{path.name} panel {panel.get('title')!r}"
        if panel.get("id") in ids:
            err(f"{where}: id {panel.get('id')} used twice")
        ids.add(panel.get("id"))
        if not {"h", "w", "x", "y"} <= set(panel.get("gridPos", {})):
            err(f"{where}: no gridPos")
        if panel.get("type") == "row":
            continue
        if not panel.get("targets"):
            err(f"{where}: no query")
        for target in panel.get("targets", []):
            queries += 1
            names = metric_names(target.get("expr", ""))
            if not names:
                err(f"{where}: query {target.get('refId')} names no metric")
            for metric in names:
                if metric not in known:
                    err(f"{where}: {metric} is no metric the services export")
    return queries


def selects(selector: dict, labels: dict) -> bool:
    return all(labels.get(k) == v for k, v in (selector.get("matchLabels") or {}).items())


def check_monitors(overlay: Path, agent: Path, err) -> int:
    docs = [d for d in yaml.safe_load_all(overlay.read_text()) if d]
    agent_docs = [d for d in yaml.safe_load_all(agent.read_text()) if d]
    monitors = 0
    for mon in (d for d in docs if d["kind"] == "ServiceMonitor"):
        monitors += 1
        where = f"ServiceMonitor {mon['metadata']['name']}"
        spec = mon["spec"]
        names = (spec.get("namespaceSelector") or {}).get("matchNames") or [mon["metadata"].get("namespace")]
        hits = [s for s in docs if s["kind"] == "Service" and s["metadata"].get("namespace") in names
                and selects(spec["selector"], s["metadata"].get("labels") or {})]
        if len(hits) != 1:
            err(f"{where}: selects {len(hits)} Services (want 1)")
            continue
        ports = {p.get("name") for p in hits[0]["spec"]["ports"]}
        for ep in spec["endpoints"]:
            if ep.get("port") not in ports:
                err(f"{where}: Service {hits[0]['metadata']['name']} has no port {ep.get('port')}")
        if spec.get("jobLabel") and spec["jobLabel"] not in (hits[0]["metadata"].get("labels") or {}):
            err(f"{where}: the Service has no label {spec['jobLabel']} (the job's name)")
    for mon in (d for d in docs if d["kind"] == "PodMonitor"):
        monitors += 1
        where = f"PodMonitor {mon['metadata']['name']}"
        spec = mon["spec"]
        names = (spec.get("namespaceSelector") or {}).get("matchNames") or [mon["metadata"].get("namespace")]
        pods = [d["spec"]["template"] for d in docs + agent_docs
                if d["kind"] in ("Deployment", "DaemonSet") and d["metadata"].get("namespace") in names
                and selects(spec["selector"], d["spec"]["template"]["metadata"].get("labels") or {})]
        if not pods:
            err(f"{where}: selects no pods in {names}")
        for template in pods:
            ports = {p.get("name") for c in template["spec"]["containers"] for p in c.get("ports", [])}
            for ep in spec["podMetricsEndpoints"]:
                if ep.get("port") not in ports:
                    err(f"{where}: the pods have no port {ep.get('port')}")
            if spec.get("jobLabel") and spec["jobLabel"] not in template["metadata"].get("labels", {}):
                err(f"{where}: the pods have no label {spec['jobLabel']} (the job's name)")
    if monitors == 0:
        err(f"{overlay}: no ServiceMonitor or PodMonitor")
    return monitors


def main(argv) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("repo")
    ap.add_argument("--overlay", required=True)
    ap.add_argument("--agent", required=True)
    args = ap.parse_args(argv[1:])
    repo = Path(args.repo).resolve()
    monitoring = repo / "deploy" / "monitoring"
    errors: list[str] = []
    known = exported(repo)
    alerts = check_rules(monitoring, known, errors.append)
    queries = check_dashboard(monitoring, known, errors.append)
    monitors = check_monitors(Path(args.overlay), Path(args.agent), errors.append)
    for e in errors:
        print(f"  ERROR: {e}")
    print(f"  {alerts} alerts, each tested firing and quiet; {queries} dashboard queries; "
          f"{monitors} monitors; against {len(known)} metric names the services can export")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
