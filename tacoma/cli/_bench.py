"""`tacoma bench`: the benchmark suite, and its `overhead`, `breakdown`, `lazy`, `movecode`
and `spalink` measurements.

A thin face over `tacoma.bench`: each command parses its run's parameters, shows progress
on stderr (a bar in a terminal, lines in a log: tacoma.display.progress) and prints the
tables on stdout (tacoma.display.table), and writes the JSON and the plots asked for. The
languages --language takes are the installed interpreters' (the kernel names none); they
are discovered when the option is checked, so that no other command pays for it.

`bench` is a group whose default is the suite: `tacoma bench [OPTIONS] [NAME]...` runs it
(the hidden command `suite`, shown under the group's own name), `tacoma bench COMMAND` runs
a measurement of its own, with its own options and its own help. A NAME of the suite is
upper case and no command's name, so the first word decides.
"""

from __future__ import annotations

import json
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

import tacoma

from ..display import Progress
from ..wire._text import escape

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

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


class _BenchGroup(click.Group):
    """`tacoma bench`: the suite unless the first word names one of the measurements."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        first = args[0].lower() if args else ""
        # Else the suite: its options, names, and --help (which lists the commands too).
        measurement = first in self.commands and first != _SUITE
        return super().parse_args(ctx, [first, *args[1:]] if measurement else [_SUITE, *args])


class _SuiteContext(click.Context):
    """The suite's context, named as the group is: its usage, help and errors say `tacoma
    bench`, the command a user types, never the hidden `suite`."""

    @property
    def command_path(self) -> str:
        return self.parent.command_path if self.parent is not None else super().command_path


class _Suite(click.Command):
    """The suite's command: its help ends with the group's other commands."""

    context_class = _SuiteContext

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        super().format_epilog(ctx, formatter)
        group = ctx.parent.command if ctx.parent is not None else None
        if isinstance(group, click.Group) and ctx.parent is not None:
            group.format_commands(ctx.parent, formatter)


#: The hidden name of the suite's command (`tacoma bench` runs it).
_SUITE = "suite"


@click.group(cls=_BenchGroup, invoke_without_command=False, no_args_is_help=False,
             short_help="Run the mobile-agent benchmark suite, beside the papers' figures.",
             help="Run the mobile-agent benchmark suite (tacoma bench --help says how), or "
                  "one of the measurements below.")
def bench() -> None:
    # SIGTERM ends a run as Ctrl-C does: the local places it started are stopped too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))


def _quick_option(help_text: str) -> Callable[[F], F]:
    return click.option("--quick", is_flag=True, help=help_text)


def _json_option(what: str) -> Callable[[F], F]:
    return click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path),
                        help=f"Also write {what} to this file.")


def _plot_option(what: str) -> Callable[[F], F]:
    return click.option("--plot", "plot_dir", type=click.Path(file_okay=False, path_type=Path),
                        help=f"Also draw {what} as PNG files in this directory (needs "
                             "matplotlib: pip install -e '.[plot]' (in a clone)).")


@bench.command(_SUITE, cls=_Suite, hidden=True)
@click.argument("names", nargs=-1, metavar="[NAME]...")
@_quick_option("Loop sizes 1, 3, 10, 30 (hops 4, 12, 40) and 1 s sustained runs: well "
               "under a minute. Otherwise the paper's 1 to 1000 (4 to 4000) and 10 s.")
@_json_option("every measurement (each loop size's total and average time, the rates, the "
              "parameters, the failures, the run's context)")
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
              help="Also print each loop size's total and average time, and each "
                   "failure's whole reason.")
@_plot_option("the paper's figures for this run, with the paper's systems beside ours,")
def _suite(names: tuple[str, ...], quick: bool, json_path: Path | None, places: str | None,
          language: str, clients: int, servers: int, agent_bytes: int, message_bytes: int,
          isolation: str, details: bool, plot_dir: Path | None) -> None:
    """Run the mobile-agent benchmark suite and print it beside the published systems.

    NAMES are benchmarks of the suite (all by default): the micro-benchmarks CL, CR, AD,
    MSG-1W, MSG-2W, SYNCH, MSG-MA and the micro-kernels ROAM, PROXY, FORW-MSG, FORW-MA
    of Dikaiakos, Kyriakou and Samaras. The table is the shape of their Table 8: our
    peak and sustained rates, then Concordia's, Aglets' and Voyager's from the paper.
    Every rate is measured here, and only after a check that the work was done; a
    benchmark that failed is shown as FAILED, with its reason, and the exit status is 1.

    The other measurements are commands of their own (below): each has its own --help.

    \b
    Examples:
      tacoma bench --quick
      tacoma bench ROAM SYNCH --json bench.json
      tacoma bench --places 10.0.0.1:7707,10.0.0.2:7707,10.0.0.3:7707,10.0.0.4:7707
      tacoma bench overhead --quick
      tacoma bench breakdown
    """
    from .. import bench as suite

    if plot_dir is not None:
        _pyplot_or_fail()
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
    info = suite.run_info(the_plan, addresses, language, isolation)
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
        json_path.write_text(suite.dumps(results, info))
        click.echo(f"measurements written to {json_path}", err=True)
    if plot_dir is not None:
        from ..bench._plot import plot_suite

        for path in plot_suite(results, plot_dir, info):
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
        raise click.UsageError("--plot needs matplotlib: pip install -e '.[plot]' (in a clone)") \
            from None


@bench.command("breakdown", short_help="The steps of a meet's path beside TACOMA 1.3's.")
@_quick_option("20 traced meets instead of 200.")
@_json_option("the median of each step and of the whole meet, in µs,")
@click.option("--place", metavar="HOST:PORT",
              help="Trace meets at this place. Default: a local place started for it.")
@_plot_option("the steps as bars beside TACOMA 1.3's, with the totals,")
def _breakdown(quick: bool, json_path: Path | None, place: str | None,
              plot_dir: Path | None) -> None:
    """Trace meets of a minimal Python agent and print the median of each step of the
    meet's critical path beside TACOMA 1.3's Table 1 (Johansen, Sudmann and van Renesse:
    13 steps, 21,675 µs in all).

    The meets are 0.1 s apart (untimed), so that each finds the place unloaded and its
    pool refilled, as TACOMA's single meets did.
    """
    from ..bench._breakdown import breakdown, breakdown_table

    if plot_dir is not None:
        _pyplot_or_fail()

    meets = 20 if quick else 200
    click.echo(f"tacoma bench breakdown: {meets} traced meets of ag_python, 0.1 s apart, "
               f"about {meets * 0.11 + 2:.0f} s", err=True)
    try:
        with _progress(meets, "traced meets") as progress:
            medians, total = breakdown(meets, place=place.split(",")[0] if place else None,
                                       progress=progress)
    except (tacoma.TacomaError, RuntimeError) as exc:
        raise click.ClickException(f"the benchmark failed: {exc}") from None
    breakdown_table(medians, total)
    if json_path is not None:
        json_path.write_text(json.dumps({"breakdown": [
            {"side": side, "step": step, "median_us": us}
            for (side, step), us in medians.items()], "total_median_us": total}, indent=2))
    if plot_dir is not None:
        from ..bench import RunInfo
        from ..bench._plot import plot_breakdown

        info = RunInfo.now("python", "given place" if place else "default",
                           "a given place" if place else "1 local place", quick)
        click.echo(f"wrote {plot_breakdown(medians, plot_dir, total, meets, info)}", err=True)


@bench.command("lazy", short_help="Accent's copy-on-reference experiment, with briefcases.")
@_quick_option("Briefcases of 1 and 10 MB (up to 1 GB otherwise), prefetch 0, 1 and 3.")
@_json_option("every meet's transfer and end-to-end time and bytes moved")
def _lazy(quick: bool, json_path: Path | None) -> None:
    """Zayas' copy-on-reference experiment (Accent), with briefcases: a folder of 1 MB to
    1 GB, of which an agent reads 0.1% to 100% in order or at random, sent eagerly or as
    a lazy folder with prefetch 0 to 15; transfer time, end-to-end time and bytes moved."""
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


@bench.command("movecode", short_help="Move the code to the data, or fetch the data?")
@_quick_option("A small grid (about 1 minute instead of 2).")
@_json_option("every setting's times, and the advice beside them,")
def _movecode(quick: bool, json_path: Path | None) -> None:
    """Search a corpus by moving the code to the data (an agent at the place) and by
    fetching the data (the client reads it), varying the place's CPU share, its
    background load and the data's size, beside `tacoma advise`'s prediction."""
    import dataclasses

    from ..bench._movecode import measure_movecode, movecode_table

    rows = _measured("movecode", f"{'quick' if quick else 'full'} run, about "
                                 f"{'1 minute' if quick else '2 minutes'}",
                     lambda progress: measure_movecode(quick, progress))
    movecode_table(rows)
    if json_path is not None:
        json_path.write_text(json.dumps({"movecode": [
            {**dataclasses.asdict(r), "faster": r.faster} for r in rows]}, indent=2))


@bench.command("spalink", short_help="Spalink, Hartman and Gibson's file-service simulator.")
@_quick_option("Fewer simulated requests (about 20 s instead of 1 minute).")
@_json_option("every simulated outcome")
def _spalink(quick: bool, json_path: Path | None) -> None:
    """Run Spalink, Hartman and Gibson's simulator of mobile code at a file server (an
    agrep-like search at the server or at the client, synthetic traces), varying the
    server's cache size and its CPU speed against the client's."""
    import dataclasses

    from ..bench._spalink import spalink_tables

    click.echo(f"tacoma bench spalink: simulating, about {'20 s' if quick else '1 minute'}",
               err=True)
    outcomes = spalink_tables(quick)
    if json_path is not None:
        json_path.write_text(json.dumps({"spalink": [
            {**dataclasses.asdict(o), "agrep_s": o.agrep_s if o.agrep_s != float("inf")
             else None} for o in outcomes]}, indent=2))


@bench.command("overhead", short_help="PAN's ActiveOverhead of a meet over a plain echo.")
@_quick_option("Briefcases of 128 and 1,500 bytes, fewer round trips (about 25 s).")
@_json_option("every setting's and size's round trips and overheads")
@_plot_option("the overhead against briefcase size, a line per setting,")
def _overhead(quick: bool, json_path: Path | None, plot_dir: Path | None) -> None:
    """PAN's ActiveOverhead, (t_active - t_passive) / t_passive: a plain msgpack
    request/reply to a passive echo server against meets of ag_echo, of a trusted null
    agent, of a WebAssembly null agent (a fresh instance each meet) and of a Python agent,
    per briefcase size and isolation setting."""
    import dataclasses

    from ..bench._overhead import measure_overhead, overhead_table

    rows = _measured("overhead", f"{'quick' if quick else 'full'} run, about "
                                 f"{'20 s' if quick else '2 minutes'}",
                     lambda progress: measure_overhead(quick, progress))
    overhead_table(rows)
    if json_path is not None:
        json_path.write_text(json.dumps({"overhead": [
            {**dataclasses.asdict(r), "echo_overhead": r.echo_overhead,
             "agent_overhead": r.agent_overhead, "trusted_overhead": r.trusted_overhead,
             "instance_overhead": r.instance_overhead}
            for r in rows]}, indent=2))
    if plot_dir is not None:
        _pyplot_or_fail()
        from ..bench._plot import plot_overhead

        click.echo(f"wrote {plot_overhead(rows, plot_dir)}", err=True)
