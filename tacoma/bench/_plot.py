"""`tacoma bench --plot DIR`: the paper's figures for our runs, as PNG files.

matplotlib is an optional extra (`pip install -e '.[plot]'` in a clone), imported only here,
with the Agg backend (no display needed). One figure per benchmark in the shape of the paper's
Figures 5 to 21, total time (left) and average time (middle) against loop size, log-log,
with a third panel of the rates beside Table 8's; the step breakdown as horizontal bars
beside TACOMA 1.3's; active overhead against briefcase size, a line per isolation setting.

The paper's systems are drawn beside ours, never mixed with them: dashed, marked series
labelled with the system and where the figure comes from. Table 8 gives each system's
peak and sustained rate, not the points of its curves, so a system's series is what its
sustained rate means at each loop size (n / rate in all, 1 / rate each), and the rates
panel has both of its rates. A benchmark that failed is drawn too: what it did before it
failed, and a red "failed: reason" label. Every figure says when and how it was measured
(`RunInfo`) in its footer. Tick labels are plain numbers (1, 3, 10, 30, 537) at the sizes
measured: matplotlib's log axes label minor ticks as 4x10^1, which overlap.

The figures are built by `suite_figure` and `breakdown_figure` (what the tests inspect)
and written by `plot_suite` and `plot_breakdown`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ._overhead import OverheadRow
from ._paper import SYSTEMS, TABLE_8, TABLE_8_SETUP, TACOMA_MEET_US, VERSIONS
from ._suite import Measured, RunInfo

__all__ = ["breakdown_figure", "plot_breakdown", "plot_overhead", "plot_suite", "suite_figure"]

#: Ours, then each of the paper's systems: a colour and a marker each, the same in every
#: figure.
_OURS = ("C0", "o")
_STYLE = {"Concordia": ("C1", "s"), "Aglets": ("C2", "^"), "Voyager": ("C3", "v")}
_FAILED = "#c0392b"


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise RuntimeError("plots need matplotlib: pip install -e '.[plot]' (in a clone)") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _plain(value: float, _position: object = None) -> str:
    """A tick label as a plain number: 1, 30, 1,000, 0.5, 0.02."""
    if value >= 1:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def _rate(value: float) -> str:
    """A rate as the tables print it: three significant figures, whole numbers from 100."""
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def _spread(values: Iterable[float], ratio: float = 1.6) -> list[float]:
    """The positive `values`, sorted, without those too close to the last kept on a log
    axis (their labels would overlap)."""
    kept: list[float] = []
    for value in sorted({v for v in values if v > 0}):
        if not kept or value >= kept[-1] * ratio:
            kept.append(value)
    return kept


def _log_x(axes: Any, sizes: Iterable[float]) -> None:
    """A log x axis with ticks at the sizes measured, labelled plainly, and no minor labels."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter, NullLocator

    ticks = _spread(sizes)
    axes.set_xscale("log")
    if ticks:
        axes.set_xlim(ticks[0] / 1.5, ticks[-1] * 1.5)
    axes.xaxis.set_major_locator(FixedLocator(ticks))
    axes.xaxis.set_major_formatter(FuncFormatter(_plain))
    axes.xaxis.set_minor_locator(NullLocator())
    axes.xaxis.set_minor_formatter(NullFormatter())


def _log_y(axes: Any, values: Iterable[float]) -> None:
    """A log y axis over `values` with room above the highest, ticks at 1, 2 and 5 times a
    power of ten (powers of ten alone over more than three decades), labelled plainly."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    shown = [v for v in values if v > 0 and math.isfinite(v)]
    axes.set_yscale("log")
    if shown:
        low, high = min(shown), max(shown)
        axes.set_ylim(low / 2, high * 3)
        decades = math.log10(high * 3) - math.log10(low / 2)
        subs = (1.0,) if decades > 3 else (1.0, 2.0, 5.0)
        axes.yaxis.set_major_locator(LogLocator(base=10, subs=subs))
    axes.yaxis.set_major_formatter(FuncFormatter(_plain))
    axes.yaxis.set_minor_formatter(NullFormatter())


def _footer(fig: Any, info: RunInfo | None, extra: str = "") -> None:
    text = " · ".join(part for part in (info.line() if info else "", extra) if part)
    if text:
        fig.text(0.5, 0.012, text, ha="center", va="bottom", fontsize=8, color="0.35")


def _paper_label(system: str, rate: float, unit: str, which: str) -> str:
    return f"{system} {VERSIONS[system]} (paper, Table 8: {which} {_rate(rate)} {unit})"


def suite_figure(result: Measured, info: RunInfo | None = None) -> Any:
    """The figure of one benchmark: total and average time against loop size, ours and the
    paper's systems' (from their Table 8 sustained rates), and the rates beside Table 8's.
    A failed benchmark's figure shows what it did before it failed and says why."""
    plt = _pyplot()
    fig, (total, average, rates) = plt.subplots(1, 3, figsize=(16, 5.4),
                                                gridspec_kw={"width_ratios": [1, 1, 0.8]})
    runs = [r for r in result.runs if r.seconds > 0]
    sustained = result.sustained if result.sustained and result.sustained.seconds > 0 \
        else None
    planned = result.parameters.get("loop_sizes")
    # The sizes measured, or (a benchmark that failed) those it was to run too.
    sizes = sorted({r.size for r in runs} | ({sustained.size} if sustained else set())
                   | {int(n) for n in (planned if isinstance(planned, list) else [])}) \
        or [1, 10, 100]
    what = "hops" if result.name == "ROAM" else "loop size"
    totals, averages = [], []
    if runs:
        totals += [r.seconds * 1000 for r in runs]
        averages += [r.average * 1000 for r in runs]
        total.plot([r.size for r in runs], totals, "-", marker=_OURS[1], color=_OURS[0],
                   label="tacoma" if not result.failure else "tacoma (before it failed)")
        average.plot([r.size for r in runs], averages, "-", marker=_OURS[1], color=_OURS[0],
                     label="tacoma" if not result.failure else "tacoma (before it failed)")
    elif result.failure:
        for axes in (total, average):
            axes.text(0.5, 0.5, "tacoma: failed before its first run", ha="center",
                      transform=axes.transAxes, fontsize=9, color=_FAILED)
    if sustained:
        label = f"tacoma, sustained run ({what} {sustained.size:,})"
        total.plot([sustained.size], [sustained.seconds * 1000], "D", color=_OURS[0],
                   markersize=8, markerfacecolor="white", label=label)
        average.plot([sustained.size], [sustained.average * 1000], "D", color=_OURS[0],
                     markersize=8, markerfacecolor="white", label=label)
        totals.append(sustained.seconds * 1000)
        averages.append(sustained.average * 1000)
    paper = TABLE_8.get(result.name, {})
    line = sizes
    for system in SYSTEMS:
        _, rate = paper.get(system, (math.nan, math.nan))
        if not rate > 0:
            continue
        color, marker = _STYLE[system]
        label = _paper_label(system, rate, result.unit, "sustained")
        paper_totals = [n / rate * 1000 for n in line]
        total.plot(line, paper_totals, "--", marker=marker, color=color, alpha=0.8,
                   markersize=5, label=label)
        average.plot(line, [1000 / rate] * len(line), "--", marker=marker, color=color,
                     alpha=0.8, markersize=5, label=label)
        totals += paper_totals
        averages.append(1000 / rate)
    for axes, values, ylabel, title in (
            (total, totals, "total time (ms)", f"total time against {what}"),
            (average, averages, "average time (ms)", f"average time against {what}")):
        _log_x(axes, sizes)
        _log_y(axes, values)
        axes.set_xlabel(what)
        axes.set_ylabel(ylabel)
        axes.set_title(title, fontsize=10)
        axes.grid(True, which="major", alpha=0.3)
    total.legend(fontsize=7, loc="upper left")
    if not paper:
        average.text(0.5, 0.04, f"the paper reports no {result.name} rate",
                     transform=average.transAxes, ha="center", fontsize=8, color="0.35")
    _rates_panel(rates, result, paper)
    ours = ("FAILED" if result.failure else
            f"peak {_rate(result.peak_rate)}, sustained {_rate(result.sustained_rate)} "
            f"{result.unit}")
    fig.suptitle(f"{result.name}: {ours}", fontsize=13,
                 color=_FAILED if result.failure else "black")
    if result.failure:
        fig.text(0.5, 0.895, f"failed: {result.short_failure}", ha="center", va="top",
                 fontsize=9, color=_FAILED, wrap=True,
                 bbox={"boxstyle": "round", "facecolor": "#fdecea", "edgecolor": _FAILED})
    _footer(fig, info, f"paper: {TABLE_8_SETUP}")
    fig.tight_layout(rect=(0, 0.04, 1, 0.86 if result.failure else 0.93))
    return fig


def _rates_panel(axes: Any, result: Measured, paper: dict[str, tuple[float, float]]) -> None:
    """Peak and sustained rates: ours, then each system's from Table 8, as bars (log)."""
    series = [("tacoma", _OURS[0], (result.peak_rate, result.sustained_rate))]
    series += [(f"{s} (paper)", _STYLE[s][0], paper[s]) for s in SYSTEMS if s in paper]
    width = 0.8 / len(series)
    values = []
    for i, (name, color, pair) in enumerate(series):
        for group, value in enumerate(pair):
            x = group - 0.4 + width * (i + 0.5)
            if value > 0 and math.isfinite(value):
                axes.bar(x, value, width, color=color, alpha=0.9 if i == 0 else 0.6,
                         hatch="" if i == 0 else "//", edgecolor=color,
                         label=name if group == 0 or not pair[0] > 0 else None)
                axes.annotate(_rate(value), (x, value), xytext=(0, 3),
                              textcoords="offset points", ha="center", va="bottom",
                              fontsize=6, rotation=90)
                values.append(value)
            else:
                note = "failed" if i == 0 and result.failure else "n/a"
                axes.text(x, 0.02, note, ha="center", va="bottom", rotation=90, fontsize=7,
                          color=_FAILED if note == "failed" else "0.4",
                          transform=axes.get_xaxis_transform())
    axes.set_xticks([0, 1], ["peak", "sustained"])
    axes.set_xlim(-0.5, 1.5)
    _log_y(axes, values)
    if values:  # room above the tallest bar for its label
        axes.set_ylim(min(values) / 3, max(values) * 12)
    axes.set_ylabel(result.unit)
    axes.set_title("rates, beside Table 8", fontsize=10)
    axes.grid(True, axis="y", alpha=0.3)
    handles, labels = axes.get_legend_handles_labels()
    if handles:
        axes.legend(handles, labels, fontsize=7, loc="upper right")


def plot_suite(results: list[Measured], directory: Path,
               info: RunInfo | None = None) -> list[Path]:
    """One PNG per benchmark, failed ones included (see `suite_figure`)."""
    plt = _pyplot()
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for result in results:
        fig = suite_figure(result, info)
        path = directory / f"{result.name.lower()}.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)
    return written


def breakdown_figure(medians: dict[tuple[str, str], float], total: float | None = None,
                     meets: int | None = None, info: RunInfo | None = None) -> Any:
    """The median of each step as a bar beside TACOMA 1.3's step, each labelled with its µs,
    and the whole meet's totals as the last pair, with room beyond the longest bar."""
    from matplotlib.ticker import FuncFormatter

    from ..wire._trace import TACOMA_STEPS, TACOMA_UNMATCHED

    plt = _pyplot()
    labels = [f"{side}: {step}\n" + (f"[{TACOMA_STEPS[(side, step)][0]}]"
                                     if (side, step) in TACOMA_STEPS else "")
              for side, step in medians]
    ours: list[float | None] = list(medians.values())
    theirs: list[float | None] = [float(TACOMA_STEPS[key][1]) if key in TACOMA_STEPS else None
                                  for key in medians]
    labels.append(f"(connection kept)\n[{TACOMA_UNMATCHED[0]}]")
    ours.append(None)
    theirs.append(float(TACOMA_UNMATCHED[1]))
    ours_total = total if total is not None else sum(v for v in ours if v is not None)
    labels.append("total (median meet)" if total is not None else "total (sum of medians)")
    ours.append(ours_total)
    theirs.append(float(TACOMA_MEET_US))
    fig, axes = plt.subplots(figsize=(11, 9))
    positions = list(range(len(labels)))
    for values, offset, color, label in (
            (ours, -0.2, _OURS[0], "tacoma (median" + (f" of {meets} meets)" if meets else ")")),
            (theirs, 0.2, "C1", "TACOMA 1.3 (Johansen et al., Table 1)")):
        shown = [(p + offset, v) for p, v in zip(positions, values, strict=True)
                 if v is not None]
        axes.barh([p for p, _ in shown], [v for _, v in shown], height=0.4, color=color,
                  label=label)
        for p, v in shown:
            axes.annotate(f"{v:,.0f}" if v >= 10 else f"{v:,.1f}", (v, p), xytext=(3, 0),
                          textcoords="offset points", va="center", fontsize=7)
    axes.axhline(len(labels) - 1.5, color="0.5", linewidth=0.8)
    axes.set_yticks(positions, labels, fontsize=8)
    axes.invert_yaxis()
    axes.set_xscale("symlog", linthresh=10)
    longest = max(v for v in [*ours, *theirs] if v is not None)
    axes.set_xlim(0, longest * 6)  # room beyond the longest bar, for its label
    axes.xaxis.set_major_formatter(FuncFormatter(_plain))
    axes.set_xlabel("µs (symmetric log scale)")
    axes.grid(True, axis="x", alpha=0.3)
    axes.legend(loc="upper right", fontsize=8)  # beside the first steps, the shortest bars
    fig.suptitle(f"A meet's critical path, step by step: tacoma {ours_total:,.0f} µs "
                 f"against TACOMA 1.3's {TACOMA_MEET_US:,} µs", fontsize=12)
    _footer(fig, info)
    fig.tight_layout(rect=(0, 0.03, 1, 0.96))
    return fig


def plot_breakdown(medians: dict[tuple[str, str], float], directory: Path,
                   total: float | None = None, meets: int | None = None,
                   info: RunInfo | None = None) -> Path:
    """The median of each step, as bars, beside TACOMA 1.3's Table 1 (`breakdown_figure`)."""
    plt = _pyplot()
    directory.mkdir(parents=True, exist_ok=True)
    fig = breakdown_figure(medians, total, meets, info)
    path = directory / "breakdown.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def plot_overhead(rows: list[OverheadRow], directory: Path) -> Path:
    """ActiveOverhead against briefcase size, a line per isolation setting and agent."""
    plt = _pyplot()
    directory.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(figsize=(8, 5))
    for setting in dict.fromkeys(r.setting for r in rows):
        mine = [r for r in rows if r.setting == setting]
        sizes = [r.size for r in mine]
        axes.plot(sizes, [r.agent_overhead * 100 for r in mine], "o-",
                  label=f"ag_python, {setting}")
    first = [r for r in rows if r.setting == rows[0].setting]
    axes.plot([r.size for r in first], [r.echo_overhead * 100 for r in first], "s--",
              label="ag_echo (no agent)")
    trusted = [(r.size, r.trusted_overhead) for r in first if r.trusted_overhead is not None]
    if trusted:
        axes.plot([s for s, _ in trusted], [o * 100 for _, o in trusted], "^--",
                  label="trusted null agent (in the place's process)")
    instance = [(r.size, r.instance_overhead) for r in first if r.instance_overhead is not None]
    if instance:
        axes.plot([s for s, _ in instance], [o * 100 for _, o in instance], "D--",
                  label="null agent in a fresh instance (a confined worker)")
    _log_x(axes, [r.size for r in rows])
    axes.set_xlabel("briefcase bytes")
    axes.set_ylabel("ActiveOverhead (%)")
    axes.set_title("ActiveOverhead = (t_active - t_passive) / t_passive (PAN)")
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize="small")
    fig.tight_layout()
    path = directory / "overhead.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
