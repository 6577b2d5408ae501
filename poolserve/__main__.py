"""`python -m poolserve` is the `poolserve` command."""

import sys

from poolserve.commands import main

sys.exit(main())
