"""`python -m riverlog ...` is the `riverlog` command."""

import sys

from riverlog.cli.main import main

sys.exit(main())
