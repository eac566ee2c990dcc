"""``python -m eddyline``: the command line (see :mod:`eddyline.cli`)."""

import sys

from .cli import main

sys.exit(main())
