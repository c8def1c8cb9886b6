"""Errors printed on the command line: plain text, kept whole."""

from __future__ import annotations

import io

from rich.console import Console

from mlsandbox.terminal import print_error


def _printed(message: object, width: int = 40) -> str:
    out = io.StringIO()
    print_error(Console(file=out, width=width, color_system=None), message)
    return out.getvalue()


def test_brackets_in_a_message_are_text_not_markup() -> None:
    assert _printed("bad value [step 7] in x") == "error: bad value [step 7] in x\n"
    assert _printed("columns ['a', 'b'] missing") == "error: columns ['a', 'b'] missing\n"
    # A closing tag with no opening one made rich raise instead of printing the error.
    assert _printed("cannot write [/tmp]") == "error: cannot write [/tmp]\n"


def test_a_long_message_is_not_wrapped_at_the_terminals_width() -> None:
    path = "/var/lib/" + "/".join(["segment"] * 20) + "/trajectory.jsonl"
    assert _printed(f"{path}: no step 7", width=40) == f"error: {path}: no step 7\n"


def test_an_exception_prints_as_its_message() -> None:
    assert _printed(ValueError("seed must be >= 0")) == "error: seed must be >= 0\n"
