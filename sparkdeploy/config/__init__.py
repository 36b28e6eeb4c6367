"""
The inventory, validated: each Spark's settings (every key, default and meaning declared
once), the fixed paths and the shape of a managed file (with the Spark's own: the engine plan's,
and the one list of both, are beside the plan in engine_plan/files.py), and the Sparks'
topology. Knows no plan's shape: config imports only escape and knowledge.
"""
