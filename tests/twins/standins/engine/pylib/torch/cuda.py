"""``torch.cuda`` of the stand-in torch: one device, "NVIDIA GB10", whose memory is the
host's (unified, as on a Spark); every operation is synchronous, so synchronize waits for
nothing."""

from __future__ import annotations

_device = 0


def is_available() -> bool:
    return True


def device_count() -> int:
    return 1


def set_device(device: int | str) -> None:
    global _device
    index = int(str(device).removeprefix("cuda").removeprefix(":") or 0)
    if index != 0:
        raise RuntimeError("CUDA error: invalid device ordinal")
    _device = index


def current_device() -> int:
    return _device


def get_device_name(device: int = 0) -> str:
    return "NVIDIA GB10"


def synchronize(device: int | None = None) -> None:
    return None


def empty_cache() -> None:
    return None


def mem_get_info(device: int | None = None) -> tuple[int, int]:
    """(free, total) bytes: MemAvailable and MemTotal, as a unified-memory GPU reports."""
    values = {}
    with open("/proc/meminfo") as meminfo:
        for line in meminfo:
            key, _, rest = line.partition(":")
            values[key] = int(rest.split()[0]) * 1024
    return values["MemAvailable"], values["MemTotal"]
