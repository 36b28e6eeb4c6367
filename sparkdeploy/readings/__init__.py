"""
What is read on a Spark and what it means, without pyinfra: the shell commands that read a
Spark's state, their parsers, and the findings made of them. The facts run these commands
over SSH (facts/); the MCP server runs them on the Spark itself (agent/), as its own
unprivileged user. Nothing here changes anything on a Spark.
"""
