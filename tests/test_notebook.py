"""tacoma in a notebook: the example notebook run headless, and the %%meet magic in a real
IPython shell against real places."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import nbclient
import nbformat
import pytest
import tacoma
from IPython.core.interactiveshell import InteractiveShell
from tacoma.wire import Briefcase

EXAMPLES = Path(__file__).parent.parent / "examples"


def test_the_example_notebook_runs_without_an_error() -> None:
    notebook = nbformat.read(EXAMPLES / "notebook.ipynb", as_version=4)
    assert all(not cell.get("outputs") for cell in notebook.cells)  # committed stripped
    # Cells tagged raises-exception must fail; any other cell's error fails the test.
    nbclient.NotebookClient(notebook, timeout=180, kernel_name="python3",
                            resources={"metadata": {"path": str(EXAMPLES)}}).execute()
    outputs = {cell.id: cell.outputs for cell in notebook.cells if cell.cell_type == "code"}
    failed = [cell for cell in notebook.cells
              if any(out.output_type == "error" for out in cell.get("outputs", []))]
    assert [cell.metadata.get("tags") for cell in failed] == [["raises-exception"]]
    error = next(out for out in failed[0].outputs if out.output_type == "error")
    assert error.ename == "AgentFailed"
    assert any('File "cell[' in line for line in error.traceback)  # the agent's own frame
    html = [out.data["text/html"] for outs in outputs.values() for out in outs
            if "text/html" in out.get("data", {})]
    assert any("<svg" in shown for shown in html)  # the traced meet's chart
    assert any("<details><summary>program" in shown for shown in html)  # a briefcase


# ------------------------------------------------------------------------- the magic
@pytest.fixture(scope="module")
def shell() -> Iterator[InteractiveShell]:
    ipython = InteractiveShell.instance()
    ipython.run_line_magic("load_ext", "tacoma")
    yield ipython
    InteractiveShell.clear_instance()


def run(shell: InteractiveShell, cell: str) -> object:
    """Run a cell as a notebook would (numbered, in the history); its value, or its error
    raised."""
    result = shell.run_cell(cell, store_history=True)
    if result.error_before_exec is not None:
        raise result.error_before_exec
    if result.error_in_exec is not None:
        raise result.error_in_exec
    return result.result


def test_a_python_cell_with_folders_and_an_output(shell: InteractiveShell, place) -> None:
    shell.user_ns.update(who=["world", b"moon"], greeting="hello", target=place.address)
    value = run(shell, "%%meet ag_python@{target} -f NAME=who -f greeting -o out\n"
                       "for name in bc.text('NAME'):\n"
                       "    bc.append('GREETING', bc.text('greeting')[0] + ', ' + name)\n")
    assert value is None
    out = shell.user_ns["out"]
    assert isinstance(out, Briefcase)
    assert out.text("GREETING") == ["hello, world", "hello, moon"]


def test_the_cell_is_named_after_its_number(shell: InteractiveShell, place) -> None:
    shell.user_ns["target"] = place.address
    echoed = run(shell, "%%meet ag_echo@{target}\nanything\n")
    assert isinstance(echoed, Briefcase)
    assert echoed.text("CODE") == ["anything\n"]
    assert echoed.text("CODE_NAME") == [f"cell[{shell.execution_count - 1}]"]


def test_a_tcl_cell(shell: InteractiveShell, place) -> None:
    shell.user_ns.update(who=["tromsø"], target=place.address)
    value = run(shell, "%%meet ag_tcl@{target} -f NAME=who\n"
                       "foreach name [bc_text NAME] {\n"
                       "    bc_append_text GREETING \"hello, $name from tcl\"\n"
                       "}\n")
    assert isinstance(value, Briefcase)
    assert value.text("GREETING") == ["hello, tromsø from tcl"]


def test_a_failing_cell_shows_the_agents_traceback(shell: InteractiveShell, place,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    shell.user_ns["target"] = place.address
    cell = "%%meet ag_python@{target}\nrate = 0\nprint(100 / rate)\n"
    with pytest.raises(tacoma.AgentFailed):
        run(shell, cell)
    number = shell.execution_count - 1
    shown = capsys.readouterr().out
    assert "AgentFailed: ZeroDivisionError: division by zero" in shown
    assert f'File "cell[{number}]", line 2, in <module>' in shown
    assert "print(100 / rate)" in shown
    assert "tacoma/client" not in shown and "run_cell_magic" not in shown


def test_an_itinerary_and_an_async_meet(shell: InteractiveShell, place,
                                        other_shared_place) -> None:
    other = other_shared_place
    shell.user_ns.update(a=place.address, b=other.address)
    run(shell, "%%meet ag_python@{a} --itinerary {b} -o trip\n"
               "bc.append('VISITED', place)\n"
               "go_next()\n")
    assert shell.user_ns["trip"].text("VISITED") == [place.address, other.address]
    run(shell, "%%meet ag_python@{b} --async -o started\nbc['X'] = ['later']\n")
    started = shell.user_ns["started"]
    assert started.endswith(f"@{other.address}")  # ID@PLACE, ready for tacoma.result
    assert tacoma.result(started, timeout=60).text("X") == ["later"]


def test_a_cells_agent_goes_where_its_passport_lets_it(shell: InteractiveShell, place,
                                                       other_shared_place) -> None:
    other = other_shared_place
    shell.user_ns.update(a=place.address, b=other.address)
    run(shell, "%%meet ag_python@{a} --itinerary {b} --places {a},{b} --may move -o trip\n"
               "bc.append('VISITED', place)\n"
               "go_next()\n")
    assert shell.user_ns["trip"].text("VISITED") == [place.address, other.address]
    with pytest.raises(tacoma.AgentFailed, match="does not admit place"):
        run(shell, "%%meet ag_python@{a} --itinerary {b} --places {a}\n"
                   "go_next()\n")
    with pytest.raises(tacoma.AgentFailed, match="does not let the agent meet agents"):
        run(shell, f"%%meet ag_python@{{a}} --may move\n"
                   f"meet('ag_python@{other.address}', Briefcase(CODE=['pass']))\n")


def test_an_interrupted_cell_says_so_in_one_line(shell: InteractiveShell, place,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """Kernel > Interrupt during a `%%meet` cell: the meet is cancelled at the place and the
    cell says so in one line, as `tacoma meet` does on Ctrl-C; no traceback through tacoma."""
    import _thread
    import re
    import threading

    from tacoma.notebook._magics import MeetCancelled

    from conftest import wait_until

    shell.user_ns["target"] = place.address

    def interrupt() -> None:  # as the kernel does: SIGINT, a KeyboardInterrupt in the cell
        wait_until(lambda: tacoma.place_status(place.address).running >= 1, timeout=60,
                   what="the cell's agent running")
        _thread.interrupt_main()

    interrupter = threading.Thread(target=interrupt)
    interrupter.start()
    try:
        with pytest.raises(MeetCancelled):
            run(shell, "%%meet ag_python@{target}\nimport time\ntime.sleep(120)\n")
    finally:
        interrupter.join()
    shown = capsys.readouterr()
    lines = [line for line in (shown.out + shown.err).splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert re.fullmatch(r"Cancelled: meet \S+ cancelled; the agent was stopped", lines[0])
    wait_until(lambda: tacoma.place_status(place.address).running == 0, timeout=30,
               what="the cancelled agent gone")


def test_at_the_embedded_place(shell: InteractiveShell) -> None:
    value = run(shell, "%%meet ag_python --timeout 60\nbc['PLACE'] = [place]\n")
    assert isinstance(value, Briefcase) and value.text("PLACE")


@pytest.mark.parametrize(("line", "message"), [
    ("-f N=nothing_here", "the notebook has no variable 'nothing_here'"),
    ("-f N=number", "the variable holds a int"),
    ("-f N=mixed", "element 1 is a float"),
    ("-f CODE=who", "CODE is the cell itself"),
    ("-f =who", "folder name must be 1 to 255 characters"),
    ("--itinerary ,", "give the places"),
    ("--places ,", "give the items"),
    ("-o 1x", "not a Python variable name"),
])
def test_usage_errors_say_what_to_do(shell: InteractiveShell, place, line: str,
                                     message: str) -> None:
    from IPython.core.error import UsageError

    shell.user_ns.update(number=1, mixed=["a", 1.5], who=["x"], target=place.address)
    with pytest.raises(UsageError, match=message):
        run(shell, f"%%meet ag_echo@{{target}} {line}\npass\n")
