"""The `tacoma` command: a thin face over the Python API."""

from ._main import main as main

__all__ = ["main"]
