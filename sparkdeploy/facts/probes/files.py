"""The managed-files probe: the sha256, mode and owner of each file the deploy writes whole
(``managed_files``), a ``~/`` path read under the operator's home."""

from __future__ import annotations

from dataclasses import dataclass

from sparkdeploy.config.paths import HOME
from sparkdeploy.escape import shell
from sparkdeploy.facts.probes import HostQuery, fields

# st PATH [NAME]: the state of a file, printed under NAME (default PATH); a symlink reads as
# absent (it is replaced, never followed: root reads no file another account points it at,
# and no FIFO that would hang the fact)
STAT_FUNCTION = (
    'st() { if [ -f "$1" ] && [ ! -L "$1" ]; then printf "file %s %s %s\\n" "${2:-$1}"'
    ' "$(sha256sum < "$1" | cut -d" " -f1)" "$(stat -c "%a %U %G" "$1")";'
    ' else printf "file %s -\\n" "${2:-$1}"; fi; }'
)


@dataclass(frozen=True)
class FileState:
    sha256: str
    mode: str  # octal, as stat prints it: "644"
    user: str
    group: str


class ManagedFiles:
    """
    Managed path -> its state, None when it is absent (or no regular file).

    Sample output of the command::

        file /etc/spark-deploy/hf.env 5d41402abc4b2a76b9719d911017c592 644 root root
        file /usr/local/sbin/spark-memory-guard -
        file ~/.cache/huggingface/token 9f86d081884c7d65 600 nvidia nvidia
    """

    kinds = ("file",)

    def lines(self, query: HostQuery) -> list[str]:
        files = " ".join(shell(path) for path in query.paths if not path.startswith(HOME))
        at_home = [path[len(HOME) :] for path in query.paths if path.startswith(HOME)]
        return [
            STAT_FUNCTION,
            f'for f in {files}; do st "$f"; done',
            *(
                f'[ -z "$home" ] || st "$home"/{shell(path)} {shell(HOME + path)}'
                for path in at_home
            ),
        ]

    def parse(self, lines: list[str]) -> dict[str, FileState | None]:
        files: dict[str, FileState | None] = {}
        for words in map(fields, lines):
            if words:
                files[words[0]] = FileState(*words[1:5]) if len(words) == 5 else None
        return files
