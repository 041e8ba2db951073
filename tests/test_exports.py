"""The public surface: what `tacoma` exports, and the shape of its one exception tree.

`__all__` is the list the Python API reference (docs/reference/python-api.md) documents;
these tests keep the two honest (trio's _tests/test_exports.py). The exception tree is
checked against the drawing in the header of tacoma/wire/_errors.py, so the picture a
reader trusts cannot drift from the classes.
"""

from __future__ import annotations

import builtins
import errno
import pickle
import re
import subprocess
import sys
from pathlib import Path

import pytest
import tacoma
from tacoma.wire import _errors

EXCEPTIONS = [name for name in tacoma.__all__
              if isinstance(getattr(tacoma, name), type)
              and issubclass(getattr(tacoma, name), BaseException)]


def test_every_exported_name_resolves() -> None:
    for name in tacoma.__all__:
        assert getattr(tacoma, name) is not None, name


def test_all_has_no_duplicates_and_no_private_names() -> None:
    assert len(set(tacoma.__all__)) == len(tacoma.__all__)
    assert all(not name.startswith("_") or name == "__version__" for name in tacoma.__all__)


def test_dir_is_sorted_all() -> None:
    assert dir(tacoma) == sorted(tacoma.__all__)


def test_star_import_gives_exactly_all() -> None:
    namespace: dict[str, object] = {}
    exec("from tacoma import *", namespace)  # noqa: S102 - a fixed string, to test the import
    namespace.pop("__builtins__")
    assert sorted(namespace) == sorted(tacoma.__all__)


def test_exports_are_the_objects_of_the_private_modules() -> None:
    from tacoma.wire._briefcase import Briefcase
    from tacoma.wire._errors import TacomaError

    assert tacoma.Briefcase is Briefcase
    assert tacoma.TacomaError is TacomaError


def test_the_api_reference_documents_exactly_all() -> None:
    """Each name of `tacoma.__all__` has its entry (an autodoc directive, or a described
    `py:data`) in the API reference, and the reference documents no other `tacoma.NAME`."""
    page = Path(__file__).resolve().parent.parent / "docs" / "reference" / "python-api.md"
    documented = re.findall(r"^\.\. (?:auto\w+|py:data):: tacoma\.(\w+)\b(?!\.)", page.read_text(),
                            re.MULTILINE)
    assert len(documented) == len(set(documented)), "a name is documented twice"
    assert sorted(documented) == sorted(tacoma.__all__)


def test_version_is_a_string() -> None:
    assert isinstance(tacoma.__version__, str)
    assert re.match(r"\d+\.\d+", tacoma.__version__)


def test_unknown_attribute_raises_attribute_error() -> None:
    with pytest.raises(AttributeError, match="module 'tacoma' has no attribute 'no_such_name'"):
        tacoma.no_such_name  # noqa: B018 - the access is the test
    assert not hasattr(tacoma, "Connection")  # private protocol classes stay private
    with pytest.raises(ImportError):
        exec("from tacoma import no_such_name")  # noqa: S102 - a fixed string


def test_importing_tacoma_is_lazy() -> None:
    """Agent processes import tacoma; the package itself must not pull in the place."""
    code = ("import sys, tacoma\n"
            "print(','.join(sorted(m for m in ('asyncio', 'click', 'tacoma.place._place', "
            "'tacoma.client._client') if m in sys.modules)) or 'none')\n")
    out = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True,
                         check=True, timeout=60)
    assert out.stdout.strip() == "none", out.stderr


@pytest.mark.parametrize("name", EXCEPTIONS)
def test_every_exported_exception_is_a_tacoma_error(name: str) -> None:
    assert issubclass(getattr(tacoma, name), tacoma.TacomaError)


def test_the_exception_classes_are_exported() -> None:
    public = {name for name in _errors.__all__ if name[0].isupper() and name != "KINDS"}
    assert public <= set(tacoma.__all__)
    assert len(EXCEPTIONS) == len(public)


# ---------------------------------------------------------------------- the tree's shape
def documented_tree() -> list[tuple[str, str | None, str | None]]:
    """(class, documented parent, documented built-in base) from the _errors header drawing."""
    doc = _errors.__doc__
    assert doc is not None
    lines = doc.split("    TacomaError\n", 1)[1].split("\n\n", 1)[0].splitlines()
    tree: list[tuple[str, str | None, str | None]] = [("TacomaError", None, None)]
    stack = ["TacomaError"]
    for line in lines:
        match = re.match(r"^    ([│ ]*)[├└]── (\w+)(?: \((\w+)\))?", line)
        assert match, f"cannot read the tree line {line!r}"
        depth = len(match.group(1)) // 4 + 1
        del stack[depth:]
        tree.append((match.group(2), stack[-1], match.group(3)))
        stack.append(match.group(2))
    return tree


def test_the_drawing_is_read_whole() -> None:
    names = [name for name, _, _ in documented_tree()]
    assert set(names) == set(EXCEPTIONS)


@pytest.mark.parametrize(("name", "parent", "builtin"), documented_tree(),
                         ids=[name for name, _, _ in documented_tree()])
def test_the_tree_is_as_drawn(name: str, parent: str | None, builtin: str | None) -> None:
    cls = getattr(tacoma, name)
    if parent is not None:
        assert parent in [base.__name__ for base in cls.__bases__]
        assert issubclass(cls, getattr(tacoma, parent))
    if builtin is not None:
        assert issubclass(cls, getattr(builtins, builtin))


def test_the_built_in_meanings() -> None:
    assert issubclass(tacoma.UnknownAgent, LookupError)
    assert issubclass(tacoma.MeetTimeout, TimeoutError)
    assert issubclass(tacoma.LimitExceeded, ValueError)
    assert issubclass(tacoma.TransportError, OSError)
    assert issubclass(tacoma.ConnectError, OSError)
    assert issubclass(tacoma.ConnectionLost, OSError)
    assert issubclass(tacoma.LocalProtocolError, tacoma.ProtocolError)
    assert issubclass(tacoma.RemoteProtocolError, tacoma.ProtocolError)
    # Protocol errors, meet errors and transport errors are separate branches.
    assert not issubclass(tacoma.ProtocolError, OSError | ValueError | tacoma.MeetError)
    assert not issubclass(tacoma.MeetError, OSError | ValueError)


@pytest.mark.parametrize("name", ["MeetError", "UnknownAgent", "AgentFailed", "AgentKilled",
                                  "MeetTimeout", "PlaceUnavailable"])
def test_meet_errors_carry_message_and_detail(name: str) -> None:
    cls = getattr(tacoma, name)
    exc = cls("the agent raised", "Traceback (most recent call last):\n  ...")
    assert str(exc) == "the agent raised"
    assert exc.message == "the agent raised"
    assert exc.detail.startswith("Traceback")
    assert cls("no detail").detail == ""
    back = pickle.loads(pickle.dumps(exc))  # noqa: S301 - our own bytes, to test __reduce__
    assert type(back) is cls
    assert (back.message, back.detail) == (exc.message, exc.detail)


def test_agent_failed_has_detail() -> None:
    exc = tacoma.AgentFailed("ZeroDivisionError: division by zero", "line 1\nline 2")
    assert exc.detail == "line 1\nline 2"


# ------------------------------------------------------------------------ kinds on the wire
def test_every_kind_comes_back_as_its_class() -> None:
    for kind, cls in _errors.KINDS.items():
        exc = _errors.error_from_wire(kind, "msg", "detail")
        assert type(exc) is cls
        assert _errors.kind_of(exc) == kind
        assert (exc.message, exc.detail) == ("msg", "detail")
    assert len(set(_errors.KINDS.values())) == len(_errors.KINDS)


def test_unknown_kinds_stay_plain_meet_errors() -> None:
    exc = _errors.error_from_wire("from-the-future", "msg", "")
    assert type(exc) is tacoma.MeetError


def test_remote_limits_and_protocol_failures_keep_their_meaning() -> None:
    too_big = _errors.error_from_wire(_errors.kind_of(tacoma.LimitExceeded("big")), "m", "")
    assert isinstance(too_big, tacoma.LimitExceeded)
    assert isinstance(too_big, tacoma.MeetError)
    refused = _errors.error_from_wire(_errors.kind_of(tacoma.LocalProtocolError("x")), "m", "")
    assert isinstance(refused, tacoma.ProtocolError)
    assert _errors.kind_of(RuntimeError("anything else")) == "meet-failed"


# ---------------------------------------------------------------------- transport boundary
@pytest.mark.parametrize(("raised", "expected"), [
    (ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused"), tacoma.ConnectError),
    (TimeoutError("timed out"), tacoma.ConnectError),
    (OSError(errno.EHOSTUNREACH, "No route to host"), tacoma.ConnectError),
    (ConnectionResetError(errno.ECONNRESET, "Connection reset by peer"), tacoma.ConnectionLost),
    (BrokenPipeError(errno.EPIPE, "Broken pipe"), tacoma.ConnectionLost),
])
def test_os_errors_become_transport_errors(raised: OSError, expected: type[Exception]) -> None:
    with pytest.raises(expected) as info, _errors.map_transport_errors("127.0.0.1:7707"):
        raise raised
    assert str(info.value).startswith("127.0.0.1:7707: ")
    assert info.value.__cause__ is raised


def test_tacoma_errors_pass_the_boundary_unchanged() -> None:
    original = tacoma.RemoteProtocolError("garbage")
    with pytest.raises(tacoma.RemoteProtocolError) as info, \
            _errors.map_transport_errors("somewhere"):
        raise original
    assert info.value is original
