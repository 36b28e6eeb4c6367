"""The managed-files probe: the sha256, mode and owner of each file the deploy writes whole
(``managed_files``), a ``~/`` path read under the operator's home."""

from __future__ import annotations

from dataclasses import dataclass

from sparkdeploy.config.paths import HOME
from sparkdeploy.escape import shell
from sparkdeploy.facts.probes import HostQuery, fields

# The state of many files, with one sha256sum and one stat for all the regular files among
# them (four processes per file were a third of the host-state command on a twin: 0.1 s of
# 0.3 s for 31 files). A symlink reads as absent (it is replaced, never followed: root reads
# no file another account points it at, and no FIFO that would hang the fact). awk joins the
# two outputs by path; sha256sum prints "HASH  PATH" (the path from column 67), stat "mode
# MODE USER GROUP PATH"; each path is printed after ``shown``. A file removed in between gets
# no line, and a path missing from the output reads as absent.
JOIN = (
    '/^mode / { p = $0; sub(/^mode [^ ]+ [^ ]+ [^ ]+ /, "", p); m[p] = $2 " " $3 " " $4; next }'
    ' { p = substr($0, 67); if (p in m) print "file", shown p, $1, m[p] }'
)


def stat_all(paths: str, shown: str = "") -> str:
    """The line that prints ``file PATH SHA256 MODE USER GROUP`` for each of ``paths`` (shell
    words) that is a regular file, ``file PATH -`` for the others; PATH after ``shown`` (a
    fixed prefix such as ``~/``, for paths read relative to the operator's home)."""
    if any(char in shown for char in "%\\\"'$`"):
        raise ValueError(f"not a fixed prefix for printf and awk: {shown!r}")
    return (
        f'( set --; for f in {paths}; do if [ -f "$f" ] && [ ! -L "$f" ];'
        f' then set -- "$@" "$f"; else printf "file {shown}%s -\\n" "$f"; fi; done;'
        ' [ $# -eq 0 ] || { stat -c \'mode %a %U %G %n\' -- "$@"; sha256sum -- "$@"; }'
        f" 2>/dev/null | awk -v shown={shell(shown)} {shell(JOIN)} )"
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
        lines = [stat_all(files)]
        if at_home:  # read from the operator's home, printed as ~/PATH
            home_files = " ".join(shell(path) for path in at_home)
            read = stat_all(home_files, HOME)
            lines.append(f'( if [ -n "$home" ] && cd "$home" 2>/dev/null; then {read}; fi )')
        return lines

    def parse(self, lines: list[str]) -> dict[str, FileState | None]:
        files: dict[str, FileState | None] = {}
        for words in map(fields, lines):
            if words:
                files[words[0]] = FileState(*words[1:5]) if len(words) == 5 else None
        return files
