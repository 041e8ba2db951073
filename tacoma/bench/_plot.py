"""`tacoma bench --plot DIR`: the paper's figures for our runs, as PNG files.

matplotlib is an optional extra (`pip install tacoma[plot]`), imported only here, with the
Agg backend (no display needed). One figure per benchmark in the shape of the paper's
Figures 5 to 21: total time (left) and average time (right) against loop size, log-log;
the step breakdown as horizontal bars beside TACOMA 1.3's; active overhead against
briefcase size, a line per isolation setting.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ._overhead import OverheadRow
from ._suite import Measured

__all__ = ["plot_breakdown", "plot_overhead", "plot_suite"]


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise RuntimeError("plots need matplotlib: pip install 'tacoma[plot]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_suite(results: list[Measured], directory: Path) -> list[Path]:
    """One PNG per benchmark: total and average time against loop size."""
    plt = _pyplot()
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for result in results:
        sizes = [r.size for r in result.runs]
        fig, (total, average) = plt.subplots(1, 2, figsize=(10, 4))
        total.plot(sizes, [r.seconds * 1000 for r in result.runs], "o-", label="tacoma")
        average.plot(sizes, [r.average * 1000 for r in result.runs], "o-", label="tacoma")
        for axes, what in ((total, "total time (ms)"), (average, "average time (ms)")):
            axes.set_xscale("log")
            axes.set_yscale("log")
            axes.set_xlabel("hops" if result.name == "ROAM" else "loop size")
            axes.set_ylabel(what)
            axes.grid(True, which="both", alpha=0.3)
        fig.suptitle(f"{result.name}: peak {result.peak_rate:,.1f}, sustained "
                     f"{result.sustained_rate:,.1f} {result.unit}")
        fig.tight_layout()
        path = directory / f"{result.name.lower()}.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)
    return written


def plot_breakdown(medians: dict[tuple[str, str], float], directory: Path) -> Path:
    """The median of each step, as bars, beside TACOMA 1.3's Table 1."""
    from ..wire._trace import TACOMA_STEPS

    plt = _pyplot()
    directory.mkdir(parents=True, exist_ok=True)
    labels = [f"{side}: {step}" for side, step in medians]
    ours = list(medians.values())
    theirs = [TACOMA_STEPS.get(key, ("", 0))[1] for key in medians]
    fig, axes = plt.subplots(figsize=(10, 6))
    positions = range(len(labels))
    axes.barh([p + 0.2 for p in positions], ours, height=0.4, label="tacoma (median)")
    axes.barh([p - 0.2 for p in positions], theirs, height=0.4,
              label="TACOMA 1.3, Table 1 (paper)")
    axes.set_yticks(list(positions), labels)
    axes.invert_yaxis()
    axes.set_xscale("symlog")
    axes.set_xlabel("µs")
    axes.legend()
    fig.tight_layout()
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
    axes.set_xscale("log")
    axes.set_xlabel("briefcase bytes")
    axes.set_ylabel("ActiveOverhead (%)")
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize="small")
    fig.tight_layout()
    path = directory / "overhead.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
