"""
Build-time tool: the generated parts of the documentation. Today that is the inventory key
reference, ``docs/inventory.md``, made from the settings models' own field descriptions
(``sparkdeploy/config/``), so the reference cannot drift from the code.

    python -m tools.docs            # write docs/inventory.md
    python -m tools.docs --check    # exit 1 when the committed file differs
"""
