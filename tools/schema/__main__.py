"""python -m tools.schema [--check]: write (or check) docs/inventory.schema.json."""

from tools.schema.inventory import main

raise SystemExit(main())
