import sys

from acx.cli import main

sys.exit(main())
