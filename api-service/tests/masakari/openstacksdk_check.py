#!/usr/bin/env python3
"""Drives instanceha-api's Masakari-compatible REST API with openstacksdk's
``instance_ha`` proxy, as operators' scripts and masakari-monitors do.

The cloud ``ha`` comes from OS_CLIENT_CONFIG_FILE: Keystone is
openstack-sim's and ``instance_ha_endpoint_override`` points at the REST
API. SIM_BASE_URL is the simulator's control API, used only to cut a
host's power before reporting it failed. Segments, hosts and notifications
are created, listed, shown, updated and deleted; a failed host is reported
with the exact call and body masakari-monitors' hostmonitor sends, and the
recovery is followed to its end with its vmoves. Exits non-zero at the
first mismatch.
"""

import datetime
import json
import os
import re
import sys
import time
import urllib.request

import openstack
from openstack import exceptions

SIM = os.environ["SIM_BASE_URL"]
checks = 0
# oslo.middleware's request id (ID_FORMAT), as Masakari's pipeline sends it.
REQUEST_ID = re.compile(
    r"^req-[a-f0-9]{8}-[a-f0-9]{4}-[a-f0-9]{4}-[a-f0-9]{4}-[a-f0-9]{12}$")


def check(condition, what):
    global checks
    if not condition:
        print(f"FAILED: {what}", file=sys.stderr)
        sys.exit(1)
    checks += 1
    print(f"ok: {what}")


def refused(call, status, what):
    """The call fails with HTTP `status`."""
    try:
        call()
    except exceptions.HttpException as e:
        check(e.status_code == status, f"{what}: {e.status_code} ({e})")
        # openstacksdk reads x-openstack-request-id into the error.
        check(REQUEST_ID.match(e.request_id or ""),
              f"{what}: request id {e.request_id!r}")
        return e
    check(False, f"{what}: no error")


def power_off(host):
    request = urllib.request.Request(
        f"{SIM}/sim/hosts/{host}/power-off", data=b"", method="POST")
    with urllib.request.urlopen(request) as response:
        response.read()


def hostmonitor_event(hostname):
    """masakarimonitors/hostmonitor/host_handler/handle_host.py _make_event
    for a node gone offline whose IPMI power check says it is off."""
    current_time = datetime.datetime.now(
        datetime.timezone.utc).replace(tzinfo=None)  # timeutils.utcnow()
    return {
        'notification': {
            'type': 'COMPUTE_HOST',
            'hostname': hostname,
            'generated_time': current_time,
            'payload': {
                'event': 'STOPPED',
                'cluster_status': 'OFFLINE',
                'host_status': 'NORMAL',
            },
        },
    }


def send_like_masakari_monitors(ha, event):
    """masakarimonitors/ha/masakari.py SendNotification.send_notification,
    one try."""
    return ha.create_notification(
        type=event['notification']['type'],
        hostname=event['notification']['hostname'],
        generated_time=event['notification']['generated_time'],
        payload=event['notification']['payload'])


conn = openstack.connect(cloud="ha")
ha = conn.instance_ha

# ---- request ids ---------------------------------------------------------
# Each answer has a fresh one; a caller's own (a global request id) is kept
# in the log, never echoed.
mine = "req-1b4e28ba-2fa1-41d2-883f-0016d3cca427"
ids = [ha.get("/segments", headers={"X-OpenStack-Request-ID": mine})
       .headers.get("x-openstack-request-id") for _ in range(2)]
check(all(REQUEST_ID.match(i or "") for i in ids) and ids[0] != ids[1]
      and mine not in ids, f"a fresh request id per answer: {ids}")

# ---- segments -----------------------------------------------------------
segment = ha.create_segment(
    name="rack-a", recovery_method="auto", service_type="COMPUTE",
    description="first rack")
check(isinstance(segment.id, int) and segment.uuid,
      f"segment created with id {segment.id} and uuid {segment.uuid}")
check(segment.is_enabled is True, "segments are enabled by default")
check(segment.created_at and segment.updated_at is None,
      "created_at set, updated_at null until changed")
spare = ha.create_segment(
    name="rack-b", recovery_method="reserved_host", service_type="COMPUTE",
    is_enabled=False)
check(spare.is_enabled is False,
      "is_enabled sent at the negotiated microversion 1.2")
shown = ha.get_segment(segment.uuid)
check(shown.name == "rack-a" and shown.description == "first rack",
      "segment shown by uuid")
updated = ha.update_segment(spare.uuid, description="spares",
                            is_enabled=True)
check(updated.description == "spares" and updated.is_enabled is True,
      "segment updated")
check(ha.get_segment(spare.uuid).updated_at is not None,
      "updated_at set after an update")
names = [s.name for s in ha.segments()]
check(names == ["rack-b", "rack-a"], f"segments newest first: {names}")
names = [s.name for s in ha.segments(sort_key="name", sort_dir="asc")]
check(names == ["rack-a", "rack-b"], f"segments sorted by name: {names}")
names = [s.name for s in ha.segments(recovery_method="reserved_host")]
check(names == ["rack-b"], "segments filtered by recovery_method")
names = [s.name for s in ha.segments(is_enabled=True, service_type="COMPUTE")]
check(len(names) == 2, "segments filtered by enabled and service_type")
# With a limit openstacksdk pages on, passing the last id as the marker,
# until a page comes back empty.
paged = list(ha.segments(limit=1, sort_key="name", sort_dir="asc"))
check([s.name for s in paged] == ["rack-a", "rack-b"],
      "segments paged one by one by limit and marker")
after = list(ha.segments(marker=paged[0].id, sort_key="name", sort_dir="asc"))
check([s.name for s in after] == ["rack-b"], "segments after a marker")
refused(lambda: ha.get_segment("0c0c0c0c-0000-4000-8000-000000000000"),
        404, "an unknown segment is not found")
refused(lambda: ha.create_segment(name="rack-a", recovery_method="auto",
                                  service_type="COMPUTE"),
        409, "segment names are unique")
refused(lambda: ha.create_segment(name="x", recovery_method="fastest",
                                  service_type="COMPUTE"),
        400, "an unknown recovery method is refused")

# ---- hosts --------------------------------------------------------------
h1 = ha.create_host(segment.uuid, name="compute-01", type="COMPUTE",
                    control_attributes="SSH")
h2 = ha.create_host(segment.uuid, name="compute-02", type="COMPUTE",
                    control_attributes="SSH")
extra = ha.create_host(segment.uuid, name="compute-03", type="COMPUTE",
                       control_attributes="SSH", reserved=True)
check(h1.uuid and h1.failover_segment_id == segment.uuid,
      "hosts created in the segment")
check(extra.reserved is True, "a reserved host")
hosts = sorted(h.name for h in ha.hosts(segment.uuid))
check(hosts == ["compute-01", "compute-02", "compute-03"], "hosts listed")
hosts = [h.name for h in ha.hosts(segment.uuid, reserved=True)]
check(hosts == ["compute-03"], "hosts filtered by reserved")
shown = ha.get_host(h2.uuid, segment.uuid)
check(shown.name == "compute-02" and shown.on_maintenance is False,
      "host shown under its segment")
refused(lambda: ha.get_host(h2.uuid, spare.uuid), 404,
        "a host is not found under another segment")
updated = ha.update_host(extra.uuid, segment.uuid, reserved=False,
                         control_attributes="IPMI")
check(updated.reserved is False and updated.control_attributes == "IPMI",
      "host updated")
ha.delete_host(extra.uuid, segment.uuid, ignore_missing=False)
refused(lambda: ha.get_host(extra.uuid, segment.uuid), 404,
        "a deleted host is gone")
refused(lambda: ha.create_host(segment.uuid, name="compute-01",
                               type="COMPUTE", control_attributes="SSH"),
        409, "host names are unique")

# ---- a host failure, reported as masakari-monitors reports it ----------
power_off("compute-01")
event = hostmonitor_event("compute-01")
notification = send_like_masakari_monitors(ha, event)
check(notification.notification_uuid and notification.status == "new",
      f"hostmonitor notification accepted: {notification.notification_uuid}")
check(notification.source_host_uuid == h1.uuid,
      "the notification names its source host")
# Every other cluster member reports the same failure: a duplicate, 409,
# which masakari-monitors treats as final.
refused(lambda: send_like_masakari_monitors(ha, hostmonitor_event("compute-01")),
        409, "the second member's report is a duplicate")
refused(lambda: ha.create_notification(
            type="COMPUTE_HOST", hostname="compute-99",
            generated_time=datetime.datetime.now().isoformat(),
            payload={"event": "STOPPED"}),
        400, "a report for an unknown host is refused")

uuid = notification.notification_uuid
deadline = time.time() + 120
while True:
    current = ha.get_notification(uuid)
    if current.status in ("finished", "failed", "ignored"):
        break
    if time.time() > deadline:
        check(False, f"notification still {current.status}")
    time.sleep(0.1)
check(current.status == "finished", f"hostmonitor notification recovered: "
      f"{current.status}")

vmoves = list(ha.vmoves(uuid))
check(len(vmoves) == 2, f"two vmoves: {[v.server_name for v in vmoves]}")
for vmove in vmoves:
    check(vmove.status == "succeeded" and vmove.type == "evacuation"
          and vmove.source_host == "compute-01"
          and vmove.dest_host == "compute-02"
          and vmove.start_time and vmove.end_time,
          f"vmove of {vmove.server_name} succeeded to {vmove.dest_host}")
one = ha.get_vmove(vmoves[0].uuid, uuid)
check(one.server_id == vmoves[0].server_id, "vmove shown")
succeeded = list(ha.vmoves(uuid, status="succeeded", type="evacuation"))
check(len(succeeded) == 2, "vmoves filtered by status and type")

# The progress, at Masakari's microversion 1.3 (as python-masakariclient
# asks for it).
latest = openstack.connect(cloud="ha", instance_ha_api_version="1.3")
detailed = latest.instance_ha.get_notification(uuid)
tasks = [t.name for t in detailed.recovery_workflow_details or []]
check("evacuate_instances" in tasks, f"recovery_workflow_details: {tasks}")

listed = [n.notification_uuid for n in ha.notifications(
    source_host_uuid=h1.uuid, type="COMPUTE_HOST", status="finished")]
check(listed == [uuid], "notifications filtered by host, type and status")
since = (datetime.datetime.now(datetime.timezone.utc)
         + datetime.timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%S")
check(list(ha.notifications(generated_since=since)) == [],
      "notifications filtered by generated-since")

# ---- clean up -------------------------------------------------------------
for host in ha.hosts(segment.uuid):
    ha.delete_host(host.uuid, segment.uuid, ignore_missing=False)
ha.delete_segment(segment.uuid, ignore_missing=False)
ha.delete_segment(spare.uuid, ignore_missing=False)
check([s.name for s in ha.segments()] == [], "segments deleted")
refused(lambda: ha.delete_segment(segment.uuid, ignore_missing=False), 404,
        "a deleted segment is gone")

print(f"openstacksdk instance_ha: all {checks} checks passed")
print(json.dumps({"checks": checks}))
