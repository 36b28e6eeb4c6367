"""Settings: merge order, defaults, and every kind of invalid input, all listed at once."""

from __future__ import annotations

import textwrap

import pytest

from operations.settings import InventoryError, SparkSettings, load_inventory, validate_inventory

PATH = "inventory/sparks.yml"


def problems(raw) -> list[str]:
    with pytest.raises(InventoryError) as caught:
        validate_inventory(raw, PATH)
    return caught.value.problems


def test_defaults_then_shared_then_host_keys():
    inventory = validate_inventory(
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
    inventory = validate_inventory(
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
        f"{PATH}: host 'spark-1', key 'allow_reboot': Input should be a valid boolean "
        "(got 'yes')",
        f"{PATH}: host 'spark-1', key 'model_dir': must be an absolute path, such as "
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
        ({"sparks": {}}, "sparks: list one or two Sparks"),
        ({"sparks": ["a"]}, "sparks: must be a mapping"),
        ({"sparks": {"s1": {"ssh_host": "a"}}, "hosts": 1}, "top-level key 'hosts': unknown"),
        ({"sparks": {"Spark_1": {"ssh_host": "a"}}}, "name must be lower-case letters"),
        ({"sparks": {"s1": "a"}}, "host 's1': must be a mapping"),
        (
            {"sparks": {f"s{i}": {"ssh_host": f"h{i}"} for i in range(3)}},
            "3 hosts given; this project prepares one Spark or a pair (2 at most)",
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


def test_readme_documents_every_key_with_its_default():
    readme = open("README.md", encoding="utf-8").read()
    for key, field in SparkSettings.model_fields.items():
        default = "required" if field.is_required() else field.get_default(
            call_default_factory=True
        )
        if default is None or isinstance(default, bool):
            default = {None: "unset", True: "true", False: "false"}[default]
        row = f"| `{key}` | `{default}` |" if default not in ("required", "unset") else (
            f"| `{key}` | {default} |"
        )
        assert row in readme, f"README.md lacks the row for {key}: {row}"
