"""
Spark twins: booted Debian containers (real systemd, NetworkManager, sshd, sudo, apt) that
stand in for a pair of DGX Sparks, linked by veth "QSFP cables", reachable over real SSH on
127.0.0.1 only.

    python -m tests.twins up        # build (cached) and start two twins, write inventory/twins.yml
    python -m tests.twins down      # remove the twins of this checkout (its namespace)
    python -m tests.twins demo      # up, deploy twice, show that the second run changed nothing

The image is built from a Debian base made with debootstrap from this machine's own apt
mirror, and cached by a hash of its inputs. Images are shared by every checkout on the machine
(`sparkdeploy-twin:<hash>`, `sparkdeploy-twin-base:<hash>`); a first build takes a machine-wide
lock (/tmp/sparkdeploy-twin-build.lock), so two checkouts building the same tag at once build
it once.

Twins belong to a namespace, so that clones of the repository in different folders can run
`make test` at once on one machine: by default a short hash of this checkout's absolute path,
or `$TWIN_NAMESPACE` (up to 32 letters, digits, '_', '.', '-'; two checkouts given the same value
share, and replace, each other's twins). The namespace is in every container name
(`sparkdeploy-twin-<namespace>-<name>`; the hostname stays `<name>`), in the label
`sparkdeploy.twin.namespace=<namespace>` that `down` removes by, and in the state directory
`.twins/<namespace>/` (known_hosts). A process that starts or removes twins holds the
namespace's lock (/tmp/sparkdeploy-twin-ns-<namespace>.lock) until it exits: a second test
session on the same namespace stops with an error instead of replacing the first one's twins.
The cable's veth pairs are made inside the twins' network namespaces, never on the host.

Three to eight twins hang off a QSFP switch instead (`up(names, fabric="switch")`,
`python -m tests.twins up --switch 3`): a container of its own (`<namespace>-qsfp-switch`, no
network but its own namespace) holding one Linux bridge per rail, with one veth pair per twin
and rail between the twin (its end under the rail's ConnectX-7 name) and the switch (its end a
port of that rail's bridge, MTU 9000 unless a scenario sets it lower with `set_port_mtu`).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Container, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
STATE_DIR = ROOT / ".twins"
TWINS_INVENTORY = ROOT / "inventory" / "twins.yml"
CATALOGUES = ROOT / "sparkdeploy" / "knowledge" / "catalogues"
TWIN_CATALOGUES = "/opt/spark-twin/catalogues"  # where the stand-in engine reads them
PREFIX = "sparkdeploy-twin"
NAMESPACE_ENV = "TWIN_NAMESPACE"
NAMESPACE_FORMAT = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,31}")  # within a docker name
NAMESPACE_LABEL = "sparkdeploy.twin.namespace"
CHECKOUT_LABEL = "sparkdeploy.twin.checkout"
LEGACY_LABEL = "sparkdeploy.twin=1"  # twins of harness versions without namespaces
# Machine-wide, as the Docker engine is: shared by every checkout and user of it.
LOCK_DIR = Path("/tmp")
BUILD_LOCK = LOCK_DIR / f"{PREFIX}-build.lock"
# docker run's errors when the SSH port was taken between free_port() and the bind.
PORT_TAKEN = re.compile(r"port is already allocated|address already in use")
PORT_ATTEMPTS = 5
SUITE_DEFAULT = "bookworm"
SITE_CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
# The QSFP rails of a Spark as the twins name them: one veth pair per rail.
RAILS = ("enp1s0f0np0", "enP2p1s0f0np0")
# Where the stand-in RoCE GID tables live in a twin (standins/roce-gids): its sysfs_root.
TWIN_SYSFS = "/opt/spark-twin/sys"


# A switch port's MTU unless a scenario sets it: jumbo frames, as the rails are configured.
JUMBO_MTU = 9000
# How the twins' QSFP rails are wired: a direct cable between two, a switch for any number,
# or three or four in a ring (port 0 of each to port 1 of the next).
Fabric = Literal["cable", "switch", "ring"]
# A ring's ports as a Spark names their logical interfaces (NVIDIA connect-three-sparks).
RING_PORTS = (("enp1s0f0np0", "enP2p1s0f0np0"), ("enp1s0f1np1", "enP2p1s0f1np1"))
# NVIDIA's three-Spark ring addresses, exactly as the playbook's netplan files give them
# (dgx-spark-playbooks nvidia/connect-three-sparks a8bb888): one /24 per cable, both logical
# interfaces of a port in it. Node -> (port 0's two addresses, port 1's two addresses).
NVIDIA_RING = {
    1: (("192.168.0.1", "192.168.0.2"), ("192.168.1.1", "192.168.1.2")),
    2: (("192.168.2.1", "192.168.2.2"), ("192.168.0.3", "192.168.0.4")),
    3: (("192.168.1.3", "192.168.1.4"), ("192.168.2.3", "192.168.2.4")),
}
SWITCH_NAME = "qsfp-switch"  # the switch container's name within the namespace
# The cluster sizes: a switch takes three to eight Sparks (a pair may use one too).
MAX_SPARKS = 8


def qsfp_plan(node: int) -> list[dict]:
    """The qsfp inventory entries of Spark `node` (1 to 8): one subnet per rail, shared by
    every Spark on that rail (a pair's cable or a switch's bridge), the host part `node`."""
    return [
        {"interface": rail, "address": f"192.168.{100 + i}.{node}/24"}
        for i, rail in enumerate(RAILS)
    ]


def ring_plan(node: int, count: int) -> list[dict]:
    """The qsfp entries of Spark `node` (from 1) in a ring of `count`: three as NVIDIA's
    playbook addresses them (NVIDIA_RING), four as eugr's four-node ring does (two /24s per
    cable, one per logical link: cable c has 10.20.(2c-2).0/24 and 10.20.(2c-1).0/24, the
    host part 10 + node; eugr/spark-vllm-docker docs/NETWORKING.md)."""
    ports: tuple[tuple[str, ...], tuple[str, ...]]
    if count == 3:
        ports = NVIDIA_RING[node]
    else:
        previous = (node - 2) % count + 1  # the cable into port 1 is the previous node's
        ports = (
            tuple(f"10.20.{2 * node - 2 + i}.{10 + node}" for i in range(2)),
            tuple(f"10.20.{2 * previous - 2 + i}.{10 + node}" for i in range(2)),
        )
    return [
        {"interface": interface, "address": f"{address}/24"}
        for names, addresses in zip(RING_PORTS, ports)
        for interface, address in zip(names, addresses)
    ]


# What inventory/twins.yml asks of each twin: together they exercise every capability.
# The twins' stand-in Hub (tests/twins/standins/hf-hub), and the token it accepts.
TWIN_HUB = "http://127.0.0.1:5555"
TWIN_HUB_TOKEN = "hf_twinGatedToken0123456789"
TWIN_TOKEN_ENV = "SPARK_TWIN_HF_TOKEN"
# The twins' operator trusts the stand-in Hub with the token (sparkdeploy/config/trust.py: the
# token goes only to the Hugging Face Hub, or the one endpoint the laptop's environment names).
TRUST_HUB_ENV = {"SPARK_TRUST_HF_ENDPOINT": TWIN_HUB}
HUB_TOKEN_ENV = {TWIN_TOKEN_ENV: TWIN_HUB_TOKEN, **TRUST_HUB_ENV}  # a twin deploy's laptop env
MODEL = {
    "model_repo": "mistralai/Mistral-Small-4-119B-2603-NVFP4",
    "model_base_repo": "mistralai/Mistral-Small-4-119B-2603",
    "draft_model_repo": "mistralai/Mistral-Small-4-119B-2603-eagle",
}
# SGLang across the pair (QSFP), with a conflicting GPU service the twins also have.
ENGINE = {"name": "sglang", "other_gpu_services": ["twin-tts.service"]}
DEMO_HOSTS: dict[str, dict] = {
    # reboots when a change needs it
    "spark-a": {
        "allow_reboot": True,
        "reboot_timeout": 120,
        "sysfs_root": TWIN_SYSFS,
        "qsfp": qsfp_plan(1),
        **MODEL,
        "engine": ENGINE,
    },
    # may not reboot: the run ends with a pending-reboot notice
    "spark-b": {"sysfs_root": TWIN_SYSFS, "qsfp": qsfp_plan(2), **MODEL, "engine": ENGINE},
}


class HarnessError(RuntimeError):
    pass


def run(*args: str, check: bool = True, capture: bool = True, input: str | None = None):
    result = subprocess.run(list(args), check=False, text=True, capture_output=capture, input=input)
    if check and result.returncode != 0:
        detail = "\n".join((result.stderr or result.stdout or "").strip().splitlines()[-25:])
        raise HarnessError(f"{' '.join(args)} failed ({result.returncode}): {detail}")
    return result


def docker(*args: str, **kwargs):
    return run("docker", *args, **kwargs)


# ---------------------------------------------------------------------------------------
# Namespace and locks


def namespace() -> str:
    """This checkout's twin namespace: $TWIN_NAMESPACE, or a short hash of ROOT."""
    chosen = os.environ.get(NAMESPACE_ENV) or digest(str(ROOT).encode())[:8]
    if not NAMESPACE_FORMAT.fullmatch(chosen):
        raise HarnessError(
            f"{NAMESPACE_ENV}={chosen!r}: use 1 to 32 letters, digits, '_', '.' or '-', "
            "starting with a letter or digit"
        )
    return chosen


def container_name(name: str) -> str:
    """The docker name of twin `name` in this namespace (its hostname stays `name`)."""
    return f"{PREFIX}-{namespace()}-{name}"


def state_dir() -> Path:
    """This namespace's state under .twins/ (the SSH key is the checkout's, one level up)."""
    path = STATE_DIR / namespace()
    path.mkdir(parents=True, exist_ok=True)
    return path


def _open_lock(path: Path) -> int:
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as error:
        raise HarnessError(f"cannot open the lock file {path}: {error}") from error


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


@contextmanager
def file_lock(path: Path, waiting_for: str) -> Iterator[None]:
    """Hold an exclusive flock on `path` for the block, saying so when it has to wait. The
    kernel drops the lock when its holder dies, so a crashed holder never blocks anyone."""
    fd = _open_lock(path)
    try:
        if not _try_lock(fd):
            print(f"twins: waiting for {waiting_for} ({path})", flush=True)
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


_claimed: dict[str, int] = {}  # namespace -> the fd of its lock, held until the process ends


def claim_namespace() -> None:
    """Hold this namespace's lock for the rest of the process (once per process): a second
    session on the same namespace stops here instead of replacing the first one's twins."""
    name = namespace()
    if name in _claimed:
        return
    path = LOCK_DIR / f"{PREFIX}-ns-{name}.lock"
    fd = _open_lock(path)
    if not _try_lock(fd):
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
        os.close(fd)
        raise HarnessError(
            f"twin namespace {name} is in use by process {holder} ({path}), another session"
            f" of this checkout? Wait for it to end, or set {NAMESPACE_ENV} to run alongside it"
        )
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    _claimed[name] = fd


# ---------------------------------------------------------------------------------------
# Image


def apt_mirror() -> tuple[str, str]:
    """The machine's own Debian mirror and suite, read from its apt configuration."""
    if os.environ.get("TWIN_MIRROR"):
        return os.environ["TWIN_MIRROR"], os.environ.get("TWIN_SUITE", SUITE_DEFAULT)
    suite = SUITE_DEFAULT
    release = Path("/etc/os-release")
    if release.exists():
        match = re.search(r"^VERSION_CODENAME=(\w+)", release.read_text(), re.M)
        if match:
            suite = match.group(1)
    sources = sorted(Path("/etc/apt/sources.list.d").glob("*.sources"))
    for path in sources:
        for stanza in path.read_text().split("\n\n"):
            uris = re.search(r"^URIs:\s*(\S+)", stanza, re.M)
            suites = re.search(r"^Suites:\s*(.+)$", stanza, re.M)
            if uris and suites and suite in suites.group(1).split():
                return uris.group(1), suite
    legacy = Path("/etc/apt/sources.list")
    if legacy.exists():
        for line in legacy.read_text().splitlines():
            parts = line.split()
            if len(parts) >= 3 and parts[0] == "deb" and parts[2] == suite:
                uri = next(p for p in parts[1:] if not p.startswith("["))
                return uri, suite
    raise HarnessError(
        "no Debian mirror for the twin base found in /etc/apt; set TWIN_MIRROR and TWIN_SUITE"
    )


def digest(*parts: bytes) -> str:
    sha = hashlib.sha256()
    for part in parts:
        sha.update(len(part).to_bytes(8, "big"))
        sha.update(part)
    return sha.hexdigest()[:12]


def image_inputs_hash(mirror: str, suite: str) -> str:
    stand_ins = (p for p in (HERE / "standins").rglob("*") if "__pycache__" not in p.parts)
    files = [HERE / "Dockerfile", *sorted(stand_ins)]  # compiled forms: whoever ran them
    contents = [str(p.relative_to(HERE)).encode() + p.read_bytes() for p in files if p.is_file()]
    return digest(mirror.encode(), suite.encode(), *contents)


def image_exists(tag: str) -> bool:
    return docker("image", "inspect", tag, check=False).returncode == 0


def build_base(mirror: str, suite: str) -> str:
    tag = f"{PREFIX}-base:{digest(mirror.encode(), suite.encode())}"
    if image_exists(tag):
        return tag
    if shutil.which("debootstrap") is None:
        raise HarnessError("debootstrap is missing: apt-get install debootstrap")
    with tempfile.TemporaryDirectory(prefix="twin-rootfs-") as tmp:
        rootfs = Path(tmp) / "rootfs"
        print(f"twins: debootstrap {suite} from {mirror} (about a minute, once)", flush=True)
        run("debootstrap", "--variant=minbase", suite, str(rootfs), mirror)
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        subprocess.run(
            ["docker", "import", "-", tag], stdin=tar.stdout, check=True, capture_output=True
        )
        tar.wait()
    return tag


def build_image() -> str:
    """The twin image tag, built only when its inputs changed. The build holds the machine's
    build lock, so a checkout that needs the same tag meanwhile waits and then uses it."""
    mirror, suite = apt_mirror()
    tag = f"{PREFIX}:{image_inputs_hash(mirror, suite)}"
    if image_exists(tag):
        return tag
    with file_lock(BUILD_LOCK, "another build of the twin image"):
        if not image_exists(tag):  # unless whoever held the lock built it
            base = build_base(mirror, suite)
            print(f"twins: building {tag}", flush=True)
            docker("build", "--quiet", "--build-arg", f"BASE={base}", "-t", tag, str(HERE))
    return tag


# ---------------------------------------------------------------------------------------
# Twins


@dataclass
class Twin:
    name: str
    container: str
    port: int
    pid: int = 0
    host_key: str = ""
    data: dict = field(default_factory=dict)
    switch: Switch | None = None  # the QSFP switch the twin hangs off, if any

    def exec(self, command: str, check: bool = True, input: str | None = None):
        """Run a shell command inside the twin as root (the harness's back door)."""
        return docker("exec", "-i", self.container, "sh", "-c", command, check=check, input=input)

    def read(self, path: str) -> str | None:
        result = self.exec(f"cat {path}", check=False)
        return result.stdout if result.returncode == 0 else None


def published_ports() -> set[int]:
    """The host ports every container on this engine publishes, running or not: a twin
    restarting (a reboot) lets go of its port for a moment and needs it back."""
    ids = docker("ps", "-aq").stdout.split()
    template = "{{range .HostConfig.PortBindings}}{{range .}}{{.HostPort}} {{end}}{{end}}"
    # check=False: a container removed since `ps` fails only its own line
    found = docker("inspect", "-f", template, *ids, check=False).stdout if ids else ""
    return {int(port) for port in found.split() if port.isdigit()}


def free_port(taken: Container[int] = ()) -> int:
    """A port free on 127.0.0.1 now, and not in `taken`."""
    while True:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        if port not in taken:
            return port


def ssh_key() -> Path:
    """A throwaway ed25519 key for the twins, made once under .twins/ (under a lock: sessions
    on other namespaces of this checkout share it)."""
    key_path = STATE_DIR / "id_ed25519"
    if not key_path.exists():
        STATE_DIR.mkdir(exist_ok=True)
        with file_lock(STATE_DIR / "id_ed25519.lock", "another session making the SSH key"):
            if not key_path.exists():
                _write_key(key_path)
    return key_path


def _write_key(key_path: Path) -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption(),
    )
    public = key.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    key_path.with_suffix(".pub").write_bytes(public + b" spark-twin\n")
    key_path.touch(mode=0o600)
    key_path.write_bytes(private)


def wait_for(check, what: str, timeout: float = 90.0, interval: float = 0.3):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise HarnessError(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")


def _booted(twin: Twin):
    """One `docker exec` that returns when systemd has finished booting (`--wait`), instead
    of one every 0.3 s: each costs dockerd, containerd and runc some 65 ms of CPU, which the
    booting twins need. Too early for systemd's socket, it fails at once and is asked again."""
    state = twin.exec("timeout 60 systemctl is-system-running --wait", check=False).stdout.strip()
    return state in ("running", "degraded") and state


def _ssh_ready(twin: Twin):
    try:
        with socket.create_connection(("127.0.0.1", twin.port), timeout=1) as sock:
            return sock.recv(64).startswith(b"SSH-")
    except OSError:
        return False


def container_pid(container: str) -> int:
    return int(docker("inspect", "-f", "{{.State.Pid}}", container).stdout.strip())


def wait_booted(twin: Twin) -> None:
    wait_for(lambda: _booted(twin), f"{twin.name} to boot systemd")
    wait_for(lambda: _ssh_ready(twin), f"{twin.name} sshd on 127.0.0.1:{twin.port}")
    twin.pid = container_pid(twin.container)


def labelled_run(name: str, container: str) -> tuple[str, ...]:
    """`docker run -d` of a container of this namespace and checkout (a twin, the switch):
    its name, hostname and the labels down() and destroy() find it by."""
    return (
        "run", "-d", "--name", container, "--hostname", name,
        "--label", f"{NAMESPACE_LABEL}={namespace()}", "--label", f"{CHECKOUT_LABEL}={ROOT}",
    )  # fmt: skip


def run_container(name: str, container: str, image: str) -> int:
    """`docker run` twin `name`, its SSH published on a free port of 127.0.0.1; the port.
    Another suite (or any program) can take the port between free_port() and docker's bind:
    docker then leaves the container created but not started, and it runs again elsewhere."""
    for _ in range(PORT_ATTEMPTS):
        port = free_port(published_ports())
        try:
            docker(
                *labelled_run(name, container),
                "--restart",
                "always",
                "--cap-add",
                "NET_ADMIN",
                "--cap-add",
                "SYS_ADMIN",
                "-v",
                "/sys/fs/cgroup:/sys/fs/cgroup:rw",
                "--tmpfs",
                "/run",
                "--tmpfs",
                "/run/lock",
                "-p",
                f"127.0.0.1:{port}:22",
                image,
                "/sbin/init",
            )
            return port
        except HarnessError as error:
            if not PORT_TAKEN.search(str(error)):
                raise
            print(f"twins: port {port} was taken before {name} bound it; another port", flush=True)
            docker("rm", "-f", container, check=False)
    raise HarnessError(f"{name}: no free SSH port after {PORT_ATTEMPTS} attempts")


def start_twin(name: str, image: str) -> Twin:
    container = container_name(name)
    docker("rm", "-f", container, check=False)  # this namespace's own leftover, if any
    twin = Twin(name=name, container=container, port=run_container(name, container, image))
    wait_booted(twin)
    # The site's CA bundle, as a Spark on this network would have it (TLS to the package
    # registries is intercepted here by a local CA).
    if Path(SITE_CA_BUNDLE).is_file():
        docker("cp", "-L", SITE_CA_BUNDLE, f"{container}:{SITE_CA_BUNDLE}")
    # The engine releases' flag catalogues, for the stand-in engine to parse its command line
    # as the image's release does (copied, so the twin never reads the deploy's package).
    docker("cp", f"{CATALOGUES}/.", f"{container}:{TWIN_CATALOGUES}")
    public = ssh_key().with_suffix(".pub").read_text()
    twin.exec(
        "install -d -m 700 -o spark -g spark ~spark/.ssh && cat > ~spark/.ssh/authorized_keys"
        " && chown spark:spark ~spark/.ssh/authorized_keys"
        " && chmod 600 ~spark/.ssh/authorized_keys",
        input=public,
    )
    host_key = twin.read("/etc/ssh/ssh_host_ed25519_key.pub")
    if host_key is None:
        raise HarnessError(f"{twin.name} has no SSH host key (/etc/ssh/ssh_host_ed25519_key.pub)")
    twin.host_key = " ".join(host_key.split()[:2])
    return twin


def veth_pair(pid: int, name: str, peer: str, peer_pid: int) -> None:
    """A veth pair made inside the network namespace of process `pid` (a twin), `name` there
    and `peer` in the namespace of `peer_pid` (the other twin, or the switch): never on the
    host."""
    run("nsenter", "-t", str(pid), "-n", "ip", "link", "add", name, "type", "veth",
        "peer", "name", peer, "netns", str(peer_pid))  # fmt: skip


def link_cable(a: Twin, b: Twin) -> None:
    """Plug the QSFP cable: one veth pair per rail, made right inside the two twins' network
    namespaces under the ConnectX-7 port names. NetworkManager sees each port appear under
    its final name, as a udev-named port on a Spark (a port renamed after it appeared would
    first get NetworkManager's default DHCP profile)."""
    for ifname in RAILS:
        veth_pair(a.pid, ifname, ifname, b.pid)
        for twin in (a, b):
            run("nsenter", "-t", str(twin.pid), "-n", "ip", "link", "set", ifname, "up")


def rails_connected(twin: Twin) -> bool:
    """NetworkManager has every QSFP rail of the twin connected, and the rail's RoCE GID
    table lists its IPv4 address. A kernel adds that GID with the address; the twin's
    stand-in (a dispatcher script) a moment after NetworkManager reports the rail connected,
    and a deploy started in that moment found no GID for the rail. One exec for all rails."""
    gids = f"{TWIN_SYSFS}/class/infiniband/*/ports/1"
    return (
        twin.exec(
            " && ".join(
                f"nmcli -t -g GENERAL.STATE device show {rail} | grep -q '^100'"
                f" && d=$(grep -lx {rail} {gids}/gid_attrs/ndevs/* | head -n1)"
                f' && grep -qs "^0000:0000:0000:0000:0000:ffff:" "${{d%/gid_attrs/*}}"/gids/*'
                for rail in RAILS
            ),
            check=False,
        ).returncode
        == 0
    )


def link_ring(twins: list[Twin], swapped_at: str | None = None) -> None:
    """Cable the twins in a ring: port 0 of each to port 1 of the next (the last to the
    first), one veth pair per logical link (the n-th interface of one port to the n-th of
    the other). `swapped_at` names a twin whose two cables are in each other's ports: the
    cable meant for its port 0 is in its port 1 and the other way round."""
    for index, a in enumerate(twins):
        b = twins[(index + 1) % len(twins)]
        ours = RING_PORTS[1] if a.name == swapped_at else RING_PORTS[0]
        theirs = RING_PORTS[0] if b.name == swapped_at else RING_PORTS[1]
        for mine, other in zip(ours, theirs):
            veth_pair(a.pid, mine, other, b.pid)
    for twin in twins:
        for ifname in (*RING_PORTS[0], *RING_PORTS[1]):
            run("nsenter", "-t", str(twin.pid), "-n", "ip", "link", "set", ifname, "up")


def unlink_ring(twins: list[Twin]) -> None:
    """Pull every cable of the ring (deleting one end of a veth pair deletes both)."""
    for twin in twins:
        for ifname in (*RING_PORTS[0], *RING_PORTS[1]):  # a swapped cable may end in either
            run("nsenter", "-t", str(twin.pid), "-n", "ip", "link", "del", ifname, check=False)


def container_ip(twin: Twin) -> str:
    """The twin's address on Docker's bridge: its management network."""
    template = "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}"
    return docker("inspect", "-f", template, twin.container).stdout.strip()


def replug_cable(a: Twin, b: Twin) -> None:
    """Pull the cable (if a reboot has not taken it already: a twin's reboot is a new
    network namespace) and plug a new one, then wait until NetworkManager has brought the
    rails back up by itself."""
    for twin in (a, b):
        twin.pid = container_pid(twin.container)
    for rail in RAILS:  # deleting one end of a veth pair deletes both
        run("nsenter", "-t", str(a.pid), "-n", "ip", "link", "del", rail, check=False)
    link_cable(a, b)
    for twin in (a, b):
        wait_for(
            lambda twin=twin: rails_connected(twin), f"{twin.name}'s QSFP rails to come back", 60
        )


# ---------------------------------------------------------------------------------------
# The QSFP switch


def bridge_name(rail: int) -> str:
    """The switch's bridge of rail `rail` (from 0, as in RAILS)."""
    return f"rail{rail + 1}"


def switch_port(port: int, rail: int) -> str:
    """The switch-side name of port `port` (from 1) on rail `rail` (from 0): p1r1, p3r2..."""
    return f"p{port}r{rail + 1}"


@dataclass
class Switch:
    """A QSFP switch: one bridge per rail in a container of its own. Port n of every rail
    cables the n-th twin plugged in, at MTU `mtu[(n, rail)]` (JUMBO_MTU unless set)."""

    container: str
    pid: int = 0
    ports: dict[str, int] = field(default_factory=dict)  # twin name -> port number, from 1
    mtu: dict[tuple[int, int], int] = field(default_factory=dict)  # (port, rail) -> MTU

    def ip(self, *args: str, check: bool = True):
        """`ip ARGS` in the switch's network namespace."""
        return run("nsenter", "-t", str(self.pid), "-n", "ip", *args, check=check)

    def port_of(self, twin: Twin) -> int:
        if twin.name not in self.ports:
            raise HarnessError(f"{twin.name} is not plugged into {self.container}")
        return self.ports[twin.name]

    def port_mtu(self, port: int, rail: int) -> int:
        return self.mtu.get((port, rail), JUMBO_MTU)


def start_switch(image: str, name: str = SWITCH_NAME) -> Switch:
    """Start the switch: a container of `image` that only sleeps, with no network of its own
    (--network none: its namespace holds just its bridges and ports) and no published port,
    labelled like the twins so that down() and destroy() remove it."""
    container = container_name(name)
    docker("rm", "-f", container, check=False)  # this namespace's own leftover, if any
    docker(
        *labelled_run(name, container),
        "--network",
        "none",
        "--cap-add",
        "NET_ADMIN",
        image,
        "sleep",
        "infinity",
    )
    switch = Switch(container=container, pid=container_pid(container))
    for rail in range(len(RAILS)):
        bridge = bridge_name(rail)
        # forward_delay 0: without STP a port forwards as soon as it is up, as on a switch.
        switch.ip("link", "add", bridge, "type", "bridge", "forward_delay", "0")
        switch.ip("link", "set", bridge, "mtu", str(JUMBO_MTU), "up")
    return switch


def plug(switch: Switch, twin: Twin) -> None:
    """Cable every QSFP rail of `twin` to the switch: one veth pair per rail, made inside the
    twin's network namespace under the rail's ConnectX-7 name (as link_cable does), its other
    end in the switch's namespace as a port of the rail's bridge. A twin plugged in again
    keeps its port number and its ports' MTUs."""
    port = switch.ports.setdefault(twin.name, len(switch.ports) + 1)
    twin.switch = switch
    for rail, ifname in enumerate(RAILS):
        end = switch_port(port, rail)
        veth_pair(twin.pid, ifname, end, switch.pid)
        switch.ip("link", "set", end, "mtu", str(switch.port_mtu(port, rail)))
        switch.ip("link", "set", end, "master", bridge_name(rail), "up")
        run("nsenter", "-t", str(twin.pid), "-n", "ip", "link", "set", ifname, "up")


def set_port_mtu(switch: Switch, twin: Twin, mtu: int, rail: int | None = None) -> None:
    """Set the MTU of `twin`'s switch port on `rail` (from 0; every rail when None): 1500
    makes a switch that does not pass jumbo frames to or from that Spark. The setting holds
    across a replug."""
    port = switch.port_of(twin)
    for each in range(len(RAILS)) if rail is None else (rail,):
        switch.mtu[(port, each)] = mtu
        switch.ip("link", "set", switch_port(port, each), "mtu", str(mtu))


def replug_switch(switch: Switch, twins: Iterable[Twin]) -> None:
    """Plug `twins` into the switch again (a twin's reboot is a new network namespace: its
    cables went with the old one, and the switch's ends with them), after pulling whatever
    is left of their old cables; then wait until NetworkManager has the rails up again."""
    twins = list(twins)
    switch.pid = container_pid(switch.container)
    for twin in twins:
        twin.pid = container_pid(twin.container)
        port = switch.port_of(twin)
        for rail in range(len(RAILS)):  # deleting one end of a veth pair deletes both
            switch.ip("link", "del", switch_port(port, rail), check=False)
        plug(switch, twin)
    for twin in twins:
        wait_for(
            lambda twin=twin: rails_connected(twin), f"{twin.name}'s QSFP rails to come back", 60
        )


def replug(twins: list[Twin]) -> None:
    """Plug the twins' QSFP rails in again, as they were wired: to their switch, or the
    pair's cable."""
    switches = {t.switch.container: t.switch for t in twins if t.switch is not None}
    for switch in switches.values():
        replug_switch(switch, [t for t in twins if t.switch is switch])
    if not switches:
        replug_cable(*twins)


def known_hosts(twins: list[Twin]) -> Path:
    path = state_dir() / "known_hosts"
    path.write_text("".join(f"[127.0.0.1]:{t.port} {t.host_key}\n" for t in twins))
    return path


def write_inventory(twins: list[Twin], path: Path, defaults: dict | None = None) -> Path:
    """An inventory for the twins, in the same format an operator writes for real Sparks."""
    document = {
        "defaults": {
            "ssh_user": "spark",
            "ssh_key": str(ssh_key()),
            "ssh_known_hosts_file": str(known_hosts(twins)),
            "ssh_strict_host_key_checking": "yes",
            "hf_endpoint": TWIN_HUB,
            "hf_endpoint_allow_http": True,  # the stand-in Hub listens on the twin's loopback
            "memory_guard_gb": 1,  # a twin has what this machine has, not 128 GB
            "hf_token_env": TWIN_TOKEN_ENV,
            **(defaults or {}),
        },
        "sparks": {t.name: {"ssh_host": "127.0.0.1", "ssh_port": t.port, **t.data} for t in twins},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    header = "# Written by tests/twins/harness.py for the local Spark twins; do not edit.\n"
    path.write_text(header + yaml.safe_dump(document, sort_keys=False))
    return path


def spark_names(count: int) -> tuple[str, ...]:
    """`count` twin names in the demo's style: spark-a, spark-b, ... (1 to MAX_SPARKS)."""
    if not 1 <= count <= MAX_SPARKS:
        raise HarnessError(f"{count} twins: a cluster has 1 to {MAX_SPARKS} Sparks")
    return tuple(f"spark-{chr(ord('a') + i)}" for i in range(count))


def choose_fabric(count: int, cable: bool = True, fabric: Fabric | None = None) -> Fabric | None:
    """How `count` twins are wired: `fabric` when given, else the pair's cable (when `cable`
    and there are two), else nothing. A cable joins exactly two twins."""
    if fabric == "cable" and count != 2:
        raise HarnessError(f"a QSFP cable joins two twins, not {count}: use fabric='switch'")
    if fabric == "ring" and count not in (3, 4):
        raise HarnessError(f"a ring is three or four twins, not {count}")
    if fabric is not None:
        return fabric
    return "cable" if cable and count == 2 else None


def host_data(names: Iterable[str], fabric: Fabric | None) -> dict[str, dict]:
    """What the inventory asks of each twin: the demo pair's keys (DEMO_HOSTS; a twin of
    another name like spark-b's, without reboots), and on a fabric the rails of Spark n
    (n = its place in `names`, from 1) from qsfp_plan(n)."""
    spare = {key: value for key, value in DEMO_HOSTS["spark-b"].items() if key != "qsfp"}
    hosts: dict[str, dict] = {}
    names = list(names)
    for node, name in enumerate(names, start=1):
        if fabric == "ring":  # no reboots: a rebooted twin may come back at another address
            hosts[name] = {**spare, "qsfp_topology": "ring", "qsfp": ring_plan(node, len(names))}
            hosts[name]["management_interface"] = "eth0"
            continue
        data = dict(DEMO_HOSTS.get(name, spare if fabric == "switch" else {}))
        if fabric is not None:
            data["qsfp"] = qsfp_plan(node)
        hosts[name] = data
    return hosts


def up(
    names: tuple[str, ...] = tuple(DEMO_HOSTS),
    cable: bool = True,
    fabric: Fabric | None = None,
    image: Callable[[], str] | None = None,
) -> list[Twin]:
    """Start the twins `names` and wire their QSFP rails: `fabric="switch"` puts them all on
    one switch, `fabric="cable"` cables a pair; without `fabric`, a pair is cabled when `cable`
    (the default) and anything else is left unwired. Each twin's `data` is host_data()'s.
    `image` gives the twins' image tag (default: the plain image, a freshly imaged Spark)."""
    wiring = choose_fabric(len(names), cable, fabric)
    claim_namespace()
    tag = (image or build_image)()
    twins = [start_twin(name, tag) for name in names]
    for twin, data in zip(twins, host_data(names, wiring).values(), strict=True):
        twin.data = data
    if wiring == "cable":
        link_cable(*twins)
    elif wiring == "ring":
        link_ring(twins)
        for twin in twins:
            twin.data["management_address"] = container_ip(twin)
    elif wiring == "switch":
        switch = start_switch(build_image())
        for twin in twins:
            plug(switch, twin)
    return twins


def reboot_count(twin: Twin) -> int:
    return int(docker("inspect", "-f", "{{.RestartCount}}", twin.container).stdout.strip())


def destroy(twins: list[Twin]) -> None:
    """Remove these twins and the switch they hang off (cable ends and switch ports go with
    the network namespaces)."""
    switches = {t.switch.container for t in twins if t.switch is not None}
    if twins:
        docker("rm", "-f", *[t.container for t in twins], *sorted(switches), check=False)


def containers(label: str) -> list[str]:
    """The names of the containers, running or not, that carry `label` (key=value)."""
    listed = docker("ps", "-a", "--filter", f"label={label}", "--format", "{{.Names}}")
    return listed.stdout.split()


def down() -> list[str]:
    """Remove the twins of this namespace, and only them; the names removed."""
    claim_namespace()
    names = containers(f"{NAMESPACE_LABEL}={namespace()}")
    if names:
        docker("rm", "-f", *names)
    return names


def legacy_twins() -> list[str]:
    """Twins of harness versions without namespaces: any checkout's, so `down` leaves them."""
    return containers(LEGACY_LABEL)
