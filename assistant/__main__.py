"""``python -m assistant`` runs the CLI."""

import sys

from assistant.app.cli import main

sys.exit(main())
