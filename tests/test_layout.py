"""The layout is the architecture: each package is one process image with its own rules.

    wire     imported by every process: standard library and msgpack, nothing else of tacoma
    display  tables and progress for terminals and notebooks: wire (its text escaping), the
             standard library (and rich)
    agent    the agent's worker image: wire and itself; never asyncio
    trust    wire and itself (certificates, TLS contexts, the deny list)
    transport  connections over asyncio (the protocol's driver): wire, trust and itself
    client   wire, trust, transport, display and itself; never the place, never
             `cryptography`
    place    wire, agent, client, transport, trust and itself; inside it, its parts
             stand on each other in one order (PLACE_PARTS)
    cli      a face over all of them; bench likewise
    notebook the IPython extension (%%meet): a face over wire, client and display
    interpreters/<lang>  wire and agent (their workers run in the agent's image)

The rules are checked twice: from the source (every import statement, including those
inside functions and under TYPE_CHECKING, resolved to the package it names), and by
importing the light packages in a fresh interpreter and looking at what got loaded.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

#: Which tacoma packages each package may import (besides itself).
MAY_IMPORT: dict[str, set[str]] = {
    "wire": set(),
    "display": {"wire"},
    "agent": {"wire"},
    "trust": {"wire"},
    "transport": {"wire", "trust"},
    "client": {"wire", "trust", "transport", "display"},
    "place": {"wire", "agent", "client", "transport", "trust"},
    "cli": {"wire", "agent", "client", "place", "bench", "trust", "testbed", "display"},
    "bench": {"wire", "agent", "client", "place", "trust", "display"},
    "notebook": {"wire", "client", "display"},
    "testbed": {"wire"},
    "interpreters": {"wire", "agent"},
}
#: The parts of the place, and which other parts each may import (each sub-package's header
#: says the same). The place's own modules (its lifecycle, settings, the embedded place)
#: lie beside them; of those, only `_settings` may be imported by the parts.
PLACE_PARTS: dict[str, set[str]] = {
    "stores": set(),
    "workers": {"stores"},
    "meets": {"stores", "workers"},
    "promises": {"stores", "workers", "meets"},
    "taking": {"stores", "workers", "meets", "promises"},
}
#: What may lie directly in tacoma/ besides the packages.
TOP_MODULES = {"__init__", "__main__", "_version", "testing"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[0] == "interpreters":
        parts = ["tacoma", *parts]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def source_files() -> list[Path]:
    return sorted([*(ROOT / "tacoma").rglob("*.py"), *(ROOT / "interpreters").rglob("*.py")])


def imports_of(path: Path) -> set[str]:
    """Every tacoma module or package that `path` imports, as absolute names."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            found.add(target)
            found.update(f"{target}.{alias.name}" for alias in node.names)
    return {t for t in found if t == "tacoma" or t.startswith("tacoma.")}


def layer(module: str) -> str:
    """The package of tacoma a module belongs to ("" for the top level)."""
    parts = module.split(".")
    return parts[1] if len(parts) >= 2 and parts[1] in MAY_IMPORT else ""


@pytest.mark.parametrize("path", source_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_each_module_imports_only_what_its_package_may(path: Path) -> None:
    own = layer(module_name(path))
    if own not in MAY_IMPORT:
        return  # the public package and tacoma.testing face everything
    allowed = MAY_IMPORT[own] | {own}
    bad = []
    for target in imports_of(path):
        other = layer(target)
        if other and other not in allowed:
            bad.append(target)
        # The top level is the public face; nothing below it may lean on it, but for the
        # version string (and the bench, CLI and notebook, which are faces themselves).
        faces = ("cli", "bench", "notebook")
        if not other and not target.startswith("tacoma._version") and own not in faces:
            bad.append(target)
    assert not bad, f"{module_name(path)} ({own}) may import only {sorted(allowed)}: {bad}"


def test_the_place_has_only_its_parts_and_its_lifecycle() -> None:
    place = ROOT / "tacoma" / "place"
    assert {p.name for p in place.iterdir() if p.is_dir() and p.name != "__pycache__"} \
        == set(PLACE_PARTS)
    assert {p.stem for p in place.glob("*.py")} == {"__init__", "_place", "_settings",
                                                    "_embedded", "_service"}


@pytest.mark.parametrize("part", sorted(PLACE_PARTS))
def test_each_part_of_the_place_imports_only_the_parts_below_it(part: str) -> None:
    allowed = PLACE_PARTS[part] | {part}
    bad = []
    for path in sorted((ROOT / "tacoma" / "place" / part).glob("*.py")):
        for target in imports_of(path):
            parts = target.split(".")
            if parts[:2] != ["tacoma", "place"] or len(parts) < 3:
                continue
            if parts[2] in PLACE_PARTS and parts[2] not in allowed:
                bad.append(f"{path.name}: {target}")
            elif parts[2] not in PLACE_PARTS and parts[2] != "_settings":
                bad.append(f"{path.name}: {target}")  # the lifecycle is above every part
    assert not bad, f"place.{part} may import only {sorted(allowed)} and _settings: {bad}"


@pytest.mark.parametrize("part", sorted(PLACE_PARTS))
def test_each_part_of_the_place_says_what_it_owns_and_may_import(part: str) -> None:
    header = ast.get_docstring(ast.parse(
        (ROOT / "tacoma" / "place" / part / "__init__.py").read_text())) or ""
    assert "May import" in header
    for module in (ROOT / "tacoma" / "place" / part).glob("_*.py"):
        if module.stem != "__init__":
            assert f"`{module.stem}`" in header, f"{part}'s header does not name {module.stem}"


def test_no_import_cycles() -> None:
    modules = {module_name(p): p for p in source_files()}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        edges = set()
        for target in imports_of(path):
            while target and target not in modules:
                target = target.rpartition(".")[0]
            # A module importing its own package's __init__ (re-exports) is no cycle.
            if target and target != name and not name.startswith(target + "."):
                edges.add(target)
        graph[name] = edges
    state: dict[str, int] = {}  # 1: on the path, 2: done

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycle = [*path[path.index(nxt):], nxt]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])


def test_the_top_level_holds_only_the_public_face() -> None:
    flat = {p.stem for p in (ROOT / "tacoma").glob("*.py")}
    assert flat == TOP_MODULES


def _loaded_after(statement: str) -> list[str]:
    """The top-level modules a fresh interpreter holds after running `statement`."""
    code = (f"import sys\nbefore = set(sys.modules)\n{statement}\n"
            "print('\\n'.join(sorted(set(sys.modules) - before)))")
    out = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True,
                         check=True, timeout=60, cwd=ROOT)
    return out.stdout.split()


@pytest.mark.parametrize("package", ["tacoma.wire", "tacoma.agent"])
def test_the_light_packages_load_only_the_standard_library_and_msgpack(package: str) -> None:
    modules = [f"{package}.{p.stem}" for p in sorted((ROOT / package.replace(".", "/"))
                                                     .glob("_*.py"))]
    loaded = _loaded_after("import " + ", ".join([package, *modules]))
    assert "asyncio" not in loaded
    foreign = [m for m in loaded
               if m.split(".")[0] not in sys.stdlib_module_names
               and m.split(".")[0] not in ("msgpack", "tacoma")
               and not m.startswith(("_cython_", "cython_runtime"))]  # msgpack's C extension
    assert not foreign, f"{package} loads {foreign}"
    ours = {m for m in loaded if m.startswith("tacoma.")}
    allowed = ("tacoma._version", "tacoma.wire", *([package] if package != "tacoma.wire"
                                                     else []))
    assert all(m.startswith(allowed) for m in ours), sorted(ours)


def test_the_client_loads_no_place() -> None:
    loaded = _loaded_after("import tacoma.client")
    assert not [m for m in loaded if m.split(".")[:2] in (["tacoma", "place"], ["tacoma", "cli"])]


def test_the_client_loads_no_certificate_maker() -> None:
    """Clients need only the standard library's ssl: `cryptography` (tacoma.trust._certs)
    costs every `tacoma meet` tens of milliseconds, and only making certificates needs it."""
    loaded = _loaded_after("import tacoma.client, tacoma.trust")
    assert "cryptography" not in loaded
    assert "tacoma.trust._certs" not in loaded


def test_every_package_is_installed() -> None:
    """setup.cfg lists the packages a (non-editable) install copies: a package missing there
    works in the editable install of a clone and fails in every user's `pip install .`."""
    import configparser

    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    listed = set(config["options"]["packages"].split())
    found = {module_name(init) for init in (ROOT / "tacoma").rglob("__init__.py")}
    found |= {module_name(init) for init in (ROOT / "interpreters").rglob("__init__.py")}
    assert found <= listed, f"packages missing from setup.cfg: {sorted(found - listed)}"


def test_ci_runs_exactly_the_readmes_test_command_with_the_lint() -> None:
    """CI must run what a newcomer reads: the README's one command that sets up, lints,
    builds the documentation and tests (and the Makefile's lint and docs it calls must
    exist)."""
    readme = (ROOT / "README.md").read_text()
    intro = "Set up, check the code"
    command = readme[readme.index(intro):].split("\n\n")[1].strip()
    assert "make lint docs" in command
    assert command.endswith("python -m pytest")
    ci = (ROOT / ".ci" / "run").read_text()
    assert command in ci.splitlines()
    makefile = (ROOT / "Makefile").read_text()
    assert "\nlint:" in makefile
    assert "\ndocs:" in makefile
