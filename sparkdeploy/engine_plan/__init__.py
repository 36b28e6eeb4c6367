"""
The engine plan of each Spark, made from validated settings and the topology before any
host is touched: the effective flags and environment (GB10 profiles layered with the
operator's), the GB10 rules, the units and their command lines, the alerts, the files each
plan writes and the registry of every managed file (files.py). Pure code:
no pyinfra, no host.
"""
