"""The link test's pictures (issue 25): the SVG chart of bus bandwidth per size (parses as
XML, the threshold line, a point per size, the axes' labels, a series per operation and
Spark as the data gives them), the terminal bars in the report, and the chart written on
the laptop."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

from sparkdeploy.deploys.linktest import write_chart
from sparkdeploy.facts.linktest import LinkResult, RunOutput, parse_result
from sparkdeploy.reports.linkchart import bar, result_series, svg_chart, terminal_chart
from sparkdeploy.reports.linktest import SparkRun, format_report

SVG = "{http://www.w3.org/2000/svg}"
GIB = 1024**3
MIB = 1024**2
SIZES = (MIB, 16 * MIB, 256 * MIB, GIB, 4 * GIB, 16 * GIB)
GATHER = (2.1, 9.8, 19.5, 22.0, 23.0, 23.41)


def sample(gather: tuple[float, ...] = GATHER, passed: bool = True) -> LinkResult:
    rows = [
        {"op": "all_gather", "size": size, "algbw": 2 * value, "busbw": value, "time_us": 1.0}
        for size, value in zip(SIZES, gather, strict=True)
    ] + [
        {"op": "all_reduce", "size": size, "algbw": value, "busbw": value, "time_us": 1.0}
        for size, value in zip(SIZES, gather, strict=True)
    ]
    record = {
        "when": "2026-11-23T10:00:00Z",
        "passed": passed,
        "verdict": "all-gather bus bandwidth 23.410 GB/s at 16G >= 21.875 GB/s",
        "nodes": 2,
        "rank": 0,
        "min_busbw": 21.875,
        "results": rows,
        "skipped": [],
    }
    result = parse_result(json.dumps(record))
    assert result is not None
    return result


def chart(results: list[tuple[str, LinkResult]]) -> ET.Element:
    text = svg_chart(result_series(results), 21.875, "Link test <pair> & co")
    return ET.fromstring(text)  # parses as XML: the title's < and & are escaped


def test_the_svg_parses_with_the_threshold_line_and_a_point_per_size():
    root = chart([("spark-1", sample())])
    assert root.tag == f"{SVG}svg"
    thresholds = [line for line in root.iter(f"{SVG}line") if line.get("class") == "threshold"]
    assert len(thresholds) == 1
    (threshold,) = thresholds
    assert threshold.get("y1") == threshold.get("y2")  # horizontal
    texts = ["".join(text.itertext()) for text in root.iter(f"{SVG}text")]
    assert "threshold 21.875 GB/s" in texts
    assert "message size (bytes, log scale)" in texts and "bus bandwidth (GB/s)" in texts
    assert "Link test <pair> & co" in texts
    series = [line for line in root.iter(f"{SVG}polyline") if line.get("class") == "series"]
    assert [line.get("data-label") for line in series] == [
        "all_gather spark-1",
        "all_reduce spark-1",
    ]
    points = [circle for circle in root.iter(f"{SVG}circle") if circle.get("class") == "point"]
    assert len(points) == 2 * len(SIZES)  # one per size, in each series
    for line in series:
        assert len((line.get("points") or "").split()) == len(SIZES)


def test_the_sizes_go_left_to_right_on_a_log_scale_and_the_bandwidth_upwards():
    root = chart([("spark-1", sample())])
    gather = next(root.iter(f"{SVG}polyline"))
    coords = [tuple(map(float, pair.split(","))) for pair in (gather.get("points") or "").split()]
    xs = [x for x, _ in coords]
    steps = [b - a for a, b in zip(xs, xs[1:], strict=False)]
    assert abs(steps[0] - steps[1]) < 0.2  # 1M, 16M, 256M: factors of 16
    assert max(steps[2:]) - min(steps[2:]) < 0.2  # 256M, 1G, 4G, 16G: factors of 4
    assert abs(steps[0] - 2 * steps[2]) < 0.2  # log scale: 16 is twice as far as 4
    ys = [y for _, y in coords]
    assert ys == sorted(ys, reverse=True)  # more bandwidth is higher up (smaller y)


def test_a_series_per_spark_only_where_the_sparks_differ():
    same = result_series([("spark-1", sample()), ("spark-2", sample())])
    assert [s.label for s in same] == ["all_gather spark-1, spark-2", "all_reduce spark-1, spark-2"]
    slower = sample(gather=(1.0, 5.0, 9.0, 10.0, 11.0, 12.0))
    differ = result_series([("spark-1", sample()), ("spark-2", slower)])
    assert len(differ) == 4 and differ[2].label == "all_gather spark-2"


def test_one_size_still_gives_a_chart():
    result = sample()
    one = LinkResult(**{**result.__dict__, "rows": result.rows[5:6]})
    root = ET.fromstring(svg_chart(result_series([("spark-1", one)]), 21.875, "one"))
    assert len([c for c in root.iter(f"{SVG}circle")]) == 1


def test_terminal_chart_of_a_sample_result():
    lines = terminal_chart(sample(gather=(2.1, 9.8, 19.5, 22.0, 23.0, 20.0), passed=False))
    assert lines[0] == "    all_gather bus bandwidth (│ the threshold, 21.875 GB/s):"
    assert [line.split()[0] for line in lines[1:]] == ["1M", "16M", "256M", "1G", "4G", "16G"]
    assert lines[1].rstrip().endswith("2.10 <") and "│" in lines[1]  # short bar: mark shown
    assert lines[5].rstrip().endswith("23.00") and "│" not in lines[5]  # past the threshold
    assert lines[6].rstrip().endswith("20.00 <")
    widths = {len(line) for line in lines[1:] if not line.endswith("<")}
    assert len(widths) == 1  # the bars line up
    assert bar(1.0, 1.0, 4) == "████" and bar(0.5, 1.0, 4) == "██  "
    assert bar(1 / 8, 1.0, 4) == "▌   "


def spark(name: str, rank: int, result: LinkResult | None) -> SparkRun:
    return SparkRun(name, rank, RunOutput(0, (), result, True), "", ())


def test_the_report_shows_the_bars_and_the_laptop_gets_the_svg(tmp_path: Path):
    runs = [spark("spark-2", 1, sample()), spark("spark-1", 0, sample())]
    text = format_report(runs, "img", "192.168.100.1:29500")
    assert "all_gather bus bandwidth (│ the threshold" in text and "█" in text
    path = tmp_path / "linktest-spark-1.svg"
    said = write_chart(runs, path)
    assert said == f"\n    chart: {path} (bus bandwidth per size, the threshold dashed)"
    root = ET.fromstring(path.read_text(encoding="utf-8"))
    assert any(line.get("class") == "threshold" for line in root.iter(f"{SVG}line"))
    assert write_chart([spark("spark-1", 0, None)], path) == ""
    assert "not written" in write_chart(runs, tmp_path / "missing" / "x.svg")
