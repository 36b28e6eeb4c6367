"""
Diagnose the engines on the Sparks, changing nothing:

    pyinfra -y inventory.py diagnose.py

One read-only SSH command per Spark gathers the state and last journal lines of each engine
unit of its plan, and the kernel log of the current and the previous boot; after pyinfra's
results, each unit's report, and the kernel log's, names the known GB10 failure signatures
it matched (rule id, where it was seen, cause, fix, source) or says that none did (a unit's
report then shows its last lines). A unit not installed, failed, or stopped with a known
signature fails its Spark: pyinfra exits 1, naming it and its journal.
"""

from pyinfra import config

from sparkdeploy.reports import diagnosis, notices

config.SUDO = True  # a system unit's journal and the kernel log: root (and adm) read them
notices.install(final_only=False)

diagnosis.diagnose_engines()
