"""python -m tools.catalogue ENGINE VERSION [VERSION ...]: build flag catalogues (build.py)."""

from tools.catalogue.build import main

raise SystemExit(main())
