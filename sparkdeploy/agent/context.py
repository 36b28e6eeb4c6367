"""
What the MCP server knows about its Spark: written by the deploy from the validated settings
and the plan (``context_of``), read by the server at start (``load_context``). It holds no
secret: the inventory refuses secrets, and the API key lives in its own root-only file.

Sample of /etc/spark-deploy/mcp/context.json::

    {"format": 1, "spark": "spark-1", "engine": {"name": "sglang", "image": "lmsysorg/...",
     "port": 30000}, "version": "0.5.10", "image": "lmsysorg/...", "model_folder":
     "/opt/models/Qwen3-8B", "draft_folder": null, "multinode": null,
     "units": ["spark-engine-sglang.service"], "gpu_units": {"engine":
     "spark-engine-sglang.service"}, "port": 30000, "serves_api": true, "memory_guard_gb": 70}
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sparkdeploy.config.engine import EngineSettings
from sparkdeploy.config.spark import SparkSettings
from sparkdeploy.config.topology import Place
from sparkdeploy.engine_plan.effective import MultiNode, multinode_of
from sparkdeploy.engine_plan.plan import EnginePlan

FORMAT = 1  # the shape of context.json; a server reading another refuses to start


@dataclass(frozen=True)
class SparkContext:
    spark: str  # the Spark's name in the inventory
    engine: dict[str, Any] | None  # engine: as the operator wrote it (EngineSettings input)
    version: str = ""  # the engine release the plan was checked with
    image: str = ""
    model_folder: str | None = None
    draft_folder: str | None = None
    multinode: dict[str, Any] | None = None  # MultiNode's fields, on Sparks serving together
    units: tuple[str, ...] = ()  # the engine's units, in the plan's order
    gpu_units: dict[str, str] = field(default_factory=dict)  # spark-gpu-switch name -> unit
    port: int = 0  # the engine's API port on 127.0.0.1 (0: no engine)
    serves_api: bool = False  # this Spark serves the API (rank 0)
    api_key: bool = False  # the engine requires an API key (the key itself is not here)
    memory_guard_gb: int = 0

    def engine_settings(self, **changes: Any) -> EngineSettings:
        """The engine's settings as the deploy validated them, with ``changes`` applied."""
        if self.engine is None:
            raise ValueError(f"{self.spark} has no engine: in the inventory")
        return EngineSettings.model_validate({**self.engine, **changes})

    def multinode_place(self) -> MultiNode | None:
        return MultiNode(**self.multinode) if self.multinode else None

    def to_json(self) -> str:
        return json.dumps({"format": FORMAT, **asdict(self)}, indent=1, sort_keys=True) + "\n"


def context_of(
    name: str, spark: SparkSettings, plan: EnginePlan | None, place: Place
) -> SparkContext:
    """The context of one Spark, from what the deploy planned for it."""
    engine = spark.engine
    units = {"engine": plan.unit} if plan is not None else {}
    units |= {service.name: service.unit for service in spark.gpu_services}
    multinode = None
    if plan is not None and plan.nodes > 1:
        multinode = asdict(multinode_of(place))
    return SparkContext(
        spark=name,
        engine=engine.model_dump(mode="json", exclude_unset=True) if engine else None,
        version=plan.version if plan is not None else "",
        image=plan.image if plan is not None else "",
        model_folder=spark.model_folder(spark.model_repo) if spark.model_repo else None,
        draft_folder=spark.model_folder(spark.draft_model_repo) if spark.draft_model_repo else None,
        multinode=multinode,
        units=plan.units if plan is not None else (),
        gpu_units=units,
        port=plan.port if plan is not None else 0,
        serves_api=plan.serves_api if plan is not None else False,
        api_key=plan.api_key if plan is not None else False,
        memory_guard_gb=spark.memory_guard_gb,
    )


def load_context(path: Path) -> SparkContext:
    """The context the deploy wrote; refuses a file of another format."""
    data = json.loads(path.read_text(encoding="utf-8"))
    if data.pop("format", None) != FORMAT:
        raise ValueError(f"{path}: not a context of format {FORMAT}; run the deploy again")
    data["units"] = tuple(data.get("units") or ())
    return SparkContext(**data)
