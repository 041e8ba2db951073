"""`tacoma bench --plot`: what the figures show, read from matplotlib's figure objects.

The measurements drawn here are values (Measured, Run) as a run makes them; the figures
are built by the functions `tacoma bench --plot` calls, and inspected as objects (their
lines, labels and texts), never as pixels.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tacoma.bench import RunInfo
from tacoma.bench._suite import Measured, Run
from tacoma.wire._trace import TACOMA_STEPS

pytest.importorskip("matplotlib")

# After the skip: matplotlib is an extra, which the plotting module needs.
from tacoma.bench._plot import (
    breakdown_figure,
    plot_breakdown,
    plot_suite,
    suite_figure,
)

INFO = RunInfo("2026-11-26 19:40+00:00", 2, "9.9.9", "3.11.7", "python", "default",
               "4 local places", "quick")
ROAM = Measured("ROAM", "hops/s", [Run(4, 4, 0.03), Run(12, 12, 0.08), Run(40, 40, 0.25)],
                Run(184, 184, 1.01), "the roamer came home", {"loop_sizes": [4, 12, 40]})
AD = Measured("AD", "agents/s", [Run(1, 1, 0.004), Run(3, 3, 0.01), Run(10, 10, 0.03)],
              None, "", {"loop_sizes": [1, 3, 10, 30]},
              failure="PlaceUnavailable: root has its share of 32 meets running at place "
                      "127.0.0.1:40553; try again when some end" + " (and more)" * 20)


@pytest.fixture
def figure() -> Iterator[Any]:
    """Close every figure a test made (pyplot keeps them otherwise)."""
    import matplotlib.pyplot as plt

    made: list[Any] = []
    yield made.append
    for fig in made:
        plt.close(fig)


def _labels(axes: Any) -> list[str]:
    return [line.get_label() for line in axes.get_lines()]


def test_roams_ticks_are_plain_numbers_at_the_sizes_measured(figure) -> None:
    fig = suite_figure(ROAM, INFO)
    figure(fig)
    fig.canvas.draw()
    total, average, _ = fig.axes
    for axes in (total, average):
        shown = [t.get_text() for t in axes.get_xticklabels() if t.get_text()]
        assert shown == ["4", "12", "40", "184"]  # and the sustained run's hops
        assert not [t.get_text() for t in axes.get_xticklabels(minor=True) if t.get_text()]
        for tick in [t.get_text() for t in axes.get_yticklabels() if t.get_text()]:
            assert re.fullmatch(r"[\d,]+(\.\d+)?", tick), tick  # no 4x10^1, no mathtext


def test_the_papers_systems_are_drawn_beside_ours(figure) -> None:
    fig = suite_figure(ROAM, INFO)
    figure(fig)
    total, average, rates = fig.axes
    for axes in (total, average):
        labels = _labels(axes)
        assert "tacoma" in labels and "tacoma, sustained run (hops 184)" in labels
        # Table 8's ROAM rates: Concordia 0.68, Aglets 44.64, Voyager 14.7 hops/s sustained.
        for system, rate in (("Concordia 1.1.4", "0.68"), ("Aglets 1.0.3", "44.6"),
                             ("Voyager 3.1", "14.7")):
            paper = [line for line in axes.get_lines()
                     if line.get_label() == f"{system} (paper, Table 8: sustained {rate} "
                                            "hops/s)"]
            assert len(paper) == 1 and paper[0].get_linestyle() == "--"
            assert paper[0].get_marker() not in ("", "None")
    # The paper's average time is 1 / its sustained rate at every loop size.
    aglets = next(line for line in average.get_lines() if line.get_label().startswith("Aglets"))
    assert list(aglets.get_ydata()) == pytest.approx([1000 / 44.64] * 4)
    assert {"tacoma", "Concordia (paper)", "Aglets (paper)", "Voyager (paper)"} <= \
        set(rates.get_legend_handles_labels()[1])


def test_a_figure_says_when_and_how_it_was_measured(figure) -> None:
    fig = suite_figure(ROAM, INFO)
    figure(fig)
    footer = " ".join(t.get_text() for t in fig.texts)
    for part in ("2026-11-26 19:40", "2 CPUs", "tacoma 9.9.9", "agents in python",
                 "default isolation", "quick run", "Pentium III"):
        assert part in footer, part
    assert fig.get_suptitle().startswith("ROAM: peak ")


def test_a_failed_benchmark_is_a_labelled_figure(figure, tmp_path: Path) -> None:
    fig = suite_figure(AD, INFO)
    figure(fig)
    texts = [t.get_text() for t in fig.texts]
    failed = [t for t in texts if t.startswith("failed: PlaceUnavailable: root has its share")]
    assert len(failed) == 1 and len(failed[0]) <= len("failed: ") + 120  # short
    assert fig.get_suptitle() == "AD: FAILED"
    total = fig.axes[0]
    assert "tacoma (before it failed)" in _labels(total)  # what it did is still shown
    assert any(label.startswith("Concordia 1.1.4 (paper") for label in _labels(total))
    paths = plot_suite([AD, ROAM], tmp_path, INFO)  # drawn, not left out
    assert [p.name for p in paths] == ["ad.png", "roam.png"]
    assert all(p.read_bytes().startswith(b"\x89PNG") for p in paths)


def test_the_breakdown_has_a_title_totals_and_room_above_its_longest_bar(
        figure, tmp_path: Path) -> None:
    medians = {key: us / 10 for key, (_, us) in TACOMA_STEPS.items()}
    fig = breakdown_figure(medians, 2_817.2, 20, INFO)
    figure(fig)
    fig.canvas.draw()
    (axes,) = fig.axes
    title = fig.get_suptitle()
    assert "2,817 µs" in title and "21,675 µs" in title
    ticks = [t.get_text() for t in axes.get_yticklabels()]
    assert ticks[-1] == "total (median meet)"
    values = {t.get_text() for t in axes.texts}
    assert {"2,817", "21,675", "8,137"} <= values  # each bar says its µs, totals too
    longest = max(patch.get_width() for patch in axes.patches)
    assert longest == 21_675 and axes.get_xlim()[1] >= 3 * longest  # room for its label
    for text in axes.texts:  # every label inside the axes, none clipped
        box = text.get_window_extent()
        assert box.x1 <= axes.get_window_extent().x1
    path = plot_breakdown(medians, tmp_path, 2_817.2, 20, INFO)
    assert path.read_bytes().startswith(b"\x89PNG")
