"""`python -m service.client`: see `service.client.cli`."""

import sys

from service.client.cli import main

if __name__ == "__main__":
    sys.exit(main())
