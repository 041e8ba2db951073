"""Sphinx configuration of tacoma's documentation site (`make docs` builds it).

Why Sphinx: it is actively released, and its autodoc and sphinx-click generate the Python
and CLI references from the code itself; MkDocs 1.x has had no release since 2024 and
Material for MkDocs is in maintenance mode.

Pages are Markdown (MyST, through myst-nb, which also renders the example notebook); the
build runs with warnings as errors and nitpicky references (`-W -n`), so a broken cross-page
link, a missing heading anchor or an unresolved reference fails it. Links between the built
pages, and their #fragments, are then checked by docs/_check_links.py (no network needed).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # autodoc and sphinx-click import the tacoma of this tree

import tacoma  # noqa: E402 - after the path is set

project = "tacoma"
author = "the tacoma authors"
copyright = "the tacoma authors, MIT License"
release = version = tacoma.__version__

extensions = [
    "myst_nb",  # Markdown pages (it loads myst_parser) and the example notebook
    "sphinx_click",  # the CLI reference, generated from the click commands
    "sphinx.ext.autodoc",  # the Python API reference, generated from the docstrings
]

# Sources: Markdown pages and the notebook. `examples` is a link to the repository's
# examples folder, so the notebook runs in that folder, as it does in the tests.
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store", "**/__pycache__",
                    "examples/**/*.md"]
root_doc = "index"

# ---------------------------------------------------------------------------- MyST
myst_enable_extensions = ["colon_fence", "deflist"]
# `[text](page.md#a-heading)` resolves for headings down to ####; an anchor that does
# not exist is a warning (myst.xref_missing), an error under -W.
myst_heading_anchors = 4

# ------------------------------------------------------------------------ notebooks
# The example notebook is executed at every build, so the outputs shown are real and
# current (it starts an embedded place and three local places: a few seconds). A cell that
# fails fails the build, except the one tagged raises-exception, which shows a failure.
nb_execution_mode = "force"
nb_execution_timeout = 180
nb_execution_raise_on_error = True
nb_execution_show_tb = True
nb_merge_streams = True

# ---------------------------------------------------------------------------- autodoc
# tacoma's docstrings and the commands' help write code between single backticks, as
# Markdown does: in reStructuredText (the generated references) they are literals too.
default_role = "literal"
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_class_signature = "mixed"
autodoc_preserve_defaults = True

# Nitpicky: every reference must resolve. Only targets outside tacoma are let go (the
# standard library's and third parties' types in signatures: no intersphinx, since the
# build has no network).
nitpick_ignore_regex = [
    ("py:class", r"_?(collections\.abc|typing|asyncio|concurrent\.futures|pathlib|os"
                 r"|datetime|types|contextlib|io|subprocess|ssl)\..*"),
    ("py:class", r"(Path|Any|Sequence|Mapping|Iterable|Iterator|Callable|Awaitable"
                 r"|Coroutine|Future|MutableMapping|AsyncIterator)"),
    ("py:class", r"(click|IPython|rich)\..*"),
]

# ------------------------------------------------------------------------------ HTML
html_theme = "furo"
# `--json` stays two hyphens (no en dash), and quotes stay as typed: this is a manual of
# commands, which are copied.
smartquotes = False
html_title = f"tacoma {release}"
html_static_path: list[str] = []
html_copy_source = False
html_show_sourcelink = False

# External http(s) links cannot be checked in CI (no network); docs/_check_links.py checks
# the local ones after the build, fragments included.
linkcheck_ignore = [r"https?://.*"]


def _resolve_public_names(app: Any, env: Any, node: Any, contnode: Any) -> Any:
    """A type in a signature is named by the private module that defines it
    (`tacoma.wire._briefcase.Briefcase`); the reference documents it under its public
    name (`tacoma.Briefcase`), so a reference to the first resolves to the second."""
    if node.get("refdomain") != "py":
        return None
    target = node.get("reftarget", "")
    name = target.rsplit(".", 1)[-1]
    if not (target.startswith("tacoma.") or "." not in target) or name not in tacoma.__all__:
        return None
    domain = env.get_domain("py")
    return domain.resolve_xref(env, node["refdoc"], app.builder, node["reftype"],
                               f"tacoma.{name}", node, contnode)


#: `name: what it is` at the start of a line, the way tacoma's docstrings list fields.
_FIELD = re.compile(r"^([a-z_][a-z0-9_]*(?:, [a-z_][a-z0-9_]*)*): (.*)$")


def _fields_as_definitions(app: Any, what: str, name: str, obj: Any, options: Any,
                           lines: list[str]) -> None:
    """tacoma's docstrings are written to be read as text (`help()`): a class lists its
    fields as `name: text`, continued on indented lines. In reStructuredText that is a
    paragraph followed by an unexpected indent; made a definition list (the name, then the
    text indented under it), it reads as written. Only a paragraph made wholly of such
    lines is changed."""
    if not name.startswith("tacoma."):
        return
    out: list[str] = []
    start = 0
    while start < len(lines):
        end = start
        while end < len(lines) and lines[end].strip():
            end += 1
        paragraph = lines[start:end]
        if paragraph and _FIELD.match(paragraph[0]) and all(
                _FIELD.match(line) or line.startswith("    ") for line in paragraph):
            for line in paragraph:
                match = _FIELD.match(line)
                if match:
                    names = ", ".join(f"``{field}``" for field in match.group(1).split(", "))
                    out += [names, f"    {match.group(2)}"]
                else:
                    out.append(line)
        else:
            out += paragraph
        if end < len(lines):
            out.append(lines[end])
        start = end + 1
    lines[:] = out


#: A default shown by its repr, `<factory>` or `<function Interpreter.<lambda>>`.
_REPR_DEFAULT = re.compile(r"<(?:[^<>]|<[^<>]*>)*>")


def _repr_defaults(app: Any, what: str, name: str, obj: Any, options: Any,
                   signature: str | None, return_annotation: str | None) -> Any:
    """A dataclass field made by a factory, or defaulting to a lambda, shows its default
    as its repr (`<factory>`, `<function ...>`), which is no Python expression: Sphinx
    cannot read such a signature and prints it as plain text. `...` says the same (there
    is a default) and keeps the signature readable."""
    if signature and _REPR_DEFAULT.search(signature):
        return _REPR_DEFAULT.sub("...", signature), return_annotation
    return None


def _label_cli_sections(app: Any, doctree: Any) -> None:
    """The command reference's sections are made by sphinx-click, not by headings of the
    page, so Markdown links such as `cli.md#tacoma-meet` would find no anchor: each of its
    sections is made a label, named by its id, as a heading of the page would be."""
    from docutils import nodes

    if app.env.docname != "reference/cli":
        return
    std = app.env.domains.standard_domain
    for section in doctree.findall(nodes.section):
        title = section.next_node(nodes.title)
        for section_id in section["ids"]:
            if section_id.startswith("tacoma"):
                std.anonlabels[section_id] = (app.env.docname, section_id)
                std.labels[section_id] = (app.env.docname, section_id,
                                          title.astext() if title else section_id)


#: What sphinx-click writes for a command, by the event it lets a handler change.
_CLICK_PARTS = ("description", "usage", "options", "arguments")


def hidden_default_lines(ctx: Any, part: str) -> list[str]:
    """The lines of `part` that a group's hidden subcommands add to the group's own section.

    sphinx-click leaves hidden commands out. `tacoma bench` runs a hidden command, its
    default (the suite: `tacoma bench [OPTIONS] [NAME]...`), whose help, usage, options and
    arguments are the group's as a user types it; so they are written under the group's own
    name, as the command's own help shows them. (tests/test_docs.py checks with this that
    every command is covered.)"""
    import click
    from sphinx_click import ext

    group = ctx.command
    if not isinstance(group, click.Group):
        return []
    formatter = {"description": ext._format_description, "usage": ext._format_usage,
                 "options": ext._format_options, "arguments": ext._format_arguments}[part]
    lines: list[str] = []
    for name in sorted(group.commands):
        hidden = group.commands[name]
        if hidden.hidden:
            sub = hidden.context_class(hidden, info_name=name, parent=ctx)
            # The undecorated formatter: the decorated one would emit this event again.
            lines.extend(formatter.__wrapped__(sub))
    return lines


def _hidden_default(part: str) -> Any:
    def handler(app: Any, ctx: Any, lines: list[str]) -> None:
        lines.extend(hidden_default_lines(ctx, part))
    return handler


def _no_mail_links(app: Any, doctree: Any) -> None:
    """reStructuredText makes a link of anything shaped like a mail address, and in the
    generated references `ag_python@127.0.0.1` or `ID@PLACE` is a meet's target, not an
    address: such links are made plain text again (tacoma's pages mention no address)."""
    from docutils import nodes

    for ref in list(doctree.findall(nodes.reference)):
        if ref.get("refuri", "").startswith("mailto:"):
            ref.replace_self(nodes.Text(ref.astext()))


def setup(app: Any) -> None:
    app.connect("missing-reference", _resolve_public_names)
    app.connect("autodoc-process-docstring", _fields_as_definitions)
    app.connect("doctree-read", _label_cli_sections)
    app.connect("doctree-read", _no_mail_links)
    app.connect("autodoc-process-signature", _repr_defaults)
    for part in _CLICK_PARTS:
        app.connect(f"sphinx-click-process-{part}", _hidden_default(part))
