"""Cut the real data a GPU run needs into .data/ (git-ignored; carried to the GPU machine, 64 MiB cap).

    python scripts/prepare_device_data.py            # writes .data/sift450k-*.{u8bin,ibin}
    python scripts/prepare_device_data.py --rest770  # and .dataz770/rest.tgz: the rest of the base

sift-photos base rows 0..449,999 (55 MiB), the 10,000 queries, and the first 32 columns of the exact
top-100 ground truth for that base size (ids only; distances are recomputed on the GPU machine).

``--rest770``: also base rows 450,000..770,532 (39 MiB) and the first 32 ground-truth columns for the
whole base, as ``.dataz770/rest.tgz`` (gzip, members under ``.data/``), for the whole-base runs
(``benchmarks/studies/ggnn_sharded_gpu.py``). With .data they pass the 64 MiB a call carries, so carry it in a
second call while the machine is warm and unpack it beside .data (``tar xzf .dataz770/rest.tgz -C DIR``
where DIR holds .data); ``benchmarks.runner.data.load(data.sift_photos(770533))`` then reads both.
"""

import argparse
import tarfile

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from knngraph import io  # noqa: E402
from knngraph.datasets import shared_datasets_dir  # noqa: E402

N = 450_000
GT_COLS = 32


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rest770", action="store_true")
    args = ap.parse_args()
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
    if args.rest770:  # packed on its own (not left in .data, which must stay under the carry limit)
        import tempfile

        total = io.read(sift / "base.u8bin").shape[0]
        packed = out.parent / ".dataz770"
        packed.mkdir(exist_ok=True)
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            io.write(tmp / "sift770k-rest.u8bin", np.ascontiguousarray(io.read(sift / "base.u8bin", rows=(N, total))))
            gt = io.read(sift / f"gt100-base{total}.ibin")
            io.write(tmp / "sift770k-gt32.ibin", np.ascontiguousarray(gt[:, :GT_COLS]))
            with tarfile.open(packed / "rest.tgz", "w:gz") as tar:
                for name in ("sift770k-rest.u8bin", "sift770k-gt32.ibin"):
                    tar.add(tmp / name, arcname=f".data/{name}")
        print(f"{packed / 'rest.tgz'}: {(packed / 'rest.tgz').stat().st_size / 2**20:.1f} MiB")
    for f in sorted(out.iterdir()):
        print(f"{f.name}: {f.stat().st_size / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
