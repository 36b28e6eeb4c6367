"""
The MCP server of a Spark: the tools of ``tools.py`` over Streamable HTTP on 127.0.0.1, with
the ``mcp`` SDK's ``MCPServer``. Run by ``spark-mcp.service`` as the ``spark-mcp`` user:

    python -m sparkdeploy.agent.server --context /etc/spark-deploy/mcp/context.json \
        --token-file /etc/spark-deploy/mcp/token --port 8765

Every tool is annotated read-only, idempotent and closed-world (MCP ``ToolAnnotations``), and
is: the server has no sudo right, no docker group and a read-only view of the system. It
still answers with what spark-mcp reads (the engines' journals, the kernel log) that other
local users cannot, so every request must carry the operator's bearer token (issue 22).
"""

from __future__ import annotations

import argparse
import hmac
import ipaddress
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any

import uvicorn
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


Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]
# A refused request gets this and nothing else: no body, no hint of what the server is.
REFUSED = (
    {
        "type": "http.response.start",
        "status": 401,
        "headers": [(b"www-authenticate", b"Bearer"), (b"content-length", b"0")],
    },
    {"type": "http.response.body", "body": b""},
)


class BearerToken:
    """
    A pure-ASGI gate in front of the SDK's Streamable HTTP app: every HTTP request must carry
    ``Authorization: Bearer TOKEN`` with the operator's token, compared in constant time
    (``hmac.compare_digest``); any other gets 401 with an empty body, and never reaches the
    SDK. Loopback alone let every local process read journals and the kernel log through
    spark-mcp's systemd-journal group (issue 22). Lifespan events pass through.
    """

    def __init__(self, app: App, token: str):
        if not token:
            raise ValueError("the MCP token is empty: run the deploy again to make it")
        self.app = app
        self.expected = b"bearer " + token.encode()

    def allows(self, scope: Scope) -> bool:
        """Whether the request carries exactly one Authorization header with the token (the
        scheme's case is free, RFC 9110 11.1)."""
        given = [
            value for name, value in scope.get("headers", ()) if name.lower() == b"authorization"
        ]
        if len(given) != 1:
            return False
        scheme, _, token = given[0].partition(b" ")
        return hmac.compare_digest(scheme.lower() + b" " + token, self.expected)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan" or self.allows(scope):
            await self.app(scope, receive, send)
        elif scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
        else:
            for message in REFUSED:
                await send(dict(message))


def read_token(path: Path) -> str:
    """The token in ``path`` (made on the Spark by the deploy, 0640 root:spark-mcp), never
    from the environment or the command line, where other local users could read it."""
    try:
        token = path.read_text().strip()
    except OSError as error:
        raise SystemExit(f"spark-mcp: cannot read the token {path}: {error.strerror}") from None
    if not token:
        raise SystemExit(f"spark-mcp: the token {path} is empty: run the deploy again")
    return token


def app(server: MCPServer, token: str, host: str) -> BearerToken:
    """The server's Streamable HTTP app behind the token gate."""
    inner = server.streamable_http_app(streamable_http_path=MCP_PATH, host=host)
    return BearerToken(inner, token)


def loopback(host: str) -> str:
    """``host`` when it is a loopback address; the server is never reachable from outside."""
    if not ipaddress.ip_address(host).is_loopback:
        raise argparse.ArgumentTypeError(f"{host} is not a loopback address")
    return host


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="spark-mcp", description=__doc__.split("\n\n")[0])
    parser.add_argument("--context", type=Path, required=True)
    parser.add_argument("--token-file", type=Path, required=True)
    parser.add_argument("--host", type=loopback, default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    options = parser.parse_args(argv)
    token = read_token(options.token_file)
    server = build_server(Tools(load_context(options.context)))
    uvicorn.run(app(server, token, options.host), host=options.host, port=options.port)


if __name__ == "__main__":
    main()
