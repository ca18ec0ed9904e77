"""The demo's report folder from a synthetic summary: every file is written, every PNG is a real
image the page points at, text from services is escaped, and summary.json reads back as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from services.demo.html_report import cell, render_html, write_report
from services.demo.plots import PLOTS
from services.demo.summary import DemoSummary
from tests.support.demo_summaries import ballast_only_empty, both_runs

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SUMMARIES = {"both runs": both_runs, "ballast only, empty series": ballast_only_empty}


@pytest.fixture(scope="module", params=sorted(SUMMARIES))
def written(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[DemoSummary, Path]:
    """Each summary's report, written once for the module (drawing six PNGs takes about a second)."""
    summary = SUMMARIES[request.param]()
    index = write_report(summary, tmp_path_factory.mktemp("demo-report"))
    return summary, index


def test_the_folder_holds_the_page_the_record_and_every_plot(written):
    _, index = written
    assert index.name == "index.html" and index.is_file()
    names = {p.name for p in index.parent.iterdir()}
    assert names == {"index.html", "summary.json", *(p.file for p in PLOTS)}


def test_every_plot_is_a_real_png(written):
    _, index = written
    for plot in PLOTS:
        data = (index.parent / plot.file).read_bytes()
        assert data.startswith(PNG_MAGIC), plot.file
        assert len(data) > 5_000, f"{plot.file} is {len(data)} bytes: nothing drawn?"


def test_the_page_shows_exactly_the_plots_written(written):
    _, index = written
    html = index.read_text()
    sources = re.findall(r'<img src="([^"]+)"', html)
    assert sorted(sources) == sorted(p.name for p in index.parent.glob("*.png"))
    assert len(sources) == len(set(sources))
    assert all(f'alt="{p.title}"' in html for p in PLOTS)


def test_the_page_loads_nothing_from_elsewhere(written):
    _, index = written
    html = index.read_text()
    assert "<script" not in html
    assert not re.search(r'(src|href)="(https?:)?//', html)


def test_summary_json_reads_back_as_written(written):
    summary, index = written
    assert DemoSummary.read(index.parent / "summary.json") == summary


def test_verdict_and_failure_text_is_escaped():
    html = render_html(both_runs(), [p.file for p in PLOTS])
    assert "lag &lt;target&gt; &amp; &quot;quotes&quot;" in html
    assert "peak &lt;b&gt;5.2&lt;/b&gt; s &gt; 3 s" in html
    assert "<b>5.2</b>" not in html
    assert "exited &lt;1&gt; &amp; gone" in html and "/tmp/demo/shedder.log" in html
    assert html.index("FAIL") < html.index("<h2>Run:")  # the verdict comes before the details


def test_a_run_without_failure_has_no_failure_box():
    html = render_html(ballast_only_empty(), [p.file for p in PLOTS])
    assert 'class="failure"' not in html
    assert "Run: Ballast" in html and "Run: hash" not in html


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (None, "–"),
        (True, "yes"),
        (123_456, "123,456"),
        (3.0, "3"),
        (1.07314, "1.07"),
        (0.000123, "0.000123"),
        (98_765.4, "98,765"),
        ([2, None, 3], "2, –, 3"),
        ({"exact": 20, "mean": 0.5}, "exact: 20; mean: 0.5"),
        ("text", "text"),
    ],
)
def test_figures_are_shown_as_a_reader_wants_them(value, shown):
    assert cell(value) == shown


def test_the_plotted_lines_carry_exactly_the_numbers_of_summary_json():
    """What a reader sees in imbalance.png and keep.png is what summary.json says, point for point."""
    from services.demo.plots import imbalance_figure, keep_figure

    summary = both_runs()
    for figure, series in ((imbalance_figure, "imbalance"), (keep_figure, "keep")):
        ax = figure(summary).axes[0]
        drawn = {ln.get_label(): (list(ln.get_xdata()), list(ln.get_ydata())) for ln in ax.get_lines()}
        for name, run in summary.runs.items():
            rows = getattr(run, series)
            if not rows:
                continue
            xs, ys = [r[0] for r in rows], [r[1] for r in rows]
            matches = [k for k, (x, y) in drawn.items() if x[: len(xs)] == xs and y[: len(ys)] == ys]
            assert matches, f"{series} of {name}: no drawn line holds {list(zip(xs, ys, strict=True))[:3]}…"
