"""
GPU services besides the engine (``gpu_services:``): a container image with its command, the
port it answers on and the memory it needs, such as a TTS model or an image generator. They
take turns with the engine for the GPU and the 128 GB of unified memory: one at a time,
switched on the Spark with spark-gpu-switch.

    gpu_services:
      - name: tts
        image: ghcr.io/remsky/kokoro-fastapi-gpu:v0.2.2
        port: 8880
        memory_gb: 12
        health: /health
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from sparkdeploy.config.values import ImageReference, Text

SERVICE_NAME = re.compile(r"[a-z][a-z0-9-]{0,30}")
# What a health path may hold: a URL path without query, spaces or quotes.
HEALTH_PATH = re.compile(r"/[A-Za-z0-9._~/-]*")
ENGINE = "engine"  # the name spark-gpu-switch gives the engine


def service_name(value: str) -> str:
    if not SERVICE_NAME.fullmatch(value):
        raise ValueError(
            "must be a short name (lowercase letters, digits and -, starting with a letter, "
            "up to 31 characters), such as tts; it names the unit spark-gpu-NAME.service"
        )
    if value == ENGINE:
        raise ValueError("'engine' is the engine's own name in spark-gpu-switch: pick another")
    return value


def health_path(value: str) -> str:
    if not HEALTH_PATH.fullmatch(value):
        raise ValueError("must be a URL path such as /health (letters, digits, ._~/-)")
    return value


class GpuService(BaseModel):
    """One GPU service that takes turns with the engine."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    name: Annotated[str, AfterValidator(service_name)] = Field(
        description="Short name (lowercase letters, digits, -): the unit is "
        "spark-gpu-NAME.service and `spark-gpu-switch NAME` gives it the GPU.",
    )
    image: ImageReference = Field(
        description="Container image, pulled at the unit's first start if it is not on the "
        "Spark (the deploy's own fetch brings only the engine image).",
    )
    command: list[Text] = Field(
        default_factory=list,
        description="Container command after the image, word by word (empty: the image's "
        "own). The container runs with every GPU and the host's network, like the engine's.",
    )
    port: int = Field(ge=1, le=65535, description="Port the service answers on (127.0.0.1).")
    memory_gb: int = Field(
        ge=1,
        le=128,
        description="MemAvailable (GiB) the memory guard waits for before the service starts, "
        "as memory_guard_gb does for the engine.",
    )
    health: Annotated[str, AfterValidator(health_path)] = Field(
        "/health",
        description="HTTP path answering 200 once the service is ready (spark-gpu-switch "
        "waits for it).",
    )

    def image_warning(self) -> str | None:
        """An image given without a tag or digest, or as `latest`: what runs changes with
        whatever the registry holds next (an engine image must be pinned; a service's is
        only warned, as the deploy never pulls it)."""
        if "@sha256:" in self.image:
            return None
        last = self.image.rsplit("/", 1)[-1]
        tag = last.partition(":")[2]
        if tag and tag != "latest":
            return None
        return (
            f"image {self.image} is {'latest' if tag else 'untagged (latest)'}: the service runs "
            "whatever the registry holds when the Spark pulls it; pin a tag or a digest "
            "(name:tag@sha256:...)"
        )

    @property
    def unit(self) -> str:
        return f"spark-gpu-{self.name}.service"

    @property
    def container(self) -> str:
        return f"spark-gpu-{self.name}"
