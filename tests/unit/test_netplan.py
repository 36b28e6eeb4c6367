"""Netplan's claims on the QSFP interfaces (NVIDIA's /etc/netplan/40-cx7.yaml, rendered by
DGX OS to NetworkManager profiles netplan-<interface>): the network fact's lines in, the
takeover's commands or the refusal out."""

from __future__ import annotations

import base64
import hashlib

import pytest
from pyinfra.api import OperationError

from sparkdeploy.config.paths import NETPLAN_BACKUP
from sparkdeploy.config.spark import SparkSettings
from sparkdeploy.deploys.qsfp.network import (
    ClaimedFile,
    NetplanDecision,
    NetplanPlan,
    RenderedProfile,
    netplan_decision,
    netplan_plan,
    netplan_taken_over,
)
from sparkdeploy.facts.network import Network, QsfpNetwork
from sparkdeploy.facts.store import run_store
from tests.unit.operations import given, pair, run
from tests.unit.samples import docstring_sample

CX7 = "/etc/netplan/40-cx7.yaml"
KEYFILES = "/run/NetworkManager/system-connections"
# NVIDIA's connect-two-sparks file (PB README, July 2026), for this inventory's interfaces.
PLAYBOOK = """\
network:
  version: 2
  ethernets:
    enp1s0f0np0:
      addresses:
        - 192.168.100.1/24
      dhcp4: no
    enP2p1s0f0np0:
      addresses:
        - 192.168.101.1/24
      dhcp4: no
"""
WITH_MANAGEMENT = (
    PLAYBOOK
    + """\
    enP7s7:
      dhcp4: yes
"""
)
BY_MAC = """\
network:
  ethernets:
    cx7:
      match: {macaddress: "58:a2:e1:00:00:01"}
      set-name: enp1s0f0np0
"""
OWN_UUID = "46c79729-8787-4d07-931d-f363df05dde0"  # the sample's qsfp-enp1s0f0np0
BASE = [
    line
    for line in docstring_sample(QsfpNetwork)
    if not line.startswith(("netplan", "ping."))
]  # fmt: skip


def lines(path: str, text: str, interfaces: tuple[str, ...], keyfiles: bool = True) -> list[str]:
    """What the fact prints for a netplan file that mentions ``interfaces`` (and the
    keyfiles netplan rendered for them, when it did)."""
    encoded = base64.b64encode(text.encode()).decode()
    return [
        *(f"netplan={path}:{interface}" for interface in interfaces),
        f"netplan_file={path} {encoded}",
        *(
            f"netplan_profile={KEYFILES}/netplan-{interface}.nmconnection:{interface}"
            for interface in (interfaces if keyfiles else ())
        ),
    ]


def facts(*extra: str) -> Network:
    return QsfpNetwork().process([*BASE, *extra])


def spark(**keys) -> SparkSettings:
    rails = [
        {"interface": "enp1s0f0np0", "address": "192.168.100.1/24"},
        {"interface": "enP2p1s0f0np0", "address": "192.168.101.1/24"},
    ]
    return SparkSettings.model_validate({"ssh_host": "spark-1", "qsfp": rails, **keys})


BOTH = ("enp1s0f0np0", "enP2p1s0f0np0")
BACKUP = f"{NETPLAN_BACKUP}/40-cx7.yaml.{hashlib.sha256(PLAYBOOK.encode()).hexdigest()[:12]}"


def test_the_playbooks_file_is_moved_aside_and_its_profiles_removed_without_netplan_apply():
    plan = netplan_plan(spark(), facts(*lines(CX7, PLAYBOOK, BOTH)))
    assert plan.problems == []
    assert plan.commands == [
        f"install -d -m 0700 {NETPLAN_BACKUP}",
        f"mv -f {CX7} {BACKUP}",
        f"rm -f {KEYFILES}/netplan-enP2p1s0f0np0.nmconnection",
        f"rm -f {KEYFILES}/netplan-enp1s0f0np0.nmconnection",
        "nmcli connection reload",
    ]
    assert plan.changes == [
        f"moved {CX7}, which configured enP2p1s0f0np0, enp1s0f0np0 through netplan, to "
        f"{BACKUP} (to restore it: sudo mv {BACKUP} {CX7})",
        f"removed NetworkManager profile netplan-enP2p1s0f0np0 ({KEYFILES}/"
        "netplan-enP2p1s0f0np0.nmconnection), which netplan rendered for enP2p1s0f0np0",
        f"removed NetworkManager profile netplan-enp1s0f0np0 ({KEYFILES}/"
        "netplan-enp1s0f0np0.nmconnection), which netplan rendered for enp1s0f0np0",
    ]
    assert not any("netplan apply" in command for command in plan.commands)


def test_once_taken_over_a_second_run_changes_nothing():
    after = facts()  # the file is in the backup folder, the keyfiles are gone
    assert netplan_plan(spark(), after) == NetplanPlan([], [], [])


def test_a_file_not_yet_rendered_is_moved_and_nothing_is_reloaded():
    plan = netplan_plan(spark(), facts(*lines(CX7, PLAYBOOK, BOTH, keyfiles=False)))
    assert plan.commands == [f"install -d -m 0700 {NETPLAN_BACKUP}", f"mv -f {CX7} {BACKUP}"]


def test_a_profile_left_behind_by_netplan_is_removed_alone():
    stray = f"netplan_profile={KEYFILES}/netplan-enp1s0f0np0.nmconnection:enp1s0f0np0"
    plan = netplan_plan(spark(), facts(stray))
    assert plan.commands == [
        f"rm -f {KEYFILES}/netplan-enp1s0f0np0.nmconnection",
        "nmcli connection reload",
    ]


def test_networkmanagers_own_files_for_the_deploys_profiles_are_not_claims():
    own = f"/etc/netplan/90-NM-{OWN_UUID}.yaml"
    text = (
        "network:\n  ethernets:\n    NM-x:\n      renderer: NetworkManager\n"
        "      match: {name: enp1s0f0np0}\n"
    )
    rendered = f"netplan_profile={KEYFILES}/netplan-NM-{OWN_UUID}.nmconnection:enp1s0f0np0"
    assert netplan_plan(spark(), facts(*lines(own, text, BOTH[:1], False), rendered)).commands == []


def test_a_file_that_also_configures_another_interface_is_refused_with_the_edit():
    plan = netplan_plan(spark(), facts(*lines(CX7, WITH_MANAGEMENT, BOTH)))
    assert plan.commands == []
    assert plan.problems == [
        f"{CX7} configures enP2p1s0f0np0, enp1s0f0np0 through netplan, and it also configures "
        "enP7s7: the deploy moves a netplan file aside only when it configures nothing but "
        "QSFP interfaces this Spark lists. Fix: remove the stanzas of enP2p1s0f0np0, "
        f"enp1s0f0np0 from {CX7} and keep the rest, then sudo rm -f "
        f"{KEYFILES}/netplan-enp1s0f0np0.nmconnection "
        f"{KEYFILES}/netplan-enP2p1s0f0np0.nmconnection && sudo nmcli connection reload "
        "(not `netplan apply`, which drops the management address for about a second)"
    ]


@pytest.mark.parametrize(
    "path, text, why",
    [
        (CX7, BY_MAC, "it also configures cx7 (matched by more than its name)"),
        (CX7, "network: [", "it could not be read (it is not valid YAML"),
        ("/lib/netplan/40-cx7.yaml", PLAYBOOK, "the deploy takes over files under /etc/netplan"),
    ],
    ids=["matched-by-mac", "not-yaml", "outside-etc"],
)
def test_what_cannot_be_moved_safely_is_refused(path: str, text: str, why: str):
    plan = netplan_plan(spark(), facts(*lines(path, text, BOTH[:1])))
    [problem] = plan.problems
    assert why in problem and plan.commands == []


def test_refuse_mode_gives_the_exact_commands_instead():
    plan = netplan_plan(spark(qsfp_netplan="refuse"), facts(*lines(CX7, PLAYBOOK, BOTH)))
    assert plan.commands == []
    assert plan.problems == [
        f"{CX7} configures enP2p1s0f0np0, enp1s0f0np0 through netplan, which renders "
        "NetworkManager profiles that compete with the deploy's qsfp-enP2p1s0f0np0, "
        "qsfp-enp1s0f0np0 (qsfp_netplan: refuse). Fix: sudo install -d -m 0700 "
        f"{NETPLAN_BACKUP} && sudo mv {CX7} {NETPLAN_BACKUP}/40-cx7.yaml && sudo rm -f "
        f"{KEYFILES}/netplan-enp1s0f0np0.nmconnection "
        f"{KEYFILES}/netplan-enP2p1s0f0np0.nmconnection && sudo nmcli connection reload "
        "(not `netplan apply`, which drops the management address for about a second), or "
        "set qsfp_netplan: take_over"
    ]
    stray = f"netplan_profile={KEYFILES}/netplan-enp1s0f0np0.nmconnection:enp1s0f0np0"
    [problem] = netplan_plan(spark(qsfp_netplan="refuse"), facts(stray)).problems
    assert problem.startswith("NetworkManager profile netplan-enp1s0f0np0 (")


def test_the_operation_yields_the_takeover_and_says_what_it_changed():
    host = pair()["spark-1"]  # the twins' rails: enp1s0f0np0, enP2p1s0f0np0
    given(host, QsfpNetwork, facts(*lines(CX7, PLAYBOOK, BOTH)))
    outcome = run(netplan_taken_over, host)
    assert outcome.commands[1] == f"mv -f {CX7} {BACKUP}"
    assert outcome.commands[-1] == "nmcli connection reload"
    notices = [text for _, text in run_store(host.state).notices["spark-1"]]
    assert f"NETPLAN: moved {CX7}" in notices[0] and len(notices) == 3
    given(host, QsfpNetwork, facts())
    assert run(netplan_taken_over, host).noop == "netplan configures no QSFP interface"
    given(host, QsfpNetwork, facts(*lines(CX7, WITH_MANAGEMENT, BOTH)))
    with pytest.raises(OperationError, match="also configures enP7s7"):
        run(netplan_taken_over, host)


def test_the_fact_reads_the_files_and_the_rendered_profiles_of_the_qsfp_interfaces_only():
    command = QsfpNetwork().command(list(BOTH), [], "/sys", "/etc/spark-deploy/nccl.env")
    assert (
        "grep -HxF -e interface-name=enp1s0f0np0 -e interface-name=enP2p1s0f0np0 "
        f"{KEYFILES}/netplan-*.nmconnection" in command
    )
    assert "grep -lwF -e enp1s0f0np0 -e enP2p1s0f0np0 /etc/netplan/*.yaml" in command
    assert "base64 -w0" in command and "netplan apply" not in command
    parsed = facts(*lines(CX7, PLAYBOOK, BOTH))
    assert parsed.netplan_files == {CX7: PLAYBOOK}
    assert parsed.netplan_profiles[0] == (
        f"{KEYFILES}/netplan-enp1s0f0np0.nmconnection",
        "enp1s0f0np0",
    )
    assert facts(f"netplan_file={CX7} !!not-base64").netplan_files == {CX7: None}


# --- the decision, apart from its words -----------------------------------------------


def rendered(interface: str) -> RenderedProfile:
    return RenderedProfile(f"{KEYFILES}/netplan-{interface}.nmconnection", interface)


def test_the_decision_moves_the_playbooks_file_and_removes_every_rendered_profile():
    decision = netplan_decision(spark(), facts(*lines(CX7, PLAYBOOK, BOTH)))
    keyfiles = tuple(profile.keyfile for profile in map(rendered, BOTH))
    assert decision == NetplanDecision(
        files=(ClaimedFile(CX7, tuple(sorted(BOTH)), keyfiles, "move", moved=BACKUP),),
        remove=(rendered("enP2p1s0f0np0"), rendered("enp1s0f0np0")),
    )
    assert netplan_decision(spark(), facts()) == NetplanDecision()


@pytest.mark.parametrize(
    "path, text, verdict",
    [
        (CX7, WITH_MANAGEMENT, "mixed"),
        (CX7, BY_MAC, "mixed"),
        (CX7, "network: [", "unreadable"),
        ("/lib/netplan/40-cx7.yaml", PLAYBOOK, "outside"),
    ],
)
def test_a_file_refused_removes_no_profile(path: str, text: str, verdict: str):
    decision = netplan_decision(spark(), facts(*lines(path, text, BOTH)))
    [file] = decision.files
    assert file.verdict == verdict and file.moved == "" and decision.remove == ()


def test_in_refuse_mode_only_profiles_no_file_configures_are_refused_alone():
    stray = f"netplan_profile={KEYFILES}/netplan-enP2p1s0f0np0.nmconnection:enP2p1s0f0np0"
    decision = netplan_decision(
        spark(qsfp_netplan="refuse"), facts(*lines(CX7, PLAYBOOK, BOTH[:1]), stray)
    )
    [file] = decision.files
    assert file.verdict == "refuse" and file.interfaces == BOTH[:1]
    assert decision.refuse == (rendered("enP2p1s0f0np0"),) and decision.remove == ()
