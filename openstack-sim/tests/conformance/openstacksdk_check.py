#!/usr/bin/env python3
"""Drives openstack-sim with the official openstacksdk, the way an HA tool would.

It authenticates from a clouds.yaml (OS_CLIENT_CONFIG_FILE, cloud "sim"), lists the
servers of a host across pages, locks, fences and evacuates, polls, reads
migrations and instance actions, shows a volume and its attachments, clears a stale
attachment and evacuates a boot-from-volume server. The simulator's control API
(SIM_BASE_URL) is used only to cut a host's power and to know what to expect.
Exits non-zero at the first mismatch.
"""

import json
import os
import sys
import time
import urllib.request

import openstack
from openstack import exceptions

BASE = os.environ["SIM_BASE_URL"]
HOST = os.environ.get("SIM_FAILED_HOST", "compute-01")
checks = 0


def check(condition, what):
    global checks
    if not condition:
        print(f"FAILED: {what}", file=sys.stderr)
        sys.exit(1)
    checks += 1
    print(f"ok: {what}")


def control(method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"{BASE}{path}", data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req) as resp:
        return json.loads(resp.read() or b"null")


def wait_for(predicate, what, timeout=60.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    check(False, f"timed out waiting for {what}")


def evacuated(conn, server_id, source):
    def done():
        server = conn.compute.get_server(server_id)
        migrations = list(conn.compute.migrations(instance_uuid=server_id, migration_type="evacuation"))
        finished = migrations and migrations[0].status in ("done", "completed")
        if finished and server.compute_host != source and server.task_state is None:
            return server, migrations
        if migrations and migrations[0].status in ("error", "failed"):
            check(False, f"evacuation of {server_id} failed: {migrations[0].status}")
        return None
    return wait_for(done, f"evacuation of {server_id}")


def main():
    conn = openstack.connect(cloud="sim")
    token = conn.authorize()
    check(bool(token) and len(token) > 100, "password login returned a fernet-like token")

    state = control("GET", "/sim/state")
    expected = sorted(i["name"] for i in state["instances"] if i["host"] == HOST)
    before = control("GET", "/sim/requests")["last_seq"]
    # openstacksdk sends the `host` query parameter for `compute_host`; a `host=` keyword is
    # also sent but then applied client-side to the (request-only) `host` attribute, which
    # empties the result against a real Nova just the same.
    servers = list(conn.compute.servers(details=True, all_projects=True, compute_host=HOST, limit=2))
    check(sorted(s.name for s in servers) == expected,
          f"servers on {HOST} across pages: {len(servers)} of {len(expected)}")
    pages = [r for r in control("GET", f"/sim/requests?since={before}")["requests"]
             if r["path"].endswith("/servers/detail")]
    check(len(pages) >= 2 and any("marker=" in (r["query"] or "") for r in pages),
          f"the SDK followed servers_links ({len(pages)} page requests)")
    check(all(s.compute_host == HOST for s in servers), "OS-EXT-SRV-ATTR:host parsed")

    web = next(s for s in servers if s.name == "web-1")
    conn.compute.lock_server(web, locked_reason="instance-ha evacuation")
    web = conn.compute.get_server(web.id)
    check(web.is_locked and web.locked_reason == "instance-ha evacuation", "lock with locked_reason")

    control("POST", f"/sim/hosts/{HOST}/power-off")
    services = list(conn.compute.services(host=HOST, binary="nova-compute"))
    check(len(services) == 1, "one nova-compute service on the failed host")
    service = conn.compute.update_service_forced_down(services[0], HOST, "nova-compute", True)
    service = conn.compute.disable_service(services[0], HOST, "nova-compute", disabled_reason="instance-ha: host failed")
    service = next(iter(conn.compute.services(host=HOST, binary="nova-compute")))
    check(service.state == "down" and service.is_forced_down and service.status == "disabled",
          "service forced down and disabled")

    mark = control("GET", "/sim/requests")["last_seq"]
    conn.compute.evacuate_server(web)
    call = next(r for r in control("GET", f"/sim/requests?since={mark}")["requests"] if r["action"] == "evacuate")
    minor = int(call["microversion"].split(".")[1])
    check(call["status"] == 200, f"evacuate accepted at {call['microversion']}")
    web, migrations = evacuated(conn, web.id, HOST)
    # from 2.95 an evacuated server ends stopped
    expected_status = "SHUTOFF" if minor >= 95 else "ACTIVE"
    check(web.status == expected_status and web.compute_host != HOST,
          f"web-1 evacuated to {web.compute_host}, {web.status}")
    check(len(migrations) == 1 and migrations[0].migration_type == "evacuation"
          and migrations[0].source_compute == HOST and migrations[0].dest_compute == web.compute_host,
          "migration record of the evacuation")
    actions = list(conn.compute.server_actions(web))
    evac = next(a for a in actions if a.action == "evacuate")
    detail = conn.compute.get_server_action(evac.request_id, web)
    events = {e["event"]: e["result"] for e in detail.events}
    check(events.get("rebuild_server") == "Success" and events.get("compute_rebuild_instance") == "Success",
          "instance action events")
    conn.compute.unlock_server(web)
    check(not conn.compute.get_server(web.id).is_locked, "unlock")

    db = next(s for s in servers if s.name == "db-1")
    nova_attachments = list(conn.compute.volume_attachments(db))
    root = next(a for a in nova_attachments if a.device == "/dev/vda")
    volume = conn.block_storage.get_volume(root.volume_id)
    check(volume.status == "in-use" and volume.is_multiattach is False and volume.is_bootable,
          "root volume shows in-use, not multiattach, bootable")
    attachments = list(conn.block_storage.attachments(volume_id=volume.id))
    check(len(attachments) == 2, "the stale-attachment volume has two attachments")
    bdm_attachment = root.attachment_id
    stale = [a for a in attachments if a.id != bdm_attachment]
    check(len(stale) == 1 and bdm_attachment in [a.id for a in attachments],
          "Nova's BDM references one attachment, the other is stale")
    try:
        conn.block_storage.delete_attachment(bdm_attachment, ignore_missing=False)
        check(False, "deleting the BDM's attachment without a service token must be refused")
    except exceptions.ConflictException as e:
        check("using the Compute API" in str(e), "409 'Detach volume ... using the Compute API'")
    conn.block_storage.delete_attachment(stale[0].id, ignore_missing=False)
    check(len(list(conn.block_storage.attachments(volume_id=volume.id))) == 1, "stale attachment removed")

    conn.compute.evacuate_server(db)
    db, _ = evacuated(conn, db.id, HOST)
    volume = conn.block_storage.get_volume(volume.id)
    check(volume.status == "in-use" and len(volume.attachments) == 1
          and volume.attachments[0]["host_name"] == db.compute_host,
          f"root volume re-attached on {db.compute_host}")

    print(f"openstacksdk conformance: {checks} passed, 0 failed")


if __name__ == "__main__":
    main()
