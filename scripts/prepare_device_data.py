"""Cut the real data a GPU run needs into .data/ (git-ignored; carried to the GPU machine, 64 MiB cap).

    python scripts/prepare_device_data.py            # writes .data/sift450k-*.{u8bin,ibin}

sift-photos base rows 0..449,999 (55 MiB), the 10,000 queries, and the first 32 columns of the exact
top-100 ground truth for that base size (ids only; distances are recomputed on the GPU machine).
"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from knngraph import io  # noqa: E402
from knngraph.datasets import shared_datasets_dir  # noqa: E402

N = 450_000
GT_COLS = 32


def main():
    src = shared_datasets_dir()
    if src is None:
        sys.exit("no ../shared/datasets found (set KNNGRAPH_DATASETS)")
    out = Path(__file__).resolve().parents[1] / ".data"
    out.mkdir(exist_ok=True)
    sift = src / "sift-photos"
    io.write(out / "sift450k-base.u8bin", np.ascontiguousarray(io.read(sift / "base.u8bin", rows=(0, N))))
    io.write(out / "sift-query.u8bin", np.ascontiguousarray(io.read(sift / "query.u8bin")))
    gt = io.read(sift / f"gt100-base{N}.ibin")
    io.write(out / f"sift450k-gt{GT_COLS}.ibin", np.ascontiguousarray(gt[:, :GT_COLS]))
    for f in sorted(out.iterdir()):
        print(f"{f.name}: {f.stat().st_size / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
