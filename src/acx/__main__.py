"""``python -m acx``: the acx command."""

import sys

from acx.cli import main

sys.exit(main())
