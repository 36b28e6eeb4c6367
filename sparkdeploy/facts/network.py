"""
The QSFP network of a Spark as one fact: one SSH round trip answers every question the
network operations and the path proof ask.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import re
from dataclasses import dataclass

from pyinfra.api import FactBase, Host

from sparkdeploy.config.paths import NCCL_ENV, NETPLAN_NM_DIR, QSFP_PROFILE_PREFIX
from sparkdeploy.config.spark import QsfpInterface
from sparkdeploy.config.topology import Place
from sparkdeploy.escape import shell
from sparkdeploy.facts.roce import Gid, gid_table_command, parse_gid_lines
from sparkdeploy.facts.store import gathered

# The NetworkManager properties the deploy manages on a QSFP profile, in nmcli's names.
PROFILE_FIELDS = (
    "connection.uuid",
    "connection.interface-name",
    "connection.autoconnect",
    "ipv4.method",
    "ipv4.addresses",
    "802-3-ethernet.mtu",
    "ipv6.method",
    "ipv4.route-table",
    "ipv4.routing-rules",
    "GENERAL.STATE",  # "activated" while the profile is up; absent when it is not
)
NETPLAN_GLOBS = ("/etc/netplan/*.yaml", "/run/netplan/*.yaml", "/lib/netplan/*.yaml")
NETPLAN_MAX_BYTES = 65536  # a netplan file read whole for the takeover (40-cx7.yaml: ~300 B)
# Two full frames, don't fragment, 50 ms apart: every run's proof waits for the second
# (iputils lets any user go down to 2 ms; Ubuntu 24.04 has 20240117).
PING = "ping -n -q -c 2 -i 0.05 -W 1 -M do"
IP_HEADERS = 28  # IPv4 (20) + ICMP (8): a full frame's ping payload is MTU - 28
LINK = re.compile(r"^\d+: (?P<name>[^:@ ]+)(@\S+)?: <(?P<flags>[^>]*)> .*\bmtu (?P<mtu>\d+)")
ADDR = re.compile(r"^\d+: (?P<name>\S+)\s+inet (?P<cidr>\S+)")
MAC = re.compile(r"\blink/ether (?P<mac>[0-9a-f]{2}(?::[0-9a-f]{2}){5})\b")
# A neighbour `ip -o neigh show dev IF` lists with the MAC that answered for it.
NEIGHBOUR = re.compile(r"^(?P<ip>\d+\.\d+\.\d+\.\d+) .*\blladdr (?P<mac>[0-9a-f:]{17})\b")


def captured(key: str, command: str, keep: str = "") -> list[str]:
    """
    Shell lines that run ``command`` and print ``key=<exit status> <output>``, its stdout
    and stderr on one line (only the lines matching the extended regex ``keep``, when
    given). The exit status is the command's own, so the fact's command still succeeds.
    """
    q = shell
    kept = f" | grep -E {q(keep)}" if keep else ""
    return [
        f"o=$({command} 2>&1)",
        f"printf {q(f'{key}=%s %s')}'\\n' $? \"$(printf '%s\\n' \"$o\"{kept} | tr '\\n' ' ')\"",
    ]


def captured_together(commands: list[tuple[str, str]], keep: str = "") -> list[str]:
    """
    ``captured`` for several commands run at once (``key``, ``command`` each): each in the
    background into a private temporary folder, then every ``key=<exit status> <output>``
    line in the given order. The proof's pings wait on the wire, not the CPU: run one after
    another they cost their intervals over again on every run, converged or not.
    """
    if not commands:
        return []
    q = shell
    kept = f" | grep -E {q(keep)}" if keep else ""
    lines = ["t=$(mktemp -d) || exit 1"]
    for index, (_, command) in enumerate(commands):
        lines.append(f'{{ ( {command} ) > "$t/{index}" 2>&1; echo $? > "$t/{index}.rc"; }} &')
    lines.append("wait")
    for index, (key, _) in enumerate(commands):
        lines.append(
            f'printf {q(f"{key}=%s %s")}\'\\n\' "$(cat "$t/{index}.rc")" '
            f"\"$(cat \"$t/{index}\"{kept} | tr '\\n' ' ')\""
        )
    return [*lines, 'rm -rf "$t"']


def parse_captured(value: str) -> tuple[int, str]:
    """A ``captured`` line's value (after ``key=``): exit status and output."""
    status, _, output = value.partition(" ")
    return (int(status) if status.isdigit() else -1), output.strip()


def profile_name(interface: str) -> str:
    return f"{QSFP_PROFILE_PREFIX}{interface}"


@dataclass(frozen=True)
class Link:
    name: str
    mtu: int
    up: bool
    addresses: tuple[str, ...] = ()  # IPv4 CIDRs, as `ip` shows them
    mac: str = ""  # its Ethernet address, "" when it has none


@dataclass(frozen=True)
class Ping:
    interface: str
    ok: bool
    detail: str  # ping's summary and error lines
    to: str = ""  # the address pinged


@dataclass(frozen=True)
class Network:
    nmcli: bool  # NetworkManager answers (nmcli present, daemon running)
    ssh_connection: str  # $SSH_CONNECTION of the deploy's session: client port server port
    ssh_devs: tuple[str, ...]  # interfaces carrying the SSH session (route, local address)
    default_devs: tuple[str, ...]  # interfaces of the default routes
    links: dict[str, Link]
    devices: dict[str, dict[str, str]]  # QSFP interface -> NM device fields (GENERAL.*)
    profiles: dict[str, dict[str, str]]  # existing QSFP profile name -> PROFILE_FIELDS
    netplan: tuple[tuple[str, str], ...]  # (file, interface) for each mention
    pings: dict[tuple[str, str], Ping]  # (interface, address pinged) -> result
    gids: tuple[Gid, ...]
    env_sha256: str  # of the engine environment file, "" when it is missing
    # The text of each netplan file that mentions a QSFP interface (None: unreadable or
    # larger than NETPLAN_MAX_BYTES), and the NetworkManager keyfiles netplan rendered for a
    # QSFP interface: (keyfile, interface).
    netplan_files: dict[str, str | None] = dataclasses.field(default_factory=dict)
    netplan_profiles: tuple[tuple[str, str], ...] = ()


class QsfpNetwork(FactBase):
    """
    Returns the state of a Spark's QSFP network in one round trip: NetworkManager's
    profiles and devices for the QSFP interfaces, every link with its MTU and IPv4
    addresses, the interfaces of the SSH session and the default route, netplan files that
    mention a QSFP interface (with their text, base64) and the NetworkManager profiles netplan
    rendered for one, a don't-fragment ping to each other Spark the proof pings on every
    rail, the RoCE GID tables and the checksum of the engine environment file.

    Sample output of the command::

        nm=running
        ssh=192.168.1.20 51612 192.168.1.50 22
        ssh_dev=enP7s7
        ssh_dev=enP7s7
        default_dev=enP7s7
        link=4: enp1s0f0np0: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 9000 qdisc mq state UP ...
        addr=4: enp1s0f0np0    inet 192.168.100.1/24 brd 192.168.100.255 scope global ...
        nmdev.enp1s0f0np0=GENERAL.STATE:100 (connected)
        nmdev.enp1s0f0np0=GENERAL.CONNECTION:qsfp-enp1s0f0np0
        profile.qsfp-enp1s0f0np0=connection.uuid:46c79729-8787-4d07-931d-f363df05dde0
        profile.qsfp-enp1s0f0np0=ipv4.addresses:192.168.100.1/24
        profile.qsfp-enp1s0f0np0=GENERAL.STATE:activated
        netplan=/etc/netplan/40-cx7.yaml:enp1s0f0np0
        netplan_file=/etc/netplan/40-cx7.yaml bmV0d29yazoKICBldGhlcm5ldHM6CiAgICBlbnAxczBmMG5wMDoge2RoY3A0OiBub30K
        netplan_profile=/run/NetworkManager/system-connections/netplan-enp1s0f0np0.nmconnection:enp1s0f0np0
        ping.enp1s0f0np0@192.168.100.2=0 2 packets transmitted, 2 received, 0% packet loss, time 201ms
        gid=/sys/class/infiniband/rocep1s0f0/ports/1/gids/3:0000:...:ffff:c0a8:6401
        gid=/sys/class/infiniband/rocep1s0f0/ports/1/gid_attrs/types/3:RoCE v2
        gid=/sys/class/infiniband/rocep1s0f0/ports/1/gid_attrs/ndevs/3:enp1s0f0np0
        env_sha256=9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08

    ``pings`` are (interface, address, payload bytes); pyinfra runs facts through
    sudo, which drops $SSH_CONNECTION, so it is read from the nearest ancestor process that
    still has it (the sudo process itself).
    """

    def command(
        self,
        interfaces: list[str],
        pings: list[tuple[str, str, int]],
        sysfs_root: str,
        env_file: str,
    ) -> str:
        q = shell
        lines = [
            "printf 'nm=%s\\n' \"$(nmcli -t -f RUNNING general 2>/dev/null)\"",
            "p=$$; c=",
            'while [ -z "$c" ] && [ "${p:-1}" -gt 1 ]; do',
            "  c=$(tr '\\0' '\\n' < /proc/$p/environ 2>/dev/null | sed -n 's/^SSH_CONNECTION=//p')",
            "  p=$(sed 's/.*) //' /proc/$p/stat 2>/dev/null | cut -d' ' -f2)",
            "done",
            "printf 'ssh=%s\\n' \"$c\"",
            "set -- $c",
            'if [ -n "$1" ]; then ip -o route get "$1" 2>/dev/null'
            " | sed -n 's/.* dev \\([^ ]*\\).*/ssh_dev=\\1/p'; fi",
            'if [ -n "$3" ]; then ip -o addr show to "$3" 2>/dev/null'
            " | awk '{print \"ssh_dev=\" $2}'; fi",
            "{ ip -o route show default; ip -o -6 route show default; } 2>/dev/null"
            " | sed -n 's/.* dev \\([^ ]*\\).*/default_dev=\\1/p'",
            "ip -o link show | sed 's/^/link=/'",
            "ip -o -4 addr show | sed 's/^/addr=/'",
        ]
        for interface in interfaces:
            profile = profile_name(interface)
            lines += [
                f"nmcli -t -f GENERAL.STATE,GENERAL.CONNECTION device show {q(interface)}"
                f" 2>/dev/null | sed {q(f's/^/nmdev.{interface}=/')}",
                f"nmcli -t -f {','.join(PROFILE_FIELDS)} connection show {q(profile)}"
                f" 2>/dev/null | sed {q(f's/^/profile.{profile}=/')}",
            ]
        lines += _netplan_lines(interfaces)
        lines += captured_together(
            [
                (
                    f"ping.{interface}@{peer}",
                    f"{PING} -s {int(payload)} -I {q(interface)} {q(peer)}",
                )
                for interface, peer, payload in pings
            ],
            keep="transmitted|rror|nreachable|too long",
        )
        lines += [
            gid_table_command(sysfs_root),
            f"printf 'env_sha256=%s\\n' \"$(sha256sum {q(env_file)} 2>/dev/null | cut -d' ' -f1)\"",
        ]
        return "\n".join(lines)

    def process(self, output: list[str]) -> Network:
        raw = _keyed(output)

        def one(key: str) -> str:
            return raw.get(key, [""])[0].strip()

        subjects, pings = _subjects(raw)
        return Network(
            nmcli=one("nm") == "running",
            ssh_connection=one("ssh"),
            ssh_devs=tuple(dict.fromkeys(raw.get("ssh_dev", []))),
            default_devs=tuple(dict.fromkeys(raw.get("default_dev", []))),
            links=_links(raw),
            devices=subjects["nmdev"],
            profiles=subjects["profile"],
            netplan=_colon_pairs(raw.get("netplan", [])),
            pings=pings,
            gids=parse_gid_lines(raw.get("gid", [])),
            env_sha256=one("env_sha256"),
            netplan_files=dict(
                _netplan_text(value) for value in raw.get("netplan_file", []) if " " in value
            ),
            netplan_profiles=_colon_pairs(raw.get("netplan_profile", [])),
        )


def _netplan_lines(interfaces: list[str]) -> list[str]:
    """The netplan files that mention a QSFP interface (with their text, base64) and the
    NetworkManager profiles netplan rendered for one."""
    if not interfaces:
        return []
    q = shell
    words = " ".join(f"-e {q(interface)}" for interface in interfaces)
    names = " ".join(f"-e {q('interface-name=' + interface)}" for interface in interfaces)
    return [
        f"grep -HowF {words} {' '.join(NETPLAN_GLOBS)} 2>/dev/null | sort -u | sed 's/^/netplan=/'",
        f"grep -lwF {words} {' '.join(NETPLAN_GLOBS)} 2>/dev/null | sort -u"
        " | while IFS= read -r f; do printf 'netplan_file=%s %s\\n' \"$f\" "
        f'"$(head -c {NETPLAN_MAX_BYTES + 1} "$f" | base64 -w0)"; done',
        f"grep -HxF {names} "
        f"{NETPLAN_NM_DIR}/netplan-*.nmconnection 2>/dev/null"
        " | sed 's/^/netplan_profile=/; s/:interface-name=/:/'",
    ]


def _keyed(output: list[str]) -> dict[str, list[str]]:
    """The fact's ``key=value`` lines, every value of each key in order."""
    raw: dict[str, list[str]] = {}
    for line in output:
        if "=" in line:
            key, value = line.split("=", 1)
            raw.setdefault(key, []).append(value)
    return raw


def _links(raw: dict[str, list[str]]) -> dict[str, Link]:
    """Each interface's link (``link=`` lines) with its addresses (``addr=`` lines)."""
    addresses: dict[str, list[str]] = {}
    for value in raw.get("addr", []):
        if match := ADDR.match(value):
            addresses.setdefault(match["name"], []).append(match["cidr"])
    links = {}
    for value in raw.get("link", []):
        if match := LINK.match(value):
            name = match["name"]
            up = "UP" in match["flags"].split(",")
            mac = found["mac"] if (found := MAC.search(value)) else ""
            links[name] = Link(name, int(match["mtu"]), up, tuple(addresses.get(name, ())), mac)
    return links


def _subjects(
    raw: dict[str, list[str]],
) -> tuple[dict[str, dict[str, dict[str, str]]], dict[tuple[str, str], Ping]]:
    """NetworkManager's devices and profiles (``nmdev.NAME=``, ``profile.NAME=`` lines of
    ``field:value``), and the pings (``ping.INTERFACE[@TO]=``)."""
    by_subject: dict[str, dict[str, dict[str, str]]] = {"nmdev": {}, "profile": {}}
    pings = {}
    for key, values in raw.items():
        kind, _, subject = key.partition(".")
        if kind in by_subject and subject:
            by_subject[kind][subject] = dict(
                value.split(":", 1) for value in values if ":" in value
            )
        elif kind == "ping" and subject:
            interface, at, to = subject.rpartition("@")
            interface = interface if at else subject
            status, detail = parse_captured(values[0].strip())
            pings[(interface, to)] = Ping(interface, status == 0, detail, to)
    return by_subject, pings


def _colon_pairs(values: list[str]) -> tuple[tuple[str, str], ...]:
    """``head:tail`` values split at their last colon (those without one are dropped)."""
    return tuple(
        (head, tail) for head, colon, tail in (value.rpartition(":") for value in values) if colon
    )


def _netplan_text(value: str) -> tuple[str, str | None]:
    """A ``netplan_file`` line's value: the file, and its text (None when it is not
    UTF-8 text of at most NETPLAN_MAX_BYTES)."""
    path, _, encoded = value.rpartition(" ")
    try:
        data = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        return path, None
    if len(data) > NETPLAN_MAX_BYTES:
        return path, None
    try:
        return path, data.decode()
    except UnicodeDecodeError:
        return path, None


def peer_of(target: Host) -> Host | None:
    """The other Spark of the pair (its pyinfra host), if the inventory has one."""
    place: Place = target.data.place
    return target.inventory.get_host(place.peer) if place.peer else None


def pinged(target: Host) -> list[Host]:
    """The Sparks whose rails this Spark pings in the QSFP proof (its ``qsfp_proof``), in
    rank order: the peer of a pair; through a switch the head, or every other Spark."""
    place: Place = target.data.place
    names = {
        end.name
        for rail in place.rails
        for end in place.ping_ends(rail, target.data.spark.qsfp_proof)
    }
    return [target.inventory.get_host(name) for name in target.inventory.hosts if name in names]


def fact_arguments(target: Host) -> dict:
    """The QsfpNetwork arguments of a Spark, from its settings and its place: its rails,
    a full-size ping to each end the proof pings on each (``Place.ping_ends``), where sysfs
    is, the engine environment."""
    place: Place = target.data.place
    mode = target.data.spark.qsfp_proof
    return {
        "interfaces": [rail.interface for rail in place.rails],
        "pings": [
            (rail.interface, end.ip, rail.mtu - IP_HEADERS)
            for rail in place.rails
            for end in place.ping_ends(rail, mode)
        ],
        "sysfs_root": target.data.spark.sysfs_root,
        "env_file": NCCL_ENV,
    }


def network(target: Host) -> Network:
    """The QSFP network fact of a Spark (this one or its peer), taken once per run."""
    return gathered(target, QsfpNetwork, **fact_arguments(target))


def is_up_as_configured(rail: QsfpInterface, facts: Network) -> bool:
    """The rail's profile is the active one on its device, and the kernel shows its MTU
    and address (nobody changed them behind NetworkManager's back)."""
    name = profile_name(rail.interface)
    device = facts.devices.get(rail.interface, {})
    link = facts.links.get(rail.interface)
    return (
        facts.profiles.get(name, {}).get("GENERAL.STATE") == "activated"
        and device.get("GENERAL.CONNECTION") == name
        and link is not None
        and link.mtu == rail.mtu
        and rail.address in link.addresses
    )


class RingNeighbours(FactBase):
    """
    Returns, for each interface asked about, the (address, MAC) pairs that answered on it
    when every address of ``asked`` was tried through it: which Spark's port is at the far
    end of the cable, whatever subnet it is in (a socket bound to an interface sends to an
    address no route knows as if it were on that link, so the kernel asks for it by ARP
    there; Linux answers ARP for any of its addresses). Run only when a ring's proof failed;
    it first flushes the neighbour cache of those interfaces (a cache: the kernel refills it),
    so that no entry from before a recabling answers for the new cable.

    Sample output of the command::

        neigh.enp1s0f0np0=192.168.1.3 lladdr 3c:6d:66:cc:b3:b7 REACHABLE
    """

    def command(self, asked: list[tuple[str, list[str]]]) -> str:
        q = shell
        lines = [f"ip -4 neigh flush dev {q(interface)} 2>/dev/null" for interface, _ in asked]
        for interface, addresses in asked:
            lines += [
                f"ping -n -q -c 1 -W 1 -I {q(interface)} {q(address)} >/dev/null 2>&1 &"
                for address in addresses
            ]
        lines.append("wait")
        lines += [
            f"ip -o -4 neigh show dev {q(interface)} 2>/dev/null"
            f" | sed {q(f's/^/neigh.{interface}=/')}"
            for interface, _ in asked
        ]
        return "\n".join([*lines, "true"])

    def process(self, output: list[str]) -> dict[str, tuple[tuple[str, str], ...]]:
        found: dict[str, list[tuple[str, str]]] = {}
        for key, values in _keyed(output).items():
            kind, _, interface = key.partition(".")
            if kind != "neigh" or not interface:
                continue
            for value in values:
                if match := NEIGHBOUR.match(value.strip()):
                    found.setdefault(interface, []).append((match["ip"], match["mac"]))
        return {interface: tuple(pairs) for interface, pairs in found.items()}
