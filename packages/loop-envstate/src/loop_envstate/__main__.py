"""`python -m loop_envstate`: the CLI, for when the console script is not on PATH."""

import sys

from loop_envstate.cli import main

sys.exit(main())
