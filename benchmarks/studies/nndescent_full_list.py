"""NN-Descent's whole-list quality against the length of the lists it iterates with.

    python benchmarks/studies/nndescent_full_list.py --device cuda --out out/
    python benchmarks/studies/nndescent_full_list.py --device cpu --datasets sample --out out/

For each dataset (the bundled sift 20k sample; sift-photos 450k where the cut real data is present) and
each k in --ks, builds the k-NN graph with ``intermediate_graph_degree`` = each factor of --factors times k
(1 = lists of k entries, as before the automatic length grew) and with the automatic length (0), and
reports the build time (the runner's protocol: a warm-up build, then the median of --repeats) and the
graph recall of the whole list (recall@k) and of its first 10 (recall@10) on a fixed sample of nodes
(:class:`benchmarks.runner.quality.GraphTruth`).

The GPU uses GNND's selective update (each sample inserts only its nearest partners), whose lists
converge short of their last true neighbours unless they are longer than the k returned; the CPU is
measured with ``update='selective'`` too when --update selective is given (the same rule as the GPU's).

Writes ``nndescent_full_list_<device>.jsonl`` (one line per build) and a PNG of recall@k against seconds.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: python benchmarks/studies/NAME.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks.runner import data  # noqa: E402
from benchmarks.runner.measure import command_line, environment, time_calls  # noqa: E402
from benchmarks.runner.quality import GraphTruth  # noqa: E402


def _datasets(names: list[str]) -> list[str]:
    specs = []
    for name in names:
        if name == "sample":
            specs.append("sample")
        elif name == "sift450k":
            if data.dataset_path_exists("sift-photos-450k"):
                specs.append("sift-photos-450k")
            else:
                print("sift-photos 450k not found: skipped", flush=True)
        else:
            raise ValueError(f"--datasets: 'sample' or 'sift450k', got {name!r}")
    return specs


def measure(spec: str, ks: list[int], factors: list[float], device: str, update: str, repeats: int,
            sample: int) -> list[dict]:
    from knngraph import nndescent
    from knngraph._device import Device
    from knngraph.nndescent._index import _build_degree, _selective

    ds = data.load(spec)
    base = ds.base
    if device == "cuda":
        import cupy as cp

        base = cp.asarray(base)  # resident on the GPU: the build's time, not the upload's
    rows = []
    for k in ks:
        truth = GraphTruth(base, ds.metric, k, sample=sample, device=device)
        degrees = sorted({int(round(f * k)) for f in factors}) + [0]
        for degree in degrees:
            params = nndescent.IndexParams(graph_degree=k, intermediate_graph_degree=degree, update=update)
            timing = time_calls(lambda: nndescent.build(params, base, device=device, verbose=False),
                                repeats=repeats)
            graph = timing.result.graph
            ids = data.host(graph.indices)
            row = {"dataset": spec, "n": int(base.shape[0]), "k": k, "intermediate_graph_degree": degree,
                   "list_entries": _build_degree(params, k, int(base.shape[0]), _selective(params, Device(device))),
                   "update": graph.info.get("update"), "iterations": graph.info.get("iterations"),
                   "build_s": timing.median_s, "all_s": timing.all_s,
                   "recall_at_k": truth.recall(ids, k), "recall@10": truth.recall(ids, 10)}
            print(json.dumps(row), flush=True)
            rows.append(row)
    return rows


def plot(rows: list[dict], path: Path, gpu: str | None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    specs = sorted({r["dataset"] for r in rows})
    fig, axes = plt.subplots(1, len(specs), figsize=(6 * len(specs), 4.5), squeeze=False)
    for ax, spec in zip(axes[0], specs):
        for k in sorted({r["k"] for r in rows if r["dataset"] == spec}):
            pts = [r for r in rows if r["dataset"] == spec and r["k"] == k and r["intermediate_graph_degree"]]
            ax.plot([r["build_s"] for r in pts], [r["recall_at_k"] for r in pts], "o-", label=f"k={k}")
            for r in pts:
                ax.annotate(str(r["intermediate_graph_degree"]), (r["build_s"], r["recall_at_k"]), fontsize=7)
            auto = [r for r in rows if r["dataset"] == spec and r["k"] == k and not r["intermediate_graph_degree"]]
            ax.plot([r["build_s"] for r in auto], [r["recall_at_k"] for r in auto], "k*", ms=10)
        ax.set_xlabel("build seconds")
        ax.set_ylabel("whole-list recall@k")
        ax.set_title(f"{spec} ({gpu or 'CPU'}); labels: list entries, star: automatic")
        ax.legend()
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--datasets", default="sample,sift450k")
    ap.add_argument("--ks", default="32,64,100")
    ap.add_argument("--factors", default="1,1.5,2")
    ap.add_argument("--update", default="auto", choices=["auto", "selective", "all"])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--sample", type=int, default=1000, help="nodes scored per graph")
    ap.add_argument("--out", type=Path, default=Path("out"))
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    env = environment()
    rows = []
    for spec in _datasets(args.datasets.split(",")):
        rows += measure(spec, [int(k) for k in args.ks.split(",")], [float(f) for f in args.factors.split(",")],
                        args.device, args.update, args.repeats, args.sample)
    path = args.out / f"nndescent_full_list_{args.device}.jsonl"
    with open(path, "w") as fh:
        for r in rows:
            fh.write(json.dumps({**r, "device": args.device, "gpu": env["gpu"], "command": command_line(),
                                 "source": env["source"]}) + "\n")
    if rows:
        plot(rows, path.with_suffix(".png"), env["gpu"] if args.device == "cuda" else None)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
