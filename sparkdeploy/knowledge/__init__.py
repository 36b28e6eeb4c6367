"""
What is known about the engines and the GB10, as data with its sources: the flag
catalogues of each engine release (read from the published wheels by tools/catalogue),
images, GB10 profiles and rules, flag renames, failure signatures and metric names, with
the small pure loaders that read them. Nothing here depends on the inventory or on pyinfra.
"""

from pathlib import Path

KNOWLEDGE_DIR = Path(__file__).resolve().parent
