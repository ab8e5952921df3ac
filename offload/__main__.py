"""`python -m offload` runs the command line."""

from .cli import main

main()
