"""python -m tools.lock TOOL VERSION | --shipped: write a venv's hash lock (__init__.py)."""

from tools.lock import main

raise SystemExit(main())
