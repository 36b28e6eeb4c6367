"""
The laptop's fetch progress for every Spark of a run at once: the thin layer that writes
what deploys/fetch/progress.py renders. Each Spark's fetch runs in a greenlet of its own
(pyinfra runs an operation on all the Sparks in parallel) and hands its statuses to the one
board of the run. On a terminal (pyinfra logs on stderr: that is the stream looked at) the
board is one block redrawn in place, one line per Spark and job; anything pyinfra logs
meanwhile erases it first and the next look draws it again below. Elsewhere each job gets a
line at most every progress.LOG_EVERY seconds, through the Spark's log prefix.

May import: deploys.fetch.progress, pyinfra's logger. Knows nothing of jobs or SSH.
"""

from __future__ import annotations

import logging
import shutil
import sys
import weakref
from collections.abc import Callable
from typing import Any, TextIO

from sparkdeploy.deploys.fetch.progress import board_lines, due_lines, redraw

BOARDS: weakref.WeakKeyDictionary[Any, Board] = weakref.WeakKeyDictionary()


class Board(logging.Filter):
    """One run's block of fetch progress; a filter on pyinfra's logger while it is drawn, so
    that a line logged under it erases it first instead of being drawn over."""

    def __init__(self, stream: TextIO, log: logging.Logger):
        super().__init__()
        self.stream, self.log = stream, log
        self.terminal = stream.isatty()
        self.rows: dict[str, list[dict[str, Any]]] = {}
        self.shown: dict[str, dict[str, float]] = {}  # Spark -> job -> when it was logged
        self.height = 0  # the lines of the block on the screen now

    @classmethod
    def of(cls, state: Any) -> Board:
        """The board of pyinfra's ``state`` (one per run), made on first use."""
        if state not in BOARDS:
            BOARDS[state] = cls(sys.stderr, logging.getLogger("pyinfra"))
        return BOARDS[state]

    def show(
        self, name: str, statuses: list[dict[str, Any]], emit: Callable[[str], Any], now: float
    ) -> None:
        """Where the jobs of Spark ``name`` stand: redrawn, or logged with ``emit`` (the
        caller's logger, with the Spark's prefix) when a minute has passed."""
        if self.terminal:
            self.rows[name] = statuses
            self.draw()
            return
        lines, self.shown[name] = due_lines(statuses, self.shown.get(name, {}), now)
        for line in lines:
            emit(line)

    def drop(self, name: str) -> None:
        """Spark ``name`` is done watching (finished, failed or out of time): off the block."""
        if self.rows.pop(name, None) is not None:
            self.draw()

    def draw(self) -> None:
        lines = board_lines(self.rows, shutil.get_terminal_size().columns)
        self.write(redraw(self.height, lines))
        self.height = len(lines)
        if not self.height:
            self.log.removeFilter(self)
        elif self not in self.log.filters:
            # first: the block is erased before any other filter writes (reports/quiet.py
            # prints an operation's held header when the operation says something)
            self.log.filters.insert(0, self)

    def write(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()

    def filter(self, record: logging.LogRecord) -> bool:
        """Something else is logged: erase the block (the next look draws it again)."""
        if self.height:
            self.write(redraw(self.height, []))
            self.height = 0
        return True
