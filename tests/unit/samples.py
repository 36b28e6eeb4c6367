"""The sample output a fact documents in its docstring, so tests parse exactly that."""

from __future__ import annotations

import textwrap


def docstring_sample(fact: type) -> list[str]:
    doc = fact.__doc__ or ""
    block = doc.split("Sample output of the command::", 1)[1]
    block = block.split(".. code::", 1)[0]
    return [line for line in textwrap.dedent(block).strip("\n").splitlines()]
