"""
The engine plan of each Spark, made from validated settings and the topology before any
host is touched: the effective flags and environment (GB10 profiles layered with the
operator's), the GB10 rules, the units and their command lines, the alerts, the files each
plan writes and the registry of every managed file (files.py). Pure code:
no pyinfra, no host.

Its rooms, in the order data flows (tests/unit/test_layers.py keeps it): effective, rules,
alerts (knowledge applied to settings); launch (units and command lines); planners, mounts
(each planner's part, problems and warnings); plan (the pipeline and EnginePlan);
image_check, linktest (what reads a finished plan).
"""
