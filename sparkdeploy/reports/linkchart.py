"""
The link test's bus bandwidth per message size as pictures (issue 25): an SVG chart (log
scale of sizes, GB/s, the pass threshold as a dashed line, one series per operation and
Spark as the data gives them) and a few lines of unicode bars for the terminal report.
Pure renderers: a stored result in, text out; writing the SVG is the caller's
(deploys/linktest.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from xml.sax.saxutils import escape, quoteattr

from sparkdeploy.facts.linktest import LinkResult

GIB = 1024**3
WIDTH, HEIGHT = 720, 420
LEFT, RIGHT, TOP, BOTTOM = 70, 170, 40, 60  # margins: axis labels left/bottom, legend right
COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2")
JUDGED = "all_gather"  # the operation the verdict reads (files/spark-link-test)
BLOCKS = " ▏▎▍▌▋▊▉█"  # eighths of a terminal cell


def human(size: int) -> str:
    """A size as nccl-tests' arguments write it: 16G, 256M, 64K, 100."""
    for suffix, unit in (("G", GIB), ("M", 1024**2), ("K", 1024)):
        if size >= unit and size % unit == 0:
            return f"{size // unit}{suffix}"
    return str(size)


@dataclass(frozen=True)
class Series:
    """One line of the chart: its label and (size in bytes, bus bandwidth GB/s) points."""

    label: str
    points: tuple[tuple[int, float], ...]


def op_points(result: LinkResult, op: str) -> tuple[tuple[int, float], ...]:
    """The (size, busbw) points of one operation of a result, by size."""
    found = {
        int(row["size"]): float(row["busbw"])
        for row in result.rows
        if row.get("op") == op and "size" in row and "busbw" in row
    }
    return tuple(sorted(found.items()))


def result_series(results: list[tuple[str, LinkResult]]) -> list[Series]:
    """One series per operation and Spark; a Spark whose points equal an earlier Spark's
    (every rank reports the same averaged times) joins that series' label instead."""
    found: dict[tuple[str, tuple[tuple[int, float], ...]], list[str]] = {}
    for name, result in results:
        for op in (JUDGED, "all_reduce"):
            points = op_points(result, op)
            if points:
                found.setdefault((op, points), []).append(name)
    return [Series(f"{op} {', '.join(names)}", points) for (op, points), names in found.items()]


def _scales(series: list[Series], threshold: float) -> tuple[int, int, float]:
    """The chart's smallest and largest size (a decade either side when only one) and its
    top bandwidth (a round number over every point and the threshold)."""
    sizes = [size for s in series for size, _ in s.points] or [GIB]
    low, high = min(sizes), max(sizes)
    if low == high:
        low, high = max(1, low // 4), high * 4
    top = max([threshold, *(value for s in series for _, value in s.points)]) or 1.0
    step = 10 ** math.floor(math.log10(top))
    return low, high, math.ceil(top * 1.1 / step) * step


def svg_chart(series: list[Series], threshold: float, title: str) -> str:
    """The SVG text of the chart: x the message size (log scale), y the bus bandwidth in
    GB/s from 0, a dashed line at ``threshold``, a polyline and a circle per point for each
    series, a legend on the right."""
    low, high, top = _scales(series, threshold)
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    span = math.log2(high) - math.log2(low)

    def x(size: int) -> float:
        return LEFT + plot_w * (math.log2(size) - math.log2(low)) / span

    def y(value: float) -> float:
        return TOP + plot_h * (1 - value / top)

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">',
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
        f'<text x="{WIDTH / 2:.1f}" y="22" text-anchor="middle" font-size="14">'
        f"{escape(title)}</text>",
        *_axes(x, y, low, high, top),
        f'<line class="threshold" x1="{LEFT}" y1="{y(threshold):.1f}" x2="{LEFT + plot_w}" '
        f'y2="{y(threshold):.1f}" stroke="#d62728" stroke-dasharray="6 4"/>',
        f'<text x="{LEFT + plot_w - 4}" y="{y(threshold) - 5:.1f}" text-anchor="end" '
        f'fill="#d62728">threshold {threshold:g} GB/s</text>',
    ]
    for index, line in enumerate(series):
        colour = COLOURS[index % len(COLOURS)]
        coords = " ".join(f"{x(size):.1f},{y(value):.1f}" for size, value in line.points)
        parts.append(
            f'<polyline class="series" points="{coords}" fill="none" stroke="{colour}" '
            f'stroke-width="2" data-label={quoteattr(line.label)}/>'
        )
        parts += [
            f'<circle class="point" cx="{x(size):.1f}" cy="{y(value):.1f}" r="3.5" '
            f'fill="{colour}"><title>{escape(line.label)}: {human(size)} '
            f"{value:.2f} GB/s</title></circle>"
            for size, value in line.points
        ]
        legend_y = TOP + 10 + 18 * index
        parts.append(
            f'<rect x="{WIDTH - RIGHT + 12}" y="{legend_y - 8}" width="12" height="4" '
            f'fill="{colour}"/><text x="{WIDTH - RIGHT + 30}" y="{legend_y}">'
            f"{escape(line.label)}</text>"
        )
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def _axes(
    x: Callable[[int], float], y: Callable[[float], float], low: int, high: int, top: float
) -> list[str]:
    """The axes, their ticks (every power of 2 of the sizes, labelled every other one when
    crowded; five bandwidth steps) and their labels."""
    bottom, right = y(0.0), x(high)
    parts: list[str] = []
    first, last = math.ceil(math.log2(low)), math.floor(math.log2(high))
    every = 1 if last - first <= 12 else 2
    for power in range(first, last + 1, every):
        at = x(2**power)
        parts.append(
            f'<line x1="{at:.1f}" y1="{bottom:.1f}" x2="{at:.1f}" y2="{bottom + 4:.1f}" '
            f'stroke="black"/><text x="{at:.1f}" y="{bottom + 17:.1f}" text-anchor="middle">'
            f"{human(2**power)}</text>"
        )
    for step in range(6):
        value = top * step / 5
        parts.append(
            f'<line x1="{LEFT}" y1="{y(value):.1f}" x2="{right:.1f}" y2="{y(value):.1f}" '
            f'stroke="#dddddd"/><text x="{LEFT - 6}" y="{y(value) + 4:.1f}" '
            f'text-anchor="end">{value:g}</text>'
        )
    parts += [  # the axes over the grid
        f'<line x1="{LEFT}" y1="{bottom:.1f}" x2="{right:.1f}" y2="{bottom:.1f}" stroke="black"/>',
        f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{bottom:.1f}" stroke="black"/>',
        f'<text x="{(LEFT + right) / 2:.1f}" y="{HEIGHT - 15}" text-anchor="middle">'
        "message size (bytes, log scale)</text>",
        f'<text transform="translate(18 {(TOP + bottom) / 2:.1f}) rotate(-90)" '
        'text-anchor="middle">bus bandwidth (GB/s)</text>',
    ]
    return parts


def bar(value: float, top: float, width: int) -> str:
    """A unicode bar of ``value`` out of ``top`` in ``width`` cells, to an eighth of one."""
    eighths = max(0, min(width * 8, round(8 * width * value / top))) if top > 0 else 0
    full, part = divmod(eighths, 8)
    return ("█" * full + (BLOCKS[part] if part else "")).ljust(width)


def terminal_chart(result: LinkResult, width: int = 32) -> list[str]:
    """A line per size of the judged operation's bus bandwidth: the size, a bar (the ``│``
    marks the threshold), the value, and ``<`` under the threshold."""
    points = op_points(result, JUDGED)
    if not points:
        return []
    top = max([result.min_busbw, *(value for _, value in points)]) * 1.05 or 1.0
    mark = min(width - 1, round(width * result.min_busbw / top)) if result.min_busbw else -1
    lines = [f"    {JUDGED} bus bandwidth (│ the threshold, {result.min_busbw:g} GB/s):"]
    for size, value in points:
        cells = list(bar(value, top, width))
        if mark >= 0 and cells[mark] == " ":
            cells[mark] = "│"
        below = " <" if value < result.min_busbw else ""
        lines.append(f"    {human(size):>5} {''.join(cells)} {value:6.2f}{below}")
    return lines
