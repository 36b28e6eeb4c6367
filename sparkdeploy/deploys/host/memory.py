"""
Memory on a Spark is one 128 GB pool for CPU and GPU. Engines start only when enough of it
is free (the memory guard), the page cache can be dropped first, and sshd and
NetworkManager are protected from the OOM killer so the Spark stays reachable.
"""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.operations import systemd

from sparkdeploy.config.paths import (
    DROP_CACHES,
    MEMORY_GUARD,
    MEMORY_GUARD_ENV,
    OOM_DROP_IN,
    OOM_PROTECTED_UNITS,
)
from sparkdeploy.config.spark import SparkSettings
from sparkdeploy.deploys.managed import managed_file
from sparkdeploy.render import file_text, render


@deploy("Install the memory guard and keep the Spark reachable")
def guard_memory() -> None:
    spark: SparkSettings = host.data.spark
    managed_file(
        name="Install spark-memory-guard",
        path=MEMORY_GUARD,
        content=file_text("spark-memory-guard"),
    )
    managed_file(
        name="Set the memory guard defaults",
        path=MEMORY_GUARD_ENV,
        content=render(
            "memory-guard.env.j2",
            memory_guard_gb=spark.memory_guard_gb,
            memory_guard_timeout=spark.memory_guard_timeout,
        ),
    )
    managed_file(
        name="Install spark-drop-caches",
        path=DROP_CACHES,
        content=file_text("spark-drop-caches"),
    )
    drop_ins = [
        managed_file(
            name=f"Protect {unit} from the OOM killer",
            path=OOM_DROP_IN.format(unit=unit),
            content=render("oom-protect.conf.j2", unit=unit),
        )
        for unit in OOM_PROTECTED_UNITS
    ]
    systemd.daemon_reload(
        name="Reload systemd units",
        _if=lambda: any(drop_in.did_change() for drop_in in drop_ins),
    )
