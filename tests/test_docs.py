"""The documentation site's sources: what `make docs` cannot see for itself.

The build (`make docs`: Sphinx with warnings as errors, then docs/_check_links.py) checks
references, anchors and links between the built pages; it runs in CI beside these tests and
is not run here. These tests are cheap and need no Sphinx build:

- the pages speak to users: no issue numbers or trackers, no work sessions, no brief;
- the command reference covers every command and subcommand: its one sphinx-click directive
  names the `tacoma` group with every command nested, and sphinx-click's own formatter, run
  over that group here, writes a section for each command;
- the README's links into docs/ name pages that exist (a code host renders them; Sphinx
  never sees the README).
"""

from __future__ import annotations

import importlib
import importlib.util
import re
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import click
import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
README = ROOT / "README.md"
CLI_PAGE = DOCS / "reference" / "cli.md"


def pages() -> list[Path]:
    """Every page of the site (and the README): Markdown under docs/ and the notebook it
    renders, not the build's output nor the examples folder it links to."""
    found = [path for path in DOCS.rglob("*.md")
             if "_build" not in path.parts and "examples" not in path.relative_to(DOCS).parts]
    return sorted([*found, DOCS / "examples" / "notebook.ipynb", README])


# ----------------------------------------------------------------------- words for users
#: An issue tracker's vocabulary: "issue 12", "issues #3", ".../issues/7", "pull/4", "(#12)".
ISSUES = re.compile(r"\bissues?\s*#?\s*\d+|\bissues/|\bpull/\d+|\bissue tracker\b"
                    r"|\(#\d+\)|\bbug\s*#\d+", re.IGNORECASE)
#: A work session: "session 3", "since session 2", "this session's runs". Not a TLS session
#: ("no session tickets") nor a process's session ("its own session and process group").
SESSIONS = re.compile(r"\bsessions?\s*#?\s*\d+"
                      r"|\b(?:this|that|last|next|previous|earlier|later|each|every|same|one"
                      r"|another|work|since|in)\s+sessions?\b(?!\s+(?:tickets?|keys?|ids?"
                      r"|resumption|leaders?|and process))"
                      r"|\bsession's\b|\bsession notes?\b", re.IGNORECASE)
BRIEF = re.compile(r"\bthe brief\b", re.IGNORECASE)


@pytest.mark.parametrize("page", pages(), ids=lambda path: str(path.relative_to(ROOT)))
def test_pages_speak_to_users(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    found = [(pattern, match.group(0), text.count("\n", 0, match.start()) + 1)
             for pattern in (ISSUES, SESSIONS, BRIEF) for match in pattern.finditer(text)]
    assert not found, "\n".join(f"{page.relative_to(ROOT)}:{line}: {word!r}"
                                for _, word, line in found)


@pytest.mark.parametrize(("text", "caught"), [
    ("fixed (issue 12)", True), ("see issues/7", True), ("as in #12 (#12)", True),
    ("since session 3", True), ("in this session's runs", True), ("Session 2 found", True),
    ("tacoma trust issue alice", False), ("issue an identity", False),
    ("no session tickets", False), ("its own session and process group", False),
    ("a TLS session", False),
])
def test_the_patterns_catch_what_they_mean(text: str, caught: bool) -> None:
    assert any(p.search(text) for p in (ISSUES, SESSIONS, BRIEF)) is caught


# ----------------------------------------------------------------- the command reference
def click_directive() -> tuple[str, dict[str, str]]:
    """The one sphinx-click directive of the command reference: its target and options."""
    text = CLI_PAGE.read_text(encoding="utf-8")
    directives = re.findall(r"^\.\. click:: (\S+)\n((?:   :\S+:.*\n)*)", text, re.MULTILINE)
    assert len(directives) == 1, f"{CLI_PAGE}: expected one `.. click::` directive"
    target, options = directives[0]
    return target, dict(re.findall(r"^   :(\S+):\s*(.*)$", options, re.MULTILINE))


def test_the_reference_is_generated_from_the_tacoma_group_with_every_command() -> None:
    from tacoma.cli import _main

    target, options = click_directive()
    module, _, name = target.partition(":")
    assert getattr(importlib.import_module(module), name) is _main.main
    assert options.get("prog") == "tacoma"
    assert options.get("nested") == "full"  # every subcommand, in a section of its own
    assert "commands" not in options  # no command left out


def commands(group: click.Command, path: str) -> Iterator[tuple[str, click.Command]]:
    yield path, group
    if isinstance(group, click.Group):
        for name, command in sorted(group.commands.items()):
            yield from commands(command, f"{path} {name}")


def docs_conf() -> ModuleType:
    """docs/conf.py, loaded as a module (it changes nothing when loaded)."""
    spec = importlib.util.spec_from_file_location("tacoma_docs_conf", DOCS / "conf.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def sphinx_click_source(command: click.Command, name: str,
                        parent: click.Context | None = None) -> Iterator[str]:
    """The reStructuredText sphinx-click writes for `command` and, nested in full, every
    subcommand, as its directive does (`ClickDirective._generate_nodes`), with what
    docs/conf.py adds to a group's section for its hidden default command; without Sphinx."""
    ext = pytest.importorskip("sphinx_click.ext")
    conf = docs_conf()
    ctx = click.Context(command, info_name=name, parent=parent)
    if command.hidden:
        return
    yield ctx.command_path  # the section's title
    yield from ext._format_command(ctx, "full")
    for part in conf._CLICK_PARTS:
        yield from conf.hidden_default_lines(ctx, part)
    for sub in ext._filter_commands(ctx):
        yield from sphinx_click_source(sub, sub.name, ctx)


def test_every_command_and_subcommand_is_in_the_reference() -> None:
    from tacoma.cli import _main

    target, options = click_directive()
    module, _, name = target.partition(":")
    group = getattr(importlib.import_module(module), name)
    source = list(sphinx_click_source(group, options["prog"]))
    every = list(commands(_main.main, "tacoma"))
    assert len(every) > 13  # the group, its commands, and their subcommands
    shown = [path for path, command in every if not command.hidden]
    missing = [path for path in shown if f".. program:: {path}" not in source]
    assert not missing, f"not in the command reference: {missing}"
    # A hidden command (`tacoma bench` runs its suite so) is written under its group's name:
    # each of its options is there.
    option_lines = [line for line in source if line.startswith(".. option:: ")]
    for path, command in every:
        if command.hidden:
            for param in command.params:
                if isinstance(param, click.Option) and not param.hidden:
                    assert any(f" {param.opts[0]}" in line for line in option_lines), \
                        f"{path}: {param.opts[0]} is not in the command reference"


# ----------------------------------------------------------------------- the README's links
def test_the_readmes_links_into_docs_name_pages_that_exist() -> None:
    text = README.read_text(encoding="utf-8")
    links = re.findall(r"\]\(((?:docs/|CHANGELOG)[^)#\s]*)(?:#[^)]*)?\)", text)
    assert len(links) > 10
    missing = sorted({link for link in links if not (ROOT / link).exists()})
    assert not missing, f"README.md links to files that do not exist: {missing}"
    assert "make docs" in text and "docs/_build/html/index.html" in text


def test_no_page_or_message_installs_tacoma_from_the_package_index() -> None:
    """tacoma is not on the package index: every install hint is from the clone
    (`pip install -e '.[plot]'`), never `pip install 'tacoma[plot]'`."""
    wrong = re.compile(r"pip install\s+['\"]?tacoma\[")
    files = [ROOT / "README.md", *(ROOT / "docs").rglob("*.md"), *(ROOT / "tacoma").rglob("*.py"),
             *(ROOT / "examples").rglob("*.ipynb")]
    found = [str(path.relative_to(ROOT)) for path in files
             if "_build" not in path.parts and wrong.search(path.read_text())]
    assert not found, found
