"""Regenerate the bundled sample data in ``src/knngraph/data/`` from the shared datasets.

The sample is a prefix of sift-photos (see ``src/knngraph/data/README.md``):

* ``sift20k-base.u8bin``   first 20,000 rows of ``sift-photos/base.u8bin``
* ``sift20k-query.u8bin``  first 1,000 rows of ``sift-photos/query.u8bin``
* ``sift20k-gt100.ibin``   first 1,000 rows of ``sift-photos/gt100-base20000.ibin``
* ``sift20k-gt100.fbin``   first 1,000 rows of ``sift-photos/gt100-base20000.fbin``

Usage::

    python scripts/make_sample_data.py                 # rewrite src/knngraph/data/
    python scripts/make_sample_data.py --check         # regenerate in a temp dir, compare bytes
    python scripts/make_sample_data.py --source DIR --out DIR

``--source`` defaults to :func:`knngraph.datasets.shared_datasets_dir` (the
``KNNGRAPH_DATASETS`` environment variable or ``../shared/datasets``).
"""

from __future__ import annotations

import argparse
import filecmp
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO / "src") not in sys.path:
    sys.path.insert(0, str(REPO / "src"))

from knngraph import io  # noqa: E402
from knngraph.datasets import shared_datasets_dir  # noqa: E402

N_BASE = 20_000
N_QUERIES = 1_000

# output name -> (file under sift-photos/, rows to keep)
FILES = {
    "sift20k-base.u8bin": ("base.u8bin", N_BASE),
    "sift20k-query.u8bin": ("query.u8bin", N_QUERIES),
    "sift20k-gt100.ibin": (f"gt100-base{N_BASE}.ibin", N_QUERIES),
    "sift20k-gt100.fbin": (f"gt100-base{N_BASE}.fbin", N_QUERIES),
}


def make(source: Path, out: Path) -> list[Path]:
    """Write the sample files from ``source/sift-photos`` into ``out``; return their paths."""
    written = []
    for name, (src_name, n_rows) in FILES.items():
        rows = io.read(source / "sift-photos" / src_name, rows=(0, n_rows), mmap=False)
        io.write(out / name, rows)
        written.append(out / name)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, default=None, help="shared datasets directory")
    parser.add_argument(
        "--out", type=Path, default=REPO / "src" / "knngraph" / "data", help="output directory"
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="regenerate into a temporary directory and compare with --out byte for byte",
    )
    args = parser.parse_args(argv)

    source = args.source or shared_datasets_dir()
    if source is None or not (source / "sift-photos").is_dir():
        parser.error(
            f"sift-photos not found under {source}; pass --source or set KNNGRAPH_DATASETS"
        )

    if not args.check:
        for path in make(source, args.out):
            print(f"wrote {path} ({path.stat().st_size} bytes)")
        return 0

    with tempfile.TemporaryDirectory() as tmp:
        differ = []
        for path in make(source, Path(tmp)):
            bundled = args.out / path.name
            same = bundled.is_file() and filecmp.cmp(path, bundled, shallow=False)
            print(f"{'same' if same else 'DIFFERENT'}: {bundled}")
            if not same:
                differ.append(bundled)
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
