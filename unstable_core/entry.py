"""The ``unstable`` console script: Ctrl-C and SIGTERM are handled from its first line
(``interrupts.py``), before the command line's own imports, then the command line runs."""

from __future__ import annotations

from .interrupts import install_early_handlers


def main() -> None:
    install_early_handlers()
    from .cli import main as cli_main

    cli_main()
