"""
A shim: the pyinfra inventory is sparkdeploy/entry/inventory.py (packaged, so that the
spark-deploy command of an installed package reads the same file); see its docstring.

    pyinfra inventory.py deploy.py
    SPARK_INVENTORY=inventory/twins.yml pyinfra inventory.py deploy.py
"""

from sparkdeploy.entry import run as _run

sparks = _run("inventory", __file__)["sparks"]
