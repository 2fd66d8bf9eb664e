"""``python -m knngraph.cli``: the ``knngraph`` command."""

import sys

from ._main import main

sys.exit(main())
