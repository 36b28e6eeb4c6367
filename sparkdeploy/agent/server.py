"""
The MCP server of a Spark: the tools of ``tools.py`` over Streamable HTTP on 127.0.0.1, with
the ``mcp`` SDK's ``MCPServer``. Run by ``spark-mcp.service`` as the ``spark-mcp`` user:

    python -m sparkdeploy.agent.server --context /etc/spark-deploy/mcp/context.json --port 8765

Every tool is annotated read-only, idempotent and closed-world (MCP ``ToolAnnotations``), and
is: the server has no sudo right, no docker group and a read-only view of the system.
"""

from __future__ import annotations

import argparse
import ipaddress
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations

from sparkdeploy.agent.context import load_context
from sparkdeploy.agent.tools import Tools
from sparkdeploy.config.paths import MCP_PATH

NAME = "spark-deploy"
READ_ONLY = ToolAnnotations(readOnlyHint=True, idempotentHint=True, openWorldHint=False)
INSTRUCTIONS = (
    "Diagnosis of an NVIDIA DGX Spark (GB10) serving an LLM with SGLang or vLLM, prepared by "
    "spark-deploy. Start with status; when an engine unit failed or restarts, call diagnose "
    "and explain_rule with the ids it names; before suggesting new engine flags, pass the "
    "whole command line to check_command. Every tool is read-only: changes go through the "
    "inventory and `pyinfra inventory.py deploy.py` on the operator's laptop."
)


def answer(call: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """What a tool answers; a question it cannot answer (an unknown unit or rule, a command
    line it cannot read) is the caller's to correct: its message goes back as the error."""
    try:
        return call()
    except ValueError as error:
        raise ToolError(str(error)) from None


def build_server(tools: Tools) -> MCPServer:
    """The MCP server answering with ``tools``."""
    server: MCPServer = MCPServer(NAME, instructions=INSTRUCTIONS)

    @server.tool(annotations=READ_ONLY)
    def status() -> dict[str, Any]:
        """This Spark's engine and GPU services: each unit's state, which one holds the GPU,
        the engine's API, memory available against the guard, the GPU, the kept engine
        configuration and the last rollback, and the last QSFP link test."""
        return answer(tools.status)

    @server.tool(annotations=READ_ONLY)
    def diagnose(unit: str = "", lines: int = 300) -> dict[str, Any]:
        """Each engine unit's state and last journal lines (or only ``unit``'s), and the
        kernel log of this boot and the previous one, matched against the known GB10 failure
        signatures: each finding gives its rule id, the line seen, cause, fix and sources."""
        return answer(lambda: tools.diagnose(unit, lines))

    @server.tool(annotations=READ_ONLY)
    def explain_rule(rule_id: str = "") -> dict[str, Any]:
        """A GB10 rule (as check_command and the deploy name them) or a failure signature
        (as diagnose names them): what it prevents, why, the fix, where it was seen and its
        sources. Without an id: every rule and signature with its summary."""
        return answer(lambda: tools.explain_rule(rule_id))

    @server.tool(annotations=READ_ONLY)
    def check_command(command: str) -> dict[str, Any]:
        """Check a proposed engine command line (`vllm serve MODEL --flag ...`,
        `python3 -m sglang.launch_server --flag ...`, or the flags alone) against the flag
        catalogue of the release in this Spark's engine image and the GB10 rules, as the
        deploy would plan it here: the verdict, every problem and warning, and the server
        flags the unit would run. Nothing is run."""
        return answer(lambda: tools.check_command(command))

    return server


def loopback(host: str) -> str:
    """``host`` when it is a loopback address; the server is never reachable from outside."""
    if not ipaddress.ip_address(host).is_loopback:
        raise argparse.ArgumentTypeError(f"{host} is not a loopback address")
    return host


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="spark-mcp", description=__doc__.split("\n\n")[0])
    parser.add_argument("--context", type=Path, required=True)
    parser.add_argument("--host", type=loopback, default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    options = parser.parse_args(argv)
    server = build_server(Tools(load_context(options.context)))
    server.run(
        "streamable-http",
        host=options.host,
        port=options.port,
        streamable_http_path=MCP_PATH,
    )


if __name__ == "__main__":
    main()
