"""``python -m eddyline``: the command line (see :mod:`eddyline.client.cli`)."""

import sys

from .client.cli import main

sys.exit(main())
