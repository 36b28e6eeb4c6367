"""
pyinfra inventory: the Sparks named in the YAML file at $SPARK_INVENTORY
(default inventory/sparks.yml), validated before pyinfra connects to anything.

    pyinfra inventory.py deploy.py
    SPARK_INVENTORY=inventory/twins.yml pyinfra inventory.py deploy.py
    SPARK_INVENTORY=examples/sglang-pair.yml pyinfra inventory.py debug-inventory

Keys the inventory owns cannot be overridden with pyinfra's --data (or --ssh-user,
--ssh-port, --ssh-key): set them in the file (sparkdeploy/overrides.py says why). The link
test (linktest.py) runs on every Spark at once: a --limit or --exclude that leaves one out
is refused before connecting.
"""

import os as _os
import sys as _sys

from sparkdeploy.config.errors import InventoryError as _InventoryError
from sparkdeploy.config.errors import terminal_width as _terminal_width
from sparkdeploy.config.invocation import inventory_path as _inventory_path
from sparkdeploy.config.model_source import read_model_class as _read_model_class
from sparkdeploy.config.security import security_summary as _security_summary
from sparkdeploy.inventory import load_inventory as _load_inventory
from sparkdeploy.overrides import cli_overrides as _cli_overrides
from sparkdeploy.overrides import cli_selection as _cli_selection
from sparkdeploy.overrides import link_test_limit_problems as _link_test_limit_problems
from sparkdeploy.overrides import override_problems as _override_problems

_path = _inventory_path()  # $SPARK_INVENTORY, else inventory/sparks.yml

_refused = _override_problems(_path, *_cli_overrides())  # --data of an inventory key
if _refused:
    print("\n".join(_refused), file=_sys.stderr)
    _sys.exit(2)

try:
    _inventory = _load_inventory(_path, _read_model_class)
except _InventoryError as _error:
    print(_error.wrapped(_terminal_width(_sys.stderr)), file=_sys.stderr)
    _sys.exit(2)

_refused = _link_test_limit_problems(_path, *_cli_selection(), list(_inventory.sparks))
if _refused:  # --limit on the link test, which needs every Spark
    print("\n".join(_refused), file=_sys.stderr)
    _sys.exit(2)

for _warning in _inventory.warnings:
    print(f"warning: {_warning}", file=_sys.stderr)
_summary = _security_summary(_inventory.sparks, _os.environ)
if _summary:  # before pyinfra asks to apply
    print(_summary, file=_sys.stderr)
sparks = _inventory.pyinfra_hosts()
