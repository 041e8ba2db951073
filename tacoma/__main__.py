"""`python -m tacoma` is the `tacoma` command."""

from .cli._main import main

main()
