"""
Expected failures, said without a traceback: a step that fails at execution on a Spark (a
health check, a fetch job, a refusal found only then) raises ``OperationError`` as before;
its callback, wrapped by ``expected``, logs the message where it happened, records a
``Failure`` and returns False, which is how pyinfra fails an operation of a Python
callback cleanly (pyinfra prints a traceback for any exception a callback lets out). After
pyinfra's results, one block per failed Spark says what failed, the cause found in its
journal (the known GB10 failure signatures), the fix and the next command to run.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pyinfra import host as current_host
from pyinfra import logger
from pyinfra.api import FunctionCommand, Host, OperationError, State, operation

from sparkdeploy.config.invocation import command
from sparkdeploy.facts.store import run_store
from sparkdeploy.knowledge.signatures import diagnose

FAILURES = "failures"  # the run store's result key (host name "")


def diagnose_command(name: str) -> str:
    """The read-only command that reads a Spark's engine journals and kernel log, in the
    form this run was started in (config/invocation.py)."""
    return command("diagnose", "--limit", name)


def status_command(name: str = "") -> str:
    """The read-only status table, of one Spark or of all."""
    return command("status", *(("--limit", name) if name else ()))


class SparkFailed(OperationError):
    """A failure the deploy expects and explains: the message, and the commands that show
    more (``then``); the cause and the fix come from the message's failure signatures."""

    def __init__(self, message: str, then: Sequence[str] = (), unexplained: str = ""):
        super().__init__(message)
        self.then = tuple(then)
        self.unexplained = unexplained  # the cause line when no failure signature matches


@dataclass(frozen=True)
class Failure:
    """What failed on one Spark, why, what to do, and what to run next."""

    host: str
    what: str  # the failed step and the message's first line
    cause: str  # the failure signature's cause and where it was seen ("" when none matched)
    fix: str  # the signature's fix ("" when none matched)
    then: tuple[str, ...]  # the commands that show more


# A next command: its text ("{host}" the Spark's name), or made from the Spark's name when
# the run ends (the form of the command depends on how the run was started).
Then = str | Callable[[str], str]


def failure_of(host: str, step: str, error: OperationError, then: Sequence[Then] = ()) -> Failure:
    """The Failure an ``OperationError`` of ``step`` on ``host`` says: its first line, the
    first known failure signature its text matches, and its commands (else ``then``, else
    diagnose.py)."""
    text = str(error)
    first = text.strip().splitlines()[0].rstrip(":") if text.strip() else type(error).__name__
    found = diagnose(text)
    cause, fix = getattr(error, "unexplained", ""), ""
    if found:
        signature = found[0].signature
        rule = f" (GB10 rule {signature.rule})" if signature.rule else ""
        cause = f"{signature.id}{rule}: {signature.cause} Seen: {found[0].line.strip()}"
        fix = signature.fix
    named = tuple(said(host) if callable(said) else said.replace("{host}", host) for said in then)
    commands: tuple[str, ...] = getattr(error, "then", ()) or named or (diagnose_command(host),)
    return Failure(host, f"{step}: {first}" if step else first, cause, fix, commands)


def format_failure(failure: Failure) -> str:
    """One block: the Spark and what failed, then cause, fix and next, one label a line."""
    lines = [f"--> {failure.host} FAILED: {failure.what}"]
    lines.append(f"    cause  {failure.cause or 'no known GB10 failure signature; see above'}")
    if failure.fix:
        lines.append(f"    fix    {failure.fix}")
    for number, said in enumerate(failure.then):
        lines.append(f"    {'next' if number == 0 else '':<6} {said}")
    return "\n".join(lines)


def format_failures(failures: Sequence[Failure]) -> str:
    """Every failure's block, then one line naming the Sparks that failed ("" for none)."""
    if not failures:
        return ""
    names = list(dict.fromkeys(failure.host for failure in failures))
    blocks = [format_failure(failure) for failure in failures]
    return "\n".join([*blocks, f"--> {len(names)} Spark(s) FAILED: {', '.join(names)}"])


def record(state: State, failure: Failure) -> None:
    """Keep a failure of this run, to be printed when it ends."""
    failures = run_store(state).results.setdefault(("", FAILURES), [])
    if failure not in failures:
        failures.append(failure)


def take_failures(state: State) -> list[Failure]:
    """The failures of this run, once (they are printed once), in the inventory's order of
    their Sparks: hosts run in parallel greenlets, so the order they failed in is chance."""
    failed: list[Failure] = run_store(state).results.pop(("", FAILURES), [])
    place = {host.name: number for number, host in enumerate(getattr(state, "inventory", ()))}
    return sorted(failed, key=lambda failure: place.get(failure.host, len(place)))


def expected(
    step: str, then: Sequence[Then] = ()
) -> Callable[[Callable[..., None]], Callable[..., bool]]:
    """Wrap a callback ``function(state, host, ...)`` of a ``FunctionCommand``: an
    ``OperationError`` it raises fails the operation without a traceback (logged where it
    happened, recorded for the end of the run, with ``then`` as the next commands when the
    error names none; ``{host}`` in them is the Spark's name)."""

    def wrap(function: Callable[..., None]) -> Callable[..., bool]:
        @functools.wraps(function)
        def run(state: State, host: Host, *args: object, **kwargs: object) -> bool:
            try:
                function(state, host, *args, **kwargs)
            except OperationError as error:
                for line in str(error).splitlines():
                    logger.error(f"{host.print_prefix}{line}")
                record(state, failure_of(host.name, step, error, then))
                return False
            return True

        return run

    return wrap


@expected("")
def _fail(
    state: State, host: Host, message: str, then: tuple[str, ...], unexplained: str = ""
) -> None:
    raise SparkFailed(message, then, unexplained)


@operation(is_idempotent=False)
def judged(failed: str = "", then: Sequence[str] = (), unexplained: str = ""):
    """
    Fail this Spark when a read-only check found something broken, so pyinfra exits 1 and
    the end of the run says what and which command explains it; nothing to do otherwise.

    + failed: what failed, one line ("" when nothing did)
    + then: the commands that explain it
    + unexplained: the cause line when no failure signature matches what failed (a check
      that read no journal says so, instead of pointing above)
    """
    if not failed:
        current_host.noop("nothing failed")
        return
    yield FunctionCommand(_fail, (failed, tuple(then), unexplained), {})
