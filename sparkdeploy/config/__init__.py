"""
The inventory, validated: each Spark's settings (every key, default and meaning declared
once), the fixed paths and the managed-file registry, and the Sparks' topology.
"""
