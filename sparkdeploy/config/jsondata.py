"""
Host data pyinfra can print. ``pyinfra inventory.py debug-inventory`` (and ``--json``) dump
each host's data with pyinfra's own JSON encoder (``pyinfra_cli.util.json_encode``), which
calls ``to_json()`` on an object it does not otherwise know. The objects the inventory puts
in host data (``spark``, ``place``, ``engine_plan``) inherit it from here, so they print as
the plain values they hold.
"""

from __future__ import annotations

from typing import Any

from pydantic_core import to_jsonable_python


class PyinfraJson:
    """An object pyinfra's JSON encoder writes as its fields (pydantic models and
    dataclasses alike; anything JSON cannot say becomes its ``repr``)."""

    def to_json(self) -> Any:
        """The object as JSON values: mappings, lists, strings, numbers, booleans, null."""
        return to_jsonable_python(self, fallback=repr)
