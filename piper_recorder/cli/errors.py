"""One error seam for the console scripts: bad input ends with one line and exit 2, a bug with a traceback.

Input a command cannot use ends with one line on stderr and exit code 2, never a traceback; any other
exception is a bug and ends with its traceback, a line that says so, and exit code 1. Which errors count as
bad input: ``piper_recorder.errors.is_input_error``.
"""

from __future__ import annotations

import functools
import sys
import traceback
from collections.abc import Callable, Sequence
from typing import TypeVar

from piper_recorder.errors import describe, is_input_error

EXIT_BUG = 1
EXIT_BAD_INPUT = 2
F = TypeVar("F", bound=Callable[..., int])


def exits_2_on_bad_input(prog: str) -> Callable[[F], F]:
    """Decorate a console script's ``main(argv) -> int`` with the seam.

    Input errors become ``prog: message`` and 2; a bug prints its traceback and ``prog: internal error ...``
    and returns 1.
    """

    def wrap(main: F) -> F:
        @functools.wraps(main)
        def run(argv: Sequence[str] | None = None) -> int:
            try:
                return main(argv)
            except Exception as exc:  # noqa: BLE001 - sorted into input (2) and bug (1) below
                if is_input_error(exc):
                    print(f"{prog}: {describe(exc)}", file=sys.stderr)
                    return EXIT_BAD_INPUT
                traceback.print_exc()
                print(
                    f"{prog}: internal error (a bug, not bad input: please report it with the traceback "
                    f"above): {type(exc).__name__}: {exc}",
                    file=sys.stderr,
                )
                return EXIT_BUG

        return run  # type: ignore[return-value]

    return wrap
