"""
A shim: the deploy file pyinfra runs here is sparkdeploy/entry/deploy.py (packaged, so that the
spark-deploy command of an installed package runs the same file); see its docstring.

    pyinfra inventory.py deploy.py
"""

from sparkdeploy.entry import run

run("deploy", __file__)
