"""files/spark-memory-guard and files/spark-drop-caches against fake /proc files."""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path

from sparkdeploy.render import FILES

GIB_KB = 1024 * 1024


def meminfo(path: Path, available_gib: float) -> None:
    path.write_text(
        f"MemTotal:       {128 * GIB_KB} kB\n"
        f"MemFree:        {int(available_gib * GIB_KB) // 2} kB\n"
        f"MemAvailable:   {int(available_gib * GIB_KB)} kB\n"
    )


def guard(tmp_path: Path, *args: str, interval: str = "1"):
    env = {
        "PATH": "/usr/bin:/bin",
        "SPARK_MEMINFO": str(tmp_path / "meminfo"),
        "SPARK_MEMORY_GUARD_INTERVAL": interval,
    }
    return subprocess.run(
        [str(FILES / "spark-memory-guard"), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_enough_memory_goes_at_once(tmp_path):
    meminfo(tmp_path / "meminfo", 110.4)
    done = guard(tmp_path, "70", "5")
    assert done.returncode == 0
    assert "110 GiB available (need 70) after 0s: go" in done.stdout


def test_waits_with_progress_until_memory_is_released(tmp_path):
    meminfo(tmp_path / "meminfo", 40)
    threading.Timer(1.5, meminfo, (tmp_path / "meminfo", 75)).start()
    started = time.monotonic()
    done = guard(tmp_path, "70", "20")
    assert done.returncode == 0, done.stderr
    assert "40 GiB available, waiting for 70" in done.stdout
    assert "75 GiB available (need 70)" in done.stdout
    assert 1 <= time.monotonic() - started < 10


def test_times_out_non_zero_with_the_reason(tmp_path):
    meminfo(tmp_path / "meminfo", 12)
    done = guard(tmp_path, "70", "1")  # the shortest timeout: a second of waiting, not two
    assert done.returncode == 1
    assert "only 12 GiB available after" in done.stderr and "giving up" in done.stderr


def test_bad_arguments_and_unreadable_meminfo(tmp_path):
    meminfo(tmp_path / "meminfo", 100)
    assert guard(tmp_path, "seventy").returncode == 2
    (tmp_path / "meminfo").write_text("MemTotal: 1 kB\n")
    done = guard(tmp_path, "70", "2")
    assert done.returncode == 2 and "no MemAvailable" in done.stderr


def test_drop_caches_writes_3_and_reports(tmp_path):
    meminfo(tmp_path / "meminfo", 50)
    control = tmp_path / "drop_caches"
    control.write_text("0")
    env = {
        "PATH": "/usr/bin:/bin",
        "SPARK_MEMINFO": str(tmp_path / "meminfo"),
        "SPARK_DROP_CACHES_FILE": str(control),
    }
    done = subprocess.run(
        [str(FILES / "spark-drop-caches")], env=env, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    assert control.read_text() == "3\n"
    assert "page cache dropped, MemAvailable 51200 -> 51200 MiB" in done.stdout


def test_drop_caches_fails_clearly_when_it_cannot_write(tmp_path):
    meminfo(tmp_path / "meminfo", 50)
    env = {
        "PATH": "/usr/bin:/bin",
        "SPARK_MEMINFO": str(tmp_path / "meminfo"),
        "SPARK_DROP_CACHES_FILE": str(tmp_path / "missing" / "drop_caches"),
    }
    done = subprocess.run(
        [str(FILES / "spark-drop-caches")], env=env, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 1 and "cannot write" in done.stderr
