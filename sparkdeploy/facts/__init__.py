"""
Facts about a Spark, mirroring pyinfra's own facts/: one module per fact family, each fact
one SSH round trip that answers many questions at once, and one run-scoped store
(``store.py``) that gathers each fact once per run and keeps the run's results.
"""
