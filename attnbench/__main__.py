"""The `attnbench` command: the console script's entry (`main`), and `python -m attnbench`
for a checkout that is on the path but not installed.

SIGINT and SIGTERM are handled from the first instruction: until the command's run begins
(the command line library, torch and numba import for seconds) and again from its end
through the interpreter's shutdown, either one ends the process at once with the line
`interrupted` and exit code 130 or 143, never a traceback and never a silent exit 0. The run
itself turns them into an interrupt that lets the outputs keep every completed case
(`attnbench.cli.core.OneLineErrors`).
"""

import os
import signal
import sys


def _exit_at_once(signum, frame):
    """Stands in until `attnbench.results.interrupts` has imported."""
    os.write(2, b"interrupted\n")
    os._exit(128 + signum)


signal.signal(signal.SIGINT, _exit_at_once)
signal.signal(signal.SIGTERM, _exit_at_once)


def main() -> None:
    """Run the command line, then end the process under `exit_process`; never returns."""
    from attnbench.results.interrupts import end_at_once, exit_process

    end_at_once()
    try:
        from attnbench.cli import main as command_line

        command_line()
        code = 0
    except SystemExit as exc:
        code = _exit_code(exc.code)
    except BaseException:  # a bug: its traceback, exit code 1, as Python itself would
        sys.excepthook(*sys.exc_info())
        code = 1
    exit_process(code)


def _exit_code(code) -> int:
    """What `sys.exit(code)` exits with: None is 0, any other non-integer is printed, 1."""
    if code is None or isinstance(code, int):
        return code or 0
    print(code, file=sys.stderr)
    return 1


if __name__ == "__main__":
    main()
