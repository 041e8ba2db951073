"""`python -m tacoma` is the `tacoma` command."""

from ._cli import main

main()
