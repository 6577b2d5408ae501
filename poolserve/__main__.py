"""`python -m poolserve` is the `poolserve` command."""

import sys

from poolserve.cli import main

sys.exit(main())
