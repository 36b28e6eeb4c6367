"""The sample output a fact documents in its docstring, so tests parse exactly that."""

from __future__ import annotations

import textwrap


def docstring_sample(fact: type) -> list[str]:
    """The literal block after "Sample output of the command::": its indented lines, up to
    the first line indented no deeper than the text around it (or a ``.. code::``)."""
    doc = fact.__doc__ or ""
    block = doc.split("Sample output of the command::", 1)[1]
    block = block.split(".. code::", 1)[0]
    lines = block.splitlines()
    body = [line for line in lines if line.strip()]
    indent = len(body[0]) - len(body[0].lstrip()) if body else 0
    kept = []
    for line in lines:
        if line.strip() and len(line) - len(line.lstrip()) < indent:
            break
        kept.append(line)
    return textwrap.dedent("\n".join(kept)).strip("\n").splitlines()
