"""``python -m sonic_hep.workflows.cli`` is the ``sonic`` command."""

import sys

from . import main

sys.exit(main())
