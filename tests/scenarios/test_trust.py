"""
Trust boundaries on a twin, looked at from the other side (docs/security.md).

The Spark has an operator account (`ops`) that is not the SSH user: it has no sudo of its
own, only what the deploy's sudoers gives it, and it owns its home. As that account, the
scenario plants what an operator who wants root would plant before a deploy (a symlink where
the deploy writes the Hugging Face token, later its whole `~/.cache` pointed at
/etc/sudoers.d), then checks after every converge that:

- root followed none of it: /etc/shadow, /etc/sudoers.d and /etc keep their content, mode and
  owner, and ops still cannot read what only root may;
- the system trees (/etc, /usr, /opt, /var/lib, /home) keep the mode and owner of every path
  that was there before the first deploy, but for the few the deploy owns (DEPLOY_OWNS);
- an API key, set on purpose, leaves /etc as it was (it once made /etc 0700);
- another unprivileged account can still resolve names and read CA certificates;
- a second run changes nothing.
"""

from __future__ import annotations

from tests.scenarios.conftest import assert_idempotent
from tests.scenarios.test_engine import PREPARE, TOKEN_ENV, as_ops
from tests.twins import harness

KEY = "trust-key-0d9b6c1f2e8a47b5a3c6e1f0b9d8c7a6"
ENV = {**TOKEN_ENV, "SPARK_API_KEY": KEY}
TREES = "/etc /usr /opt /var/lib /home"
# mode, owner and group of every path in the system trees (the twin's own root filesystem);
# what docker and apt keep churning for themselves is not the deploy's doing.
SNAPSHOT = (
    f"find {TREES} -xdev \\( -path /var/lib/docker -o -path /var/lib/apt/lists"
    " -o -path /var/lib/systemd/timers -o -path /var/lib/containerd \\) -prune -o"
    " -printf '%p %m %u %g\\n' 2>/dev/null | LC_ALL=C sort"
)
TOKEN = "/home/ops/.cache/huggingface/token"
# Paths that were there before the first deploy and whose mode or owner the deploy sets on
# purpose: only the token's path, where the operator planted a symlink that the deploy
# replaces with the token file (the operator writes it, see deploys/managed.py).
DEPLOY_OWNS = frozenset({TOKEN})
SHADOW = "stat -c '%a %U %G' /etc/shadow && sha256sum /etc/shadow"


def snapshot(twin: harness.Twin) -> dict[str, str]:
    lines = twin.exec(SNAPSHOT).stdout.splitlines()
    return dict(line.split(" ", 1) for line in lines if " " in line)


def changed_modes(
    before: dict[str, str], after: dict[str, str], operator_did: str = "//"
) -> list[str]:
    """Paths there before whose mode or owner changed (new and removed paths are not),
    but those the deploy owns and those under ``operator_did``, which the operator changed."""
    return [
        f"{path}: {before[path]} -> {after[path]}"
        for path in sorted(before.keys() & after.keys())
        if before[path] != after[path]
        and path not in DEPLOY_OWNS
        and not path.startswith(operator_did)
    ]


class TestTrustFromTheOperatorsSide:
    twins = {
        "trust": {
            **harness.MODEL,
            "operator_user": "ops",
            "engine": {"name": "sglang", "bind": "0.0.0.0", "api_key_env": "SPARK_API_KEY"},
        }
    }
    prepare = {"trust": PREPARE}
    before: dict[str, str] = {}
    shadow = ""

    def test_the_operator_plants_a_symlink_where_the_token_goes(self, scenario):
        twin = scenario.twins["trust"]
        planted = as_ops(
            twin, "mkdir -p ~/.cache/huggingface && ln -s /etc/shadow ~/.cache/huggingface/token"
        )
        assert planted.returncode == 0, planted.stderr
        assert as_ops(twin, "sudo -n true").returncode != 0  # no sudo of its own
        type(self).before = snapshot(twin)
        type(self).shadow = twin.exec(SHADOW).stdout
        assert "/etc 755 root root" in {f"{k} {v}" for k, v in self.before.items()}

    def test_converge_with_an_api_key(self, scenario):
        run = scenario.deploy(env=ENV)
        assert run.returncode == 0, run.explain()
        assert "[trust] spark-engine-health: ready after" in run.stderr

    def test_root_followed_nothing_the_operator_planted(self, scenario):
        twin = scenario.twins["trust"]
        assert twin.exec(SHADOW).stdout == self.shadow
        # the symlink was replaced by the operator's own 0600 file holding the token
        assert twin.exec(f"stat -c '%F %a %U %G' {TOKEN}").stdout.split() == [
            "regular",
            "file",
            "600",
            "ops",
            "ops",
        ]
        same = as_ops(twin, f'test "$(cat {TOKEN})" = {harness.TWIN_HUB_TOKEN}')
        assert same.returncode == 0
        assert as_ops(twin, "cat /etc/shadow").returncode != 0

    def test_the_system_trees_keep_their_modes_and_owners(self, scenario):
        twin = scenario.twins["trust"]
        after = snapshot(twin)
        assert changed_modes(self.before, after) == []
        assert after["/etc"] == "755 root root"
        assert after["/etc/spark-deploy"] == "755 root root"
        # what the deploy added to /etc, shown with -s (the closing note of issue 22 quotes it)
        for path in sorted(after.keys() - self.before.keys()):
            if path.startswith(("/etc/spark-deploy", "/etc/sudoers.d", "/home/ops")):
                print(f"added {path} {after[path]}")

    def test_another_account_still_uses_the_system(self, scenario):
        twin = scenario.twins["trust"]
        for command in (
            "getent hosts localhost",
            "cat /etc/ssl/certs/ca-certificates.crt > /dev/null",
            "ls /etc/spark-deploy",
        ):
            assert as_ops(twin, command).returncode == 0, command
        key_file = "/etc/spark-deploy/spark-engine-sglang.key.yaml"
        assert as_ops(twin, f"cat {key_file}").returncode != 0  # the key is root's alone
        assert twin.exec(f"stat -c '%a %U' {key_file}").stdout.split() == ["600", "root"]

    def test_idempotence(self, scenario):
        assert_idempotent(scenario.deploy(env=ENV))
        assert changed_modes(self.before, snapshot(scenario.twins["trust"])) == []

    def test_a_cache_pointed_at_sudoers_fails_the_run_and_writes_nothing_there(self, scenario):
        twin = scenario.twins["trust"]
        sudoers = twin.exec("ls -la /etc/sudoers.d && stat -c '%a %U %G' /etc/sudoers.d").stdout
        planted = as_ops(twin, "mv ~/.cache ~/.cache.real && ln -s /etc/sudoers.d ~/.cache")
        assert planted.returncode == 0, planted.stderr
        run = scenario.deploy(env=ENV)
        assert run.returncode != 0
        assert "Permission denied" in run.stderr + run.stdout, run.explain()
        assert (
            twin.exec("ls -la /etc/sudoers.d && stat -c '%a %U %G' /etc/sudoers.d").stdout
            == sudoers
        )
        # ~/.cache is now the operator's symlink: their own doing, nothing else moved
        assert changed_modes(self.before, snapshot(twin), operator_did="/home/ops/.cache") == []
        assert as_ops(twin, "sudo -n true").returncode != 0

    def test_the_operator_mends_the_home_and_the_deploy_converges_again(self, scenario):
        twin = scenario.twins["trust"]
        assert as_ops(twin, "rm ~/.cache && mv ~/.cache.real ~/.cache").returncode == 0
        run = scenario.deploy(env=ENV)
        assert run.returncode == 0, run.explain()
        assert_idempotent(scenario.deploy(env=ENV))
