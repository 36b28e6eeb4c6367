"""
Prove the link between the Sparks of a pair or cluster, changing nothing but the test's own
result file:

    pyinfra -y inventory.py linktest.py
    SPARK_LINK_TEST_WHILE_SERVING=1 pyinfra -y inventory.py linktest.py   # engines running

One SSH command per Spark checks it may run (engine units stopped, image and script there,
each rail's link speed), then every Spark at once runs files/spark-link-test in its engine
image with the engine's environment (`docker run ... python3 /usr/local/sbin/spark-link-test`):
NCCL all-gather and all-reduce through torch.distributed, bus bandwidth per size as
nccl-tests computes it, judged against link_test_min_busbw at the largest size. The result
is stored on each Spark (/var/lib/spark-deploy/linktest.json; the status table shows it).
After pyinfra's results: the table per size, the network NCCL used, the rail speeds and the
verdict; pyinfra exits 1 when the test did not pass. All Sparks of the pair or cluster must
be in the run, with --parallel at least their number (pyinfra's default): a --limit or
--exclude that leaves one out is refused by the inventory before connecting.
"""

import os

from pyinfra import config

from sparkdeploy.deploys import linktest

config.SUDO = True  # docker, and the result file under /var/lib/spark-deploy

linktest.run_link_test(while_serving=os.environ.get(linktest.WHILE_SERVING_ENV) == "1")
