"""The model check probe: model_check.py's result for each model folder (whether it holds the
wanted snapshot, complete)."""

from __future__ import annotations

import json

from sparkdeploy.escape import shell
from sparkdeploy.facts.probes import HostQuery
from sparkdeploy.render import file_text

MODEL_CHECK = file_text("model_check.py")


class ModelChecks:
    """
    Model folder -> model_check.py's result.

    Sample output of the command::

        model {"folder": "/opt/models/X", "exists": true, "marker": "o/X@main", "missing": [], "empty": [], "complete": true}
    """  # noqa: E501 -- the sample output is verbatim (tests parse it)

    kinds = ("model",)

    def lines(self, query: HostQuery) -> list[str]:
        if not query.models:
            return []
        return [
            f"python3 -I -c {shell(MODEL_CHECK)} {' '.join(map(shell, query.models))}"
            " | sed 's/^/model /'"
        ]

    def parse(self, lines: list[str]) -> dict[str, dict]:
        models: dict[str, dict] = {}
        for line in lines:
            result = json.loads(line.partition(" ")[2])
            models[result["folder"]] = result
        return models
