"""Read-only stand-ins for the two OpenStack APIs the real stack runs
without: the image API (Glance) and the network API (Neutron).

Nova needs an image API to boot from an image (a version document, image
show, the image schema) and a network API for every build, evacuation and
delete, even for servers booted with ``"networks": "none"``. These answer
with one fixed image and with "no ports, no networks": enough for Nova's
fake virt driver, and nothing the engine under test talks to.

Usage: python standins.py --image-port P --network-port Q
"""

import argparse
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

IMAGE_ID = "6c1b6f3e-4a0c-4b9e-9c7a-1f5d3c2b0a01"
IMAGE = {
    "id": IMAGE_ID,
    "name": "cirros-fake",
    "status": "active",
    "visibility": "public",
    "protected": False,
    "os_hidden": False,
    "disk_format": "qcow2",
    "container_format": "bare",
    "size": 21430272,
    "virtual_size": 117440512,
    "min_disk": 0,
    "min_ram": 0,
    "checksum": "443b7623e27ecf03dc9e01ee93f67afe",
    "os_hash_algo": "sha512",
    "os_hash_value": "0" * 128,
    "owner": None,
    "tags": [],
    "created_at": "2026-01-01T00:00:00Z",
    "updated_at": "2026-01-01T00:00:00Z",
    "self": f"/v2/images/{IMAGE_ID}",
    "file": f"/v2/images/{IMAGE_ID}/file",
    "schema": "/v2/schemas/image",
}


class StandIn(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    api = "image"

    def log_message(self, fmt, *args):  # quiet: one line per request
        print(f"{self.api} {self.command} {self.path} -> {fmt % args}", flush=True)

    def reply(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def base(self):
        host = self.headers.get("Host", "127.0.0.1")
        return f"http://{host}"

    def route(self):
        path = self.path.split("?", 1)[0].rstrip("/")
        if self.api == "image":
            return self.image(path)
        return self.network(path)

    def image(self, path):
        if path in ("", "/v2") and self.command == "GET":
            return 200, {"versions": [{"id": "v2.16", "status": "CURRENT",
                                       "links": [{"rel": "self", "href": f"{self.base()}/v2/"}]}]}
        if path == "/v2/images" and self.command == "GET":
            return 200, {"images": [IMAGE], "first": "/v2/images", "schema": "/v2/schemas/images"}
        if path == f"/v2/images/{IMAGE_ID}" and self.command == "GET":
            return 200, IMAGE
        if path.startswith("/v2/schemas/image") and self.command == "GET":
            return 200, {"name": "image", "properties": {k: {} for k in IMAGE},
                         "additionalProperties": {"type": "string"}}
        return 404, {"message": f"{path} not found", "code": "404 Not Found"}

    def network(self, path):
        if path == "" and self.command == "GET":
            return 200, {"versions": [{"id": "v2.0", "status": "CURRENT",
                                       "links": [{"rel": "self", "href": f"{self.base()}/v2.0/"}]}]}
        empty = {
            "/v2.0/extensions": "extensions",
            "/v2.0/ports": "ports",
            "/v2.0/networks": "networks",
            "/v2.0/subnets": "subnets",
            "/v2.0/floatingips": "floatingips",
            "/v2.0/security-groups": "security_groups",
        }
        if self.command == "GET" and path in empty:
            return 200, {empty[path]: []}
        return 404, {"NeutronError": {"type": "HTTPNotFound", "message": f"{path} not found", "detail": ""}}

    def handle_any(self):
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        status, body = self.route()
        self.reply(status, body)

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = handle_any


def serve(api, port):
    handler = type(f"{api}StandIn", (StandIn,), {"api": api})
    server = ThreadingHTTPServer(("127.0.0.1", port), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return thread


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--image-port", type=int, required=True)
    parser.add_argument("--network-port", type=int, required=True)
    args = parser.parse_args()
    threads = [serve("image", args.image_port), serve("network", args.network_port)]
    print(f"stand-ins: image on {args.image_port}, network on {args.network_port}", flush=True)
    for t in threads:
        t.join()


if __name__ == "__main__":
    main()
