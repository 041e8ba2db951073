"""Briefcase, the value that travels with every meet: a mapping of folder name to byte strings."""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

import msgpack
import pytest
import tacoma
from hypothesis import given, settings
from hypothesis import strategies as st
from tacoma import Briefcase
from tacoma.wire._briefcase import LAZY, MAX_FOLDER_NAME, check_folder_name

#: Any name but LAZY, which carries a briefcase's lazy folders and is refused as a folder of
#: its own on the wire (hypothesis finds it among the constants of the code it tests).
folder_names = st.text(min_size=1, max_size=MAX_FOLDER_NAME).filter(lambda name: name != LAZY)
briefcases = st.dictionaries(
    folder_names, st.lists(st.binary(max_size=40), max_size=4), max_size=5,
).map(Briefcase)


# ----------------------------------------------------------------------- building one
def test_built_from_a_mapping_and_from_keywords() -> None:
    bc = Briefcase({"A": [b"1"]}, B=["two"], C=[])
    assert bc.folders() == ["A", "B", "C"]
    assert bc["A"] == [b"1"]
    assert bc["B"] == [b"two"]
    assert bc["C"] == []


def test_keywords_may_use_any_folder_name_even_folders() -> None:
    # The mapping argument is positional-only, so `folders=` names a folder.
    bc = Briefcase(folders=[b"x"])
    assert bc.folders() == ["folders"]


def test_empty_briefcase() -> None:
    for bc in (Briefcase(), Briefcase(None), Briefcase({})):
        assert len(bc) == 0
        assert not bc
        assert bc.folders() == []
        assert bc.size() == 0
        assert bc.to_wire() == {}


def test_elements_may_be_any_iterable() -> None:
    bc = Briefcase(A=(b"x" for _ in range(3)), B=(bytearray(b"y"), memoryview(b"z")))
    assert bc["A"] == [b"x", b"x", b"x"]
    assert bc["B"] == [b"y", b"z"]
    assert all(type(e) is bytes for e in bc["B"])


def test_the_constructor_copies_its_lists() -> None:
    source = [b"a"]
    bc = Briefcase(A=source)
    source.append(b"b")
    assert bc["A"] == [b"a"]


# ---------------------------------------------------------------------------- mapping
def test_a_copy_of_a_briefcase_converts_what_was_put_into_its_lists_since() -> None:
    original = Briefcase(A=[b"1"], B=[b"2"])
    original["A"].append("zwei")  # a folder is its own list: nothing checked this
    original["B"].append(bytearray(b"3"))
    copy = Briefcase(original)
    assert copy["A"] == [b"1", b"zwei"] and copy["B"] == [b"2", b"3"]
    assert copy["A"] is not original["A"]
    original["B"].append(3)
    with pytest.raises(TypeError, match="folder 'B': folder elements are bytes"):
        Briefcase(original)
    with pytest.raises(TypeError, match="folder 'B' element 2: folder elements are bytes"):
        original.to_wire()


def test_is_a_mutable_mapping() -> None:
    bc = Briefcase(A=[b"1"], B=[b"2"])
    assert isinstance(bc, MutableMapping)
    assert "A" in bc
    assert "Z" not in bc
    assert list(bc) == ["A", "B"]
    assert list(bc.keys()) == ["A", "B"]
    assert list(bc.values()) == [[b"1"], [b"2"]]
    assert list(bc.items()) == [("A", [b"1"]), ("B", [b"2"])]
    assert bc.get("Z") is None
    assert bc.get("A") == [b"1"]
    with pytest.raises(KeyError):
        bc["Z"]
    del bc["A"]
    assert list(bc) == ["B"]
    with pytest.raises(KeyError):
        del bc["A"]


def test_mapping_mixins_go_through_the_checks() -> None:
    bc = Briefcase()
    bc.update({"A": ["text"]}, B=[b"b"])
    assert bc == {"A": [b"text"], "B": [b"b"]}
    bc.setdefault("C", ["c"])
    assert bc["C"] == [b"c"]
    assert bc.pop("B") == [b"b"]
    with pytest.raises(TypeError):
        bc.update({"D": [1]})
    bc.clear()
    assert len(bc) == 0


def test_setdefault_returns_the_folder_itself() -> None:
    bc = Briefcase()
    bc.setdefault("LOG", []).append(b"line")
    assert bc["LOG"] == [b"line"]


def test_insertion_order_is_kept_and_replacing_keeps_the_place() -> None:
    bc = Briefcase()
    for name in ("Z", "A", "M"):
        bc[name] = [name]
    bc["A"] = [b"again"]
    assert bc.folders() == ["Z", "A", "M"]


def test_a_folder_is_its_own_list() -> None:
    bc = Briefcase(A=[b"1"])
    bc["A"].append(b"2")
    assert bc["A"] == [b"1", b"2"]
    assert bc.folder("A") is bc["A"]


def test_assigning_converts_text_to_utf8() -> None:
    bc = Briefcase()
    bc["T"] = ["tromsø", "", "☃"]
    assert bc["T"] == ["tromsø".encode(), b"", "☃".encode()]
    assert bc.text("T") == ["tromsø", "", "☃"]


@pytest.mark.parametrize("single", [b"abc", "abc", bytearray(b"abc"), memoryview(b"abc")])
def test_assigning_a_single_element_instead_of_a_list_is_refused(single: Any) -> None:
    bc = Briefcase()
    with pytest.raises(TypeError, match=r"folder 'A': assign a list of elements"):
        bc["A"] = single
    assert "A" not in bc


def test_a_failed_assignment_leaves_the_folder_as_it_was() -> None:
    bc = Briefcase(A=[b"old"])
    with pytest.raises(TypeError):
        bc["A"] = [b"new", 3]
    assert bc["A"] == [b"old"]


def test_not_hashable() -> None:
    with pytest.raises(TypeError):
        hash(Briefcase())


# ------------------------------------------------------------------------- operations
def test_append_creates_the_folder_and_adds_at_the_end() -> None:
    bc = Briefcase()
    bc.append("LOG", b"one")
    bc.append("LOG", "two")
    bc.append("LOG", bytearray(b"three"))
    assert bc["LOG"] == [b"one", b"two", b"three"]


def test_replace() -> None:
    bc = Briefcase(A=[b"1", b"2"], B=[b"b"])
    bc.replace("A", ["x"])
    assert bc == {"A": [b"x"], "B": [b"b"]}
    bc.replace("NEW", [])
    assert bc["NEW"] == []
    with pytest.raises(TypeError):
        bc.replace("A", b"not a list")
    assert bc["A"] == [b"x"]


def test_remove_returns_the_elements() -> None:
    bc = Briefcase(A=[b"1"], B=[])
    assert bc.remove("A") == [b"1"]
    assert "A" not in bc
    assert bc.remove("A") == []
    assert bc.remove("never") == []
    assert bc.folders() == ["B"]


def test_folder_of_a_missing_name_is_empty_and_creates_nothing() -> None:
    bc = Briefcase()
    assert bc.folder("NONE") == []
    assert "NONE" not in bc
    assert bc.text("NONE") == []


def test_text_decodes_utf8_and_refuses_other_bytes() -> None:
    bc = Briefcase(A=["ok", b"\xff\xfe"])
    with pytest.raises(UnicodeDecodeError):
        bc.text("A")
    assert Briefcase(A=["ok", "ø"]).text("A") == ["ok", "ø"]


def test_folders_is_a_fresh_list() -> None:
    bc = Briefcase(A=[], B=[])
    names = bc.folders()
    names.append("C")
    assert bc.folders() == ["A", "B"]


def test_copy_is_independent() -> None:
    bc = Briefcase(A=[b"1"])
    twin = bc.copy()
    assert twin == bc
    assert twin is not bc
    assert isinstance(twin, Briefcase)
    twin["A"].append(b"2")
    twin["B"] = []
    assert bc == {"A": [b"1"]}


def test_size_counts_element_bytes_only() -> None:
    bc = Briefcase(LONG_FOLDER_NAME=[b"12345", b""], B=["ø"])
    assert bc.size() == 5 + 0 + 2


def test_repr_shows_the_folders() -> None:
    assert repr(Briefcase(A=[b"x"], B=[])) == "Briefcase(A=[b'x'], B=[])"
    assert repr(Briefcase()) == "Briefcase()"


# ------------------------------------------------------------------------------ names
@pytest.mark.parametrize("name", [1, None, b"A", ("A",), 1.5])
def test_folder_names_must_be_str(name: Any) -> None:
    with pytest.raises(TypeError, match=f"folder names are str, got {type(name).__name__}"):
        check_folder_name(name)
    bc = Briefcase()
    with pytest.raises(TypeError, match="folder names are str"):
        bc[name] = []
    with pytest.raises(TypeError, match="folder names are str"):
        bc.append(name, b"x")
    with pytest.raises(TypeError, match="folder names are str"):
        Briefcase({name: []})
    assert len(bc) == 0


@pytest.mark.parametrize("name", ["", "n" * (MAX_FOLDER_NAME + 1)])
def test_folder_names_are_1_to_255_characters(name: str) -> None:
    with pytest.raises(ValueError, match="folder name must be 1 to 255 characters"):
        check_folder_name(name)
    with pytest.raises(ValueError, match="1 to 255"):
        Briefcase()[name] = []
    with pytest.raises(ValueError, match="1 to 255"):
        Briefcase().append(name, b"")


def test_longest_and_shortest_names_are_fine() -> None:
    longest = "ø" * MAX_FOLDER_NAME  # characters, not bytes
    bc = Briefcase({longest: [b"x"], "A": []})
    assert check_folder_name(longest) == longest
    assert Briefcase.from_wire(bc.to_wire()) == bc


def test_reserved_folders() -> None:
    assert tacoma.CODE == "CODE"
    assert tacoma.CODE in tacoma.RESERVED_FOLDERS
    assert {"ITINERARY", "HOME", "ENVELOPE"} <= tacoma.RESERVED_FOLDERS
    assert isinstance(tacoma.RESERVED_FOLDERS, frozenset)


def test_a_folder_named_lazy_is_refused_on_the_wire() -> None:
    """LAZY carries the references of a briefcase's lazy folders: a briefcase that holds a
    folder of that name is refused when it is sent, saying why."""
    with pytest.raises(ValueError, match=r"folder name LAZY is reserved for the references"):
        Briefcase({LAZY: [b"mine"]}).to_wire()


# --------------------------------------------------------------------------- elements
@pytest.mark.parametrize("element", [1, None, 2.5, [b"x"], {"a": 1}, object()])
def test_elements_must_be_bytes_or_str(element: Any) -> None:
    expected = (r"folder 'A': folder elements are bytes \(or str, stored as UTF-8\), "
                f"got {type(element).__name__}")
    with pytest.raises(TypeError, match=expected):
        Briefcase(A=[element])
    with pytest.raises(TypeError, match=expected):
        Briefcase().append("A", element)


def test_text_that_cannot_be_utf8_is_refused() -> None:
    with pytest.raises(UnicodeEncodeError):
        Briefcase(A=["\ud800"])


def test_a_refused_append_creates_no_folder() -> None:
    bc = Briefcase()
    with pytest.raises(TypeError):
        bc.append("X", 5)  # type: ignore[arg-type]
    assert "X" not in bc


def test_assigning_a_non_iterable_says_which_folder() -> None:
    with pytest.raises(TypeError, match="folder 'A'"):
        Briefcase()["A"] = 5  # type: ignore[assignment]


def test_a_non_mapping_argument_is_a_type_error() -> None:
    with pytest.raises(TypeError):
        Briefcase([("A", [b"x"])])  # type: ignore[arg-type]


# --------------------------------------------------------------------------- equality
def test_equality_is_by_value() -> None:
    assert Briefcase(A=[b"x"]) == Briefcase(A=["x"])
    assert Briefcase(A=[b"x"]) != Briefcase(A=[b"y"])
    assert Briefcase(A=[b"x"]) != Briefcase(A=[b"x", b"x"])
    assert Briefcase(A=[]) != Briefcase()
    assert Briefcase(A=[b"1"], B=[b"2"]) == Briefcase(B=[b"2"], A=[b"1"])


def test_equal_to_plain_mappings_of_the_same_bytes() -> None:
    assert Briefcase(A=[b"x"]) == {"A": [b"x"]}
    assert {"A": [b"x"]} == Briefcase(A=[b"x"])  # noqa: SIM300 - the reflected comparison
    assert Briefcase(A=[b"x"]) != {"A": ["x"]}  # a plain dict is not converted
    assert Briefcase() == {}


@pytest.mark.parametrize("other", [None, 0, "A", [("A", [b"x"])], b""])
def test_not_equal_to_non_mappings(other: object) -> None:
    assert Briefcase(A=[b"x"]) != other
    assert Briefcase() != other


# --------------------------------------------------------------------------- wire form
def test_to_wire_is_a_plain_dict_of_lists_of_bytes() -> None:
    bc = Briefcase(A=["x"], B=[])
    wire = bc.to_wire()
    assert type(wire) is dict
    assert wire == {"A": [b"x"], "B": []}
    assert list(wire) == ["A", "B"]


def test_to_wire_converts_text_put_straight_into_a_folder() -> None:
    bc = Briefcase(A=[])
    bc["A"].append("late text")  # type: ignore[arg-type]  # as an agent might
    bc["A"].append(bytearray(b"ba"))  # type: ignore[arg-type]
    assert bc.to_wire() == {"A": [b"late text", b"ba"]}


def test_to_wire_refuses_what_was_smuggled_into_a_folder() -> None:
    bc = Briefcase(A=[b"fine"])
    bc["A"].append(42)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="folder 'A' element 1"):
        bc.to_wire()


@pytest.mark.parametrize(("value", "error", "message"), [
    ([], TypeError, "a briefcase is a map, got list"),
    (None, TypeError, "a briefcase is a map, got NoneType"),
    (Briefcase(A=[b"x"]), TypeError, "a briefcase is a map, got Briefcase"),
    ({1: []}, TypeError, "folder names are str"),
    ({b"A": []}, TypeError, "folder names are str"),
    ({"": []}, ValueError, "1 to 255"),
    ({"n" * 256: []}, ValueError, "1 to 255"),
    ({"A": b"x"}, TypeError, "folder 'A' must be a list of bytes"),
    ({"A": (b"x",)}, TypeError, "folder 'A' must be a list of bytes"),
    ({"A": ["x"]}, TypeError, "folder 'A' must be a list of bytes"),
    ({"A": [bytearray(b"x")]}, TypeError, "folder 'A' must be a list of bytes"),
    ({"A": [None]}, TypeError, "folder 'A' must be a list of bytes"),
])
def test_from_wire_refuses_anything_else(value: object, error: type[Exception],
                                         message: str) -> None:
    with pytest.raises(error, match=message):
        Briefcase.from_wire(value)


def test_all_256_byte_values_survive() -> None:
    every = bytes(range(256))
    bc = Briefcase(ALL=[every], EACH=[bytes([b]) for b in range(256)], EMPTY=[b""])
    packed = msgpack.packb(bc.to_wire(), use_bin_type=True)
    back = Briefcase.from_wire(msgpack.unpackb(packed, raw=False))
    assert back == bc
    assert back["ALL"] == [every]
    assert back["EACH"] == [bytes([b]) for b in range(256)]
    assert back.size() == 512


@settings(max_examples=100, deadline=None)
@given(bc=briefcases)
def test_wire_round_trip(bc: Briefcase) -> None:
    wire = bc.to_wire()
    back = Briefcase.from_wire(msgpack.unpackb(msgpack.packb(wire, use_bin_type=True),
                                               raw=False))
    assert back == bc
    assert back.folders() == bc.folders()
    assert back.size() == bc.size() == sum(len(e) for es in wire.values() for e in es)


@settings(max_examples=100, deadline=None)
@given(bc=briefcases, name=folder_names, element=st.binary(max_size=20) | st.text(max_size=20))
def test_copy_and_append_properties(bc: Briefcase, name: str, element: bytes | str) -> None:
    before = bc.copy()
    bc.append(name, element)
    as_bytes = element.encode() if isinstance(element, str) else element
    assert bc[name][-1] == as_bytes
    assert bc.size() == before.size() + len(as_bytes)
    assert bc.folder(name)[:-1] == before.folder(name)
    assert before == Briefcase.from_wire(before.to_wire())  # the copy did not move
