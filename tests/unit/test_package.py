"""`pip install .`: the wheel holds the package with its data (templates, shipped files, the
knowledge's YAML, JSON catalogues and hash locks), the pyinfra files and the command; and the
header of every file the deploy writes carries the release."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from sparkdeploy import __version__
from sparkdeploy.config.paths import MANAGED_HEADER
from sparkdeploy.render import FILES, STAMP, TEMPLATES, file_text

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "sparkdeploy"
# setuptools' PEP 517 backend, called as pip calls it (without pip's isolated environment).
BUILD = "import sys; from setuptools import build_meta; print(build_meta.build_wheel(sys.argv[1]))"


def data_files() -> set[str]:
    """What must travel as package data: every file of the package that is not Python."""
    return {
        path.relative_to(ROOT).as_posix()
        for path in PACKAGE.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"
    }


@pytest.mark.slow
def test_the_wheel_holds_the_package_data_the_files_and_the_command(tmp_path: Path):
    source = tmp_path / "source"  # a copy: the build's own folders stay out of the checkout
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(PACKAGE, source / "sparkdeploy", ignore=shutil.ignore_patterns("__pycache__"))
    done = subprocess.run(
        [sys.executable, "-c", BUILD, str(tmp_path)],
        cwd=source,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    wheel = tmp_path / done.stdout.strip().splitlines()[-1]
    assert wheel.name == f"spark_deploy-{__version__}-py3-none-any.whl"
    names = set(zipfile.ZipFile(wheel).namelist())
    assert data_files() <= names, sorted(data_files() - names)
    for needed in (
        "sparkdeploy/templates/engine.service.j2",
        "sparkdeploy/files/fetch_job.py",
        "sparkdeploy/files/spark-engine-health",
        "sparkdeploy/knowledge/gb10_rules.yaml",
        "sparkdeploy/entry/deploy.py",
        "sparkdeploy/cli.py",
    ):
        assert needed in names, needed
    assert any(n.startswith("sparkdeploy/knowledge/catalogues/vllm-") for n in names)
    assert any(n.startswith("sparkdeploy/knowledge/locks/") for n in names)
    info = f"spark_deploy-{__version__}.dist-info"
    with zipfile.ZipFile(wheel) as archive:
        assert (
            "spark-deploy = sparkdeploy.cli:main"
            in archive.read(f"{info}/entry_points.txt").decode()
        )
        metadata = archive.read(f"{info}/METADATA").decode()
    assert "Requires-Dist: pyinfra" in metadata and "Requires-Dist: pydantic" in metadata
    assert "Requires-Dist: pytest" not in metadata.split("Provides-Extra: dev")[0]


def test_every_template_starts_with_the_stamped_header():
    for template in sorted(TEMPLATES.glob("*.j2")):
        first = template.read_text().splitlines()[:2]
        assert any(line.startswith("{{ managed }}") for line in first), template.name


def test_every_shipped_file_carries_the_release_in_its_header():
    for path in sorted(p for p in FILES.iterdir() if p.is_file()):
        head = file_text(path.name).splitlines()[:2]
        assert STAMP in head or any(line.startswith(STAMP + ":") for line in head), path.name
        assert file_text(path.name) == file_text(path.name)  # two runs, the same bytes


def test_the_spark_recognises_the_stamped_header_and_the_older_one():
    """The retire logic's test (`head -n 1 | grep -qF MANAGED_HEADER`) holds for files of
    this release and for those of releases before the stamp."""
    assert f"# Managed by spark-deploy {__version__}" == STAMP
    for first_line in (f"{STAMP}: x", "# Managed by spark-deploy: x"):
        assert MANAGED_HEADER in first_line
    shell = subprocess.run(
        ["sh", "-c", f"printf '%s\\n' '{STAMP}: x' | head -n 1 | grep -qF '{MANAGED_HEADER}'"]
    )
    assert shell.returncode == 0
