"""`python -m service.client`: see `service.client.cli`."""

import os
import sys

from service.client.cli import main


def run() -> int:
    """main(), where a reader that closes the pipe early (`... status X | head`) ends it quietly."""
    try:
        code = main()
        sys.stdout.flush()  # a closed pipe shows here, not at interpreter exit
        return code
    except BrokenPipeError:
        # Python flushes stdout again at exit: point it at /dev/null so that flush cannot fail too.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # what a shell reports for a process ended by SIGPIPE (128 + 13)


if __name__ == "__main__":
    sys.exit(run())
