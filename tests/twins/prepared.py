"""
The twin image a deploy has already been through once, for the scenarios that do not test a
fresh host: the plain twin image (harness.build_image) plus what the deploy's slowest
host-independent steps leave (the hf command's venv, about 15 s of CPU on every fresh twin;
nftables, an apt-get in every converge of Sparks with others).
It is made by the real deploy (tests/twins/deploys/prepared.py) on a twin of the plain image,
which is then stopped and committed; its tag hashes the plain image's tag and the sources that
decide what it holds, so a change to them makes it again. Scenarios that test what a fresh Spark
gets (the hf command's install) ask for the plain image with `fresh = True`.
"""

from __future__ import annotations

from pathlib import Path

from tests.twins import harness
from tests.twins.runner import run_deploy

DEPLOY = "tests/twins/deploys/prepared.py"
SOURCES = (  # what decides what the prepared image holds
    "sparkdeploy/deploys/venv.py",
    "sparkdeploy/deploys/models/huggingface.py",
    "sparkdeploy/knowledge/locks.py",
    "sparkdeploy/config/spark.py",
    "sparkdeploy/facts/probes/hf_cli.py",
    "sparkdeploy/deploys/qsfp/guard.py",
    DEPLOY,
)
LOCKS = harness.ROOT / "sparkdeploy" / "knowledge" / "locks"
TWIN = "prepare"
# The per-twin things start_twin writes again, taken out so that the image holds none.
CLEAN = (
    f"rm -rf ~spark/.ssh {harness.TWIN_CATALOGUES} /tmp/pyinfra-* ~spark/.spark-deploy-upload"
    " /var/log/journal/*/*"
)


def inputs(plain: str) -> list[bytes]:
    """What the prepared image is made from: the plain image's tag and SOURCES, locks too."""
    files = [harness.ROOT / name for name in SOURCES]
    files += [path for path in sorted(LOCKS.rglob("*")) if path.is_file()]
    named = [str(p.relative_to(harness.ROOT)).encode() + p.read_bytes() for p in files]
    return [plain.encode(), *named]


def prepared_image() -> str:
    """The prepared twin image's tag, made when missing (under the machine's build lock, as
    the plain image is)."""
    plain = harness.build_image()
    tag = f"{harness.PREFIX}-prepared:{harness.digest(*inputs(plain))}"
    if harness.image_exists(tag):
        return tag
    with harness.file_lock(harness.BUILD_LOCK, "another build of the twin image"):
        if not harness.image_exists(tag):
            print(f"twins: preparing {tag} (a deploy's hf venv, once)", flush=True)
            _make(plain, tag)
    return tag


def _make(plain: str, tag: str) -> None:
    twin = harness.start_twin(TWIN, plain)
    try:
        inventory = harness.write_inventory([twin], harness.state_dir() / "prepare.yml")
        run = run_deploy(Path(inventory), deploy=DEPLOY)
        if run.returncode != 0:
            raise harness.HarnessError(f"preparing {tag} failed:\n{run.explain()}")
        twin.exec(CLEAN)
        harness.docker("stop", twin.container)
        harness.docker("commit", twin.container, tag)
    finally:
        harness.destroy([twin])
