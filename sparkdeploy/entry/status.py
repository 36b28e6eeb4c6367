"""
Show the state of every Spark in one table, changing nothing:

    pyinfra -y inventory.py status.py

One SSH command per Spark, run as the SSH user (no sudo). No operation is planned, so
pyinfra has no change to show or make (without -y it still asks to press enter, as for any
deploy file); the table is printed at the end of the run (sparkdeploy/reports/status.py).
"""

from sparkdeploy.reports import status

status.show_status()
