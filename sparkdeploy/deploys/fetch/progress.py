"""
What the laptop shows while the Spark works: one line per Spark every few seconds, naming
each job with its bytes done and total, rate and the time left; with a bar on a terminal.
Pure: statuses (spark-fetch's JSON) in, text out.
"""

from __future__ import annotations

from typing import Any

BAR_WIDTH = 20


def human_bytes(size: float) -> str:
    """Decimal units, as the Hub and docker print sizes: 66.0 GB, 850.3 MB."""
    for unit in ("B", "kB", "MB", "GB"):
        if abs(size) < 1000:
            return f"{int(size)} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{size:.1f} TB"


def human_time(seconds: float) -> str:
    seconds = int(seconds)
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    if seconds >= 60:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds}s"


def bar(fraction: float) -> str:
    filled = round(max(0.0, min(1.0, fraction)) * BAR_WIDTH)
    return "[" + "#" * filled + "." * (BAR_WIDTH - filled) + "]"


PHASES = {
    "start": "starting",
    "listing": "reading the Hub's file list",
    "repair": "fetching the files this release omits",
    "seal": "checking the folder",
    "present": "on the Spark",
    "read": "reading the image",
    "waiting": "waiting until the head has it whole",
    "done": "done",
}
MOVING = ("download", "pull", "copy")  # the phases that move bytes


def job_line(status: dict[str, Any], terminal: bool) -> str:
    """One job: ``model X: [####......] 12.3 GB of 66.0 GB (18%), 85.2 MB/s, 10m32s left``."""
    label = status.get("label") or status.get("id", "?")
    if status.get("state") == "retrying":  # spark-fetch@.service runs it again, backing off
        return f"{label}: a network error, to be tried again ({status.get('error') or '?'})"
    phase = status.get("phase", "start")
    done, total = status.get("done"), status.get("total")
    if phase not in MOVING or done is None:
        return f"{label}: {PHASES.get(phase, phase)}"
    rate = float(status.get("rate") or 0)
    parts = [human_bytes(done) + (f" of {human_bytes(total)}" if total else "")]
    if total:
        parts[0] += f" ({100 * done / total:.0f}%)"
    parts.append(f"{human_bytes(rate)}/s" if rate else "waiting for data")
    if total and rate > 0 and total > done:
        parts.append(f"{human_time((total - done) / rate)} left")
    shown = ", ".join(parts)
    if terminal and total:
        shown = f"{bar(done / total)} {shown}"
    return f"{label}: {shown}"


def progress_line(statuses: list[dict[str, Any]], terminal: bool) -> str:
    """Every job of one Spark, on one line."""
    return " | ".join(job_line(status, terminal) for status in statuses)


def finished_line(status: dict[str, Any]) -> str:
    """A job that finished in this run: what it moved and how fast."""
    label = status.get("label") or status.get("id", "?")
    took = float(status.get("finished", 0)) - float(status.get("started", 0))
    total = status.get("total") or status.get("done") or 0
    if took <= 0 or not total:
        return f"{label}: done"
    rate = total / took
    return f"{label}: done, {human_bytes(total)} in {human_time(took)} ({human_bytes(rate)}/s)"


def failure_text(status: dict[str, Any], unit: str) -> str:
    """Why a job failed, its last journal lines, and how to follow it."""
    label = status.get("label") or status.get("id", "?")
    lines = "".join(f"\n    {line}" for line in status.get("lines") or [])
    return (
        f"{label} failed on the Spark: {status.get('error') or 'no reason recorded'}"
        f"{lines}\n  journal: journalctl -u {unit}; the next deploy run retries it from "
        "where it stopped"
    )


# --- the laptop's view of every Spark's jobs ---------------------------------------------
# On a terminal one block, one line per Spark and job, redrawn in place; elsewhere (a log, CI)
# a line per job at most every LOG_EVERY seconds, so that a six-hour fetch is not 4000 lines.

LOG_EVERY = 60.0


def board_lines(rows: dict[str, list[dict[str, Any]]], width: int) -> list[str]:
    """The block: one line per Spark and job, in the order the Sparks first reported, the
    names aligned, each line cut to the terminal's width (a line that wrapped would take two
    rows, and the redraw, which counts lines, would leave the top one behind)."""
    pad = max((len(name) for name in rows), default=0)
    lines = [
        f"{name:<{pad}}  {job_line(status, True)}"
        for name, statuses in rows.items()
        for status in statuses
    ]
    return [fit(line, width) for line in lines]


def fit(line: str, width: int) -> str:
    """``line`` within ``width - 1`` columns (the last column would wrap on some terminals)."""
    return line if len(line) < width else line[: max(width - 4, 0)] + "..."


def redraw(height: int, lines: list[str]) -> str:
    """What replaces the block of ``height`` lines drawn last, the cursor on the line below
    it, with ``lines``: up to its first line, clear to the end of the screen (pyinfra's
    spinner below it too), draw. No lines: the block is erased."""
    up = f"\x1b[{height}A" if height else ""
    return "\r" + up + "\x1b[J" + "".join(line + "\n" for line in lines)


def due_lines(
    statuses: list[dict[str, Any]], shown: dict[str, float], now: float
) -> tuple[list[str], dict[str, float]]:
    """Off a terminal: the lines of the jobs not shown for LOG_EVERY seconds (a job seen
    for the first time at once), and when each job was shown last, updated."""
    lines, shown = [], dict(shown)
    for status in statuses:
        key = str(status.get("id") or status.get("label"))
        if now - shown.get(key, float("-inf")) >= LOG_EVERY:
            lines.append(job_line(status, False))
            shown[key] = now
    return lines, shown
