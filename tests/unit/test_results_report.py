"""Plots, style registry, HTML report, the report CLI and the progress display on the sample runs."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

from results.cli import report_main
from results.compare import compare
from results.html import reading, render
from results.plots import FIGURES, make_plots
from results.progress import Progress
from results.record import RunRecord, find_runs, load_run
from results.style import StyleRegistry

DATA = Path(__file__).resolve().parents[1] / "data" / "runs"


@pytest.fixture(scope="module")
def cmp():  # type: ignore[no-untyped-def]
    return compare(find_runs([DATA]))


@pytest.fixture(scope="module")
def plots(cmp, tmp_path_factory):  # type: ignore[no-untyped-def]
    return make_plots(cmp, tmp_path_factory.mktemp("plots"))


def test_every_figure_drawn_png_and_svg(plots) -> None:  # type: ignore[no-untyped-def]
    assert plots.skipped == {}
    assert set(plots.files) == set(FIGURES)
    for name, paths in plots.files.items():
        assert [p.suffix for p in paths] == [".png", ".svg"], name
        assert paths[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and paths[0].stat().st_size > 5000, name
        assert b"<svg" in paths[1].read_bytes()[:2000], name


def test_figure_without_data_is_skipped_not_drawn(tmp_path: Path) -> None:
    rec = RunRecord.create(tmp_path / "runs", "empty")
    rec.finish()
    result = make_plots(compare([load_run(rec.path)]), tmp_path / "out")
    assert result.files == {}
    assert set(result.skipped) == set(FIGURES)
    assert "queue" in result.skipped["queue_occupancy"]
    assert not list((tmp_path / "out").iterdir())


def test_style_registry_is_stable() -> None:
    a = StyleRegistry(["buffer=50KB", "buffer=200KB"])
    b = StyleRegistry(["buffer=50KB", "buffer=200KB", "buffer=50KB [incomplete]"])
    assert a.style("buffer=50KB") == b.style("buffer=50KB")
    assert a.style("buffer=50KB").color != a.style("buffer=200KB").color
    assert a.style("buffer=50KB").marker != a.style("buffer=200KB").marker
    inc = b.style("buffer=50KB [incomplete]")
    assert inc.color == b.style("buffer=50KB").color and inc.hollow and inc.linestyle == ":"
    assert len(b) == 3


def test_html_self_contained(cmp, plots) -> None:  # type: ignore[no-untyped-def]
    page = render(cmp, plots)
    assert "http://" not in page and "https://" not in page
    assert not re.search(r"""(src|href)\s*=\s*['"](?!data:)""", page)  # only data: URIs
    assert page.count("data:image/png;base64,") == len(FIGURES)
    for needle in (
        "links.buffer",
        "buffer=200KB",
        "incomplete",
        "kernel",
        "git_revision",
        "capabilities",
        "hash_policy",
        "<table",
    ):
        assert needle in page, needle


def test_reading_claims_against_the_baseline_with_n_and_interval(cmp) -> None:  # type: ignore[no-untyped-def]
    text = reading(cmp)
    assert "Against the baseline buffer=50KB" in text
    assert (
        "buffer=200KB lower than buffer=50KB on drops by 75.7 or 80% (95% CI [59.5, 91.8], n = 3, paired; Holm p "
        in text
    )
    claims = re.findall(r"buffer=200KB (?:lower|higher) than buffer=50KB on [^(]+\(95% CI [^)]+\)", text)
    claims += re.findall(r"buffer=200KB vs buffer=50KB: no difference detected on .+? at n = \d+ \([^)]+\)", text)
    assert len(claims) >= 3 and all("n = 3" in c and "paired" in c for c in claims), claims  # repeats 0-2 pair up
    assert "Drops (mean per run): buffer=50KB:" in text and "buffer=200KB:" in text
    assert "incomplete" in text


def test_report_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "rep"
    assert report_main([str(DATA), "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "buffer=50KB" in printed and "buffer=200KB" in printed and str(out / "report.html") in printed
    for f in ("comparison.csv", "comparison.md", "versus.csv", "report.html", "plots/cdf_rtt.png", "plots/cdf_rtt.svg"):
        assert (out / f).stat().st_size > 0, f
    # the same claims in the terminal, the Markdown, the CSV and the page
    assert "vs baseline (buffer=50KB)" in printed and "lower (better)" in printed
    assert "## vs baseline (buffer=50KB)" in (out / "comparison.md").read_text()
    assert "n = 3, paired" in (out / "versus.csv").read_text()
    page = (out / "report.html").read_text()
    assert "position:sticky" in page and "vs baseline (buffer=50KB)" in page and "lower (better)" in page
    assert report_main([str(tmp_path / "missing")]) == 2


def test_progress_plain_lines() -> None:
    now = [0.0]
    buf = io.StringIO()
    p = Progress(3, stream=buf, clock=lambda: now[0], tty=False, plain_every=10)
    p.plan([60.0, 60.0, 60.0])
    p.start("buffer=50KB #0")
    now[0] = 30.0
    assert p.eta() == pytest.approx(30 + 120)
    p.tick()  # 30 s since the last line: printed
    now[0] = 62.0
    p.finish()
    p.start("buffer=50KB #1")
    assert p.eta() == pytest.approx(60 + 60)
    lines = buf.getvalue().splitlines()
    assert lines[0].startswith("start buffer=50KB #0: [0/3]")
    assert "left ~2:30" in lines[1]
    assert "buffer=50KB #0: complete in 1:02 | [1/3]" in lines[2]
    assert "\r" not in buf.getvalue()


def test_progress_tty_redraws_and_unknown_eta() -> None:
    buf = io.StringIO()
    now = [0.0]
    p = Progress(2, stream=buf, clock=lambda: now[0], tty=True)
    p.start("run a")
    assert p.eta() is None  # no expected duration, nothing finished yet
    now[0] = 10.0
    p.finish()
    p.start("run b")
    assert p.eta() == pytest.approx(10.0)  # the mean of finished runs
    assert "\r\x1b[2K" in buf.getvalue()


def test_deferred_report_is_written_by_pending_and_only_once(tmp_path: Path) -> None:
    from results.cli import PENDING, defer_report

    runs = [DATA / "sweep-buffer"]  # find_runs takes the parent of a sweep's run directories
    out = tmp_path / "scenarios" / "s1" / "test_x" / "report"
    defer_report(runs, out)
    assert (out / PENDING).exists() and not (out / "report.html").exists()
    assert report_main(["--pending", str(tmp_path)]) == 0
    assert (out / "report.html").exists() and (out / "comparison.csv").exists() and not (out / PENDING).exists()
    assert report_main(["--pending", str(tmp_path)]) == 0  # nothing left pending
    assert report_main(["--pending"]) == 2
