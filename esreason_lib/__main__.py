"""`python -m esreason_lib`: the command line (`cli.main`)."""

import sys

from esreason_lib.cli import main

sys.exit(main())
