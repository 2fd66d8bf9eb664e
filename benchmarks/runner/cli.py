"""``python -m benchmarks``: run benchmarks, run the suites, generate the report.

    python -m benchmarks list                                   # datasets, methods, what is installed
    python -m benchmarks run --dataset sift-photos-100k --task search \\
        --method knngraph-song --method hnswlib --set hnswlib.ef=10,40,160 --out out/mine.jsonl
    python -m benchmarks run --dataset sift-photos-100k --method knngraph-ggnn --method knngraph-song-on-grnnd \\
        --set knngraph-ggnn.tau=0.3,0.5,1.0 --set knngraph-ggnn.graph_degree=40 --out out/graphs.jsonl
    python -m benchmarks run --dataset sift-photos-450k --device cuda --method knngraph-song --method cuvs-cagra \\
        --batch-sizes 1,10,100,1000 --max-calls 1000 --out out/batches.jsonl   # time per call, small batches
    python -m benchmarks run --dataset synth:n=1m,d=128,nq=0 --task graph --method knngraph-nndescent \\
        --device cuda -k 32 --set knngraph-nndescent.memory_limit=quarter
    python -m benchmarks suite cpu --out benchmarks/results/bench_cpu_2cores.jsonl
    python -m benchmarks suite gpu --out $OUT/bench_gpu.jsonl    # bash scripts/gpu_check.sh bench suite
    python -m benchmarks report                                 # benchmarks/REPORT.md from benchmarks/results
    python -m benchmarks report --allow-missing-baselines       # ... from runs without cuVS (the committed GPU run)

Every run appends one JSON line per measured point to ``--out`` (fields: :mod:`benchmarks.runner.run`).
knngraph's methods (``knngraph-<algorithm>``, and ``knngraph-song-on-<builder>`` for the search graphs of
GGNN and GRNND) take the fields of the algorithm's ``IndexParams`` and ``SearchParams`` as ``--set``
parameters; a ``SearchParams`` field is a search parameter, any other a build parameter.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

__all__ = ["main", "parse_value", "parse_sets", "parse_overrides", "split_params"]

_REPO = Path(__file__).resolve().parents[2]


def parse_value(text: str):
    """'10' -> 10, '0.5' -> 0.5, 'none' -> None, 'true'/'false' -> bool, anything else stays a string."""
    low = text.strip().lower()
    if low in ("none", "null"):
        return None
    if low in ("true", "false"):
        return low == "true"
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            continue
    return text.strip()


def parse_overrides(spec: str) -> dict:
    """``"default"`` -> {}; ``"a=1,b=x"`` -> {"a": 1, "b": "x"} (values by :func:`parse_value`): a set of
    parameter overrides, as the studies' ``--variants`` name them."""
    if spec.strip() == "default":
        return {}
    out = {}
    for item in spec.split(","):
        key, _, value = item.partition("=")
        out[key.strip()] = parse_value(value)
    return out


def parse_sets(items) -> dict:
    """``["hnswlib.ef=10,40", "hnswlib.M=16"]`` -> ``{"hnswlib": {"ef": [10, 40], "M": [16]}}``."""
    out: dict = {}
    for item in items or ():
        key, eq, values = item.partition("=")
        method, dot, param = key.partition(".")
        if not eq or not dot or not method or not param:
            raise SystemExit(f"--set expects METHOD.PARAM=V1,V2,..., got {item!r}")
        out.setdefault(method, {})[param] = [parse_value(v) for v in values.split(",")]
    return out


def split_params(method, own: dict) -> tuple[dict, dict]:
    """(build, search) parameter lists of ``--set`` values for ``method``: a parameter the method sweeps
    at search time or lists among its search parameters (``search_keys``: a knngraph method's
    ``SearchParams`` fields) is a search parameter, any other a build parameter."""
    search = {p: v for p, v in own.items() if p in method.search_sweep or p in method.search_keys}
    return {p: v for p, v in own.items() if p not in search}, search


def _batch_sizes(text: str) -> list:
    """'1,10,all' -> [1, 10, None]; '' -> [None] (all queries in one call)."""
    if not text:
        return [None]
    out = []
    for item in text.split(","):
        value = parse_value(item)
        if value is None or (isinstance(value, str) and value.lower() == "all"):
            out.append(None)
        elif isinstance(value, int) and not isinstance(value, bool) and value >= 1:
            out.append(value)
        else:
            raise SystemExit(f"--batch-sizes expects positive integers or 'all', got {item!r}")
    return out


def _threads(value) -> int:
    return int(value) if value else (os.cpu_count() or 1)


def cmd_list(args) -> int:
    from .methods import METHODS

    print("methods (task, devices, search knob swept by default, installed):")
    for m in METHODS.values():
        miss = m.missing()
        knob = ",".join(m.search_sweep) or "-"
        print(f"  {m.name:<24} {','.join(m.tasks):<14} {','.join(m.devices):<10} {knob:<18} "
              f"{'yes' if not miss else miss}")
    print("datasets: sample, sift-photos-{20k,100k,450k,770k}, minilm-words, hdf5:PATH, "
          "bigann:base=P,query=Q,gt=G[,metric=M], synth:n=N,d=D[,seed=S,nq=Q]; options nq=, n=")
    return 0


def cmd_run(args) -> int:
    from .methods import get
    from .run import Runner, RunSpec

    sets = parse_sets(args.set)
    runner = Runner(args.out, threads=_threads(args.threads), suite=args.suite)
    for ds in args.dataset:
        for name in args.method:
            method = get(name)
            own = sets.get(name, {})
            if args.task == "search":
                build, search = split_params(method, own)
                spec = RunSpec(ds, "search", name, device=args.device, k=args.k,
                               build={**method.build_sweep, **build} if own else None,
                               search={**method.search_sweep, **search} if own else None)
            else:
                spec = RunSpec(ds, "graph", name, device=args.device, k=args.k,
                               graph={**method.graph_sweep, **own} if own else None)
            spec.repeats = args.repeats
            spec.build_repeats = args.build_repeats
            spec.batch_sizes = _batch_sizes(args.batch_sizes)
            spec.max_calls = args.max_calls
            spec.input = args.input
            spec.tag = args.tag
            runner.run(spec)
    print(f"wrote {len(runner.lines)} lines to {args.out}")
    return 0


def cmd_suite(args) -> int:
    from .run import Runner
    from .suites import CPU_PARTS, DEFAULT_GPU_PARTS, GPU_PARTS, cpu_suite, gpu_suite

    known, default = (CPU_PARTS, CPU_PARTS) if args.which == "cpu" else (GPU_PARTS, DEFAULT_GPU_PARTS)
    parts = tuple(args.parts.split(",")) if args.parts else default
    unknown = set(parts) - set(known)
    if unknown:
        raise SystemExit(f"unknown {args.which} parts {sorted(unknown)}; parts: {', '.join(known)}")
    if args.which == "cpu":
        specs = cpu_suite(parts, quick=args.quick)
        out = args.out or (_REPO / "benchmarks" / "results" / "bench_cpu.jsonl")
    else:
        sizes = tuple(int(float(s.lower().replace("m", "e6").replace("k", "e3"))) for s in args.ooc_sizes.split(","))
        specs = gpu_suite(parts, quick=args.quick, device=args.device or "cuda", ooc_sizes=sizes,
                          ooc_time_limit_s=args.ooc_time_limit)
        out = args.out or (Path(os.environ.get("OUT", "out")) / "bench_gpu.jsonl")
    if args.device and args.which == "cpu":
        for s in specs:
            s.device = args.device
    runner = Runner(out, threads=_threads(args.threads), suite=f"{args.which}{'-quick' if args.quick else ''}")
    for spec in specs:
        runner.run(spec)
    bad = [ln for ln in runner.lines if ln["status"] == "error"]
    print(f"wrote {len(runner.lines)} lines to {out} ({len(bad)} errors)")
    if args.plots:
        from .report import draw_all

        for path in draw_all(runner.lines, Path(out).parent):
            print(f"wrote {path}")
    return 1 if bad else 0


def cmd_report(args) -> int:
    from .report import MissingDataError, generate

    results = [Path(p) for p in args.results] if args.results else sorted((_REPO / "benchmarks" / "results").glob("bench_*.jsonl"))
    try:
        out = generate(results, Path(args.out), Path(args.figures),
                       allow_missing_baselines=args.allow_missing_baselines)
    except MissingDataError as exc:
        print(f"report not written: {exc}", file=sys.stderr)
        if not args.allow_missing_baselines and all("neither measured nor skipped" in p for p in str(exc).split("; ")):
            print("only baselines are missing (runs made without cuVS, like the committed GPU results): "
                  "--allow-missing-baselines draws the figures without them and names them under each",
                  file=sys.stderr)
        return 2
    print(f"wrote {out}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)

    p = sub.add_parser("list", help="methods, datasets and what is installed")
    p.set_defaults(fn=cmd_list)

    p = sub.add_parser("run", help="datasets x methods x sweeps -> JSON lines")
    p.add_argument("--dataset", action="append", required=True, help="dataset spec (repeatable)")
    p.add_argument("--method", action="append", required=True, help="method name (repeatable)")
    p.add_argument("--task", choices=("search", "graph"), default="search")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("-k", type=int, default=None, help="neighbours (default 10 for search, 32 for graphs)")
    p.add_argument("--set", action="append", help="METHOD.PARAM=V1,V2: sweep values (repeatable); a parameter "
                                                  "the method sweeps at search time is a search parameter, others "
                                                  "are build parameters")
    p.add_argument("--batch-sizes", default="", help="queries per search call, comma-separated, 'all' for one call "
                                                     "(default: all); each call is timed alone, the line gives the "
                                                     "median time per call (call_s)")
    p.add_argument("--max-calls", type=int, default=None, help="with --batch-sizes: search only the first "
                                                              "batch x max-calls queries (default: all)")
    p.add_argument("--repeats", type=int, default=3, help="timed search calls (median)")
    p.add_argument("--build-repeats", type=int, default=3, help="timed builds (median)")
    p.add_argument("--input", choices=("device", "host"), default="device", help="GPU runs: data on the GPU or host")
    p.add_argument("--threads", type=int, default=None, help="CPU threads (default: all cores)")
    p.add_argument("--tag", default="")
    p.add_argument("--suite", default=None)
    p.add_argument("--out", default="out/bench.jsonl")
    p.set_defaults(fn=cmd_run)

    p = sub.add_parser("suite", help="the CPU or GPU suite of the committed report")
    p.add_argument("which", choices=("cpu", "gpu"))
    p.add_argument("--out", default=None, help="JSON-lines file (cpu: benchmarks/results/bench_cpu.jsonl, "
                                               "gpu: $OUT/bench_gpu.jsonl)")
    p.add_argument("--parts", default="", help="parts, comma-separated: cpu of compare,search_graphs (default both); "
                                               "gpu of sift,search_graphs,scaling,ooc,ooc_probe (default all but "
                                               "ooc_probe)")
    p.add_argument("--ooc-sizes", default="1m,10m", help="GPU out-of-core sizes (default 1m,10m)")
    p.add_argument("--ooc-time-limit", type=float, default=None,
                   help="seconds after which an out-of-core build is abandoned with a 'timeout' line")
    p.add_argument("--quick", action="store_true", help="tiny sizes: checks the code, not the speed")
    p.add_argument("--device", choices=("cpu", "cuda"), default=None, help="override the suite's device")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--plots", action="store_true", help="also draw the PNGs next to --out")
    p.set_defaults(fn=cmd_suite)

    p = sub.add_parser("report", help="benchmarks/REPORT.md and its plots from the JSON lines")
    p.add_argument("--results", nargs="*", help="JSON-lines files (default benchmarks/results/bench_*.jsonl)")
    p.add_argument("--out", default=str(_REPO / "benchmarks" / "REPORT.md"))
    p.add_argument("--figures", default=str(_REPO / "benchmarks" / "results" / "figures"))
    p.add_argument("--allow-missing-baselines", action="store_true",
                   help="draw figures whose runs lack a baseline (cuVS not installed there) and say so under them")
    p.set_defaults(fn=cmd_report)
    return ap


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    return args.fn(args)
