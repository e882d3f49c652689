import sys

from esreason_lib.cli import main

sys.exit(main())
