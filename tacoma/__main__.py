"""`python -m tacoma` is the `tacoma` command."""

from .cli import main

main()
