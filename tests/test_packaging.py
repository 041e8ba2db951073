"""What a newcomer installs: a wheel built from the tree, in a fresh virtual environment.

The wheel is built (`python -m build`, as any packager would) from a copy of the tree, since
setuptools writes build/ and tacoma.egg-info into the tree it builds; it is installed into
a new virtual environment with its dependencies from the package index (pip's cache makes
reruns fast); and the README's first command is run with that environment's `tacoma`, from
a directory that is not the repository, so nothing of the tree can be imported by accident.
The command is read from README.md, so a change to it there is a change to what is tested.

Building and installing need the package index (the build's own setuptools comes from it,
as do tacoma's dependencies): without a route to it these tests skip, saying why, and only
then; whether there is one is found out by asking the index, not assumed.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest
import tacoma

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"

#: A build and an install with dependencies take a minute or more on a slow machine, past
#: the suite's per-test default; they run once for the module (the fixtures below).
pytestmark = pytest.mark.timeout(900)


def _index_unreachable() -> str | None:
    """Why the package index pip would use cannot be reached, or None if it answered.

    Asks the index (pip's PIP_INDEX_URL, else PyPI) with pip's own CA bundle (PIP_CERT),
    so that a network pip can use is never taken for none. Any HTTP answer, even an error
    status, means the index is there.
    """
    index = os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple").rstrip("/")
    context = ssl.create_default_context(cafile=os.environ.get("PIP_CERT") or None)
    try:
        with urllib.request.urlopen(f"{index}/pip/", timeout=15,  # noqa: S310 (an https URL)
                                    context=context):
            return None
    except urllib.error.HTTPError:
        return None
    except (urllib.error.URLError, OSError) as error:
        reason = getattr(error, "reason", error)
        return f"no route to the package index {index} ({reason}): cannot build or install"


def readme_first_command() -> list[str]:
    """The first command of README's "On a fresh machine", split into its `&&` parts."""
    section = README.read_text().split("\n## On a fresh machine\n", 1)[1].split("\n## ", 1)[0]
    line = next(line for line in section.splitlines() if line.startswith("    "))
    return [part.strip() for part in line.split(" && ")]


def _run(argv: list[str | Path], *, timeout: float, cwd: Path | None = None,
         env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([str(a) for a in argv], capture_output=True, text=True, check=False,
                          timeout=timeout, cwd=cwd, env=env)
    assert done.returncode == 0, f"{argv} exited {done.returncode}:\n{done.stdout}{done.stderr}"
    return done


@dataclass(frozen=True)
class Installed:
    wheel: Path
    venv: Path
    #: a directory outside the repository, to run the installed tacoma from
    elsewhere: Path

    @property
    def env(self) -> dict[str, str]:
        """The environment `. VENV/bin/activate` gives, and nothing that reaches the tree."""
        env = {k: v for k, v in os.environ.items()
               if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSAFEPATH", "VIRTUAL_ENV")}
        env["VIRTUAL_ENV"] = str(self.venv)
        env["PATH"] = f"{self.venv / 'bin'}{os.pathsep}{env.get('PATH', os.defpath)}"
        return env

    def run(self, *argv: str | Path) -> subprocess.CompletedProcess[str]:
        return _run(list(argv), cwd=self.elsewhere, env=self.env, timeout=300)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    reason = _index_unreachable()
    if reason is not None:
        pytest.skip(reason)
    work = tmp_path_factory.mktemp("packaging")

    # What a clone holds: the tree less what .gitignore keeps out of it (builds, caches, a
    # .venv), read from .gitignore itself so the two cannot drift apart.
    ignored = [line.strip().rstrip("/") for line in (ROOT / ".gitignore").read_text()
               .splitlines() if line.strip() and not line.startswith("#")]
    source = work / "source"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(".git", *ignored))
    dist = work / "dist"
    _run([sys.executable, "-m", "build", "--wheel", "--outdir", dist, source], timeout=600)
    (wheel,) = dist.glob("tacoma-*.whl")

    venv = work / "venv"
    _run([sys.executable, "-m", "venv", venv], timeout=300)
    _run([venv / "bin" / "python", "-m", "pip", "install", "--quiet", wheel], timeout=600)

    elsewhere = work / "elsewhere"
    elsewhere.mkdir()
    return Installed(wheel, venv, elsewhere)


def test_the_readme_first_command_runs_from_the_installed_wheel(installed: Installed) -> None:
    parts = readme_first_command()
    assert parts[-1].startswith("tacoma "), parts
    argv = shlex.split(parts[-1])
    # The files the command names (the agent's program) are there as in a clone; nothing
    # else of the tree is.
    for arg in argv:
        if (ROOT / arg).is_file():
            (installed.elsewhere / arg).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(ROOT / arg, installed.elsewhere / arg)
    names = [arg.removeprefix("NAME=") for arg in argv if arg.startswith("NAME=")]
    assert names, argv

    out = installed.run(installed.venv / "bin" / argv[0], *argv[1:])
    assert f"GREETING ({len(names)} element" in out.stdout, out.stdout
    for name in names:
        assert f"hello, {name} from python" in out.stdout, out.stdout


def test_the_installed_wheel_used_from_the_clone_finds_its_interpreters(
        installed: Installed) -> None:
    # The README's Python examples open examples/... by relative paths, so they are run
    # from the clone, whose tacoma/ then comes first on sys.path (the script's directory,
    # or '' for python -c, a REPL or a notebook) ahead of the installed package.
    source = installed.wheel.parent.parent / "source"
    program = (
        "import tacoma\n"
        "bc = tacoma.meet('ag_python', {'NAME': ['clone']},\n"
        "                 code=open('examples/hello/hello.py').read())\n"
        "print(bc.text('GREETING'))\n"
    )
    out = _run([installed.venv / "bin" / "python", "-c", program], cwd=source,
               env=installed.env, timeout=300)
    assert out.stdout.strip() == "['hello, clone from python']"
    assert "failed to load" not in out.stderr, out.stderr


def test_the_installed_tacoma_is_the_wheel_and_not_the_tree(installed: Installed) -> None:
    out = installed.run("python", "-c", "import tacoma; print(tacoma.__file__)")
    assert Path(out.stdout.strip()).is_relative_to(installed.venv), out.stdout
    version = installed.run("tacoma", "--version")
    assert version.stdout.strip() == f"tacoma, version {tacoma.__version__}"


def test_the_wheel_holds_the_packages_the_interpreters_and_the_license_only(
        installed: Installed) -> None:
    names = set(zipfile.ZipFile(installed.wheel).namelist())

    def shipped(folder: Path, prefix: str) -> set[str]:
        return {prefix + path.relative_to(folder).as_posix() for path in folder.rglob("*")
                if path.is_file() and "__pycache__" not in path.parts
                and path.suffix != ".pyc"}

    # Every file of the tree's packages, and the interpreter adapters (one folder per
    # language, installed as tacoma.interpreters, C's header included): a package missing
    # from setup.cfg's list, or a data file from its package_data, shows here.
    expected = shipped(ROOT / "tacoma", "tacoma/") | shipped(ROOT / "interpreters",
                                                             "tacoma/interpreters/")
    assert expected - names == set()
    assert {n for n in names if n.startswith("tacoma/interpreters/c/include/")} \
        == {"tacoma/interpreters/c/include/tacoma.h"}
    licenses = [n for n in names if re.fullmatch(r"tacoma-[^/]+\.dist-info/(licenses/)?LICENSE",
                                                 n)]
    assert len(licenses) == 1, sorted(names)
    # Only tacoma and its metadata: no tests, examples, benchmarks or a bare interpreters.
    assert {n.split("/")[0] for n in names if not n.startswith("tacoma/")} \
        == {n.split("/")[0] for n in licenses}


def test_the_installed_metadata_names_license_pythons_urls_and_interpreters(
        installed: Installed) -> None:
    probe = (
        "import importlib.metadata as m, json\n"
        "d = m.metadata('tacoma')\n"
        "print(json.dumps({'license': d['License'], 'expression': d['License-Expression'],\n"
        "    'license_files': d.get_all('License-File'), 'classifiers': d.get_all('Classifier'),\n"
        "    'urls': d.get_all('Project-URL'), 'requires_python': d['Requires-Python'],\n"
        "    'interpreters': sorted(e.name for e in m.entry_points(group='tacoma.interpreters')),\n"
        "    'scripts': sorted(e.name for e in m.entry_points(group='console_scripts')\n"
        "                      if e.value.startswith('tacoma.'))}))\n"
    )
    meta = json.loads(installed.run("python", "-c", probe).stdout)

    license_name = meta["expression"] or meta["license"]
    assert license_name == "MIT"
    assert (ROOT / "LICENSE").read_text().splitlines()[0] == f"{license_name} License"
    assert meta["license_files"] == ["LICENSE"]
    readme_license = README.read_text().split("\n## License\n", 1)[1].split("\n## ", 1)[0]
    assert f"{license_name} License" in readme_license or license_name in readme_license
    classifiers = set(meta["classifiers"])
    assert "License :: OSI Approved :: MIT License" in classifiers
    for version in ("3.11", "3.12", "3.13"):
        assert f"Programming Language :: Python :: {version}" in classifiers
    assert meta["requires_python"] == ">=3.11"
    assert meta["urls"], "no project URLs"

    # Each interpreter folder of the tree is declared, so an installed place finds it.
    folders = sorted(p.parent.name for p in (ROOT / "interpreters").glob("*/__init__.py"))
    assert meta["interpreters"] == folders
    assert meta["scripts"] == ["tacoma"]
