"""python -m tools.docs [--check]: write (or check) docs/inventory.md (see inventory.py)."""

from tools.docs.inventory import main

raise SystemExit(main())
