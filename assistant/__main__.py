"""``python -m assistant`` runs the CLI."""

import sys

from assistant.cli import main

sys.exit(main())
