#!/usr/bin/env python3
"""Drives instanceha-api's Masakari-compatible REST API with
python-masakariclient: the commands behind ``openstack segment ...``,
``openstack segment host ...``, ``openstack notification ...`` and
``openstack notification vmove ...``, parsed and run as osc-lib runs them
(``take_action`` on the parsed arguments), with the client
``masakariclient.plugin.make_client`` builds at its default microversion
1.3.

Like the ``openstack`` CLI given ``--os-token`` and ``--os-endpoint``, the
session carries a Keystone token (from the simulator, cloud ``ha`` in
OS_CLIENT_CONFIG_FILE) and the instance-ha endpoint
INSTANCEHA_REST_URL/v1/<project_id>, the project-scoped form devstack
registers for Masakari. SIM_BASE_URL is the simulator's control API, used
only to cut a host's power. Exits non-zero at the first mismatch.
"""

import datetime
import json
import os
import sys
import time
import types
import urllib.request

import openstack.config
from keystoneauth1 import session as ks_session
from keystoneauth1 import token_endpoint
from osc_lib import exceptions as osc_exceptions
from osc_lib.command import command

from masakariclient import plugin
from masakariclient.osc.v1 import host as host_cmd
from masakariclient.osc.v1 import notification as notification_cmd
from masakariclient.osc.v1 import segment as segment_cmd
from masakariclient.osc.v1 import vmove as vmove_cmd

REST = os.environ["INSTANCEHA_REST_URL"]
SIM = os.environ["SIM_BASE_URL"]
checks = 0


def check(condition, what):
    global checks
    if not condition:
        print(f"FAILED: {what}", file=sys.stderr)
        sys.exit(1)
    checks += 1
    print(f"ok: {what}")


def power_off(host):
    request = urllib.request.Request(
        f"{SIM}/sim/hosts/{host}/power-off", data=b"", method="POST")
    with urllib.request.urlopen(request) as response:
        response.read()


# A token from Keystone, as `openstack token issue` gives one.
keystone = openstack.config.OpenStackConfig().get_one("ha").get_session()
token = keystone.get_token()
project_id = keystone.get_project_id()
endpoint = f"{REST}/v1/{project_id}"

# What osc-lib's ClientManager hands to the plugin's make_client.
instance = types.SimpleNamespace(
    session=ks_session.Session(auth=token_endpoint.Token(endpoint, token)),
    interface="public",
    region_name="RegionOne",
    _api_version={plugin.API_NAME: plugin.DEFAULT_HA_API_VERSION},
)
ha = plugin.make_client(instance)
app = types.SimpleNamespace(
    client_manager=types.SimpleNamespace(ha=ha),
    stdout=sys.stdout, stderr=sys.stderr)


def osc(cls, *argv):
    """Runs one `openstack ...` command: rows (a list of dicts) for a
    lister, a dict for a show, None for the others."""
    cmd = cls(app, None)
    parsed = cmd.get_parser("openstack").parse_args([str(a) for a in argv])
    result = cmd.take_action(parsed)
    if result is None:
        return None
    columns, data = result
    if isinstance(cmd, command.Lister):
        return [dict(zip(columns, row)) for row in data]
    return dict(zip(columns, data))


def fails(cls, *argv):
    """The command fails; returns the error."""
    try:
        osc(cls, *argv)
    except Exception as e:  # the CLI prints whatever the command raised
        return e
    check(False, f"{cls.__name__} {argv} did not fail")


check(ha.default_microversion == "1.3", "the client asks for microversion 1.3")

# ---- openstack segment ----------------------------------------------------
a = osc(segment_cmd.CreateSegment, "rack-a", "auto", "COMPUTE",
        "--description", "first rack")
check(a["name"] == "rack-a" and a["uuid"] and a["is_enabled"] is True,
      f"segment create: {a['uuid']}")
b = osc(segment_cmd.CreateSegment, "rack-b", "reserved_host", "COMPUTE",
        "--is_enabled", "False")
check(b["is_enabled"] is False, "segment create --is_enabled False")
rows = osc(segment_cmd.ListSegment)
check([r["name"] for r in rows] == ["rack-b", "rack-a"]
      and all("is_enabled" in r for r in rows),
      "segment list, newest first, with is_enabled")
rows = osc(segment_cmd.ListSegment, "--sort", "name:asc")
check([r["name"] for r in rows] == ["rack-a", "rack-b"],
      "segment list --sort name:asc")
rows = osc(segment_cmd.ListSegment, "--filters", "recovery_method=auto")
check([r["name"] for r in rows] == ["rack-a"],
      "segment list --filters recovery_method=auto")
rows = osc(segment_cmd.ListSegment, "--limit", "1", "--sort", "name:asc")
check([r["name"] for r in rows] == ["rack-a", "rack-b"],
      "segment list --limit 1 (pages by marker)")
shown = osc(segment_cmd.ShowSegment, "rack-a")
check(shown["uuid"] == a["uuid"] and shown["description"] == "first rack"
      and isinstance(shown["id"], int),
      "segment show by name")
updated = osc(segment_cmd.UpdateSegment, "rack-b", "--description", "spares",
              "--is_enabled", "True")
check(updated["description"] == "spares" and updated["is_enabled"] is True
      and updated["updated_at"],
      "segment update")
error = fails(segment_cmd.ShowSegment, "0c0c0c0c-0000-4000-8000-000000000000")
check(isinstance(error, osc_exceptions.CommandError)
      and "not found" in str(error), f"segment show of nothing: {error}")
error = fails(segment_cmd.CreateSegment, "rack-a", "auto", "COMPUTE")
check(getattr(error, "status_code", None) == 409,
      f"segment create of a taken name: {error}")

# ---- openstack segment host -------------------------------------------
h1 = osc(host_cmd.CreateHost, "compute-01", "COMPUTE", "SSH", "rack-a")
osc(host_cmd.CreateHost, "compute-02", "COMPUTE", "SSH", "rack-a")
h3 = osc(host_cmd.CreateHost, "compute-03", "COMPUTE", "SSH", "rack-a",
         "--reserved", "True")
check(h1["failover_segment_id"] == a["uuid"] and h3["reserved"] is True,
      "segment host create")
rows = osc(host_cmd.ListHost, "rack-a", "--sort", "name:asc")
check([r["name"] for r in rows] == ["compute-01", "compute-02", "compute-03"],
      "segment host list --sort name:asc")
rows = osc(host_cmd.ListHost, "rack-a", "--filters", "reserved=True")
check([r["name"] for r in rows] == ["compute-03"],
      "segment host list --filters reserved=True")
shown = osc(host_cmd.ShowHost, "rack-a", "compute-02")
check(shown["name"] == "compute-02" and shown["on_maintenance"] is False,
      "segment host show by names")
updated = osc(host_cmd.UpdateHost, "rack-a", "compute-03", "--reserved",
              "False", "--control_attributes", "IPMI")
check(updated["reserved"] is False and updated["control_attributes"] == "IPMI",
      "segment host update")
osc(host_cmd.DeleteHost, "rack-a", "compute-03")
rows = osc(host_cmd.ListHost, "rack-a")
check(sorted(r["name"] for r in rows) == ["compute-01", "compute-02"],
      "segment host delete")
error = fails(host_cmd.ShowHost, "rack-b", h1["uuid"])
check(isinstance(error, osc_exceptions.CommandError),
      f"segment host show under another segment: {error}")

# ---- openstack notification -------------------------------------------
power_off("compute-01")
generated = datetime.datetime.now(datetime.timezone.utc).strftime(
    "%Y-%m-%dT%H:%M:%S.%f")
payload = json.dumps({"event": "STOPPED", "host_status": "NORMAL",
                      "cluster_status": "OFFLINE"})
n = osc(notification_cmd.CreateNotification, "COMPUTE_HOST", "compute-01",
        generated, payload)
uuid = n["notification_uuid"]
check(uuid and n["type"] == "COMPUTE_HOST"
      and n["source_host_uuid"] == h1["uuid"]
      and "recovery_workflow_details" in n,
      f"notification create: {uuid}")
error = fails(notification_cmd.CreateNotification, "COMPUTE_HOST",
              "compute-01", generated, payload)
check(getattr(error, "status_code", None) == 409,
      f"notification create of a duplicate: {error}")
deadline = time.time() + 120
while True:
    n = osc(notification_cmd.ShowNotification, uuid)
    if n["status"] in ("finished", "failed", "ignored"):
        break
    if time.time() > deadline:
        check(False, f"notification still {n['status']}")
    time.sleep(0.1)
check(n["status"] == "finished", f"notification show: {n['status']}")
tasks = [t["name"] for t in n["recovery_workflow_details"]]
check("evacuate_instances" in tasks
      and all(t["state"] == "SUCCESS" for t in n["recovery_workflow_details"]
              if t["name"] == "evacuate_instances"),
      f"recovery_workflow_details: {tasks}")
rows = osc(notification_cmd.ListNotification, "--filters",
           "type=COMPUTE_HOST;status=finished")
check([r["notification_uuid"] for r in rows] == [uuid],
      "notification list --filters type=COMPUTE_HOST;status=finished")
rows = osc(notification_cmd.ListNotification, "--filters",
           f"source_host_uuid={h1['uuid']}", "--sort", "created_at:asc")
check([r["notification_uuid"] for r in rows] == [uuid],
      "notification list --filters source_host_uuid")

# ---- openstack notification vmove -----------------------------------
rows = osc(vmove_cmd.ListVMove, uuid, "--sort", "start_time:asc")
check(len(rows) == 2 and all(r["status"] == "succeeded"
                             and r["dest_host"] == "compute-02"
                             for r in rows),
      f"notification vmove list: {[r['server_name'] for r in rows]}")
rows = osc(vmove_cmd.ListVMove, uuid, "--filters", "status=failed")
check(rows == [], "notification vmove list --filters status=failed")
vmove = osc(vmove_cmd.ShowVMove, uuid, osc(vmove_cmd.ListVMove, uuid)[0]["uuid"])
check(vmove["type"] == "evacuation" and vmove["source_host"] == "compute-01"
      and vmove["start_time"] and vmove["end_time"],
      "notification vmove show")

# ---- clean up -------------------------------------------------------------
osc(segment_cmd.DeleteSegment, "rack-b")
osc(host_cmd.DeleteHost, "rack-a", "compute-01")
osc(host_cmd.DeleteHost, "rack-a", "compute-02")
osc(segment_cmd.DeleteSegment, "rack-a")
check(osc(segment_cmd.ListSegment) == [], "segment delete")

print(f"python-masakariclient: all {checks} checks passed")
