"""``python -m segstore_cli`` is the ``segstore`` command."""

import sys

from segstore_cli.main import main

sys.exit(main())
