"""Test images without a container engine: a root file system made into an
OCI layout with umoci, a test registry (Debian's docker-registry) on
127.0.0.1 and pushes with skopeo. Shared by the image end-to-end tests."""

import hashlib
import io
import json
import os
import shutil
import socket
import subprocess
import tarfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TOOLS = ["bwrap", "skopeo", "umoci"]
REGISTRY = "/usr/bin/docker-registry"


def missing_tools():
    out = [t for t in TOOLS if shutil.which(t) is None]
    if not os.path.exists(REGISTRY):
        out.append(REGISTRY)
    if os.geteuid() != 0:
        out.append("root")
    return out


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Registry:
    """docker-registry serving a temporary storage on 127.0.0.1."""

    def __init__(self, dir_):
        self.port = free_port()
        self.host = f"127.0.0.1:{self.port}"
        storage = os.path.join(dir_, "registry")
        os.makedirs(storage, exist_ok=True)
        config = os.path.join(dir_, "registry.yml")
        with open(config, "w") as f:
            f.write("version: 0.1\nlog:\n  level: error\n"
                    f"storage:\n  filesystem:\n    rootdirectory: {storage}\n"
                    "  delete:\n    enabled: true\n"
                    f"http:\n  addr: {self.host}\n")
        self.log = open(os.path.join(dir_, "registry.log"), "w")
        self.proc = subprocess.Popen([REGISTRY, "serve", config],
                                     stdout=self.log, stderr=self.log)
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("the test registry did not start")

    def stop(self):
        self.proc.kill()
        self.proc.wait()
        self.log.close()

    def push(self, layout_ref, name):
        """Pushes oci:LAYOUT:TAG to NAME:TAG on this registry."""
        subprocess.run(["skopeo", "copy", "--quiet",
                        "--dest-tls-verify=false", f"oci:{layout_ref}",
                        f"docker://{self.host}/{name}"], check=True)
        return f"{self.host}/{name}"


def make_image(dir_, name, marker):
    """An OCI layout DIR/NAME holding tag 1: a root file system with the
    host's python and /etc/sv-image-marker = MARKER. Returns "DIR/NAME:1"."""
    layout = os.path.join(dir_, name)
    bundle = os.path.join(dir_, name + ".bundle")
    subprocess.run(["umoci", "init", "--layout", layout], check=True)
    subprocess.run(["umoci", "new", "--image", f"{layout}:1"], check=True)
    subprocess.run(["umoci", "unpack", "--rootless", "--image",
                    f"{layout}:1", bundle], check=True,
                   capture_output=True)
    subprocess.run([os.path.join(HERE, "make_rootfs.sh"),
                    os.path.join(bundle, "rootfs"), marker], check=True)
    subprocess.run(["umoci", "repack", "--image", f"{layout}:1", bundle],
                   check=True)
    subprocess.run(["umoci", "config", "--image", f"{layout}:1",
                    "--config.env", "SV_IMAGE_ENV=" + marker,
                    "--config.env", "PATH=/usr/local/bin:/usr/bin:/bin"],
                   check=True)
    subprocess.run(["umoci", "gc", "--layout", layout], check=True)
    shutil.rmtree(bundle)
    return f"{layout}:1"


def _blob(layout, data):
    digest = hashlib.sha256(data).hexdigest()
    os.makedirs(os.path.join(layout, "blobs", "sha256"), exist_ok=True)
    with open(os.path.join(layout, "blobs", "sha256", digest), "wb") as f:
        f.write(data)
    return {"digest": "sha256:" + digest, "size": len(data)}


def make_raw_image(dir_, name, layers, env=("PATH=/usr/bin:/bin",)):
    """An OCI layout DIR/NAME (tag 1) of LAYERS, each a list of
    (tarfile.TarInfo, bytes or None), with config Env ENV: hostile ones
    included."""
    layout = os.path.join(dir_, name)
    os.makedirs(layout, exist_ok=True)
    with open(os.path.join(layout, "oci-layout"), "w") as f:
        json.dump({"imageLayoutVersion": "1.0.0"}, f)
    descs, diffs = [], []
    for entries in layers:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
            for info, data in entries:
                t.addfile(info, io.BytesIO(data) if data is not None else None)
        raw = buf.getvalue()
        d = _blob(layout, raw)
        d["mediaType"] = "application/vnd.oci.image.layer.v1.tar"
        descs.append(d)
        diffs.append(d["digest"])
    config = _blob(layout, json.dumps({
        "architecture": "amd64", "os": "linux",
        "config": {"Env": list(env)},
        "rootfs": {"type": "layers", "diff_ids": diffs}}).encode())
    config["mediaType"] = "application/vnd.oci.image.config.v1+json"
    manifest = _blob(layout, json.dumps({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": config, "layers": descs}).encode())
    manifest["mediaType"] = "application/vnd.oci.image.manifest.v1+json"
    manifest["annotations"] = {"org.opencontainers.image.ref.name": "1"}
    with open(os.path.join(layout, "index.json"), "w") as f:
        json.dump({"schemaVersion": 2, "manifests": [manifest]}, f)
    return f"{layout}:1"


def entry(name, type_=tarfile.REGTYPE, data=b"", link="", mode=0o644):
    info = tarfile.TarInfo(name)
    info.type = type_
    info.mode = mode
    info.linkname = link
    info.size = len(data) if type_ == tarfile.REGTYPE else 0
    return (info, data if type_ == tarfile.REGTYPE else None)


class SlowProxy:
    """A plain-HTTP proxy on 127.0.0.1 in front of a registry that waits
    DELAY seconds before answering each blob request: a slow pull."""

    def __init__(self, upstream, delay):
        import http.client
        import http.server
        import threading

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def forward(self, body):
                if "/blobs/" in self.path:
                    time.sleep(delay)
                conn = http.client.HTTPConnection(upstream, timeout=60)
                conn.putrequest(self.command, self.path, skip_host=True,
                                skip_accept_encoding=True)
                conn.putheader("Host", upstream)
                for k, v in self.headers.items():  # each Accept kept
                    if k.lower() not in ("host", "connection"):
                        conn.putheader(k, v)
                conn.endheaders()
                resp = conn.getresponse()
                data = resp.read()
                self.send_response(resp.status)
                for k, v in resp.getheaders():
                    if k.lower() not in ("connection", "transfer-encoding",
                                         "content-length"):
                        self.send_header(k, v)
                self.send_header("Content-Length",
                                 str(resp.getheader("Content-Length", "0")
                                     if not body else len(data)))
                self.end_headers()
                if body:
                    self.wfile.write(data)
                conn.close()

            def do_GET(self):
                self.forward(True)

            def do_HEAD(self):
                self.forward(False)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                                      Handler)
        self.server.daemon_threads = True
        self.host = f"127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever,
                                       daemon=True)
        self.thread.start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()
