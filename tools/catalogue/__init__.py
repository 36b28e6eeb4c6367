"""
Build-time tool: the flag catalogues of engine releases, read from their published wheels
with ``ast`` (never installed or imported) and written as JSON into
sparkdeploy/knowledge/catalogues/. No deploy module imports this package.

    python -m tools.catalogue sglang 0.5.12
"""
