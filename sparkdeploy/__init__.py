"""
Prepare DGX Sparks to serve large language models. Data flows one way:

    inventory YAML -> config (validated settings, topology) -> engine_plan (the plan)
        -> deploys (operations, reading facts) -> files and units on the Spark

knowledge/ holds what is known about engines and the GB10 as data; reports/ prints what
the operator reads at the end of a run.
"""

# The release, written here only: pyproject.toml reads it (setuptools' dynamic version), the
# header of every file the deploy manages carries it, `spark-deploy --version` prints it.
__version__ = "0.1.0"
# The pyinfra releases this deploy runs with: requirements.txt pins one of them, pyproject's
# dependency allows them, and the deploy file requires them (config.REQUIRE_PYINFRA_VERSION).
PYINFRA_VERSIONS = ">=3.10.0,<4"
