"""The MCP server probe: its state, read whether it is wanted or not (to retire it); its
unit's state is read by the units probe when it is wanted."""

from __future__ import annotations

from sparkdeploy.config.paths import (
    MCP_CONTEXT,
    MCP_DIR,
    MCP_LIB,
    MCP_OPERATOR_TOKEN,
    MCP_TOKEN,
    MCP_UNIT,
    MCP_USER,
    MCP_VENV,
)
from sparkdeploy.facts.probes import LOCK_STAMP, HostQuery, keyed_values, stamp_line

MCP_STAMP = MCP_VENV + "/" + LOCK_STAMP
MCP_DIGEST = MCP_LIB + "/DIGEST"
MCP_LINES = (
    stamp_line("mcp venv", MCP_STAMP),
    f"printf 'mcp lib %s\\n' \"$(cat {MCP_DIGEST} 2>/dev/null)\"",
    f"printf 'mcp user %s\\n' \"$(id -nG {MCP_USER} 2>/dev/null)\"",
    f"[ -e {MCP_DIR} ] || [ -e {MCP_UNIT} ] || [ -e {MCP_CONTEXT} ] || [ -e {MCP_TOKEN} ]"
    " && echo 'mcp present 1' || echo 'mcp present 0'",
    # the token's mode and owner when it is a file with content ("" when not), and the mode
    # of the operator's copy when it holds the same (sha256 compared as root; a symlink or
    # other non-file there is never opened). $home is the operator's home, set first.
    f't={MCP_TOKEN}; c="$home"/{MCP_OPERATOR_TOKEN}; tok() {{ [ -f "$1" ] && [ ! -L "$1" ]'
    ' && [ -s "$1" ]; }',
    "printf 'mcp token %s\\n' \"$(tok $t && stat -c '%a %U %G' $t)\"",
    'printf \'mcp copy %s\\n\' "$([ -n "$home" ] && tok $t && tok "$c"'
    ' && [ "$(sha256sum < $t)" = "$(sha256sum < "$c")" ] && stat -c %a "$c")"',
)


class McpServer:
    """
    "venv" the sha256 of the lock its venv was made from, "lib" the digest of the code
    unpacked, "user" spark-mcp's groups, "present" 1 when any of its files is on the Spark
    ("" when not), "token" the token's mode and owner, "copy" the mode of the operator's copy
    when it holds that token.

    Sample output of the command::

        mcp venv 7fd1759a17995a0ba555a7532e66469c069155812919aff4ddf7151e42051db1
        mcp lib 3f79bb7b435b05321651daefd374cdc681dc06faa65e374e38337b88ca046dea
        mcp user spark-mcp systemd-journal
        mcp present 1
        mcp token 640 root spark-mcp
        mcp copy 600
    """

    kinds = ("mcp",)

    def lines(self, query: HostQuery) -> list[str]:
        return list(MCP_LINES)

    def parse(self, lines: list[str]) -> dict[str, str]:
        return keyed_values(lines)
