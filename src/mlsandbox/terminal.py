"""Printing errors on the command line."""

from __future__ import annotations

from rich.console import Console
from rich.text import Text


def print_error(console: Console, message: object) -> None:
    """``error: <message>`` on ``console``, the message as plain text: brackets in it are kept (no rich
    markup, so ``[step 7]`` or ``[/tmp]`` neither vanish nor break the print), and it is not wrapped at the
    terminal's width, so a path or a command in it can be copied whole."""
    console.print(Text.assemble(("error:", "bold red"), " ", str(message)), soft_wrap=True)
