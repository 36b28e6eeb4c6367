"""
Facts about a Spark, mirroring pyinfra's own facts/: one module per fact family, each fact
one SSH round trip that answers many questions at once, and one run-scoped store
(``store.py``) that gathers each fact once per run and keeps the run's results.
The host-state fact is composed of probes (``probes/``), one per feature it reads: each
probe's lines and parser, pure (no pyinfra), knowing nothing of the fact that runs them.
"""
