"""The ``knngraph`` command line: ``info``, ``knn``, ``build``, ``prepare``, ``search``, ``eval``, ``demo``.

    knngraph knn base.fbin queries.fbin -k 10 --out ids.ibin --out-distances d.fbin    # exact search
    knngraph build base.u8bin -k 32 --method nndescent --max-iterations 8 --out g.knng  # any graph builder
    knngraph prepare g.knng base.u8bin --graph-degree 32 --out search.knng             # optimize_graph
    knngraph search base.u8bin --save-index sift.song                                  # build a search index
    knngraph search sift.song queries.u8bin -k 10 --queue-size 64 --out ids.ibin       # search a saved one
    knngraph search base.u8bin queries.u8bin -k 10 --graph search.knng --out ids.ibin  # any graph
    knngraph eval ids.ibin gt.ibin -k 10

``build`` and ``search`` take their algorithms from :mod:`knngraph.registry`, and their algorithm options
from the fields of each algorithm's ``IndexParams`` / ``SearchParams`` (``--max-iterations`` is
``IndexParams.max_iterations``); an option that the chosen ``--method`` does not have is an error. Every
subcommand takes ``--json`` to print one JSON object instead of text, for scripts.

The package: :mod:`knngraph.cli.common` holds what every command shares (option types, checking, reading
and writing files, output, timing, error reporting); one module per command family adds its subcommands
(``_info``: info; ``_knn``: knn; ``_build``: build, prepare; ``_search``: search; ``_eval``: eval;
``_demo``: warmup, demo), and ``_main`` builds the parser from them and runs it.

Errors
------
Every error is one line on stderr, ``knngraph <command>: error: <message>``, no traceback; with ``--json``
it is also printed on stdout as one JSON object ``{"error": ..., "type": ..., "command": ...,
"exit_status": ...}`` (``type``: the Python exception class behind it). Exit status:

* **2, usage**: what was typed is wrong, and nothing is computed: argparse errors (unknown or missing
  options, values of the wrong type such as ``--sample 0``, ``--memory-limit abc``, NaN or infinite
  floats), an input path that does not exist or is a directory, an output path whose folder does not
  exist, that is a directory or whose extension cannot hold that output (checked before any computation,
  so a long build never ends in a failed write), options that do not go together, files that are valid
  but wrong for their role (float data given as ids, ``--base`` of another size than the graph), and every
  ``ValueError`` / ``TypeError`` from the library (it raises them for argument values, e.g. ``-k`` larger
  than the data);
* **1, failure while running**: an input file that cannot be read as its format (truncated, corrupt, not a
  knngraph file, unreadable), ``MemoryError``, ``RuntimeError`` (e.g. CUDA), other ``OSError`` (e.g. the
  disk filling up while writing) and any other exception.
"""

from __future__ import annotations

from ._main import build_parser, main
from .common import CommandError

__all__ = ["main", "build_parser", "CommandError"]
