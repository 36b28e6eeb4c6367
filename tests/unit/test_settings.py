"""Settings: merge order, defaults, and every kind of invalid input, all listed at once."""

from __future__ import annotations

import pytest

from sparkdeploy.config.errors import InventoryError
from sparkdeploy.config.spark import SparkSettings
from sparkdeploy.inventory import build_inventory, load_inventory

PATH = "inventory/sparks.yml"


def problems(raw) -> list[str]:
    with pytest.raises(InventoryError) as caught:
        build_inventory(raw, PATH)
    return caught.value.problems


def test_defaults_then_shared_then_host_keys():
    inventory = build_inventory(
        {
            "defaults": {"ssh_user": "nvidia", "allow_reboot": True, "model_dir": "/srv/m/"},
            "sparks": {
                "spark-1": {"ssh_host": "10.0.0.1"},
                "spark-2": {"ssh_host": "10.0.0.2", "allow_reboot": False, "ssh_port": 2222},
            },
        },
        PATH,
    )
    one, two = inventory.sparks["spark-1"], inventory.sparks["spark-2"]
    assert (one.ssh_user, one.allow_reboot, one.ssh_port) == ("nvidia", True, 22)
    assert (two.ssh_user, two.allow_reboot, two.ssh_port) == ("nvidia", False, 2222)
    assert one.model_dir == "/srv/m"  # normalised
    assert one.reboot_timeout == SparkSettings.model_fields["reboot_timeout"].default
    assert list(inventory.sparks) == ["spark-1", "spark-2"]


def test_pyinfra_host_data_carries_ssh_keys_and_settings():
    inventory = build_inventory(
        {"sparks": {"spark-1": {"ssh_host": "h", "ssh_key": "/k", "ssh_user": "u"}}}, PATH
    )
    [(name, data)] = inventory.pyinfra_hosts()
    assert name == "spark-1"
    assert data["ssh_hostname"] == "h" and data["ssh_key"] == "/k" and data["ssh_user"] == "u"
    assert data["ssh_port"] == 22 and data["ssh_strict_host_key_checking"] == "accept-new"
    assert "ssh_known_hosts_file" not in data  # unset keys are left to pyinfra/ssh config
    assert data["spark"] is inventory.sparks["spark-1"]


def test_every_problem_is_listed_at_once_with_file_host_and_key():
    found = problems(
        {
            "defaults": {"ssh_usr": "x", "ssh_host": "shared"},
            "sparks": {
                "spark-1": {"ssh_port": "22", "allow_reboot": "yes", "model_dir": "models"},
                "spark-2": {"ssh_host": "b", "reboot_timeout": 5, "colour": "red"},
            },
        }
    )
    assert found == [
        f"{PATH}: defaults.ssh_usr: unknown key; did you mean 'ssh_user'? valid keys: "
        + ", ".join(SparkSettings.model_fields),
        f"{PATH}: defaults.ssh_host: per-host only; set it under each Spark",
        f"{PATH}: host 'spark-1', key 'ssh_host': required: Address or DNS name the laptop "
        "reaches the Spark's SSH server at",
        f"{PATH}: host 'spark-1', key 'ssh_port': Input should be a valid integer (got '22')",
        f"{PATH}: host 'spark-1', key 'allow_reboot': Input should be a valid boolean (got 'yes')",
        f"{PATH}: host 'spark-1', key 'model_dir': must be an absolute path (letters, digits and . _ + - /), such as "
        "/opt/models (got 'models')",
        f"{PATH}: host 'spark-2', key 'reboot_timeout': Input should be greater than or equal "
        "to 60 (got 5)",
        f"{PATH}: host 'spark-2', key 'colour': unknown key; valid keys: "
        + ", ".join(SparkSettings.model_fields),
    ]


def test_problem_from_shared_defaults_says_where_it_was_set():
    [problem] = problems({"defaults": {"ssh_port": 70000}, "sparks": {"s1": {"ssh_host": "a"}}})
    assert problem.startswith(f"{PATH}: host 's1', key 'ssh_port' (set under defaults:):")
    assert "less than or equal to 65535" in problem


@pytest.mark.parametrize(
    "raw, expected",
    [
        (None, "the file must be a mapping with `sparks:`"),
        ({"sparks": {}}, "sparks: list one to 8 Sparks"),
        ({"sparks": ["a"]}, "sparks: must be a mapping"),
        ({"sparks": {"s1": {"ssh_host": "a"}}, "hosts": 1}, "top-level key 'hosts': unknown"),
        ({"sparks": {"Spark_1": {"ssh_host": "a"}}}, "name must be lower-case letters"),
        ({"sparks": {"s1": "a"}}, "host 's1': must be a mapping"),
        (
            {"sparks": {f"s{i}": {"ssh_host": f"h{i}"} for i in range(9)}},
            "9 hosts given; this project prepares one Spark, a pair cabled to each other, or "
            "up to 8 Sparks through a switch (8 at most)",
        ),
        (
            {"sparks": {"s1": {"ssh_host": "a"}, "s2": {"ssh_host": "a"}}},
            "host 's2', key 'ssh_host': a:22 is also host 's1'",
        ),
        (
            {"sparks": {"s1": {"ssh_host": "a", "ssh_strict_host_key_checking": "maybe"}}},
            "Input should be 'yes', 'accept-new' or 'no' (got 'maybe')",
        ),
    ],
)
def test_invalid_shapes(raw, expected):
    assert any(expected in problem for problem in problems(raw)), problems(raw)


def test_missing_file_says_how_to_make_one(tmp_path):
    with pytest.raises(InventoryError) as caught:
        load_inventory(str(tmp_path / "nope.yml"))
    assert "copy inventory/sparks.example.yml to inventory/sparks.yml" in str(caught.value)
    assert "SPARK_INVENTORY" in str(caught.value)


def test_malformed_yaml_names_line_and_column(tmp_path):
    path = tmp_path / "bad.yml"
    path.write_text("sparks:\n  s1:\n    ssh_host: [unclosed\n")
    with pytest.raises(InventoryError) as caught:
        load_inventory(str(path))
    [problem] = caught.value.problems
    assert problem.startswith(f"{path}:4:1: not valid YAML")


def test_example_inventory_is_valid():
    inventory = load_inventory("inventory/sparks.example.yml")
    assert list(inventory.sparks) == ["spark-1"]


def rails(node: int, first: dict | None = None, second: dict | None = None) -> list[dict]:
    """Spark `node`'s two rails, with changes to the first and second."""
    return [
        {"interface": "enp1s0f0np0", "address": f"192.168.100.{node}/24", **(first or {})},
        {"interface": "enP2p1s0f0np0", "address": f"192.168.101.{node}/24", **(second or {})},
    ]


def pair(one: list, two: list, **shared) -> dict:
    return {
        "defaults": {"ssh_user": "nvidia", **shared},
        "sparks": {
            "spark-1": {"ssh_host": "a", "qsfp": one},
            "spark-2": {"ssh_host": "b", "qsfp": two},
        },
    }


def test_qsfp_rails_with_their_defaults():
    inventory = build_inventory(pair(rails(1), rails(2), roce_gid_index="auto"), PATH)
    one = inventory.sparks["spark-1"]
    assert [(r.interface, r.address, r.mtu, r.ipv6) for r in one.qsfp] == [
        ("enp1s0f0np0", "192.168.100.1/24", 9000, False),
        ("enP2p1s0f0np0", "192.168.101.1/24", 9000, False),
    ]
    assert one.qsfp[1].ip == "192.168.101.1" and str(one.qsfp[1].network) == "192.168.101.0/24"
    assert one.roce_gid_index == "auto" and one.sysfs_root == "/sys"
    alone = build_inventory({"sparks": {"s": {"ssh_host": "a", "ssh_user": "u"}}}, PATH).sparks["s"]
    assert alone.qsfp == [] and alone.roce_gid_index == 3


def test_invalid_rails_are_listed_with_host_key_and_rail():
    found = problems(
        pair(
            [
                {"interface": "enp1s0f0np0", "address": "192.168.100.1"},
                {"interface": "bad name!", "address": "192.168.100.0/24", "mtu": 100, "speed": 1},
            ],
            rails(2, {"address": "300.1.1.1/24"}),
            roce_gid_index=-1,
            sysfs_root="sys",
        )
    )
    where = f"{PATH}: host 'spark-1', key"
    assert found[:6] == [
        f"{where} 'qsfp', rail 1, 'address': must give the prefix length too, such as "
        "192.168.100.1/24 (got '192.168.100.1')",
        f"{where} 'qsfp', rail 2, 'interface': must be a network interface name (up to 15 "
        "letters, digits, '.', '-', '_'; not lo), such as enp1s0f0np0 (got 'bad name!')",
        f"{where} 'qsfp', rail 2, 'address': is the network or broadcast address of "
        "192.168.100.0/24; such as 192.168.100.1/24 (got '192.168.100.0/24')",
        f"{where} 'qsfp', rail 2, 'mtu': Input should be greater than or equal to 1280 (got 100)",
        f"{where} 'qsfp', rail 2, 'speed': unknown key; valid keys: interface, address, mtu, ipv6, port",
        f"{PATH}: defaults.roce_gid_index (inherited by hosts 'spark-1', 'spark-2'): must be "
        "a GID index (0 or more) or auto (got -1)",
    ]
    assert found[6] == (
        f"{PATH}: defaults.sysfs_root (inherited by hosts 'spark-1', 'spark-2'): must be an "
        "absolute path (letters, digits and . _ + - /), such as /sys (got 'sys')"
    )
    assert sum("roce_gid_index" in problem for problem in found) == 1  # not once per Spark
    assert found[7].startswith(
        f"{PATH}: host 'spark-2', key 'qsfp', rail 1, 'address': must "
        "be an IPv4 address with prefix length"
    )


def test_rails_of_one_spark_need_their_own_interfaces_and_subnets():
    [same_subnet] = problems(
        {
            "sparks": {
                "s": {"ssh_host": "a", "qsfp": rails(1, second={"address": "192.168.100.7/24"})}
            }
        }
    )
    assert same_subnet == (
        f"{PATH}: host 's', key 'qsfp': enp1s0f0np0 (192.168.100.1/24) and enP2p1s0f0np0 "
        "(192.168.100.7/24) share a subnet; give each rail its own, such as 192.168.100.0/24 "
        "and 192.168.101.0/24"
    )
    [twice] = problems(
        {"sparks": {"s": {"ssh_host": "a", "qsfp": rails(1, second={"interface": "enp1s0f0np0"})}}}
    )
    assert twice == f"{PATH}: host 's', key 'qsfp': interface enp1s0f0np0 is listed twice"


def test_pair_address_plan_shared_address_and_rail_subnet_mismatch():
    found = problems(
        pair(rails(1), rails(2, {"address": "192.168.100.1/24"}, {"address": "192.168.201.2/24"}))
    )
    assert found == [
        f"{PATH}: host 'spark-2', key 'qsfp', rail 1, 'address': 192.168.100.1 is also the "
        "address of host 'spark-1' on rail 1; each Spark needs its own address",
        f"{PATH}: host 'spark-2', key 'qsfp', rail 2, 'address': 192.168.201.2/24 is not in "
        "192.168.101.0/24, the subnet of rail 2 on host 'spark-1' (192.168.101.1/24); both "
        "ends of a rail share one subnet",
    ]


def test_pair_lists_the_same_rails_on_both():
    [problem] = problems(pair(rails(1), rails(2)[:1]))
    assert problem.startswith(
        f"{PATH}: host 'spark-2', key 'qsfp': 1 rail(s), but host 'spark-1' has 2"
    )
    [problem] = problems(pair(rails(1), []))
    assert "0 rail(s), but host 'spark-1' has 2" in problem


def test_a_defaults_key_is_one_message_however_many_sparks_inherit_it():
    """A bad flag under defaults.engine.args on eight Sparks: one message naming the key and
    the Sparks, not eight (operator session); a Spark's own key still names the Spark."""
    sparks: dict[str, dict] = {f"spark-{n}": {"ssh_host": f"h{n}"} for n in range(1, 9)}
    sparks["spark-8"]["engine"] = {"name": "sglang", "args": {"--no-such": 2}}
    document = {
        "defaults": {"ssh_user": "nvidia", "engine": {"name": "sglang", "args": {"--no-such": 1}}},
        "sparks": sparks,
    }
    found = [p for p in problems(document) if "--no-such" in p]
    inherited = [f"'spark-{n}'" for n in range(1, 8)]
    assert len(found) == 2, found
    assert found[0].startswith(
        f"{PATH}: defaults.engine.args (inherited by hosts {', '.join(inherited)}): --no-such"
    )
    assert found[1].startswith(f"{PATH}: host 'spark-8', key 'engine', 'args': --no-such")


def test_one_pass_reports_the_address_plan_with_the_sparks_own_problems():
    """The operator session's broken pair: a key typo, a missing ssh_host and a bad boolean
    on spark-2 hid the rail-2 address both Sparks had until a second run; now one pass says
    all of them, and nothing that follows from the bad keys themselves."""
    document = pair(rails(1), rails(2, second={"address": "192.168.101.1/24"}))
    del document["sparks"]["spark-2"]["ssh_host"]
    document["sparks"]["spark-2"]["allow_reboot"] = "maybe"
    document["sparks"]["spark-1"]["alow_reboot"] = True
    found = problems(document)
    assert [problem.split(": ", 2)[1] for problem in found] == [
        "host 'spark-1', key 'alow_reboot'",
        "host 'spark-2', key 'ssh_host'",
        "host 'spark-2', key 'allow_reboot'",
        "host 'spark-2', key 'qsfp', rail 2, 'address'",
    ]
    assert found[-1].endswith(
        "192.168.101.1 is also the address of host 'spark-1' on rail 2; each Spark needs its "
        "own address"
    )


def test_a_spark_whose_rails_are_wrong_is_not_judged_by_the_address_plan():
    """spark-2's rail 2 is invalid: its place in the plan is unknown, so no "1 rail(s), but
    spark-1 has 2" or subnet message follows from it."""
    found = problems(pair(rails(1), rails(2, second={"address": "300.1.1.1/24"})))
    assert len(found) == 1 and "host 'spark-2', key 'qsfp', rail 2, 'address'" in found[0]


def test_sparks_whose_ssh_address_is_invalid_are_not_compared_by_it():
    """Two Sparks without ssh_host (or with a bad port) are not "the same address"."""
    document = pair(rails(1), rails(2))
    for spark in document["sparks"].values():
        del spark["ssh_host"]
    found = problems(document)
    assert len(found) == 2 and all("key 'ssh_host': required" in p for p in found)
    same_host = pair(rails(1), rails(2))
    same_host["sparks"]["spark-2"].update(ssh_host="a", ssh_port="22")
    [port] = problems(same_host)
    assert "host 'spark-2', key 'ssh_port'" in port
