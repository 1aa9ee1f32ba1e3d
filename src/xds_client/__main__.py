"""``python -m xds_client``: the ``xds-client`` command line."""

from __future__ import annotations

import sys

from xds_client.cli import main

if __name__ == "__main__":
    sys.exit(main())
