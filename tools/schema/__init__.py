"""
Build-time tool: the JSON Schema of the inventory, ``docs/inventory.schema.json``, made from
the settings models (``sparkdeploy/config/``), for editor completion and checking:

    python -m tools.schema            # write docs/inventory.schema.json
    python -m tools.schema --check    # exit 1 when the committed file differs
"""
