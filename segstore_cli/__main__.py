"""``python -m segstore_cli`` is the ``segstore`` command."""

import sys

from segstore_cli.entry import main

sys.exit(main())
