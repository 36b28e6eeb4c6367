"""The hf CLI probe: the huggingface_hub version in the hf command's venv, and the sha256 of
the hash lock that venv was made from."""

from __future__ import annotations

from dataclasses import dataclass

from sparkdeploy.config.paths import HF_CLI_VENV
from sparkdeploy.facts.probes import LOCK_STAMP, HostQuery, last_value, stamp_line

HF_CLI_STAMP = HF_CLI_VENV + "/" + LOCK_STAMP


@dataclass(frozen=True)
class HfCli:
    version: str  # "" when absent
    lock: str  # "" when none


class HfCliVenv:
    """
    The hf venv's huggingface_hub version and lock.

    Sample output of the command::

        hfcli 2.4.0
        hflock f508cbfeba33e3feabdc7432f30e030ca582b470d0e746345a5821b36942cf70
    """

    kinds = ("hfcli", "hflock")

    def lines(self, query: HostQuery) -> list[str]:
        return [
            f"v=$(ls -d {HF_CLI_VENV}/lib/python3*/site-packages/huggingface_hub-*.dist-info"
            " 2>/dev/null | head -n1)",
            'printf "hfcli %s\\n" "$(basename "$v" .dist-info | sed -n "s/^huggingface_hub-//p")"',
            stamp_line("hflock", HF_CLI_STAMP),
        ]

    def parse(self, lines: list[str]) -> HfCli:
        return HfCli(last_value(lines, "hfcli") or "", last_value(lines, "hflock") or "")
