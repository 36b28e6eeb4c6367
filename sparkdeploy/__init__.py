"""
Prepare DGX Sparks to serve large language models. Data flows one way:

    inventory YAML -> config (validated settings, topology) -> engine_plan (the plan)
        -> deploys (operations, reading facts) -> files and units on the Spark

knowledge/ holds what is known about engines and the GB10 as data; reports/ prints what
the operator reads at the end of a run.
"""
