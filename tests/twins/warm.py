"""
A warm pyinfra for the suite: one interpreter per test worker imports pyinfra's CLI and the
deploy's laptop-side modules once, then forks a child for each `pyinfra ...` run the
scenarios ask for. The child is the same program the `pyinfra` script runs (its `main()`,
with the script's argv, sys.path, working folder, environment and file descriptors), minus
the ~1.4 CPU-seconds of imports every run otherwise pays again (measured: pyinfra_cli 0.9 s,
the deploy's modules 0.5 s, on the CI machine kind; the suite runs pyinfra some 150 times).

What the fork cannot change is what a module reads when it is imported, so only modules that
read nothing from the environment, the working folder or the home at import are preloaded
(the entry files' own imports, ``entry_imports``; huggingface_hub, which reads HF_* at
import, is not among them, and the server checks that it was not brought in). `make demo`,
`make bench` and the CLI tests run the real `pyinfra` command.

    python tests/twins/warm.py      # serves: one JSON request per line on stdin, one reply each
"""

from __future__ import annotations

import ast
import importlib
import json
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import IO, Any

# The files pyinfra runs (the deploy, the inventory, status, diagnosis, the link test): the
# modules they import are preloaded, read from their import lines (``entry_imports``).
ENTRY = Path(__file__).resolve().parents[2] / "sparkdeploy" / "entry"
# Modules that read the environment when imported: a preload must not bring them in.
READS_ENV_AT_IMPORT = ("huggingface_hub", "httpx")


class WarmPyinfra:
    """The client side, in a test worker: runs `pyinfra ARGS` in a child of the warm
    interpreter and returns (exit status, stdout, stderr). One run at a time."""

    def __init__(self, script: Path, root: Path) -> None:
        self.script, self.root = script, root
        self.lock = threading.Lock()
        self.server: subprocess.Popen[str] | None = None

    def _started(self) -> subprocess.Popen[str]:
        if self.server is None or self.server.poll() is not None:
            self.server = subprocess.Popen(
                [sys.executable, __file__, str(self.root)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                cwd=self.root,
            )
        return self.server

    def run(
        self, args: list[str], env: dict[str, str], cwd: Path, timeout: float
    ) -> tuple[int, str, str]:
        with self.lock, tempfile.TemporaryDirectory(prefix="warm-pyinfra-") as folder:
            out, err = Path(folder, "stdout"), Path(folder, "stderr")
            server = self._started()
            assert server.stdin is not None and server.stdout is not None
            request = {"argv": [str(self.script), *args], "env": env, "cwd": str(cwd)}
            server.stdin.write(json.dumps({**request, "stdout": str(out), "stderr": str(err)}))
            server.stdin.write("\n")
            server.stdin.flush()
            reply = _read_line(server.stdout, timeout)
            if not reply:
                raise RuntimeError(f"the warm pyinfra stopped (exit {server.wait()})")
            status = json.loads(reply)["status"]
            return status, out.read_text(), err.read_text()

    def close(self) -> None:
        if self.server is not None and self.server.poll() is None:
            assert self.server.stdin is not None
            self.server.stdin.close()
            self.server.wait(timeout=30)


def _read_line(stream: IO[str], timeout: float) -> str:
    """A line from the server, or TimeoutError after `timeout` seconds (as subprocess.run's)."""
    box: list[str] = []
    reader = threading.Thread(target=lambda: box.append(stream.readline()), daemon=True)
    reader.start()
    reader.join(timeout)
    if reader.is_alive():
        raise TimeoutError(f"pyinfra ran past {timeout} s")
    return box[0]


def _child(request: dict[str, Any], path: list[str]) -> None:
    """In the forked child: become `pyinfra ARGV` as its script would start, then run it."""
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    stdin = os.open(os.devnull, os.O_RDONLY)
    os.dup2(stdin, 0)
    for fd, name in ((1, request["stdout"]), (2, request["stderr"])):
        target = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(target, fd)
        os.close(target)
    sys.argv = list(request["argv"])
    sys.path[:] = path
    status = 0
    try:
        importlib.import_module("pyinfra_cli.main").main()
    except SystemExit as done:
        code = done.code
        status = code if isinstance(code, int) else (0 if code is None else 1)
        if isinstance(code, str):
            print(code, file=sys.stderr)
    except BaseException:
        import traceback

        traceback.print_exc()
        status = 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(status)


def entry_imports(entry: Path = ENTRY) -> list[str]:
    """The modules the entry files import (``from a.b import c`` gives ``a.b.c`` when c is
    a module, else ``a.b``), pyinfra's CLI first: what every run imports before its work."""
    names = ["pyinfra_cli.main"]
    for file in sorted(entry.glob("*.py")):
        for node in ast.walk(ast.parse(file.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names += [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names += [f"{node.module}.{alias.name}" for alias in node.names]
    return list(dict.fromkeys(names))


def _preload(name: str) -> None:
    try:
        importlib.import_module(name)
    except ImportError:  # ``from a.b import c`` where c is not a module but a name in a.b
        importlib.import_module(name.rpartition(".")[0])


def serve(root: str) -> None:
    # A console script's sys.path: its own folder, then the interpreter's (this file's folder
    # and the checkout, where the preloads come from, are not on it; pyinfra adds ".").
    path = [str(Path(sys.executable).parent), *sys.path[1:]]
    sys.path.insert(0, root)
    for name in entry_imports():
        _preload(name)
    early = [m for m in READS_ENV_AT_IMPORT if m in sys.modules]
    assert not early, f"preloading imported {early}, which read the environment at import"
    replies = sys.stdout
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _child(request, path)
        _, wait_status = os.waitpid(pid, 0)
        replies.write(json.dumps({"status": os.waitstatus_to_exitcode(wait_status)}) + "\n")
        replies.flush()


if __name__ == "__main__":
    serve(sys.argv[1])
