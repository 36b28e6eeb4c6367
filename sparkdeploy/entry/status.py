"""
Show the state of every Spark in one table, changing nothing:

    pyinfra -y inventory.py status.py

One SSH command per Spark, run as the SSH user (no sudo). The only operation judges each
Spark: nothing to do, or a failure when a check FAILs, so pyinfra exits 1 (without -y it
asks to press enter, as for any deploy file). The matrix (a line per check, a column per
Spark) is printed at the end of the run (sparkdeploy/reports/status.py); with
SPARK_STATUS_JSON=FILE (or - for stdout) the status is written as JSON too (docs/status.md).
"""

from sparkdeploy.reports import status

status.show_status()
