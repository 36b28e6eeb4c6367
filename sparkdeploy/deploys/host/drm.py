"""
The drm override DGX OS ships in /etc/modprobe.d caps the memory CUDA can see at about
62 GB of the Spark's 128 GB. Removing it takes effect at the next boot.
"""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import deploy, operation

from sparkdeploy.config.paths import DRM_OVERRIDE_CONF, REBOOT_PENDING, RUN_DIR
from sparkdeploy.facts.preflight import preflight

REASON = (
    f"{DRM_OVERRIDE_CONF} was removed; CUDA sees only about 62 GB of memory until the Spark reboots"
)


@operation()
def override_absent():
    """
    Remove the drm override conf and record, under /run, that a reboot is pending (DGX OS's
    own /run/reboot-required is set too, so the login banner says so).

    **Example:**

    .. code:: python

        drm.override_absent(name="Remove the memory-capping drm override conf")
    """
    if not preflight().drm_override:
        host.noop(f"{DRM_OVERRIDE_CONF} is absent")
        return
    yield (
        f"rm -f {DRM_OVERRIDE_CONF} && mkdir -p {RUN_DIR} && "
        f"printf '%s\\n' '{REASON}' > {REBOOT_PENDING} && touch /run/reboot-required"
    )


@deploy("Remove the memory-capping drm override")
def remove_drm_override() -> None:
    override_absent(name="Remove the drm override conf (caps CUDA memory at ~62 GB)")
