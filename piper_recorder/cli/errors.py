"""One error seam for the console scripts: input a command cannot use ends with one line on stderr
and exit code 2, never a traceback. Which errors count as bad input: ``piper_recorder.errors``; any
other exception is a bug and still raises, so tests (test_cli_fuzz.py) see it.
"""
from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Sequence
from typing import TypeVar

from piper_recorder.errors import INPUT_ERRORS, describe

EXIT_BAD_INPUT = 2
F = TypeVar("F", bound=Callable[..., int])


def exits_2_on_bad_input(prog: str) -> Callable[[F], F]:
    """Decorate a console script's ``main(argv) -> int``: INPUT_ERRORS become ``prog: message`` and 2."""
    def wrap(main: F) -> F:
        @functools.wraps(main)
        def run(argv: Sequence[str] | None = None) -> int:
            try:
                return main(argv)
            except INPUT_ERRORS as exc:
                print(f"{prog}: {describe(exc)}", file=sys.stderr)
                return EXIT_BAD_INPUT
        return run  # type: ignore[return-value]
    return wrap
