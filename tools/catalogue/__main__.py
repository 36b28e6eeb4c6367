"""python -m tools.catalogue ENGINE VERSION: build one flag catalogue (see build.py)."""

from tools.catalogue.build import main

raise SystemExit(main())
