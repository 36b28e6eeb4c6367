"""
The MCP server on a Spark (``mcp_server: true``): read-only tools that local coding agents call
when an engine misbehaves. ``context.py`` is what the deploy tells the server about its Spark
(written to /etc/spark-deploy/mcp/context.json), ``tools.py`` the tools themselves, reusing the
planning code, the knowledge and the readings the laptop uses, ``server.py`` their MCP wiring.

This package, with ``escape``, ``knowledge``, ``config``, ``engine_plan`` and ``readings``, is
shipped to the Spark as it is (deploys/agent.py) and runs there without pyinfra, in a venv of
its own, as the unprivileged ``spark-mcp`` user.
"""
