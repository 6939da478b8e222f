"""``python -m itrlab.cli``: the ``itrlab`` command."""

import sys

from itrlab.cli.entry_points import main

sys.exit(main())
