#!/usr/bin/env python3
"""Distributed grading on loopback: three sv-node processes (local provider,
isolation none) and sv-grade on a `nodes` block as the front.

- a batch spreads over all three nodes;
- kill -9 of one node mid-batch: every line gets exactly one reply, the lost
  ones are provider_unavailable/node_down (or succeed elsewhere), none is
  verifier_error, the batch finishes, the survivors have nothing left;
- a node restarted on its port is used again;
- a SIGSTOP'd node is noticed (heartbeat) and the batch still finishes;
- TLS by default, with a cluster CA and certificates made here by sv-certs
  (one case, sigstop, runs plaintext with --insecure / "insecure": true on
  both ends); a node with a certificate of another CA is refused;
- hostile peers over TLS (raw sockets with certificates made here): frames
  CAF 0.17.6 would crash or stall on, wrong roles, another CA, plaintext,
  a node id or a node name already connected; after each, the node (or
  front) still grades a line for a legit front;
- nodes that --join a front listening for them: a batch spreads over both,
  kill -9 of one mid-batch, and they join the next front on their own.

Usage: e2e_nodes.py SV_NODE SV_GRADE PYTHON [case]
Every wait is bounded; every process is killed at the end.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

SKIP = 77
RUNNER = """import sys, time
time.sleep({sleep})
open(sys.argv[2], "w").write('{{"reward": 1.0}}')
"""


class Cluster:
    def __init__(self, sv_node, sv_grade, python, tmp):
        self.sv_node, self.sv_grade, self.python = sv_node, sv_grade, python
        self.sv_certs = os.path.join(os.path.dirname(sv_node), "sv-certs")
        self.tmp = tmp
        self.procs = []
        # Plaintext (--insecure / "insecure": true) instead of TLS.
        self.insecure = False

    def cert(self, role, name, ca="cluster"):
        """(cert, key, ca) of `name` with `role` under CA `ca`, made by
        sv-certs the first time."""
        d = self.path(ca)
        if not os.path.exists(os.path.join(d, "ca.pem")):
            sv_certs(self, "init", d)
        pem = os.path.join(d, f"{name}.pem")
        if not os.path.exists(pem):
            sv_certs(self, "issue", d, "--role", role, "--name", name)
        return (pem, os.path.join(d, f"{name}.key"),
                os.path.join(d, "ca.pem"))

    def path(self, name):
        return os.path.join(self.tmp, name)

    def start_node(self, name, port=0, capacity=4, tls=None, join=None,
                   expect_start=True, provider=None):
        config = self.path(f"{name}.json")
        root = self.path(f"root-{name}")
        with open(config, "w") as f:
            # No warm pool: this test reads a node's root as the sandboxes
            # it runs (pooled ones would be there before and after work).
            json.dump(provider or {"local": {"root": root, "isolation": "none",
                                             "warm_pool": 0}}, f)
        where = (["--join", join, "--name", name] if join
                 else ["--listen", f"127.0.0.1:{port}"])
        cmd = [self.sv_node, *where,
               "--provider-config", config, "--capacity", str(capacity),
               "--max-sandbox-ttl-s", "3600", "--log-level", "info"]
        if self.insecure:
            cmd += ["--insecure"]
        else:
            tls = tls or self.cert("sv-node", name)
            cmd += ["--tls-cert", tls[0], "--tls-key", tls[1],
                    "--tls-ca", tls[2]]
        log = open(self.path(f"{name}.log"), "a")
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log,
                                text=True)
        self.procs.append(proc)
        deadline = time.monotonic() + 20
        line = ""
        os.set_blocking(proc.stdout.fileno(), False)
        while time.monotonic() < deadline:
            chunk = proc.stdout.readline()
            if chunk:
                line = chunk.strip()
                break
            if proc.poll() is not None:
                break
            time.sleep(0.05)
        if join:
            check(line == f"joining {join} as {name}",
                  f"{name}: no 'joining' line: {line!r}")
            proc.endpoint, proc.root = name, root
            return proc
        check(line.startswith("listening on 127.0.0.1:"),
              f"{name}: no 'listening on' line: {line!r} "
              f"(log: {open(self.path(name + '.log')).read()[-2000:]})")
        proc.endpoint = line.split()[-1]
        proc.root = root
        return proc

    def grade(self, endpoints, n, sleep, tls=None, extra=(), settings=None):
        block = {"nodes": {**({"endpoints": endpoints} if endpoints else {}),
                           **(settings or {})}}
        if self.insecure:
            block["nodes"]["insecure"] = True
        else:
            tls = tls or self.cert("sv-front", "front")
            block["nodes"]["tls"] = {"cert": tls[0], "key": tls[1],
                                     "ca": tls[2]}
        config = self.path("front.json")
        with open(config, "w") as f:
            json.dump(block, f)
        runner = RUNNER.format(sleep=sleep)
        lines = "".join(json.dumps(
            {"id": f"j{i}", "files": {"sandbox_runner.py": runner},
             "request": {}, "exec_timeout_s": 30,
             "config": {"python": self.python}}) + "\n"
            for i in range(1, n + 1))
        summary = self.path("summary.json")
        batch = self.path("batch.jsonl")
        with open(batch, "w") as f:
            f.write(lines)
        proc = subprocess.Popen(
            [self.sv_grade, "--input", batch, "--output", "-",
             "--provider-config", config, "--summary-json", summary,
             "--log-level", "info", *extra],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True)
        return proc

    def close(self):
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.kill(p.pid, signal.SIGCONT)
                except OSError:
                    pass
                p.kill()
            p.wait(timeout=10)


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def finish(proc, timeout=90):
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate(timeout=10)
        raise AssertionError(f"sv-grade did not finish within {timeout} s")
    outcomes = [json.loads(l) for l in out.splitlines()]
    return proc.returncode, outcomes, err


def used(c, endpoint):
    """Whether the last batch's summary shows sandboxes on `endpoint`."""
    if os.environ.get("SV_NODES_NO_SUMMARY"):
        return True
    s = json.load(open(c.path("summary.json")))
    per_node = {n["endpoint"]: n for n in s.get("nodes", [])}
    return per_node.get(endpoint, {}).get("sandboxes", 0) > 0


def leftovers(root):
    if not os.path.isdir(root):
        return []
    return [e for e in os.listdir(root) if not e.startswith(".")]


def uploaded(root):
    """A sandbox of `root` holds a submission's files: its create is done
    and its runner about to start (a create still in flight when its node
    dies is placed again on another node, neither lost nor retried)."""
    for name in leftovers(root):
        try:
            if [e for e in os.listdir(os.path.join(root, name))
                    if not e.startswith(".")]:
                return True
        except OSError:
            pass  # gone meanwhile, or not a directory
    return False


def wait_until(pred, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.05)
    return pred()


def one_reply_each(outcomes, n):
    ids = sorted(o["id"] for o in outcomes)
    check(ids == sorted(f"j{i}" for i in range(1, n + 1)),
          f"not exactly one reply per line: {ids}")


def case_spread_and_kill(c):
    nodes = [c.start_node(f"n{i}") for i in range(3)]
    eps = [p.endpoint for p in nodes]
    # Spread: 12 lines of 0.5 s on 3 x 4 slots.
    rc, out, err = finish(c.grade(eps, 12, 0.5))
    check(rc == 0, f"spread: exit {rc}: {err[-3000:]}")
    one_reply_each(out, 12)
    check(all(o["ok"] for o in out), f"spread: failures: {out}")
    for ep in eps:
        check(used(c, ep), f"node {ep} got no work")
    # kill -9 of one node mid-batch.
    proc = c.grade(eps, 24, 1.5)
    check(wait_until(lambda: uploaded(nodes[1].root), 20),
          "kill: nothing started on the node")
    nodes[1].kill()
    nodes[1].wait(timeout=10)
    rc, out, err = finish(proc)
    check(rc == 0, f"kill: exit {rc}: {err[-3000:]}")
    one_reply_each(out, 24)
    lost = [o for o in out if not o["ok"]]
    for o in lost:
        f = o["failure"]
        check(f["failure_kind"] == "provider_unavailable"
              and f["cause"] == "node_down", f"kill: unexpected failure {o}")
    # retry_infra defaults to 1: what the killed node had runs again
    # elsewhere (attempts 2), unless the retry budget ran out.
    retried = [o for o in out if o["ok"] and o["attempts"] == 2]
    check(len(lost) + len(retried) >= 1,
          "kill: nothing was lost on the killed node")
    for o in retried:
        check(o["node"] != eps[1], f"kill: retried on the dead node: {o}")
    check(sum(o["ok"] for o in out) >= 24 - 4, f"kill: too many lost {lost}")
    check(all(o["node"] in eps for o in out), f"kill: node unnamed: {out}")
    sup = json.load(open(c.path("summary.json")))["supervisor"]
    had_sandbox = [o for o in lost if o["failure"]["state"] != "create"]
    # (>=: a line whose stop was in flight at the kill is ok, its sandbox
    # left to the node too.)
    check(sup["sandboxes_left_to_node"] >= len(had_sandbox) + len(retried),
          f"kill: sandboxes left to the lost node: {sup}")
    check(sup["sandboxes_created"] == sup["sandboxes_stopped"]
          + sup["sandboxes_left_to_node"], f"kill: never stopped: {sup}")
    for p in (nodes[0], nodes[2]):
        check(wait_until(lambda: not leftovers(p.root), 10),
              f"survivor {p.endpoint} has sandboxes left: "
              f"{leftovers(p.root)}")
    # The killed node comes back on its port and is used again.
    port = int(eps[1].rsplit(":", 1)[1])
    back = c.start_node("n1", port=port)
    check(back.endpoint == eps[1], "restarted on another port")
    rc, out, err = finish(c.grade(eps, 12, 0.5))
    check(rc == 0, f"restart: exit {rc}: {err[-3000:]}")
    one_reply_each(out, 12)
    check(all(o["ok"] for o in out), f"restart: failures {out}")
    check(used(c, eps[1]), f"restarted node {eps[1]} unused")


def case_sigstop(c):
    c.insecure = True  # the one plaintext case
    nodes = [c.start_node(f"s{i}") for i in range(3)]
    eps = [p.endpoint for p in nodes]
    proc = c.grade(eps, 12, 3)
    # Uploaded, not just being created: a create in flight when the node
    # stops is placed again elsewhere, neither lost nor retried.
    check(wait_until(lambda: uploaded(nodes[2].root), 20),
          "sigstop: nothing started on the node")
    os.kill(nodes[2].pid, signal.SIGSTOP)
    t0 = time.monotonic()
    rc, out, err = finish(proc)
    took = time.monotonic() - t0
    os.kill(nodes[2].pid, signal.SIGCONT)
    check(rc == 0, f"sigstop: exit {rc}: {err[-3000:]}")
    one_reply_each(out, 12)
    lost = [o for o in out if not o["ok"] or o["attempts"] > 1]
    check(len(lost) >= 1, "sigstop: nothing lost on the stopped node")
    for o in lost:
        if o["ok"]:  # retried elsewhere
            check(o["node"] != eps[2], f"sigstop: retried there: {o}")
            continue
        f = o["failure"]
        check(f["failure_kind"] == "provider_unavailable"
              and f["cause"] == "node_down", f"sigstop: {o}")
        check(o["timings_ms"]["total"] < 1000 * (3 + 5 + 1),
              f"sigstop: noticed too late: {o['timings_ms']}")
    check(took < 20, f"sigstop: batch took {took:.1f} s")


def case_front_lost_and_drain(c):
    nodes = [c.start_node(f"f{i}") for i in range(2)]
    eps = [p.endpoint for p in nodes]
    # kill -9 of the front: the nodes stop every sandbox it created.
    proc = c.grade(eps, 8, 30)
    check(wait_until(lambda: all(leftovers(p.root) for p in nodes), 15),
          "front_lost: the batch did not start on both nodes")
    proc.kill()
    proc.communicate(timeout=10)
    for p in nodes:
        check(wait_until(lambda: not leftovers(p.root), 10),
              f"front_lost: {p.endpoint} kept {leftovers(p.root)}")
    # SIGTERM drains a node: what runs on it finishes (ok), it exits 0,
    # later creates go to the other node.
    proc = c.grade(eps, 16, 1.5)
    check(wait_until(lambda: leftovers(nodes[0].root), 15),
          "drain: nothing started on the node")
    nodes[0].send_signal(signal.SIGTERM)
    rc, out, err = finish(proc)
    check(rc == 0, f"drain: exit {rc}: {err[-3000:]}")
    one_reply_each(out, 16)
    check(all(o["ok"] for o in out), f"drain: failures {out}")
    check(nodes[0].wait(timeout=30) == 0, "drain: node exit status")
    check(not leftovers(nodes[0].root), "drain: sandboxes left")


def case_usage(c):
    def node(*args):
        return subprocess.run([c.sv_node, *args], capture_output=True,
                              text=True, timeout=30)
    p = node("--help")
    check(p.returncode == 0 and "--listen" in p.stdout
          and "listening on" in p.stdout, f"--help: {p.returncode}")
    p = node()
    check(p.returncode == 2 and "--listen" in p.stderr, f"no args: {p}")
    p = node("--listen", "10.0.0.1:0")
    check(p.returncode == 2 and "--insecure" in p.stderr
          and "sv-certs" in p.stderr, f"no TLS: {p}")
    p = node("--listen", "127.0.0.1:0")
    check(p.returncode == 2 and "sv-certs" in p.stderr, f"no TLS: {p}")
    front_cert = c.cert("sv-front", "front")
    p = node("--listen", "127.0.0.1:0", "--tls-cert", front_cert[0],
             "--tls-key", front_cert[1], "--tls-ca", front_cert[2])
    check(p.returncode == 2 and "O=sv-node" in p.stderr,
          f"a front certificate on a node: {p}")
    cfg = c.path("notls.json")
    with open(cfg, "w") as f:
        f.write('{"nodes": {"endpoints": ["127.0.0.1:1"]}}')
    p = subprocess.run([c.sv_grade, "--input", "/dev/null", "--output", "-",
                        "--provider-config", cfg], capture_output=True,
                       text=True, timeout=30)
    check(p.returncode == 2 and "sv-certs" in p.stderr,
          f"a front without TLS: {p}")
    p = node("--listen", "127.0.0.1:x")
    check(p.returncode == 2 and "bad port" in p.stderr, f"bad port: {p}")
    p = node("--listen", "127.0.0.1:0", "--tls-cert", "a.pem")
    check(p.returncode == 2, f"cert without key: {p}")
    bad = c.path("bad.json")
    with open(bad, "w") as f:
        f.write('{"nodes": {"endpoints": ["127.0.0.1:1"]}}')
    p = node("--listen", "127.0.0.1:0", "--provider-config", bad, "--insecure")
    check(p.returncode == 2 and "cannot serve a nodes block" in p.stderr,
          f"nodes block on a node: {p}")
    first = c.start_node("u0")
    # Its own sandbox root: never the shared default one.
    p = node("--listen", first.endpoint, "--provider-config",
             c.path("u0.json"), "--insecure")
    check(p.returncode == 1 and "cannot listen" in p.stderr,
          f"port in use: {p}")


def sv_certs(c, *args):
    p = subprocess.run([c.sv_certs, *args], capture_output=True, text=True,
                       timeout=60)
    check(p.returncode == 0, f"sv-certs {args}: {p.stderr}")


def make_ca(c, name):
    """A node's and a front's certificates of CA `name` (sv-certs)."""
    return {"node": c.cert("sv-node", "node", ca=name),
            "front": c.cert("sv-front", "front", ca=name)}


def case_tls(c):
    if shutil.which("openssl") is None:
        print("openssl CLI missing: skipped")
        sys.exit(SKIP)
    good, other = make_ca(c, "good"), make_ca(c, "other")
    good["node"] = c.cert("sv-node", "t0", ca="good")
    node = c.start_node("t0", tls=good["node"])
    rc, out, err = finish(c.grade([node.endpoint], 4, 0.2,
                                  tls=good["front"]))
    check(rc == 0, f"tls: exit {rc}: {err[-3000:]}")
    one_reply_each(out, 4)
    check(all(o["ok"] for o in out), f"tls: failures {out}")
    # A node whose certificate another CA signed is refused.
    bad = c.start_node("t1", tls=other["node"])
    proc = c.grade([bad.endpoint], 2, 0.2, tls=good["front"],
                   extra=["--concurrency", "2"],
                   settings={"queue_timeout_s": 2})
    rc, out, err = finish(proc, timeout=90)
    # Its only node unreachable: a configuration error, no masked lines.
    check(rc == 2 and not out, f"tls: wrong cert: exit {rc}, {out}")
    check("TLS handshake refused" in err and bad.endpoint in err,
          f"tls: no clear message: {err[-2000:]}")
    # Joining over TLS: the node with the right certificate is used, the
    # one of another CA is refused and says why, both at once: its failed
    # handshakes on the front's listen port leave the good node's
    # connection alone (the BASP gate: one TLS session's failure is its own).
    front = f"127.0.0.1:{free_port()}"
    good_join = c.start_node("tj0", tls=c.cert("sv-node", "tj0", ca="good"),
                             join=front)
    proc = c.grade([], 8, 1.0, tls=good["front"],
                   extra=["--concurrency", "4"],
                   settings={"listen": front, "join_wait_s": 20})
    c.start_node("tj1", tls=c.cert("sv-node", "tj1", ca="other"), join=front)
    check(wait_until(lambda: "TLS handshake refused"
                     in open(c.path("tj1.log")).read(), 10),
          "tls join: the refused node does not say why")
    rc, out, err = finish(proc, timeout=60)
    check(rc == 0, f"tls join: exit {rc}: {err[-3000:]}")
    one_reply_each(out, 8)
    check(all(o["ok"] and o["node"] == "tj0" and o["attempts"] == 1
              for o in out), f"tls join: {out}")
    check(good_join.poll() is None, "tls join: the node died")

def bad_peer_loop(cert, endpoint, stop):
    """Connects to `endpoint` with `cert` (another CA's) until `stop` is
    set, each handshake bounded; returns how many it tried."""
    import socket
    import ssl
    host, port = endpoint.rsplit(":", 1)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.load_cert_chain(cert[0], cert[1])
    tries = 0
    while not stop.is_set():
        tries += 1
        try:
            with socket.create_connection((host, int(port)), timeout=2) as s:
                with ctx.wrap_socket(s) as t:
                    t.settimeout(2)
                    t.recv(1)
        except (OSError, ssl.SSLError):
            pass
        stop.wait(0.1)
    return tries


def case_tls_bad_peer(c):
    """A peer of another CA that keeps failing the handshake on a node's
    TLS port while a good front runs a batch there: the good front's
    connection stays up (CAF 0.17.6's openssl module left a failed
    handshake's errors in its thread's OpenSSL error queue and closed the
    next healthy session; the BASP gate's TLS keeps each session's errors
    its own)."""
    if shutil.which("openssl") is None:
        print("openssl CLI missing: skipped")
        sys.exit(SKIP)
    import threading
    good, other = make_ca(c, "good"), make_ca(c, "other")
    node = c.start_node("b0", tls=good["node"])
    stop = threading.Event()
    tries = []
    proc = c.grade([node.endpoint], 8, 0.5, tls=good["front"],
                   extra=["--concurrency", "4"])
    bad = threading.Thread(target=lambda: tries.append(
        bad_peer_loop(other["front"], node.endpoint, stop)))
    bad.start()
    try:
        rc, out, err = finish(proc, timeout=60)
    finally:
        stop.set()
        bad.join(timeout=10)
    check(tries and tries[0] >= 3, f"tls bad peer: only {tries} tries")
    check(rc == 0, f"tls bad peer: exit {rc}: {err[-3000:]}")
    one_reply_each(out, 8)
    check(all(o["ok"] and o["attempts"] == 1 for o in out),
          f"tls bad peer: the good front lost work: {out}")
    check(node.poll() is None, "tls bad peer: the node died")



# -- hostile peers ------------------------------------------------------------

def atom(text):
    """CAF 0.17's atom_value of `text` (caf/detail/atom_val.hpp)."""
    table = (" 0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_"
             "abcdefghijklmnopqrstuvwxyz")
    v = 0xF
    for ch in text:
        v = (v << 6) | table.index(ch)
    return v & 0xFFFFFFFFFFFFFFFF


def basp(op, length=0, flags=0, op_data=0, src=0, dest=0, payload=b""):
    """A BASP frame: CAF 0.17.6's 32-byte header, network order."""
    import struct
    return struct.pack(">BBBBIQQQ", op, 0, 0, flags, length, op_data, src,
                       dest) + payload


def node_id(pid, host=b"\x42" * 20):
    import struct
    return struct.pack(">QI", atom("default"), pid) + host


def client_handshake(pid):
    nid = node_id(pid)
    return basp(1, len(nid), payload=nid)


class RawPeer:
    """A hostile peer: TCP (TLS with `cert`, or plaintext) to `endpoint`."""

    def __init__(self, endpoint, cert=None):
        import socket
        import ssl
        host, port = endpoint.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=5)
        self.handshake_error = None
        if cert:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
            ctx.load_cert_chain(cert[0], cert[1])
            try:
                self.sock = ctx.wrap_socket(self.sock)
            except (OSError, ssl.SSLError) as e:
                self.handshake_error = e

    def send(self, data):
        try:
            self.sock.sendall(data)
        except OSError:
            pass

    def closed_within(self, seconds):
        """Whether the other side closes the connection within `seconds`
        (what it sends meanwhile is read and dropped)."""
        if self.handshake_error is not None:
            return True
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.sock.settimeout(max(0.05, deadline - time.monotonic()))
            try:
                if not self.sock.recv(65536):
                    return True
            except TimeoutError:
                return False
            except OSError:
                return True
        return False

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


def case_attacks(c):
    """Hostile peers against a TLS node: each is refused (connection closed,
    one log line naming the reason) and the node grades a line for a legit
    front after each; then against a front listening for nodes."""
    node = c.start_node("a0")
    ep = node.endpoint
    log = c.path("a0.log")
    attacker = c.cert("sv-front", "attacker")  # a cluster front certificate

    def still_grades(what):
        rc, out, err = finish(c.grade([ep], 1, 0.1))
        check(rc == 0 and len(out) == 1 and out[0]["ok"],
              f"{what}: the node no longer grades: {rc} {out} {err[-2000:]}")
        check(node.poll() is None, f"{what}: the node died")

    def refused(what, peer, reason, where=log):
        check(peer.closed_within(10), f"{what}: the connection stays open")
        peer.close()
        check(wait_until(lambda: reason in open(where).read(), 10),
              f"{what}: no log line with {reason!r}: "
              f"{open(where).read()[-1500:]}")

    attacks = [
        ("client_handshake without payload", attacker, basp(1),
         "client_handshake without payload"),
        ("server_handshake v3 without payload", attacker,
         basp(0, op_data=3), "server_handshake without payload"),
        ("4 GiB payload", attacker,
         client_handshake(901) + basp(2, 0xFFFFFFFF, dest=1),
         "announcing 4294967295 payload bytes"),
        ("routed message", attacker,
         client_handshake(902) + basp(3, 64, dest=1, payload=b"x" * 64),
         "routed_message"),
        ("300,000 nested messages", attacker,
         client_handshake(903) + basp(
             2, 1 + 15 * 300000 + 6, dest=1,
             payload=b"\x00" + b"\x00\x00\x0c@<>+@message" * 300000
             + b"\x00\x00\x03@<>"),
         "nesting 300001 messages"),
        ("a node certificate acting as a front",
         c.cert("sv-node", "evil-node"), client_handshake(904),
         "cannot connect to an sv-node"),
        ("a certificate of another CA",
         c.cert("sv-front", "stranger", ca="other"), client_handshake(905),
         "TLS handshake failed"),
        ("plaintext to a TLS node", None, client_handshake(906),
         "TLS handshake failed"),
    ]
    for what, cert, data, reason in attacks:
        print(f"  attack: {what}", flush=True)
        peer = RawPeer(ep, cert)
        peer.send(data)
        refused(what, peer, reason)
        still_grades(what)
    # A second connection claiming a node id that is connected.
    print("  attack: a second connection with a bound node id", flush=True)
    first = RawPeer(ep, attacker)
    first.send(client_handshake(907))
    check(wait_until(lambda: "#907" in open(log).read(), 10),
          "bound id: the first connection was not bound")
    second = RawPeer(ep, attacker)
    second.send(client_handshake(907))
    refused("bound node id", second, "is connected already")
    check(not first.closed_within(1), "bound id: the first one was closed")
    first.close()
    still_grades("bound node id")

    # A front listening for nodes: a front certificate cannot join, and a
    # node name (CN) that is connected cannot join again.
    front = f"127.0.0.1:{free_port()}"
    ja0 = c.cert("sv-node", "ja0")
    c.start_node("ja0", tls=ja0, join=front)
    proc = c.grade([], 6, 1.0, extra=["--concurrency", "2"],
                   settings={"listen": front, "join_wait_s": 20})
    check(wait_until(lambda: leftovers(c.path("root-ja0")), 20),
          "join attacks: the batch did not start on ja0")
    print("  attack: a front certificate joining as a node", flush=True)
    peer = RawPeer(front, attacker)
    peer.send(client_handshake(908))
    check(peer.closed_within(10), "front cert join: connection stays open")
    peer.close()
    print("  attack: a second node named ja0", flush=True)
    twin = c.start_node("ja0-twin", tls=ja0, join=front)
    check(wait_until(lambda: "cannot join" in open(c.path("ja0-twin.log"))
                     .read(), 15), "twin: it does not say it cannot join")
    rc, out, err = finish(proc, timeout=60)
    check(rc == 0, f"join attacks: exit {rc}: {err[-3000:]}")
    one_reply_each(out, 6)
    check(all(o["ok"] and o["node"] == "ja0" and o["attempts"] == 1
              for o in out), f"join attacks: {out}")
    check("cannot connect to an sv-front" in err,
          f"front cert join: no log line: {err[-2000:]}")
    check("a node named ja0 is connected already" in err,
          f"twin: no log line: {err[-2000:]}")
    check(twin.poll() is None, "twin: died instead of retrying")


def case_unreachable(c):
    """A front whose every node is unreachable at start exits 2 at once,
    naming each endpoint and why (issue 19 item 25)."""
    closed = f"127.0.0.1:{free_port()}"
    t0 = time.monotonic()
    rc, out, err = finish(c.grade([closed], 3, 0.1), timeout=60)
    check(rc == 2 and not out, f"unreachable: exit {rc}, {out}")
    check(closed in err and "no node reachable" in err,
          f"unreachable: no hint: {err[-2000:]}")
    check(time.monotonic() - t0 < 20, "unreachable: not fast")
    # A plaintext front, a TLS node: the handshake is cut; the hint says
    # TLS.
    node = c.start_node("x0")
    c.insecure = True
    rc, out, err = finish(c.grade([node.endpoint], 3, 0.1), timeout=60)
    check(rc == 2 and not out, f"tls mismatch: exit {rc}, {out}")
    check(node.endpoint in err and "TLS" in err,
          f"tls mismatch: no hint: {err[-2000:]}")


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def case_join(c):
    front = f"127.0.0.1:{free_port()}"
    listen = {"listen": front, "join_wait_s": 20}
    # Nodes first: they dial the front until it listens (backoff).
    nodes = [c.start_node(f"j{i}", join=front) for i in range(2)]
    proc = c.grade([], 16, 1.0, settings=listen,
                   extra=["--concurrency", "8"])
    check(wait_until(lambda: all(uploaded(p.root) for p in nodes), 20),
          "join: the batch did not reach both joined nodes")
    nodes[1].kill()
    nodes[1].wait(timeout=10)
    rc, out, err = finish(proc, timeout=60)
    check(rc == 0, f"join: exit {rc}: {err[-3000:]}")
    one_reply_each(out, 16)
    for o in out:
        if not o["ok"]:
            f = o["failure"]
            check(f["failure_kind"] == "provider_unavailable"
                  and f["cause"] == "node_down", f"join: failure {o}")
    hit = [o for o in out if not o["ok"] or o["attempts"] > 1]
    check(hit, "join: nothing was lost on the killed node")
    check({o["node"] for o in out} <= {"j0", "j1"}, f"join: nodes {out}")
    # A new front on the same port: j0 joins it by itself, j1 restarted
    # under its name too; both get work.
    nodes[1] = c.start_node("j1", join=front)
    rc, out, err = finish(c.grade([], 16, 1.0, settings=listen,
                                  extra=["--concurrency", "8"]), timeout=60)
    check(rc == 0, f"join again: exit {rc}: {err[-3000:]}")
    one_reply_each(out, 16)
    check(all(o["ok"] for o in out), f"join again: failures {out}")
    check({o["node"] for o in out} == {"j0", "j1"},
          f"join again: not spread over both: {out}")


def case_cache_identity(c):
    """Issue 19 item 10: a front's cache key holds what its nodes run. A
    node restarted on its port with another provider block (its scripted
    result 0.0 instead of 1.0) is a cache miss, graded 0.0: not the 1.0
    the cache holds from before."""
    cache = c.path("cache.sqlite")
    port = free_port()

    def node(reward):
        return c.start_node("k0", port=port, provider={"scripted": {
            "result_text": json.dumps({"reward": reward})}})

    def run():
        rc, out, err = finish(c.grade([f"127.0.0.1:{port}"], 2, 0,
                                      extra=["--cache", cache]))
        check(rc == 0, f"cache_identity: exit {rc}: {err[-3000:]}")
        one_reply_each(out, 2)
        return out, err

    first = node(1.0)
    out, _ = run()
    check(all(o["ok"] and o["result"] == {"reward": 1.0} and
              "cached" not in o for o in out), f"run 1: {out}")
    out, _ = run()
    check(all(o.get("cached") is True and o["result"] == {"reward": 1.0}
              for o in out), f"run 2 (same node): not all cached: {out}")
    first.kill()
    first.wait(timeout=10)
    node(0.0)
    out, err = run()
    check(all(o["ok"] and o["result"] == {"reward": 0.0} and
              "cached" not in o for o in out),
          f"run 3 (node reconfigured): the cache answered: {out}")
    print("ok: a reconfigured node is another cache key")


CASES = {"join": case_join, "cache_identity": case_cache_identity, "spread_and_kill": case_spread_and_kill, "sigstop": case_sigstop,
         "front_lost_and_drain": case_front_lost_and_drain, "tls": case_tls,
         "tls_bad_peer": case_tls_bad_peer, "attacks": case_attacks,
         "unreachable": case_unreachable,
         "usage": case_usage}


def main():
    if len(sys.argv) < 4:
        sys.exit(f"usage: {sys.argv[0]} SV_NODE SV_GRADE PYTHON [case]")
    names = sys.argv[4:] or list(CASES)
    if shutil.which("openssl") is None:
        print("openssl CLI missing (sv-certs needs it): skipped")
        sys.exit(SKIP)
    with tempfile.TemporaryDirectory(prefix="sv-nodes-test-",
                                     ignore_cleanup_errors=True) as tmp:
        c = Cluster(*sys.argv[1:4], tmp)
        try:
            for name in names:
                print(f"case {name}", flush=True)
                CASES[name](c)
                c.close()
                c.procs = []
                c.insecure = False
        finally:
            c.close()
    print("ok")


if __name__ == "__main__":
    main()
