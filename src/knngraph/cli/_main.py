"""The command line's parser (one subcommand per command of the command modules) and its entry point."""

from __future__ import annotations

import argparse
import logging
import sys

import knngraph

from . import _build, _demo, _eval, _info, _knn, _search
from .common import CommandError, CommandParser, report_error

__all__ = ["main", "build_parser"]

#: the modules whose ``add_commands`` add the subcommands, in the order ``knngraph --help`` lists them
COMMAND_MODULES = (_info, _knn, _build, _search, _eval, _demo)


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``knngraph``: its subcommands and their options (algorithm options from the
    ``IndexParams`` / ``SearchParams`` of the algorithms of :mod:`knngraph.registry`)."""
    parser = CommandParser(prog="knngraph",
                           description="k-NN graphs and nearest-neighbour search on NVIDIA GPUs and CPUs")
    parser.add_argument("--version", action="version", version=f"knngraph {knngraph.__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True)
    for module in COMMAND_MODULES:
        module.add_commands(subparsers)
    return parser


class _StderrHandler(logging.StreamHandler):
    """Log records as ``knngraph: message`` lines on whatever ``sys.stderr`` is when they are emitted."""

    def __init__(self):
        super().__init__(sys.stderr)
        self.setFormatter(logging.Formatter("knngraph: %(message)s"))

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value):
        pass


def _show_log(quiet: bool) -> None:
    """The library's diagnostics (logger ``knngraph``: e.g. "compiling kernels, first run only") on stderr,
    INFO and up (WARNING and up with ``--quiet``)."""
    logger = logging.getLogger("knngraph")
    if not any(isinstance(h, _StderrHandler) for h in logger.handlers):
        logger.addHandler(_StderrHandler())
    logger.setLevel(logging.WARNING if quiet else logging.INFO)


def main(argv=None) -> int:
    """Run the command line; returns the exit status (0; 1: failure while running; 2: usage error)."""
    argv = sys.argv[1:] if argv is None else [str(a) for a in argv]
    as_json = "--json" in argv  # until the arguments are parsed
    command = None
    try:
        args = build_parser().parse_args(argv)
        command, as_json = args.command, args.json
        _show_log(quiet=getattr(args, "quiet", False))
        return int(args.func(args) or 0)
    except Exception as exc:
        if isinstance(exc, CommandError) and exc.command:
            command = exc.command
        return report_error(exc, command, as_json)
