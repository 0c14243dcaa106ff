#!/usr/bin/env python3
"""A real OpenStack control plane on loopback, for the conformance tests and
the real-Nova benchmark of instance-ha.

Keystone 30, Placement 16, Nova 34 (api, conductor, scheduler and three
nova-compute with Nova's fake virt driver), Cinder 29 (api, scheduler,
volume with the fake volume driver shipped in its wheel), all from PyPI,
on the machine's PostgreSQL and a private RabbitMQ node, with read-only
stand-ins for the image and network APIs (standins.py).

    stack.py up              set up from nothing (or reuse the venv) and start
    stack.py setup           venv, configuration, databases, schemas
    stack.py start [NAME..]  start every process (or those named), wait ready
    stack.py stop [NAME..]   SIGTERM and wait (every process, or those named)
    stack.py kill NAME..     SIGKILL
    stack.py status          one line per process
    stack.py env             the environment a client needs (sh syntax)
    stack.py down            stop everything and drop the databases

The state lives in $INSTANCEHA_REAL_OPENSTACK_DIR (default
/tmp/instanceha-real-openstack); the venv in
$INSTANCEHA_REAL_OPENSTACK_VENV (default ~/.cache/instanceha/real-openstack-
<hash of requirements.txt>), reused while requirements.txt is unchanged.

A second stack runs beside the first with $INSTANCEHA_REAL_OPENSTACK_PORT_OFFSET
(added to every port, RabbitMQ's AMQP and distribution ports included; its
databases and RabbitMQ node then carry the offset as a suffix) and a
directory of its own. Mind the offsets that land one stack's RabbitMQ on the
other's APIs: 100 to 105 put RabbitMQ's distribution or AMQP port on the
default Nova, Cinder or Placement port (25774, 25776, 25778); 200 is free.
`env` prints a control that carries the three variables.
Every step prints its duration; any failure exits non-zero with the reason
and the tail of the process's log.
"""

import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
STATE = os.environ.get("INSTANCEHA_REAL_OPENSTACK_DIR", "/tmp/instanceha-real-openstack")
REQUIREMENTS = os.path.join(HERE, "requirements.txt")
PG = os.environ.get("INSTANCEHA_REAL_OPENSTACK_PG", "postgresql+psycopg2://postgres@127.0.0.1:5432")
PG_ADMIN = ["psql", "-h", "127.0.0.1", "-U", "postgres", "-d", "postgres", "-Atq", "-v", "ON_ERROR_STOP=1"]

PORT_OFFSET = int(os.environ.get("INSTANCEHA_REAL_OPENSTACK_PORT_OFFSET") or "0")
# The suffix of every name two stacks on one machine must not share: the
# databases and the RabbitMQ node.
SUFFIX = f"_{PORT_OFFSET}" if PORT_OFFSET else ""

BASE_PORTS = {
    "keystone": 25000,
    "placement": 25778,
    "nova-api": 25774,
    "cinder-api": 25776,
    "image": 25292,
    "network": 25696,
    "rabbitmq": 25673,
    "rabbitmq-dist": 25674,
}
PORTS = {name: port + PORT_OFFSET for name, port in BASE_PORTS.items()}
COMPUTES = ["compute-1", "compute-2", "compute-3"]
DATABASES = ["keystone", "placement", "nova_api", "nova_cell0", "nova_cell1", "cinder"]
PASSWORD = "secret"
REGION = "RegionOne"
RABBIT_NODE = f"instanceha-ros{SUFFIX.replace('_', '-')}@localhost"
# Service users: each has the admin and service roles in project service.
SERVICE_USERS = ["nova", "placement", "cinder", "neutron", "glance"]


def log(msg):
    print(f"[stack {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def fail(msg):
    print(f"error: {msg}", file=sys.stderr, flush=True)
    sys.exit(1)


def venv_dir():
    explicit = os.environ.get("INSTANCEHA_REAL_OPENSTACK_VENV")
    if explicit:
        return explicit
    digest = hashlib.sha256(open(REQUIREMENTS, "rb").read()).hexdigest()[:12]
    return os.path.expanduser(f"~/.cache/instanceha/real-openstack-{digest}")


VENV = venv_dir()


def bin_(name):
    return os.path.join(VENV, "bin", name)


def path(*parts):
    return os.path.join(STATE, *parts)


def run(cmd, env=None, quiet=True):
    started = time.monotonic()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        fail(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    if not quiet:
        print(proc.stdout, end="")
    return time.monotonic() - started, proc.stdout


def db_name(name):
    return f"ros_{name}{SUFFIX}"


def db_url(name):
    return f"{PG}/{db_name(name)}"


# ---------------------------------------------------------------- set-up


def ensure_venv():
    stamp = os.path.join(VENV, ".requirements")
    wanted = open(REQUIREMENTS).read()
    if os.path.exists(stamp) and open(stamp).read() == wanted:
        log(f"venv {VENV} is current")
        return
    started = time.monotonic()
    if not os.path.exists(bin_("python")):
        run([sys.executable, "-m", "venv", VENV])
    run([bin_("pip"), "install", "--quiet", "--disable-pip-version-check", "-r", REQUIREMENTS])
    with open(stamp, "w") as f:
        f.write(wanted)
    log(f"venv installed in {time.monotonic() - started:.1f} s")


def ini(sections):
    out = []
    for section, values in sections.items():
        out.append(f"[{section}]")
        for k, v in values.items():
            out.append(f"{k} = {v}")
        out.append("")
    return "\n".join(out)


def url(service, suffix=""):
    return f"http://127.0.0.1:{PORTS[service]}{suffix}"


def transport_url():
    return f"rabbit://ros:{PASSWORD}@127.0.0.1:{PORTS['rabbitmq']}/"


def authtoken(user):
    return {
        "www_authenticate_uri": url("keystone", "/v3"),
        "auth_url": url("keystone", "/v3"),
        "auth_type": "password",
        "username": user,
        "password": PASSWORD,
        "project_name": "service",
        "user_domain_name": "Default",
        "project_domain_name": "Default",
        "region_name": REGION,
        # A service token must carry the service role (Cinder's
        # os-force_detach and Nova's attachment calls rely on it).
        "service_token_roles_required": "true",
    }


def service_auth(user):
    return {
        "auth_url": url("keystone", "/v3"),
        "auth_type": "password",
        "username": user,
        "password": PASSWORD,
        "project_name": "service",
        "user_domain_name": "Default",
        "project_domain_name": "Default",
        "region_name": REGION,
    }


def write_configs():
    os.makedirs(path("etc"), exist_ok=True)
    os.makedirs(path("log"), exist_ok=True)
    os.makedirs(path("run"), exist_ok=True)
    logging = {"debug": "false", "use_stderr": "true"}

    keystone = {
        "DEFAULT": dict(logging),
        "database": {"connection": db_url("keystone")},
        "token": {"provider": "fernet", "expiration": "7200"},
        "fernet_tokens": {"key_repository": path("keystone", "fernet-keys")},
        "credential": {"key_repository": path("keystone", "credential-keys")},
    }
    os.makedirs(path("keystone"), exist_ok=True)
    write(path("etc", "keystone.conf"), ini(keystone))

    placement = {
        "DEFAULT": dict(logging),
        "placement_database": {"connection": db_url("placement")},
        "api": {"auth_strategy": "keystone"},
        "keystone_authtoken": authtoken("placement"),
    }
    os.makedirs(path("etc", "placement"), exist_ok=True)
    write(path("etc", "placement", "placement.conf"), ini(placement))

    nova = {
        "DEFAULT": {
            **logging,
            "transport_url": transport_url(),
            "compute_driver": "fake.FakeDriverWithoutFakeNodes",
            "my_ip": "127.0.0.1",
            "state_path": path("nova"),
            "report_interval": "10",
            "service_down_time": "60",
            "rpc_response_timeout": "60",
            # Both surviving computes take every instance of a failed one.
            "cpu_allocation_ratio": "16.0",
            "ram_allocation_ratio": "16.0",
            "disk_allocation_ratio": "16.0",
        },
        "api": {"auth_strategy": "keystone"},
        "wsgi": {"api_paste_config": os.path.join(VENV, "etc", "nova", "api-paste.ini")},
        "api_database": {"connection": db_url("nova_api")},
        "database": {"connection": db_url("nova_cell1")},
        "keystone_authtoken": authtoken("nova"),
        "service_user": {**service_auth("nova"), "send_service_user_token": "true"},
        "placement": service_auth("placement") | {"valid_interfaces": "public"},
        "glance": {"endpoint_override": url("image"), "num_retries": "0"},
        "neutron": service_auth("neutron") | {"endpoint_override": url("network"), "default_floating_pool": "public"},
        "cinder": service_auth("cinder") | {"catalog_info": "volumev3::publicURL", "os_region_name": REGION},
        "scheduler": {"workers": "1", "discover_hosts_in_cells_interval": "-1"},
        "conductor": {"workers": "1"},
        "quota": {"instances": "-1", "cores": "-1", "ram": "-1"},
        "oslo_concurrency": {"lock_path": path("nova", "locks")},
        "oslo_messaging_notifications": {"driver": "noop"},
        "vnc": {"enabled": "false"},
        "os_vif_ovs": {"ovsdb_connection": "tcp:127.0.0.1:6640"},
    }
    os.makedirs(path("nova", "locks"), exist_ok=True)
    write(path("etc", "nova.conf"), ini(nova))
    for name in COMPUTES:
        state = path("nova", name)
        os.makedirs(state, exist_ok=True)
        # A fixed node identity, as libvirt keeps one: a killed compute
        # starts again as the same node.
        node = str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{name}.instanceha.test"))
        write(os.path.join(state, "compute_id"), node + "\n")
        write(path("etc", f"{name}.conf"), ini({"DEFAULT": {"host": name, "state_path": state,
                                                         "instances_path": os.path.join(state, "instances")}}))

    cinder = {
        "DEFAULT": {
            **logging,
            "transport_url": transport_url(),
            "auth_strategy": "keystone",
            "enabled_backends": "fake",
            "default_volume_type": "__DEFAULT__",
            "state_path": path("cinder"),
            "my_ip": "127.0.0.1",
            "api_paste_config": os.path.join(VENV, "etc", "cinder", "api-paste.ini"),
            "report_interval": "10",
            "service_down_time": "60",
            "quota_volumes": "-1",
            "quota_gigabytes": "-1",
            "quota_snapshots": "-1",
        },
        "database": {"connection": db_url("cinder")},
        "keystone_authtoken": authtoken("cinder"),
        "service_user": {**service_auth("cinder"), "send_service_user_token": "true"},
        "nova": service_auth("nova") | {"interface": "public"},
        "oslo_concurrency": {"lock_path": path("cinder", "locks")},
        "oslo_messaging_notifications": {"driver": "noop"},
        "fake": {
            "volume_driver": "cinder.tests.fake_driver.FakeLoggingVolumeDriver",
            "volume_backend_name": "fake",
            "target_helper": "fake",
        },
    }
    os.makedirs(path("cinder", "locks"), exist_ok=True)
    write(path("etc", "cinder.conf"), ini(cinder))

    # oslo.config reads sys.argv: gunicorn's own flags must not reach it.
    shims = {
        "keystone_wsgi.py": "import sys\nsys.argv = sys.argv[:1]\nfrom keystone.wsgi.api import application  # noqa\n",
        "placement_wsgi.py": "import sys\nsys.argv = sys.argv[:1]\nfrom placement.wsgi.api import application  # noqa\n",
        "nova_wsgi.py": "import sys\nsys.argv = sys.argv[:1]\nfrom nova.wsgi.osapi_compute import application  # noqa\n",
        "cinder_wsgi.py": "import sys\nsys.argv = sys.argv[:1] + ['--config-file', %r]\n"
        "from cinder.wsgi.api import application  # noqa\n" % path("etc", "cinder.conf"),
    }
    for name, text in shims.items():
        write(path("run", name), text)

    rabbit_home = path("rabbitmq")
    os.makedirs(rabbit_home, exist_ok=True)
    write(path("rabbitmq", "enabled_plugins"), "[].\n")


def write(file, text):
    with open(file, "w") as f:
        f.write(text)


def create_databases():
    started = time.monotonic()
    for name in DATABASES:
        run(PG_ADMIN + ["-c", f"DROP DATABASE IF EXISTS {db_name(name)} WITH (FORCE)"])
        run(PG_ADMIN + ["-c", f"CREATE DATABASE {db_name(name)}"])
    log(f"databases created in {time.monotonic() - started:.1f} s")


def sync_schemas():
    started = time.monotonic()
    kconf = ["--config-file", path("etc", "keystone.conf")]
    for args in (["fernet_setup", "--keystone-user", "root", "--keystone-group", "root"],
                 ["credential_setup", "--keystone-user", "root", "--keystone-group", "root"],
                 ["db_sync"],
                 ["bootstrap", "--bootstrap-password", PASSWORD, "--bootstrap-admin-url", url("keystone", "/v3"),
                  "--bootstrap-internal-url", url("keystone", "/v3"), "--bootstrap-public-url", url("keystone", "/v3"),
                  "--bootstrap-region-id", REGION]):
        run([bin_("keystone-manage")] + kconf + args)
    run([bin_("placement-manage"), "--config-file", path("etc", "placement", "placement.conf"), "db", "sync"])
    nconf = ["--config-file", path("etc", "nova.conf")]
    run([bin_("nova-manage")] + nconf + ["api_db", "sync"])
    run([bin_("nova-manage")] + nconf + ["cell_v2", "map_cell0", "--database_connection", db_url("nova_cell0")])
    run([bin_("nova-manage")] + nconf + ["cell_v2", "create_cell", "--name", "cell1", "--verbose"])
    run([bin_("nova-manage")] + nconf + ["db", "sync"])
    run([bin_("cinder-manage"), "--config-file", path("etc", "cinder.conf"), "db", "sync"])
    log(f"schemas synced in {time.monotonic() - started:.1f} s")


def setup():
    started = time.monotonic()
    stop_all(quiet=True)
    ensure_venv()
    write_configs()
    create_databases()
    sync_schemas()
    if os.path.exists(path("run", "registered")):
        os.remove(path("run", "registered"))
    log(f"set-up done in {time.monotonic() - started:.1f} s")


# ---------------------------------------------------------------- processes


def gunicorn(module, port, workers, env=None):
    return {
        "cmd": [bin_("gunicorn"), "--chdir", path("run"), "--bind", f"127.0.0.1:{port}",
                "--workers", str(workers), "--keep-alive", "75", "--timeout", "120", f"{module}:application"],
        "env": env or {},
        "port": port,
    }


def processes():
    nova = ["--config-file", path("etc", "nova.conf")]
    cinder = ["--config-file", path("etc", "cinder.conf")]
    rabbit_env = {
        "HOME": path("rabbitmq"),
        "RABBITMQ_NODENAME": RABBIT_NODE,
        "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
        "RABBITMQ_NODE_PORT": str(PORTS["rabbitmq"]),
        "RABBITMQ_DIST_PORT": str(PORTS["rabbitmq-dist"]),
        "RABBITMQ_MNESIA_BASE": path("rabbitmq", "mnesia"),
        "RABBITMQ_LOG_BASE": path("rabbitmq", "log"),
        "RABBITMQ_ENABLED_PLUGINS_FILE": path("rabbitmq", "enabled_plugins"),
        "RABBITMQ_CONFIG_FILE": path("rabbitmq", "rabbitmq"),
        "RABBITMQ_PID_FILE": path("rabbitmq", "pid"),
    }
    procs = {
        "rabbitmq": {"cmd": ["/usr/lib/rabbitmq/bin/rabbitmq-server"], "env": rabbit_env, "port": PORTS["rabbitmq"],
                     "also_binds": [PORTS["rabbitmq-dist"]]},
        "standins": {"cmd": [bin_("python"), os.path.join(HERE, "standins.py"), "--image-port", str(PORTS["image"]),
                             "--network-port", str(PORTS["network"])], "env": {}, "port": PORTS["image"]},
        "keystone": gunicorn("keystone_wsgi", PORTS["keystone"], 2,
                             {"OS_KEYSTONE_CONFIG_FILES": path("etc", "keystone.conf")}),
        "placement": gunicorn("placement_wsgi", PORTS["placement"], 1,
                              {"OS_PLACEMENT_CONFIG_DIR": path("etc", "placement")}),
        "nova-api": gunicorn("nova_wsgi", PORTS["nova-api"], 2,
                             # The paste file first: Nova loads its pipeline from the first.
                             {"OS_NOVA_CONFIG_FILES": os.path.join(VENV, "etc", "nova", "api-paste.ini") + ";"
                              + path("etc", "nova.conf")}),
        "nova-conductor": {"cmd": [bin_("nova-conductor")] + nova, "env": {}},
        "nova-scheduler": {"cmd": [bin_("nova-scheduler")] + nova, "env": {}},
        "cinder-api": gunicorn("cinder_wsgi", PORTS["cinder-api"], 1),
        "cinder-scheduler": {"cmd": [bin_("cinder-scheduler")] + cinder, "env": {}},
        "cinder-volume": {"cmd": [bin_("cinder-volume")] + cinder, "env": {}},
    }
    for name in COMPUTES:
        procs[f"nova-{name}"] = {"cmd": [bin_("nova-compute")] + nova + ["--config-file", path("etc", f"{name}.conf")],
                                 "env": {}}
    return procs


ORDER = ["rabbitmq", "standins", "keystone", "placement", "nova-api", "nova-conductor", "nova-scheduler",
         "cinder-api", "cinder-scheduler", "cinder-volume"] + [f"nova-{c}" for c in COMPUTES]


def pid_of(name):
    try:
        pid = int(open(path("run", f"{name}.pid")).read())
    except (OSError, ValueError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    # A zombie is not running.
    try:
        if open(f"/proc/{pid}/stat").read().split(") ", 1)[1].startswith("Z"):
            return None
    except OSError:
        return None
    return pid


def port_open(port):
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def tail(name, lines=40):
    try:
        return "".join(open(path("log", f"{name}.log"), errors="replace").readlines()[-lines:])
    except OSError:
        return "(no log)"


def launch(name):
    spec = processes()[name]
    if pid_of(name):
        log(f"{name} is running")
        return
    for port in [spec.get("port")] + spec.get("also_binds", []):
        if port and port_open(port):
            fail(f"port {port} for {name} is taken by another process")
    env = dict(os.environ, **spec["env"])
    env["PATH"] = os.path.join(VENV, "bin") + ":" + env.get("PATH", "")
    logf = open(path("log", f"{name}.log"), "ab")
    logf.write(f"\n==== {time.strftime('%Y-%m-%dT%H:%M:%S')} start {name}\n".encode())
    logf.flush()
    proc = subprocess.Popen(spec["cmd"], env=env, stdout=logf, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True, cwd=path("run"))
    write(path("run", f"{name}.pid"), str(proc.pid))


def wait_port(name, port, within=60):
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if port_open(port):
            return
        if not pid_of(name):
            fail(f"{name} exited while starting:\n{tail(name)}")
        time.sleep(0.2)
    fail(f"{name} does not listen on {port} after {within} s:\n{tail(name)}")


def signal_group(name, sig):
    pid = pid_of(name)
    if not pid:
        return None
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass
    return pid


def stop(name, within=30):
    pid = signal_group(name, signal.SIGTERM)
    if not pid:
        return
    deadline = time.monotonic() + within
    while time.monotonic() < deadline and pid_of(name):
        time.sleep(0.1)
    if pid_of(name):
        signal_group(name, signal.SIGKILL)
    reap(pid)


def reap(pid):
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def kill(name):
    pid = signal_group(name, signal.SIGKILL)
    if pid:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and pid_of(name):
            time.sleep(0.05)
        reap(pid)


def stop_all(quiet=False):
    for name in reversed(ORDER):
        if pid_of(name):
            if not quiet:
                log(f"stopping {name}")
            stop(name)
    # The private RabbitMQ node leaves its epmd registration; nothing else.


# ---------------------------------------------------------------- REST


class Api:
    def __init__(self):
        self.token = None
        self.catalog = None

    def request(self, method, target, body=None, headers=None, expect=(200, 201, 202, 204), token=True):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(target, data=data, method=method)
        req.add_header("Content-Type", "application/json")
        req.add_header("Accept", "application/json")
        if token:
            req.add_header("X-Auth-Token", self.login())
        for k, v in (headers or {}).items():
            req.add_header(k, v)
        try:
            with urllib.request.urlopen(req, timeout=120) as resp:
                text = resp.read()
                return resp.status, (json.loads(text) if text else None), resp.headers
        except urllib.error.HTTPError as e:
            text = e.read()
            if e.code in expect:
                return e.code, (json.loads(text) if text else None), e.headers
            fail(f"{method} {target} answered {e.code}: {text[:500]!r}")

    def login(self):
        if self.token:
            return self.token
        body = {"auth": {"identity": {"methods": ["password"], "password": {"user": {
            "name": "admin", "domain": {"name": "Default"}, "password": PASSWORD}}},
            "scope": {"project": {"name": "admin", "domain": {"name": "Default"}}}}}
        _, reply, headers = self.request("POST", url("keystone", "/v3/auth/tokens"), body, token=False)
        self.token = headers["X-Subject-Token"]
        self.catalog = reply["token"]["catalog"]
        return self.token

    def find(self, kind, name, extra=""):
        _, reply, _ = self.request("GET", url("keystone", f"/v3/{kind}?name={name}{extra}"))
        items = reply[kind]
        return items[0]["id"] if items else None


def register():
    """Projects, users, roles, services and endpoints in Keystone
    (idempotent)."""
    api = Api()
    keystone = lambda p: url("keystone", p)  # noqa: E731
    project = api.find("projects", "service")
    if not project:
        _, reply, _ = api.request("POST", keystone("/v3/projects"),
                                  {"project": {"name": "service", "domain_id": "default"}})
        project = reply["project"]["id"]
    roles = {}
    for role in ("admin", "service", "member", "reader"):
        rid = api.find("roles", role)
        if not rid:
            _, reply, _ = api.request("POST", keystone("/v3/roles"), {"role": {"name": role}})
            rid = reply["role"]["id"]
        roles[role] = rid
    for user in SERVICE_USERS:
        uid = api.find("users", user)
        if not uid:
            _, reply, _ = api.request("POST", keystone("/v3/users"), {"user": {
                "name": user, "password": PASSWORD, "domain_id": "default", "default_project_id": project}})
            uid = reply["user"]["id"]
        for role in ("admin", "service"):
            api.request("PUT", keystone(f"/v3/projects/{project}/users/{uid}/roles/{roles[role]}"))
    services = [
        ("nova", "compute", url("nova-api", "/v2.1")),
        ("placement", "placement", url("placement")),
        ("cinderv3", "volumev3", url("cinder-api", "/v3/$(project_id)s")),
        ("cinder", "block-storage", url("cinder-api", "/v3/$(project_id)s")),
        ("glance", "image", url("image")),
        ("neutron", "network", url("network")),
    ]
    _, existing, _ = api.request("GET", keystone("/v3/services"))
    by_type = {s["type"]: s["id"] for s in existing["services"]}
    for name, kind, endpoint in services:
        sid = by_type.get(kind)
        if not sid:
            _, reply, _ = api.request("POST", keystone("/v3/services"), {"service": {"name": name, "type": kind}})
            sid = reply["service"]["id"]
        _, eps, _ = api.request("GET", keystone(f"/v3/endpoints?service_id={sid}"))
        have = {e["interface"] for e in eps["endpoints"]}
        for interface in ("public", "internal", "admin"):
            if interface not in have:
                api.request("POST", keystone("/v3/endpoints"), {"endpoint": {
                    "service_id": sid, "interface": interface, "url": endpoint, "region_id": REGION}})
    write(path("run", "registered"), "yes")


def wait_until(what, check, within, name=None):
    deadline = time.monotonic() + within
    last = None
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except SystemExit as e:  # a failed request: keep trying until the deadline
            last = e
        except Exception as e:  # noqa: BLE001 -- retried until the deadline
            last = e
        if name and not pid_of(name):
            fail(f"{name} exited while waiting for {what}:\n{tail(name)}")
        time.sleep(0.5)
    fail(f"{what} not reached after {within} s (last: {last})" + (f":\n{tail(name)}" if name else ""))


def ready():
    """Every compute up and mapped, Placement holds a provider per compute,
    cinder-volume up."""
    api = Api()

    def computes_up():
        _, reply, _ = api.request("GET", url("nova-api", "/v2.1/os-services?binary=nova-compute"),
                                  headers={"OpenStack-API-Version": "compute 2.53"})
        up = {s["host"] for s in reply["services"] if s["state"] == "up" and s["status"] == "enabled"}
        return set(COMPUTES) <= up

    wait_until("every nova-compute up", computes_up, 120)
    run([bin_("nova-manage"), "--config-file", path("etc", "nova.conf"), "cell_v2", "discover_hosts"])

    def hypervisors():
        _, reply, _ = api.request("GET", url("nova-api", "/v2.1/os-hypervisors"),
                                  headers={"OpenStack-API-Version": "compute 2.53"})
        return len(reply["hypervisors"]) >= len(COMPUTES)

    wait_until("every compute a hypervisor", hypervisors, 60)

    def providers():
        _, reply, _ = api.request("GET", url("placement", "/resource_providers"),
                                  headers={"OpenStack-API-Version": "placement 1.14"})
        return len(reply["resource_providers"]) >= len(COMPUTES)

    wait_until("a resource provider per compute", providers, 60)

    def volume_up():
        project = api.find("projects", "admin")
        _, reply, _ = api.request("GET", url("cinder-api", f"/v3/{project}/os-services"))
        return any(s["binary"] == "cinder-volume" and s["state"] == "up" for s in reply["services"])

    wait_until("cinder-volume up", volume_up, 90)


def start(names=None):
    started = time.monotonic()
    if not os.path.exists(path("etc", "nova.conf")):
        fail(f"no stack set up in {STATE}: run `stack.py setup` first")
    for name in names or ORDER:
        t0 = time.monotonic()
        launch(name)
        port = processes()[name].get("port")
        if port:
            wait_port(name, port)
        if name == "rabbitmq":
            rabbit_user()
        if name == "keystone" and not os.path.exists(path("run", "registered")):
            wait_until("keystone answers", lambda: Api().login(), 60, "keystone")
            register()
        log(f"{name} started ({time.monotonic() - t0:.1f} s)")
    if not names:
        ready()
        log(f"stack ready in {time.monotonic() - started:.1f} s")


def rabbitmqctl(*args):
    env = dict(os.environ, HOME=path("rabbitmq"), RABBITMQ_NODENAME=RABBIT_NODE)
    return subprocess.run(["/usr/lib/rabbitmq/bin/rabbitmqctl", "-n", RABBIT_NODE, *args], env=env,
                          capture_output=True, text=True)


def rabbit_user():
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if rabbitmqctl("await_startup").returncode == 0:
            break
        time.sleep(0.5)
    else:
        fail(f"the private RabbitMQ node does not start:\n{tail('rabbitmq')}")
    if "ros" not in rabbitmqctl("list_users").stdout.split():
        for args in (("add_user", "ros", PASSWORD), ("set_permissions", "ros", ".*", ".*", ".*")):
            proc = rabbitmqctl(*args)
            if proc.returncode != 0:
                fail(f"rabbitmqctl {' '.join(args)}: {proc.stdout}{proc.stderr}")


def status():
    for name in ORDER:
        pid = pid_of(name)
        print(f"{name:18} {'running ' + str(pid) if pid else 'stopped'}")


def environment():
    lines = {
        "OS_AUTH_URL": url("keystone", "/v3"),
        "OS_USERNAME": "admin",
        "OS_PASSWORD": PASSWORD,
        "OS_PROJECT_NAME": "admin",
        "OS_USER_DOMAIN_NAME": "Default",
        "OS_PROJECT_DOMAIN_NAME": "Default",
        "OS_REGION_NAME": REGION,
        "OS_SERVICE_USERNAME": "nova",
        "OS_SERVICE_PROJECT_NAME": "service",
        "OS_IDENTITY_API_VERSION": "3",
        "INSTANCEHA_REAL_OPENSTACK_IMAGE": "6c1b6f3e-4a0c-4b9e-9c7a-1f5d3c2b0a01",
        "INSTANCEHA_REAL_OPENSTACK_COMPUTES": ",".join(COMPUTES),
        "INSTANCEHA_REAL_OPENSTACK_CTL": control(),
        "INSTANCEHA_REAL_OPENSTACK_DIR": STATE,
    }
    for k, v in lines.items():
        print(f"export {k}='{v}'")


def control():
    """The command line that controls this stack: with the variables that
    place it when they are set (`env` as the program, so that it splits on
    whitespace)."""
    placing = [f"{k}={os.environ[k]}" for k in ("INSTANCEHA_REAL_OPENSTACK_PORT_OFFSET",
                                                 "INSTANCEHA_REAL_OPENSTACK_DIR",
                                                 "INSTANCEHA_REAL_OPENSTACK_VENV") if os.environ.get(k)]
    prefix = ["env"] + placing if placing else []
    return " ".join(prefix + [sys.executable, os.path.abspath(__file__)])


def down():
    stop_all()
    for name in DATABASES:
        subprocess.run(PG_ADMIN + ["-c", f"DROP DATABASE IF EXISTS {db_name(name)} WITH (FORCE)"],
                       capture_output=True)
    log("stack down, databases dropped")


def main():
    args = sys.argv[1:]
    if not args:
        print(__doc__)
        sys.exit(2)
    verb, names = args[0], args[1:]
    known = processes()
    for n in names:
        if n not in known:
            fail(f"unknown process {n!r}: one of {', '.join(ORDER)}")
    if verb == "up":
        t0 = time.monotonic()
        setup()
        start()
        log(f"up in {time.monotonic() - t0:.1f} s")
    elif verb == "setup":
        setup()
    elif verb == "start":
        start(names or None)
    elif verb == "stop":
        for n in reversed(names or ORDER):
            stop(n)
    elif verb == "kill":
        if not names:
            fail("kill needs process names")
        for n in names:
            kill(n)
    elif verb == "status":
        status()
    elif verb == "env":
        environment()
    elif verb == "down":
        down()
    else:
        fail(f"unknown verb {verb!r}: up, setup, start, stop, kill, status, env, down")


if __name__ == "__main__":
    main()
