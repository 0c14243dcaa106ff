#!/usr/bin/env python3
"""Process failure, side by side: masakari-processmonitor (masakari-monitors,
its default settings) and instanceha-agent's process monitor (its default
settings), on the same scenario, against the same instanceha-api.

The scenario: a watched process is SIGKILLed and cannot be restarted (its
restart command fails). Measured: from the kill to the notification
stored, by the notification's `created_at` in the API (the database's
clock, the same machine) minus the kill's wall-clock time.

masakari-processmonitor talks to the API's Masakari-compatible REST facade
(keystoneauth's `admin_token` plugin with the endpoint, as REST.md shows
for clients without a catalog entry); instanceha-agent talks gRPC. Both
authenticate with a static token of the API.

Usage (see BENCHMARKS.md for the figures):

  cargo build -p instanceha-api -p instanceha-agent
  python3 -m venv /tmp/mm && /tmp/mm/bin/pip install masakari-monitors==22.0.0
  python3 agent/bench/process_failure.py --api target/debug/instanceha-api \
      --agent target/debug/instanceha-agent --masakari-venv /tmp/mm --runs 5
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

TOKEN = "bench-admin-token"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rest(base: str, method: str, path: str, body=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(base + path, data=data, method=method)
    req.add_header("X-Auth-Token", TOKEN)
    req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read() or b"{}")


def wait(what: str, check, limit: float = 60.0, every: float = 0.02):
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        v = check()
        if v:
            return v
        time.sleep(every)
    raise SystemExit(f"timed out waiting for {what}")


def start_api(binary: str, work: Path) -> tuple[subprocess.Popen, str, str]:
    grpc, rest_port = free_port(), free_port()
    tokens = work / "tokens.toml"
    tokens.write_text(
        f'[[token]]\nname = "bench"\nsha256 = "{hashlib.sha256(TOKEN.encode()).hexdigest()}"\nroles = ["admin"]\n'
    )
    config = work / "api.toml"
    config.write_text(
        f'listen = "127.0.0.1:{grpc}"\n[rest]\nlisten = "127.0.0.1:{rest_port}"\n'
        f'[database]\nurl = "sqlite://{work}/api.db"\n[dispatch]\nenabled = false\n'
        f'[auth]\nmode = "static"\nstatic_tokens_file = "{tokens}"\n'
    )
    log = open(work / "api.log", "w")
    proc = subprocess.Popen([binary, "--config", str(config)], stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{rest_port}"

    def up():
        try:
            urllib.request.urlopen(base + "/healthcheck", timeout=1)
            return True
        except OSError:
            return False

    wait("the API", up, 30, 0.1)
    return proc, base, f"http://127.0.0.1:{grpc}"


def notification_for(base: str, name: str):
    for n in rest(base, "GET", "/v1/notifications?type=PROCESS")["notifications"]:
        if n["payload"].get("process_name") == name and n["payload"].get("event") == "STOPPED":
            return n
    return None


def created_at(n) -> float:
    return dt.datetime.fromisoformat(n["created_at"]).replace(tzinfo=dt.timezone.utc).timestamp()


def process_list(work: Path, marker: Path) -> Path:
    path = work / f"{marker.name}.yaml"
    path.write_text(
        "-\n"
        f"    process_name: {marker}\n"
        "    start_command: /bin/true\n    pre_start_command:\n    post_start_command:\n"
        "    restart_command: /bin/false\n    pre_restart_command:\n    post_restart_command:\n"
        "    run_as_root: False\n"
    )
    return path


def start_masakari(venv: Path, work: Path, base: str, plist: Path) -> subprocess.Popen:
    conf = work / "masakarimonitors.conf"
    conf.write_text(
        "[DEFAULT]\nuse_stderr = true\n"
        f"[api]\nauth_type = admin_token\nendpoint = {base}/v1\ntoken = {TOKEN}\n"
        "region = RegionOne\napi_interface = public\n"
        f"[process]\nprocess_list_path = {plist}\n"
    )
    log = open(work / f"masakari-{plist.stem}.log", "w")
    return subprocess.Popen(
        [str(venv / "bin" / "masakari-processmonitor"), "--config-file", str(conf)],
        stdout=log, stderr=subprocess.STDOUT,
    )


def start_agent(binary: str, work: Path, grpc: str, plist: Path) -> subprocess.Popen:
    token = work / "token"
    token.write_text(TOKEN + "\n")
    config = work / f"agent-{plist.stem}.toml"
    config.write_text(
        f'[api]\nurl = "{grpc}"\ntoken_file = "{token}"\nwatch = false\n'
        f'[spool]\npath = "{work}/{plist.stem}.redb"\n[process]\nlist_path = "{plist}"\n'
    )
    log = open(work / f"agent-{plist.stem}.log", "w")
    return subprocess.Popen([binary, "--config", str(config)], stdout=log, stderr=subprocess.STDOUT,
                            env={**os.environ, "NO_COLOR": "1"})


def one_run(kind: str, i: int, args, work: Path, base: str, grpc: str) -> float:
    marker = work / f"iha-bench-{kind}-{i}"
    marker.symlink_to("/bin/sleep")
    watched = subprocess.Popen([str(marker), "100000"])
    plist = process_list(work, marker)
    monitor = (start_masakari(Path(args.masakari_venv), work, base, plist) if kind == "masakari"
               else start_agent(args.agent, work, grpc, plist))
    # Let the monitor see the process running (masakari checks every 5 s).
    time.sleep(7 if kind == "masakari" else 1.5)
    killed = time.time()
    watched.send_signal(signal.SIGKILL)
    watched.wait()
    try:
        n = wait(f"{kind}'s notification", lambda: notification_for(base, marker.name), limit=120, every=0.05)
    except SystemExit:
        for log in sorted(work.glob("*.log")):
            print(f"--- {log.name} ---\n" + "\n".join(log.read_text().splitlines()[-25:]), file=sys.stderr)
        raise
    latency = created_at(n) - killed
    monitor.send_signal(signal.SIGTERM)
    try:
        monitor.wait(10)
    except subprocess.TimeoutExpired:
        monitor.kill()
    return latency


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--api", required=True)
    ap.add_argument("--agent", required=True)
    ap.add_argument("--masakari-venv", required=True)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        api, base, grpc = start_api(args.api, work)
        try:
            segment = rest(base, "POST", "/v1/segments", {"segment": {
                "name": "bench", "service_type": "COMPUTE", "recovery_method": "auto"}})["segment"]
            rest(base, "POST", f"/v1/segments/{segment['uuid']}/hosts", {"host": {
                "name": socket.gethostname(), "type": "COMPUTE", "control_attributes": "SSH"}})
            results = {"masakari": [], "agent": []}
            for i in range(args.runs):
                for kind in ("agent", "masakari"):
                    latency = one_run(kind, i, args, work, base, grpc)
                    results[kind].append(latency)
                    print(f"run {i + 1} {kind:8s} {latency:6.2f} s", flush=True)
        finally:
            api.send_signal(signal.SIGTERM)
            api.wait(10)
    print()
    for kind, label in (("masakari", "masakari-processmonitor 22.0.0 (defaults)"),
                        ("agent", "instanceha-agent (defaults)")):
        v = results[kind]
        print(f"{label:45s} median {statistics.median(v):6.2f} s  min {min(v):6.2f}  max {max(v):6.2f}  (n={len(v)})")
    ratio = statistics.median(results["masakari"]) / statistics.median(results["agent"])
    print(f"ratio of medians: {ratio:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
