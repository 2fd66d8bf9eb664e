"""``python -m benchmarks``: see :mod:`benchmarks.runner.cli`."""

import sys

from benchmarks.runner.cli import main

sys.exit(main())
