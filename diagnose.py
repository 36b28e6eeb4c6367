"""
Diagnose the engines on the Sparks, changing nothing:

    pyinfra -y inventory.py diagnose.py

One read-only SSH command per Spark gathers the state and last journal lines of each engine
unit of its plan; after pyinfra's results, each unit's report names the known GB10 failure
signatures it matched (rule id, cause, fix) or says that none did and shows the last lines.
"""

from pyinfra import config

from sparkdeploy.reports import diagnosis, notices

config.SUDO = True  # the journal of a system unit is readable by root (and adm)
notices.install(final_only=False)

diagnosis.diagnose_engines()
