"""
QSFP network scenarios on a twin pair linked by the veth "cable" (real NetworkManager):
refusals, converge, idempotence, the jumbo path and addresses seen with `ip`, a RoCE GID
table that moved, a rail whose ends disagree on the MTU, a cable plugged in again; and a
Spark alone without QSFP keys.
"""

from __future__ import annotations

import copy
import shlex

from sparkdeploy.config.paths import DRM_OVERRIDE_CONF, NCCL_ENV
from tests.scenarios.conftest import assert_idempotent
from tests.twins import harness

RAILS = harness.RAILS
RAIL_OP = "Configure the QSFP network | Rail {}: NetworkManager profile"
ENV_OP = (
    "Prove the QSFP path and write the engine environment | "
    f"Write {NCCL_ENV} from what the proof found"
)
DRM_OP = "Remove the memory-capping drm override | Remove the drm override conf (caps CUDA memory at ~62 GB)"
GID_TOOL = "/etc/NetworkManager/dispatcher.d/50-spark-twin-roce-gids"


# A listener on the link test's rendezvous port (29500) for the guard's check: accepts and
# closes, for two minutes at most.
LISTEN = shlex.quote(
    "import socket\n"
    "s = socket.socket()\n"
    "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
    "s.bind(('0.0.0.0', 29500))\n"
    "s.listen()\n"
    "while True:\n"
    "    s.accept()[0].close()\n"
)


def reach(twin: harness.Twin, host: str, port: int, source: str = "") -> int:
    """0 when ``twin`` opens a TCP connection to ``host``:``port`` within 3 s (from the
    address ``source`` when given)."""
    bind = f", source_address=({source!r}, 0)" if source else ""
    code = f"import socket; socket.create_connection(({host!r}, {port}), timeout=3{bind})"
    return twin.exec(f"python3 -c {shlex.quote(code)}", check=False).returncode


def network_only(by_host: dict[str, list[str]]) -> dict[str, list[str]]:
    """The QSFP network's operations (the rest of the deploy is tested elsewhere)."""
    kept = {
        host: [op for op in ops if op.startswith(("Configure the QSFP", "Prove the QSFP"))]
        for host, ops in by_host.items()
    }
    return {host: ops for host, ops in kept.items() if ops}


def network_changes(run) -> dict[str, list[str]]:
    return network_only(run.changed())


def spark(node: int, **keys) -> dict:
    return {"sysfs_root": harness.TWIN_SYSFS, "qsfp": harness.qsfp_plan(node), **keys}


def profiles(twin: harness.Twin) -> list[str]:
    names = twin.exec("nmcli -t -f NAME connection show").stdout.split()
    return [name for name in names if name.startswith("qsfp-")]


def configure(scenario, name: str, **keys) -> None:
    """Give a twin new inventory keys (on a copy: the class spec stays as it is)."""
    twin = scenario.twins[name]
    twin.data = {**copy.deepcopy(twin.data), **keys}
    scenario.write_inventory()


def env(twin: harness.Twin) -> dict[str, str]:
    text = twin.read(NCCL_ENV) or ""
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line and line[0] != "#")


class TestQsfpPair:
    """Two Sparks and the dual-rail cable: configure, prove, record, and refuse."""

    twins = {"net-a": spark(1), "net-b": spark(2)}

    def test_refuses_the_ssh_interface(self, scenario):
        mine = harness.qsfp_plan(1)
        configure(scenario, "net-a", qsfp=[{**mine[0], "interface": "eth0"}, mine[1]])
        run = scenario.deploy()
        assert run.returncode != 0
        assert "net-a refused, nothing was changed on any host" in run.stderr, run.explain()
        assert "qsfp rail 1 (eth0) carries the SSH session of this deploy (" in run.stderr
        assert "and the default route" in run.stderr
        assert run.changed() == {}
        for twin in scenario.twins.values():
            assert profiles(twin) == [], f"{twin.name} got a profile"
            assert twin.exec(f"test -e {DRM_OVERRIDE_CONF}", check=False).returncode == 0
        configure(scenario, "net-a", qsfp=mine)

    def test_refuses_clashing_addresses(self, scenario):
        mine = harness.qsfp_plan(2)
        clash = [
            {**mine[0], "address": "192.168.100.1/24"},
            {**mine[1], "address": "192.168.200.2/24"},
        ]
        configure(scenario, "net-b", qsfp=clash)
        run = scenario.deploy()
        assert run.returncode == 2, run.explain()
        assert (
            "host 'net-b', key 'qsfp', rail 1, 'address': 192.168.100.1 is also the address "
            "of host 'net-a' on rail 1" in run.stderr
        )
        assert (
            "host 'net-b', key 'qsfp', rail 2, 'address': 192.168.200.2/24 is not in "
            "192.168.101.0/24, the subnet of rail 2 on host 'net-a'" in run.stderr
        )
        assert "Connecting to hosts" not in run.stderr
        configure(scenario, "net-b", qsfp=mine)

    def test_converge(self, scenario):
        run = scenario.deploy()
        assert run.returncode == 0, run.explain()
        ops = [RAIL_OP.format(1), RAIL_OP.format(2), ENV_OP]
        assert network_changes(run) == {"net-a": ops, "net-b": ops}
        for name in scenario.twins:
            assert f"[{name}] QSFP proven: rail 1 enp1s0f0np0" in run.stderr

    def test_idempotence(self, scenario):
        run = scenario.deploy()
        assert_idempotent(run)
        # preflight, host state, and the network fact (pings and GID tables included)
        assert run.remote_commands() == {"net-a": 3, "net-b": 3}, run.stderr
        assert (
            "[net-b] QSFP proven: rail 1 enp1s0f0np0 192.168.100.2: RoCE v2 GID index 3 "
            "on rocep1s0f0 port 1; rail 2 enP2p1s0f0np0 192.168.101.2: RoCE v2 GID index "
            "3 on roceP2p1s0f0 port 1, jumbo path to net-a proven" in run.stderr
        )

    def test_control_ports_answer_the_peer_only(self, scenario):
        """The fabric guard on a pair: the link test's rendezvous port (a control port) on
        net-a answers net-b's rail address and loopback, not a third address on the same
        rail (a host on a shared switch); SSH still answers that address; the table is the
        deploy's own (the idempotence run before this one reloaded nothing)."""
        a, b = scenario.twins["net-a"], scenario.twins["net-b"]
        table = a.exec("nft list table inet spark_deploy").stdout
        assert "192.168.100.2" in table and "29500" in table, table
        stranger = "192.168.100.77"
        b.exec(f"ip addr add {stranger}/24 dev {RAILS[0]}")
        a.exec(f"systemd-run --unit=spark-probe-listener --collect timeout 120 python3 -c {LISTEN}")
        try:
            a.exec("for i in $(seq 50); do ss -ltn | grep -q ':29500 ' && break; sleep 0.1; done")
            assert reach(a, "127.0.0.1", 29500) == 0
            assert reach(b, "192.168.100.1", 29500) == 0
            assert reach(b, "192.168.100.1", 29500, source=stranger) != 0, "the stranger got in"
            assert reach(b, "192.168.100.1", 22, source=stranger) == 0, "SSH was blocked"
        finally:
            a.exec("systemctl stop spark-probe-listener", check=False)
            b.exec(f"ip addr del {stranger}/24 dev {RAILS[0]}", check=False)

    def test_verify_with_ip(self, scenario):
        for node, twin in enumerate(scenario.twins.values(), start=1):
            for i, rail in enumerate(RAILS):
                link = twin.exec(f"ip -o link show dev {rail}").stdout
                assert " mtu 9000 " in link and "state UP" in link, link
                addresses = twin.exec(f"ip -o -4 addr show dev {rail}").stdout.split()
                assert addresses[3] == f"192.168.{100 + i}.{node}/24", addresses
                assert twin.exec(f"ip -o -6 addr show dev {rail}").stdout == ""  # IPv6 off
                profile = twin.exec(
                    "nmcli -t -g connection.autoconnect,ipv4.method,802-3-ethernet.mtu "
                    f"connection show qsfp-{rail}"
                ).stdout.split()
                assert profile == ["yes", "manual", "9000"], profile
        a = scenario.twins["net-a"]
        for i, rail in enumerate(RAILS):
            peer = f"192.168.{100 + i}.2"
            full = a.exec(f"ping -c 1 -W 2 -M do -s 8972 -I {rail} {peer}", check=False)
            assert full.returncode == 0, full.stdout + full.stderr
            over = a.exec(f"ping -c 1 -W 1 -M do -s 8973 -I {rail} {peer}", check=False)
            assert over.returncode != 0, "a frame over MTU 9000 went through"

    def test_engine_environment(self, scenario):
        for name, peer in (("net-a", "192.168.100.2"), ("net-b", "192.168.100.1")):
            twin = scenario.twins[name]
            values = env(twin)
            assert values["NCCL_IB_HCA"] == "rocep1s0f0,roceP2p1s0f0"
            assert values["NCCL_IB_GID_INDEX"] == "3"
            # host facts only: the socket interfaces and host-IP variables are the engine
            # profile's (multinode.env), per engine and release
            assert "NCCL_SOCKET_IFNAME" not in values and "VLLM_HOST_IP" not in values
            assert values["SPARK_PEER_ADDR"] == peer
            assert values["SPARK_HEAD_ADDR"] == "192.168.100.1"
            mode = twin.exec(f"stat -c '%a %U %G' {NCCL_ENV}").stdout.strip()
            assert mode == "644 root root"
        assert env(scenario.twins["net-a"])["SPARK_NODE_RANK"] == "0"
        assert env(scenario.twins["net-b"])["SPARK_NODE_RANK"] == "1"

    def test_the_playbooks_netplan_file_is_taken_over(self, scenario):
        a = scenario.twins["net-a"]
        a.exec(
            "mkdir -p /etc/netplan && printf 'network:\\n  version: 2\\n  renderer: networkd\\n"
            "  ethernets:\\n    enp1s0f0np0:\\n      mtu: 9000\\n' > /etc/netplan/40-cx7.yaml"
        )
        run = scenario.deploy()
        assert run.returncode == 0, run.explain()
        assert (
            "[net-a] NETPLAN: moved /etc/netplan/40-cx7.yaml, which configured enp1s0f0np0 "
            "through netplan, to /var/lib/spark-deploy/netplan-backup/40-cx7.yaml." in run.stderr
        ), run.explain()
        assert "[net-b] NETPLAN" not in run.stderr
        assert a.exec("test -e /etc/netplan/40-cx7.yaml", check=False).returncode != 0
        backup = a.exec("cat /var/lib/spark-deploy/netplan-backup/40-cx7.yaml.*").stdout
        assert "renderer: networkd" in backup
        assert_idempotent(scenario.deploy())
        a.exec("rm -rf /var/lib/spark-deploy/netplan-backup")

    def test_moved_gid_index_is_refused_with_the_table(self, scenario):
        b = scenario.twins["net-b"]
        # What a Spark can show after a reboot: other GIDs first, RoCE v2 IPv4 at index 5.
        b.exec(
            "echo leading_gids=1 > /etc/spark-twin/roce.conf && "
            + " && ".join(f"{GID_TOOL} {rail} up" for rail in RAILS)
        )
        run = scenario.deploy()
        assert run.returncode != 0
        assert "net-b: the QSFP path is not proven, nothing was changed on any host" in run.stderr
        assert (
            "rail 1 (enp1s0f0np0, 192.168.100.2): the RoCE v2 GID of 192.168.100.2 is at "
            "index 5 on rocep1s0f0 port 1, not 3 (roce_gid_index)" in run.stderr
        ), run.explain()
        assert (
            "0000:0000:0000:0000:0000:ffff:c0a8:6402  192.168.100.2  v2   enp1s0f0np0" in run.stderr
        )
        assert run.changed() == {}
        assert env(b)["NCCL_IB_GID_INDEX"] == "3"

    def test_auto_gid_index_records_what_was_found(self, scenario):
        configure(scenario, "net-b", roce_gid_index="auto")
        run = scenario.deploy()
        assert run.returncode == 0, run.explain()
        assert network_changes(run) == {"net-b": [ENV_OP]}
        assert env(scenario.twins["net-b"])["NCCL_IB_GID_INDEX"] == "5"
        assert env(scenario.twins["net-a"])["NCCL_IB_GID_INDEX"] == "3"
        assert_idempotent(scenario.deploy())

    def test_mtu_mismatch_names_the_rail_addresses_and_mtus(self, scenario):
        mine = harness.qsfp_plan(2)
        configure(scenario, "net-b", qsfp=[mine[0], {**mine[1], "mtu": 1500}])
        run = scenario.deploy()
        assert run.returncode != 0
        assert network_changes(run) == {"net-b": [RAIL_OP.format(2), ENV_OP]}, run.explain()
        assert network_only(run.errors()) == {"net-a": [ENV_OP]}
        assert (
            "rail 2: net-a enP2p1s0f0np0 192.168.101.1 (MTU 9000) got no reply from net-b "
            "enP2p1s0f0np0 192.168.101.2 (MTU 1500) to a 8972-byte don't-fragment ping"
            in run.stderr
        ), run.explain()
        configure(scenario, "net-b", qsfp=mine)
        run = scenario.deploy()
        assert run.returncode == 0, run.explain()
        assert network_changes(run) == {"net-b": [RAIL_OP.format(2), ENV_OP], "net-a": [ENV_OP]}
        assert_idempotent(scenario.deploy())

    def test_replugged_cable_comes_back_by_itself(self, scenario):
        """A new cable (what a twin's reboot amounts to): NetworkManager brings the
        profiles up again (autoconnect) and the deploy has nothing to do."""
        harness.replug_cable(scenario.twins["net-a"], scenario.twins["net-b"])
        assert_idempotent(scenario.deploy())


class TestSparkAlone:
    """One Spark without QSFP keys: no network change, no network fact, no peer check."""

    twins: dict[str, dict] = {"net-solo": {}}

    def test_no_qsfp_keys_no_network(self, scenario):
        solo = scenario.twins["net-solo"]
        before = solo.exec("nmcli -t connection show; ip -o addr").stdout
        run = scenario.deploy()
        assert run.returncode == 0, run.explain()
        assert DRM_OP in run.changed()["net-solo"]
        assert network_changes(run) == {}
        names = " ".join(op["name"] for op in run.results["operations"])
        assert "QSFP" not in names
        run = scenario.deploy()
        assert_idempotent(run)
        assert run.remote_commands() == {"net-solo": 2}  # preflight and host state: no network
        assert "QSFP proven" not in run.stderr and "ping -n" not in run.stderr
        assert "nmcli" not in run.stderr
        assert solo.exec("nmcli -t connection show; ip -o addr").stdout == before
        assert solo.read(NCCL_ENV) is None
