"""
The laptop's fetch progress for every Spark at once: the pure renderer (deploys/fetch/
progress.py: statuses in, text out) on a terminal and off one, and the thin layer
(deploys/fetch/board.py) that writes it, redraws it in place and gets out of pyinfra's way.
"""

from __future__ import annotations

import io
import logging
import os
from typing import Any
from unittest import mock

from sparkdeploy.deploys.fetch import board as board_module
from sparkdeploy.deploys.fetch.board import Board
from sparkdeploy.deploys.fetch.progress import LOG_EVERY, board_lines, due_lines, redraw

GB = 10**9
SIZE = os.terminal_size((200, 50))


def pulling(done: int, job: str = "image", label: str = "image vllm:26.01") -> dict[str, Any]:
    return {"id": job, "label": label, "phase": "pull", "done": done, "total": 10 * GB,
            "rate": GB}  # fmt: skip


def listing(job: str = "model", label: str = "model org/m") -> dict[str, Any]:
    return {"id": job, "label": label, "phase": "listing"}


ROWS = {"spark-1": [pulling(5 * GB), listing()], "spark-10": [pulling(GB)]}

# --- the renderer on a terminal ------------------------------------------------------------


def test_the_block_has_one_line_per_spark_and_job_with_the_names_aligned():
    assert board_lines(ROWS, 200) == [
        "spark-1   image vllm:26.01: [##########..........] 5.0 GB of 10.0 GB (50%), "
        "1.0 GB/s, 5s left",
        "spark-1   model org/m: reading the Hub's file list",
        "spark-10  image vllm:26.01: [##..................] 1.0 GB of 10.0 GB (10%), "
        "1.0 GB/s, 9s left",
    ]


def test_a_line_wider_than_the_terminal_is_cut_so_that_it_cannot_wrap():
    lines = board_lines(ROWS, 40)
    assert [len(line) for line in lines] == [39, 39, 39], lines
    assert lines[0] == "spark-1   image vllm:26.01: [#######..."
    assert board_lines({}, 80) == []


def test_the_redraw_goes_back_over_the_last_block_and_clears_below_it():
    assert redraw(3, ["a", "b"]) == "\r\x1b[3A\x1b[Ja\nb\n"
    assert redraw(0, ["a"]) == "\r\x1b[Ja\n"  # the first draw moves nothing
    assert redraw(2, []) == "\r\x1b[2A\x1b[J"  # no lines: the block is erased


# --- the renderer off a terminal ----------------------------------------------------------


def test_off_a_terminal_each_job_gets_a_line_at_most_once_a_minute():
    lines, shown = due_lines([pulling(GB), listing()], {}, now=100.0)
    assert lines == [
        "image vllm:26.01: 1.0 GB of 10.0 GB (10%), 1.0 GB/s, 9s left",
        "model org/m: reading the Hub's file list",
    ]  # a job seen for the first time: at once, and without a bar
    assert due_lines([pulling(2 * GB), listing()], shown, now=100 + LOG_EVERY - 1)[0] == []
    later, _ = due_lines([pulling(3 * GB), listing()], shown, now=100 + LOG_EVERY)
    assert later[0].startswith("image vllm:26.01: 3.0 GB") and len(later) == 2


def test_a_job_that_starts_later_is_shown_at_once_and_the_others_wait_their_minute():
    _, shown = due_lines([pulling(GB)], {}, now=0.0)
    lines, _ = due_lines([pulling(GB), listing()], shown, now=30.0)
    assert lines == ["model org/m: reading the Hub's file list"]


# --- the thin layer --------------------------------------------------------------------------


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def logged_to(stream: io.StringIO, name: str) -> logging.Logger:
    log = logging.getLogger(name)
    log.handlers = [logging.StreamHandler(stream)]
    log.propagate, log.level = False, logging.INFO
    return log


def a_board(stream: io.StringIO, log: logging.Logger) -> Board:
    with mock.patch.object(board_module.sys, "stderr", stream):
        return Board.of(mock.Mock())


def test_on_a_terminal_every_spark_redraws_the_one_block_in_place():
    screen = Terminal()
    board = Board(screen, logged_to(screen, "test-board-redraw"))
    emitted: list[str] = []
    with mock.patch.object(board_module.shutil, "get_terminal_size", return_value=SIZE):
        board.show("spark-1", [pulling(GB), listing()], emitted.append, 0.0)
        board.show("spark-2", [pulling(2 * GB)], emitted.append, 1.0)
        board.show("spark-1", [pulling(3 * GB), listing()], emitted.append, 2.0)
    frames = screen.getvalue().split("\r")[1:]
    assert [frame[: frame.index("\x1b[J")] for frame in frames] == ["", "\x1b[2A", "\x1b[3A"]
    last = frames[-1].split("\x1b[J")[1].splitlines()
    assert [line.split("  ")[0] for line in last] == ["spark-1", "spark-1", "spark-2"]
    assert "3.0 GB of 10.0 GB" in last[0] and "2.0 GB of 10.0 GB" in last[2]
    assert emitted == []  # nothing logged line by line on a terminal


def test_a_line_logged_under_the_block_erases_it_first_and_a_done_board_lets_go():
    screen = Terminal()
    log = logged_to(screen, "test-board-erase")
    board = Board(screen, log)
    with mock.patch.object(board_module.shutil, "get_terminal_size", return_value=SIZE):
        board.show("spark-1", [pulling(GB)], print, 0.0)
        board.show("spark-2", [pulling(GB)], print, 0.0)
        log.info("[spark-3] Success")
        assert screen.getvalue().endswith("\r\x1b[2A\x1b[J[spark-3] Success\n")
        board.show("spark-1", [pulling(2 * GB)], print, 2.0)
        assert screen.getvalue().count("\x1b[2A") == 1  # drawn anew below the line, not over it
        board.drop("spark-1")
        board.drop("spark-2")
    assert screen.getvalue().endswith("\r\x1b[1A\x1b[J")  # erased: the Sparks are done
    assert board not in log.filters
    log.info("after")
    assert screen.getvalue().endswith("\x1b[J" + "after\n")


def test_off_a_terminal_the_board_logs_through_the_sparks_prefix_once_a_minute():
    stream = io.StringIO()
    board = a_board(stream, logged_to(stream, "test-board-log"))
    emitted: list[str] = []
    for second in range(0, 125, 2):
        board.show("spark-1", [pulling(second * 10**7)], lambda line: emitted.append(line), second)
    assert len(emitted) == 3 and emitted[1].startswith("image vllm:26.01: 600.0 MB")
    assert stream.getvalue() == ""  # nothing drawn


def test_the_block_is_erased_before_a_held_header_is_printed_under_it():
    from sparkdeploy.reports.quiet import Quiet

    screen = Terminal()
    log = logged_to(screen, "test-board-quiet")
    log.filters = []
    log.addFilter(Quiet(log))  # the deploy installs it first
    board = Board(screen, log)
    log.info("--> Starting operation: Fetch the engine image and the model folders")  # held
    with mock.patch.object(board_module.shutil, "get_terminal_size", return_value=SIZE):
        board.show("spark-1", [pulling(GB)], print, 0.0)
        log.info("[spark-1] image vllm:26.01: done")
    after_block = screen.getvalue().split("9s left\n", 1)[1]
    assert after_block == (
        "\r\x1b[1A\x1b[J--> Starting operation: Fetch the engine image and the model folders\n"
        "[spark-1] image vllm:26.01: done\n"
    )
