"""
A shim: the deploy file pyinfra runs here is sparkdeploy/entry/linktest.py (packaged, so that the
spark-deploy command of an installed package runs the same file); see its docstring.

    pyinfra -y inventory.py linktest.py
"""

from sparkdeploy.entry import run

run("linktest", __file__)
