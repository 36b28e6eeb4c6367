#!/usr/bin/env python3
"""A stand-in for Ray's `ray` CLI in the engine images, for the Spark twins. Standard library.

    ray start --head [--port 6379] [--node-ip-address IP] [--disable-usage-stats] [--block]
    ray start --address HEAD:PORT [--node-ip-address IP] [--disable-usage-stats] [--block]
    ray status
    ray --version

Like Ray, the head listens on its GCS port (on the node address) and a worker joins it over the
network, so a pair of twins forms a real two-node cluster across the QSFP link. A node counts
the GPUs `nvidia-smi -L` lists. The head keeps the cluster's state in /tmp/ray (as Ray keeps
its session there), which `ray status` prints in Ray's autoscaler format and the stand-in
engine reads to place its tensor-parallel workers. A worker whose head goes away exits 1, as
Ray's `--block` does when its raylet dies; SIGTERM stops a node cleanly.

Only `--block` is supported: the engine units run Ray in the foreground.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path

VERSION = "2.51.1"
STATE = Path(os.environ.get("SPARK_TWIN_RAY_STATE", "/tmp/ray")) / "spark-twin-cluster.json"
CONNECT_TIMEOUT_S = 10.0  # a worker's attempts to reach the head's GCS
NO_CLUSTER = (
    "ConnectionError: Could not find any running Ray instance. Please specify the "
    "one to connect to by setting `--address` flag or `RAY_ADDRESS` environment "
    "variable."
)


def node_gpus() -> int:
    if os.environ.get("SPARK_TWIN_RAY_NODE_GPUS"):  # for a run outside a twin
        return int(os.environ["SPARK_TWIN_RAY_NODE_GPUS"])
    try:
        listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True).stdout
    except OSError:
        return 0
    return sum(1 for line in listed.splitlines() if line.startswith("GPU "))


def node_ip(given: str | None) -> str:
    if given:
        return given
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("8.8.8.8", 80))  # no packet is sent: it picks the route's source
            return probe.getsockname()[0]
        except OSError:
            return "127.0.0.1"


def new_node(ip: str, gpus: int, head: bool) -> dict:
    return {"id": secrets.token_hex(28), "ip": ip, "gpus": gpus, "head": head}


# --- the state the head publishes, and what reads it --------------------------------------


def read_state() -> dict | None:
    """The running cluster's state, or None when no head runs on this host."""
    try:
        state = json.loads(STATE.read_text())
        os.kill(state["pid"], 0)
    except (OSError, ValueError, KeyError):
        return None
    return state


def cluster_gpus() -> int | None:
    """GPUs of the live nodes of the cluster whose head runs here (None: no cluster)."""
    state = read_state()
    return None if state is None else sum(node["gpus"] for node in state["nodes"])


def status_text(state: dict) -> str:
    gpus = sum(node["gpus"] for node in state["nodes"])
    cpus = float(len(state["nodes"]) * 20)
    active = "".join(f" 1 node_{node['id']}\n" for node in state["nodes"])
    failures = "".join(f" node_{node_id} (lost)\n" for node_id in state["lost"]) or (
        " (no failures)\n"
    )
    rule = "-" * 63
    return (
        f"======== Autoscaler status: {datetime.now().isoformat(sep=' ')} ========\n"
        f"Node status\n{rule}\nActive:\n{active}Pending:\n (no pending nodes)\n"
        f"Recent failures:\n{failures}\nResources\n{rule}\nUsage:\n"
        f" 0.0/{cpus:.1f} CPU\n 0.0/{float(gpus):.1f} GPU\n"
        f" 0B/{len(state['nodes']) * 96.0:.2f}GiB memory\n"
        f" 0B/{len(state['nodes']) * 38.4:.2f}GiB object_store_memory\n\n"
        "Demands:\n (no resource demands)\n"
    )


# --- the head ------------------------------------------------------------------------------


class Head:
    def __init__(self, ip: str, port: int):
        self.address = f"{ip}:{port}"
        self.lock = threading.Lock()
        self.nodes = [new_node(ip, node_gpus(), head=True)]
        self.lost: list[str] = []
        self.listener = socket.create_server((ip, port), reuse_port=False)

    def publish(self) -> None:
        STATE.parent.mkdir(parents=True, exist_ok=True)
        temporary = STATE.with_suffix(f".{os.getpid()}.tmp")
        with self.lock:
            temporary.write_text(
                json.dumps(
                    {
                        "pid": os.getpid(),
                        "address": self.address,
                        "nodes": self.nodes,
                        "lost": self.lost,
                    }
                )
            )
        os.replace(temporary, STATE)

    def serve(self) -> None:
        self.publish()
        while True:
            connection, _ = self.listener.accept()
            threading.Thread(target=self.member, args=(connection,), daemon=True).start()

    def member(self, connection: socket.socket) -> None:
        """A worker's registration; it is in the cluster while its connection lasts."""
        with connection:
            reader = connection.makefile("r")
            try:
                node = json.loads(reader.readline())
            except ValueError:
                return
            connection.sendall(json.dumps({"head": self.nodes[0]["id"]}).encode() + b"\n")
            with self.lock:
                self.nodes.append(node)
            self.publish()
            while reader.readline():  # heartbeats, until the worker goes
                pass
            with self.lock:
                self.nodes = [n for n in self.nodes if n["id"] != node["id"]]
                self.lost.append(node["id"])
            self.publish()

    def close(self) -> None:
        self.listener.close()
        STATE.unlink(missing_ok=True)


def started(ip: str, head_address: str | None) -> None:
    print(
        f"Local node IP: {ip}\n\n--------------------\nRay runtime started.\n"
        "--------------------\n",
        flush=True,
    )
    if head_address:
        print(
            f"Next steps\n  To add another node to this Ray cluster, run\n"
            f"    ray start --address='{head_address}'\n",
            flush=True,
        )
    print(
        "--block\n  This command will now block forever until terminated by a signal.\n"
        "  Running subprocesses are monitored and a message will be printed if any of them "
        "terminate unexpectedly. Subprocesses exit with SIGTERM will be treated as graceful, "
        "thus NOT reported.",
        flush=True,
    )


def start_head(ip: str, port: int) -> int:
    try:
        head = Head(ip, port)
    except OSError as error:
        print(f"ValueError: Failed to bind to {ip}:{port}: {error.strerror}", file=sys.stderr)
        return 1

    def stop(*_: object) -> None:
        head.close()
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    started(ip, head.address)
    head.serve()
    return 0


def join(address: str) -> socket.socket | None:
    host, _, port = address.rpartition(":")
    deadline = time.monotonic() + CONNECT_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            return socket.create_connection((host, int(port)), timeout=3)
        except OSError:
            time.sleep(1)
    return None


def start_worker(ip: str, address: str) -> int:
    connection = join(address)
    if connection is None:
        print(
            f"ConnectionError: Failed to connect to GCS at address {address} within "
            f"{CONNECT_TIMEOUT_S:.0f} seconds.",
            file=sys.stderr,
        )
        return 1
    connection.settimeout(None)
    connection.sendall(json.dumps(new_node(ip, node_gpus(), head=False)).encode() + b"\n")
    if not connection.makefile("r").readline():
        print(f"ConnectionError: GCS at {address} closed the connection.", file=sys.stderr)
        return 1
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    started(ip, None)
    alive = threading.Event()

    def heartbeat() -> None:
        try:
            while not alive.wait(1):
                connection.sendall(b"{}\n")
        except OSError:
            alive.set()

    threading.Thread(target=heartbeat, daemon=True).start()
    while connection.recv(1):  # the head never writes again: this returns when it goes
        pass
    print(
        "Some Ray subprocesses exited unexpectedly:\n  raylet [exit code=1]\n"
        f"Remaining processes will be killed.\n(the GCS at {address} went away)",
        file=sys.stderr,
        flush=True,
    )
    return 1


def main(argv: list[str]) -> int:
    if argv[:1] == ["--version"]:
        print(f"ray, version {VERSION}")
        return 0
    if argv[:1] == ["status"]:
        state = read_state()
        if state is None:
            print(NO_CLUSTER, file=sys.stderr)
            return 1
        sys.stdout.write(status_text(state))
        return 0
    parser = argparse.ArgumentParser(prog="ray start")
    parser.add_argument("command", choices=["start"])
    parser.add_argument("--head", action="store_true")
    parser.add_argument("--address")
    parser.add_argument("--port", type=int, default=6379)
    parser.add_argument("--node-ip-address")
    parser.add_argument("--disable-usage-stats", action="store_true")
    parser.add_argument("--block", action="store_true")
    # Ray's own (scripts.py `start`): a click bool, head only; the dashboard's bind; the client
    # server's port (0: none). The stand-in serves neither, as the deploy asks.
    parser.add_argument("--include-dashboard", choices=["true", "false", "True", "False"])
    parser.add_argument("--dashboard-host")
    parser.add_argument("--ray-client-server-port", type=int)
    args = parser.parse_args(argv)
    if args.head == bool(args.address):
        parser.error("give either --head or --address")
    if args.include_dashboard is not None and not args.head:
        parser.error("`--include-dashboard` should only be specified when starting head node")
    if not args.block:
        parser.error("the twins' Ray stand-in runs only with --block")
    ip = node_ip(args.node_ip_address)
    return start_head(ip, args.port) if args.head else start_worker(ip, args.address)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
