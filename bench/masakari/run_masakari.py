#!/usr/bin/env python3
"""Runs OpenStack Masakari (masakari-api and masakari-engine from PyPI) for
instanceha-bench, against any Keystone and Nova.

Two commands:

* ``venv``: creates (or reuses) a virtual environment with the pinned
  ``masakari`` release from PyPI, by default in
  ``~/.cache/instanceha/masakari-venv``, and prints its path.
* ``serve``: in a run directory, writes Masakari's configuration (its
  defaults, except what a deployment must say: where Keystone is, the
  admin credentials, the region and interface, the database, the message
  queue and the API's listen address), starts a private RabbitMQ node,
  creates Masakari's SQLite databases, starts masakari-api and (unless
  ``--no-engine``) masakari-engine, prints
  ``masakari-api listening on http://127.0.0.1:PORT`` once the API answers,
  and runs until SIGTERM or SIGINT, or until one of them exits; then it
  stops all of them. The process ids are in ``RUN_DIR/pids.json``.

The RabbitMQ node is private: its own node name, Erlang cookie (through its
own HOME), data and log directories under the run directory, AMQP and
distribution ports, and no plugins. The machine's own node, if any, is
left alone.

Only the standard library is used here; Masakari runs in the venv.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

MASAKARI_VERSION = "22.0.0"
# oslo.db is tested with SQLAlchemy 2.0 (pip would pick 2.1); masakari 22's
# novaclient and keystonemiddleware want a recent keystoneauth1.
REQUIREMENTS = [
    f"masakari=={MASAKARI_VERSION}",
    "SQLAlchemy>=2.0,<2.1",
    "keystoneauth1>=5.16",
]
DEFAULT_VENV = Path.home() / ".cache" / "instanceha" / "masakari-venv"
RABBITMQ_BIN = Path("/usr/lib/rabbitmq/bin")
STAMP = ".instanceha-requirements"


def log(message):
    print(f"run_masakari: {message}", file=sys.stderr, flush=True)


def ensure_venv(venv: Path, python: str) -> Path:
    """The venv with REQUIREMENTS installed; created or repaired if needed."""
    stamp = venv / STAMP
    wanted = "\n".join(REQUIREMENTS) + "\n"
    if stamp.is_file() and stamp.read_text() == wanted and (venv / "bin" / "masakari-api").is_file():
        return venv
    log(f"installing {' '.join(REQUIREMENTS)} into {venv}")
    venv.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([python, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run(pip + ["install", "--upgrade", "pip"], check=True)
    subprocess.run(pip + ["install"] + REQUIREMENTS, check=True)
    stamp.write_text(wanted)
    return venv


def installed_version(venv: Path) -> str:
    out = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import masakari.version as v; print(v.version_string())"],
        check=True, capture_output=True, text=True,
    )
    return out.stdout.strip()


def masakari_conf(args, run: Path) -> str:
    endpoint_type = f"{args.interface}URL"
    return f"""# written by run_masakari.py: Masakari's defaults, except what a
# deployment must say (Keystone, credentials, region, interface, database,
# message queue, listen address, files).
[DEFAULT]
transport_url = rabbit://masakari:masakari@127.0.0.1:{args.amqp_port}/
masakari_api_listen = 127.0.0.1
masakari_api_listen_port = {args.api_port}
os_privileged_user_auth_url = {args.auth_url}
os_privileged_user_name = {args.username}
os_privileged_user_password = {args.password}
os_privileged_user_tenant = {args.project_name}
os_user_domain_name = {args.user_domain_name}
os_project_domain_name = {args.project_domain_name}
os_region_name = {args.region}
nova_catalog_admin_info = compute:nova:{endpoint_type}
state_path = {run}
use_stderr = false

[wsgi]
api_paste_config = {run / 'api-paste.ini'}

[database]
connection = sqlite:///{run / 'masakari.sqlite'}

[taskflow]
connection = sqlite:///{run / 'taskflow.sqlite'}

[oslo_concurrency]
lock_path = {run / 'lock'}

[keystone_authtoken]
www_authenticate_uri = {args.auth_url}
auth_url = {args.auth_url}
auth_type = password
username = {args.username}
password = {args.password}
project_name = {args.project_name}
user_domain_name = {args.user_domain_name}
project_domain_name = {args.project_domain_name}
region_name = {args.region}
interface = {args.interface}
"""


class Rabbit:
    """A private RabbitMQ node."""

    def __init__(self, run: Path, node: str, amqp_port: int, dist_port: int):
        self.dir = run / "rabbitmq"
        self.node = node
        home = self.dir / "home"
        for d in (home, self.dir / "mnesia", self.dir / "log"):
            d.mkdir(parents=True, exist_ok=True)
        (self.dir / "enabled_plugins").write_text("")
        (self.dir / "rabbitmq-env.conf").write_text("")
        (self.dir / "rabbitmq.conf").write_text(
            f"listeners.tcp.local = 127.0.0.1:{amqp_port}\n"
            "log.console = false\n"
        )
        self.env = {
            k: v for k, v in os.environ.items() if not k.startswith(("RABBITMQ_", "ERL_"))
        }
        self.env.update(
            HOME=str(home),
            RABBITMQ_NODENAME=node,
            RABBITMQ_NODE_IP_ADDRESS="127.0.0.1",
            RABBITMQ_NODE_PORT=str(amqp_port),
            RABBITMQ_DIST_PORT=str(dist_port),
            RABBITMQ_MNESIA_BASE=str(self.dir / "mnesia"),
            RABBITMQ_LOG_BASE=str(self.dir / "log"),
            RABBITMQ_PID_FILE=str(self.dir / "rabbitmq.pid"),
            RABBITMQ_ENABLED_PLUGINS_FILE=str(self.dir / "enabled_plugins"),
            RABBITMQ_CONF_ENV_FILE=str(self.dir / "rabbitmq-env.conf"),
            RABBITMQ_CONFIG_FILE=str(self.dir / "rabbitmq.conf"),
            RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}",
            ERL_EPMD_ADDRESS="127.0.0.1",
        )
        self.process = None

    def ctl(self, *args, check=True, timeout=120):
        return subprocess.run(
            [str(RABBITMQ_BIN / "rabbitmqctl"), "-n", self.node, *args],
            env=self.env, check=check, timeout=timeout,
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )

    def start(self):
        out = open(self.dir / "server.out", "w")
        self.process = subprocess.Popen(
            [str(RABBITMQ_BIN / "rabbitmq-server")],
            env=self.env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        waited = self.ctl("wait", str(self.dir / "rabbitmq.pid"), "--timeout", "90", check=False)
        if waited.returncode != 0:
            raise RuntimeError(
                f"rabbitmq node {self.node} did not start: {waited.stderr.strip()} "
                f"(see {self.dir / 'server.out'})"
            )
        self.ctl("add_user", "masakari", "masakari")
        self.ctl("set_permissions", "masakari", ".*", ".*", ".*")

    def stop(self):
        if self.process is None:
            return
        if self.process.poll() is None:
            self.ctl("stop", check=False, timeout=60)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self.process = None


def start_service(venv: Path, run: Path, name: str):
    return subprocess.Popen(
        [str(venv / "bin" / name), "--config-file", str(run / "masakari.conf"),
         "--log-file", str(run / f"{name}.log")],
        stdin=subprocess.DEVNULL,
        stdout=open(run / f"{name}.out", "w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def stop_service(process, name):
    if process is None or process.poll() is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        log(f"{name} did not stop in 20 s: killed")
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def wait_for_api(url: str, process, seconds: float):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"masakari-api exited ({process.returncode})")
        try:
            with urllib.request.urlopen(url + "/", timeout=2) as response:
                if response.status in (200, 300):
                    return
        except urllib.error.HTTPError as e:
            if e.code in (200, 300):
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"masakari-api does not answer at {url} after {seconds:.0f} s")


class Stop(Exception):
    pass


def serve(args) -> int:
    venv = ensure_venv(Path(args.venv), args.python)
    version = installed_version(venv)
    run = Path(args.run_dir).resolve()
    run.mkdir(parents=True, exist_ok=True)
    (run / "lock").mkdir(exist_ok=True)
    paste = venv / "etc" / "masakari" / "api-paste.ini"
    (run / "api-paste.ini").write_text(paste.read_text())
    (run / "masakari.conf").write_text(masakari_conf(args, run))

    def on_signal(signum, frame):
        raise Stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    rabbit = Rabbit(run, args.rabbit_node, args.amqp_port, args.dist_port)
    api = engine = None
    status = 0
    try:
        rabbit.start()
        subprocess.run(
            [str(venv / "bin" / "masakari-manage"), "--config-file", str(run / "masakari.conf"),
             "--log-file", str(run / "masakari-manage.log"), "db", "sync"],
            check=True, stdin=subprocess.DEVNULL,
            stdout=open(run / "masakari-manage.out", "w"), stderr=subprocess.STDOUT,
        )
        api = start_service(venv, run, "masakari-api")
        if not args.no_engine:
            engine = start_service(venv, run, "masakari-engine")
        url = f"http://127.0.0.1:{args.api_port}"
        wait_for_api(url, api, 120)
        pids = {
            "api": api.pid,
            "engine": engine.pid if engine else None,
            "rabbitmq": rabbit.process.pid,
        }
        (run / "pids.json").write_text(json.dumps(pids))
        print(f"masakari {version}", flush=True)
        print(f"masakari-api listening on {url}", flush=True)
        while True:
            for name, process in (("masakari-api", api), ("masakari-engine", engine)):
                if process is not None and process.poll() is not None:
                    log(f"{name} exited ({process.returncode}); see {run / (name + '.log')}")
                    status = 1
                    raise Stop()
            if rabbit.process.poll() is not None:
                log(f"rabbitmq exited ({rabbit.process.returncode})")
                status = 1
                raise Stop()
            time.sleep(0.5)
    except Stop:
        pass
    except Exception as e:  # reported to the caller, then everything stops
        log(f"failed: {e}")
        status = 1
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        stop_service(engine, "masakari-engine")
        stop_service(api, "masakari-api")
        rabbit.stop()
        log("stopped")
    return status


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--venv", default=str(DEFAULT_VENV))
    parser.add_argument("--python", default=sys.executable,
                        help="the interpreter the venv is made with")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("venv", help="create or reuse the venv; print its path")
    s = commands.add_parser("serve", help="run Masakari until SIGTERM")
    s.add_argument("--run-dir", required=True)
    s.add_argument("--auth-url", required=True, help="Keystone, e.g. http://host/identity/v3")
    s.add_argument("--username", required=True)
    s.add_argument("--password", default=os.environ.get("RUN_MASAKARI_PASSWORD"),
                   help="default: $RUN_MASAKARI_PASSWORD (kept off the command line)")
    s.add_argument("--project-name", required=True)
    s.add_argument("--user-domain-name", default="Default")
    s.add_argument("--project-domain-name", default="Default")
    s.add_argument("--region", default="RegionOne")
    s.add_argument("--interface", default="public", choices=["public", "internal", "admin"])
    s.add_argument("--api-port", type=int, default=15868)
    s.add_argument("--amqp-port", type=int, default=25683)
    s.add_argument("--dist-port", type=int, default=25684)
    s.add_argument("--rabbit-node", default="masakari-bench@localhost")
    s.add_argument("--no-engine", action="store_true",
                   help="the API alone (intake): notifications are not recovered")
    args = parser.parse_args()
    if args.command == "serve" and not args.password:
        parser.error("serve needs --password or RUN_MASAKARI_PASSWORD")
    if args.command == "venv":
        venv = ensure_venv(Path(args.venv), args.python)
        print(f"{venv} masakari {installed_version(venv)}")
        return 0
    return serve(args)


if __name__ == "__main__":
    sys.exit(main())
