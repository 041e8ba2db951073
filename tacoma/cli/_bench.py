"""`tacoma bench`: the benchmark suite, and its `overhead` and `breakdown` measurements.

A thin face over `tacoma.bench`: the command parses the run's parameters, shows progress
on stderr (a bar in a terminal, lines in a log: tacoma.display.progress) and prints the
tables on stdout (tacoma.display.table), and writes the JSON and the plots asked for. The
languages --language takes are the installed interpreters' (the kernel names none); they
are discovered when the option is checked, so that no other command pays for it.
"""

from __future__ import annotations

import json
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import click

import tacoma

from ..display import Progress
from ..wire._text import escape

T = TypeVar("T")

__all__ = ["bench"]


def _installed_language(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """--language: the language of an installed interpreter, as `tacoma doctor` lists them.

    Checked when the command line is parsed, not when the command is defined: discovering
    the interpreters (entry points, their adapters' modules) takes tens of milliseconds
    that `tacoma --help` and the other commands should not spend.
    """
    from ..bench import languages

    installed = languages()
    if value not in installed:
        raise click.BadParameter(
            f"no installed interpreter runs {value!r}; the installed languages: "
            f"{', '.join(sorted(installed)) or 'none'} (tacoma doctor lists them, and says "
            "why one cannot run)", ctx, param)
    return value


@click.command(short_help="Run the mobile-agent benchmark suite, beside the papers' figures.")
@click.argument("names", nargs=-1, metavar="[NAME]...")
@click.option("--quick", is_flag=True,
              help="Loop sizes 1, 10, 30 (hops 4, 40) and 1 s sustained runs: under a "
                   "minute. Otherwise the paper's 1 to 1000 (4 to 4000) and 10 s.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write every measurement (each loop size's total and average "
                   "time, the rates, the parameters) to this file.")
@click.option("--places", metavar="A,B,C,D",
              help="Four places to run at (HOST:PORT, comma-separated). Default: four "
                   "local places started for the run.")
@click.option("--language", metavar="LANGUAGE", callback=_installed_language,
              default="python", show_default=True,
              help="Language of the agents created, dispatched and moved: any installed "
                   "language (tacoma doctor lists them).")
@click.option("--clients", type=click.IntRange(1, 64), default=3, show_default=True,
              help="Clients of PROXY and FORW-MSG (the paper: 3, 6, 12).")
@click.option("--servers", type=click.IntRange(1, 16), default=3, show_default=True,
              help="Servers of PROXY and FORW-MSG.")
@click.option("--agent-size", "agent_bytes", type=click.IntRange(0, 16 * 2**20), default=0,
              show_default=True, help="Bytes of data every created, dispatched or moved "
              "agent carries (beside its program).")
@click.option("--message-size", "message_bytes", type=click.IntRange(1, 16 * 2**20),
              default=1, show_default=True, help="Bytes every message carries.")
@click.option("--isolation", type=click.Choice(["default", "same-uid", "no-pool"]),
              default="default", show_default=True,
              help="How the local places isolate agents: their default (a uid per agent "
                   "as root, pre-started workers), --same-uid, or --pool-size 0.")
@click.option("--details", is_flag=True,
              help="Also print each loop size's total and average time.")
@click.option("--plot", "plot_dir", type=click.Path(file_okay=False, path_type=Path),
              help="Also draw the paper's figures for this run, as PNG files in this "
                   "directory (needs matplotlib: pip install 'tacoma[plot]').")
def bench(names: tuple[str, ...], quick: bool, json_path: Path | None, places: str | None,
          language: str, clients: int, servers: int, agent_bytes: int, message_bytes: int,
          isolation: str, details: bool, plot_dir: Path | None) -> None:
    """Run the mobile-agent benchmark suite and print it beside the published systems.

    NAMES are benchmarks of the suite (all by default): the micro-benchmarks CL, CR, AD,
    MSG-1W, MSG-2W, SYNCH, MSG-MA and the micro-kernels ROAM, PROXY, FORW-MSG, FORW-MA
    of Dikaiakos, Kyriakou and Samaras. The table is the shape of their Table 8: our
    peak and sustained rates, then Concordia's, Aglets' and Voyager's from the paper.
    Every rate is measured here, and only after a check that the work was done.

    `tacoma bench overhead` measures PAN's ActiveOverhead instead: a plain msgpack
    request/reply against meets of ag_echo and of a Python agent, per briefcase size and
    isolation setting. `tacoma bench breakdown` traces meets and prints the median of
    each step of the meet's path beside TACOMA 1.3's Table 1. `tacoma bench lazy` is
    Accent's copy-on-reference experiment: briefcases of 1 MB to 1 GB, 0.1% to 100% of them
    read, sent eagerly or as lazy folders with prefetch 0 to 15. `tacoma bench movecode`
    searches a corpus by moving the code to the data and by fetching the data, varying
    the place's CPU share, its background load and the data's size, beside `tacoma
    advise`'s prediction; `tacoma bench spalink` runs Spalink, Hartman and Gibson's
    simulator of the same question (synthetic traces).

    \b
    Examples:
      tacoma bench --quick
      tacoma bench ROAM SYNCH --json bench.json
      tacoma bench --places 10.0.0.1:7707,10.0.0.2:7707,10.0.0.3:7707,10.0.0.4:7707
      tacoma bench overhead --quick
      tacoma bench breakdown
      tacoma bench lazy --quick
      tacoma bench movecode --quick
      tacoma bench spalink
    """
    from .. import bench as suite

    # SIGTERM ends the run as Ctrl-C does: the local places it started are stopped too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if plot_dir is not None:
        _pyplot_or_fail()
    if [n.lower() for n in names] == ["overhead"]:
        _bench_overhead(quick, json_path, plot_dir)
        return
    if [n.lower() for n in names] == ["breakdown"]:
        _bench_breakdown(quick, json_path, places, plot_dir)
        return
    if [n.lower() for n in names] == ["lazy"]:
        _bench_lazy(quick, json_path)
        return
    if [n.lower() for n in names] == ["movecode"]:
        _bench_movecode(quick, json_path)
        return
    if [n.lower() for n in names] == ["spalink"]:
        _bench_spalink(quick, json_path)
        return

    try:
        the_plan = suite.plan([n.upper() for n in names], quick)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="NAME") from None
    addresses = [a.strip() for a in places.split(",")] if places else None
    if addresses is not None and len(addresses) != 4:
        raise click.BadParameter("give four places: A,B,C,D", param_hint="--places")
    estimate = sum(the_plan.estimate(n) for n in the_plan.names)
    click.echo(f"tacoma bench: {len(the_plan.names)} benchmarks, "
               f"{'quick' if quick else 'full'} run, about {estimate / 60:.1f} minutes "
               "(an estimate for a 2-core machine)", err=True)
    try:
        with _progress(len(the_plan.names), "tacoma bench") as progress:
            results = suite.run(the_plan, addresses, language, clients, progress,
                                servers=servers, agent_bytes=agent_bytes,
                                message_bytes=message_bytes, isolation=isolation)
    except (tacoma.TacomaError, suite.BenchmarkFailed) as exc:
        raise click.ClickException(f"the benchmark failed: {exc}") from None
    suite.table(results)
    if details:
        click.echo()
        click.echo(escape(suite.details(results), newlines=True))  # failures quote places
    if json_path is not None:
        json_path.write_text(suite.dumps(results))
        click.echo(f"measurements written to {json_path}", err=True)
    if plot_dir is not None:
        from ..bench._plot import plot_suite

        for path in plot_suite([r for r in results if not r.failure], plot_dir):
            click.echo(f"wrote {path}", err=True)
    if any(r.failure for r in results):
        sys.exit(1)


def _progress(total: int, description: str) -> Progress:
    """Progress on stderr: a bar in a terminal, lines in a log (so that a long run's
    progress shows in CI logs and `2> file` too)."""
    return Progress(total, description, file=sys.stderr, show=True)


def _measured(name: str, estimate: str, measure: Callable[[Progress], T]) -> T:
    """Say what `tacoma bench NAME` will do, run `measure` with a progress display, and
    turn its failure into the command's error."""
    click.echo(f"tacoma bench {name}: {estimate}", err=True)
    try:
        with _progress(0, name) as progress:
            return measure(progress)
    except (tacoma.TacomaError, RuntimeError, OSError) as exc:
        raise click.ClickException(f"the benchmark failed: {exc}") from None


def _pyplot_or_fail() -> None:
    """Fail before a long run, not after it, if plots were asked for and cannot be drawn."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise click.UsageError("--plot needs matplotlib: pip install 'tacoma[plot]'") \
            from None


def _bench_breakdown(quick: bool, json_path: Path | None, places: str | None,
                     plot_dir: Path | None) -> None:
    from ..bench._breakdown import breakdown, breakdown_table

    meets = 20 if quick else 200
    click.echo(f"tacoma bench breakdown: {meets} traced meets of ag_python, 0.1 s apart, "
               f"about {meets * 0.11 + 2:.0f} s", err=True)
    try:
        with _progress(meets, "traced meets") as progress:
            medians, total = breakdown(meets, place=places.split(",")[0] if places else None,
                                       progress=progress)
    except (tacoma.TacomaError, RuntimeError) as exc:
        raise click.ClickException(f"the benchmark failed: {exc}") from None
    breakdown_table(medians, total)
    if json_path is not None:
        json_path.write_text(json.dumps({"breakdown": [
            {"side": side, "step": step, "median_us": us}
            for (side, step), us in medians.items()], "total_median_us": total}, indent=2))
    if plot_dir is not None:
        from ..bench._plot import plot_breakdown

        click.echo(f"wrote {plot_breakdown(medians, plot_dir)}", err=True)


def _bench_lazy(quick: bool, json_path: Path | None) -> None:
    import dataclasses

    from ..bench._lazy import lazy_table, measure_lazy

    rows, hashing = _measured("lazy", f"{'quick' if quick else 'full'} run (briefcases up "
                                      f"to {'10 MB' if quick else '1 GB'}), about "
                                      f"{'1 minute' if quick else '3 minutes'}",
                              lambda progress: measure_lazy(quick, progress))
    lazy_table(rows, hashing)
    if json_path is not None:
        json_path.write_text(json.dumps({"lazy": [dataclasses.asdict(r) for r in rows],
                                         "first_reference_ms": hashing}, indent=2))


def _bench_movecode(quick: bool, json_path: Path | None) -> None:
    import dataclasses

    from ..bench._movecode import measure_movecode, movecode_table

    rows = _measured("movecode", f"{'quick' if quick else 'full'} run, about "
                                 f"{'1 minute' if quick else '2 minutes'}",
                     lambda progress: measure_movecode(quick, progress))
    movecode_table(rows)
    if json_path is not None:
        json_path.write_text(json.dumps({"movecode": [
            {**dataclasses.asdict(r), "faster": r.faster} for r in rows]}, indent=2))


def _bench_spalink(quick: bool, json_path: Path | None) -> None:
    import dataclasses

    from ..bench._spalink import spalink_tables

    click.echo(f"tacoma bench spalink: simulating, about {'20 s' if quick else '1 minute'}",
               err=True)
    outcomes = spalink_tables(quick)
    if json_path is not None:
        json_path.write_text(json.dumps({"spalink": [
            {**dataclasses.asdict(o), "agrep_s": o.agrep_s if o.agrep_s != float("inf")
             else None} for o in outcomes]}, indent=2))


def _bench_overhead(quick: bool, json_path: Path | None, plot_dir: Path | None) -> None:
    import dataclasses

    from ..bench._overhead import measure_overhead, overhead_table

    rows = _measured("overhead", f"{'quick' if quick else 'full'} run, about "
                                 f"{'20 s' if quick else '2 minutes'}",
                     lambda progress: measure_overhead(quick, progress))
    overhead_table(rows)
    if json_path is not None:
        json_path.write_text(json.dumps({"overhead": [
            {**dataclasses.asdict(r), "echo_overhead": r.echo_overhead,
             "agent_overhead": r.agent_overhead, "trusted_overhead": r.trusted_overhead}
            for r in rows]}, indent=2))
    if plot_dir is not None:
        from ..bench._plot import plot_overhead

        click.echo(f"wrote {plot_overhead(rows, plot_dir)}", err=True)
