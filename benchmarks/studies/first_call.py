"""How soon does a new process answer? First and second calls of fresh processes, with the kernels already
compiled on disk (warm) and with empty caches (cold).

    python benchmarks/studies/first_call.py --out out/                # GPU
    python benchmarks/studies/first_call.py --device cpu --out out/   # CPU
    python benchmarks/studies/first_call.py --profile knn,song        # where a warm first call goes

Each case runs in processes of its own (``--child CASE``) on the bundled sample (20,000 uint8 SIFT vectors,
1,000 queries), with its own empty numba and kernel caches (``NUMBA_CACHE_DIR``, ``KNNGRAPH_CACHE_DIR``):
the first process finds them empty (cold: it compiles what it runs), the second finds what the first left
(warm: what every later process of a machine sees). Python's bytecode is written once before them and
read by each (``PYTHONPYCACHEPREFIX``), as on a user's install. Each process times ``import knngraph``, its
first call and a second one (the runner's :func:`~benchmarks.runner.measure.time_calls`, no warm-up), and
counts the GPU kernels it built (``knngraph._cuda_launch.kernels_compiled``) and the seconds it spent
compiling (``knngraph._compiling.compile_seconds``).

GPU cases: ``knn`` (k=10, the 1,000 queries), ``nndescent`` (``knn_graph(..., 32, method='nndescent')``),
``song`` (``song.build`` + ``song.search``), ``grnnd`` and ``ggnn`` (their builds), and ``knngraph demo``
(wall time of the command). CPU: ``knngraph warmup`` (every dtype and metric; cold, then again warm),
``nndescent_5k`` (``knn_graph`` of 5,000 rows, k=10: cold without a warm-up, warm after it) and the demo.
Each line says the target it is held to (``target_s``: warm first calls, the GPU demo warm and cold, the
CPU's first warm-up) and whether it was met. Writes first_call_{cpu,gpu}.jsonl and .png.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: python benchmarks/studies/NAME.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

ROOT = Path(__file__).resolve().parents[2]

#: targets of warm first calls (seconds), by device and case; ``demo_cold`` holds the cold demo
TARGETS = {"cuda": {"knn": 0.3, "nndescent": 0.5, "song": 0.5, "grnnd": 1.0, "ggnn": 1.0, "demo": 3.0,
                    "demo_cold": 30.0},
           "cpu": {"warmup": 60.0, "nndescent_5k": 1.0}}
GPU_CASES = ("knn", "nndescent", "song", "grnnd", "ggnn")


# --------------------------------------------------------------------------------------------------
# the child: one case in a fresh process


def child(case: str, device: str, profile: bool = False) -> dict:
    """Import knngraph, run ``case`` twice; the seconds of each step, the kernels built, the compilation.
    ``profile``: the first call runs under cProfile, whose 40 costliest entries (cumulative) go to stderr."""
    t0 = time.perf_counter()
    import numpy as np

    import knngraph
    from knngraph.datasets import load_sample

    import_s = time.perf_counter() - t0
    s = load_sample()
    base, queries = s.base, s.queries

    def run():
        if case == "knn":
            knngraph.knn(base, queries, 10, device=device, verbose=False)
        elif case == "nndescent":
            knngraph.knn_graph(base, 32, method="nndescent", device=device, verbose=False)
        elif case == "nndescent_5k":
            knngraph.knn_graph(np.ascontiguousarray(base[:5000]), 10, method="nndescent", device=device,
                               verbose=False)
        elif case == "song":
            index = knngraph.song.build(knngraph.song.IndexParams(), base, device=device, verbose=False)
            knngraph.song.search(index, queries, 10, device=device, verbose=False)
        elif case == "grnnd":
            knngraph.grnnd.build(knngraph.grnnd.IndexParams(), base, device=device, verbose=False)
        elif case == "ggnn":
            knngraph.ggnn.build(knngraph.ggnn.IndexParams(), base, device=device, verbose=False)
        else:
            raise ValueError(f"unknown case {case!r}")
        if device != "cpu":
            import cupy as cp

            cp.cuda.Device().synchronize()

    from benchmarks.runner.measure import time_calls  # (after the import of knngraph is timed)

    profiler = None
    if profile:  # the first call under cProfile, its report printed after the timing
        import cProfile

        profiler = cProfile.Profile()

    def profiled():
        finder = _ImportTracer()
        sys.meta_path.insert(0, finder)
        profiler.enable()
        try:
            return run()
        finally:
            profiler.disable()
            sys.meta_path.remove(finder)
            print("\n".join(finder.report()), file=sys.stderr)

    # the first call, then the second, each timed once without a warm-up
    times = [time_calls(profiled if profile else run, 1, warmup=False).median_s,
             time_calls(run, 1, warmup=False).median_s]
    if profiler is not None:
        import pstats

        pstats.Stats(profiler, stream=sys.stderr).sort_stats("cumulative").print_stats(40)
    from knngraph._compiling import compile_seconds

    gpu = sys.modules.get("knngraph._cuda_launch")
    return {"import_s": import_s, "first_s": times[0], "second_s": times[1],
            "kernels_compiled": gpu.kernels_compiled() if gpu is not None else 0, "compile_s": compile_seconds()}


class _ImportTracer:
    """An import hook of the profiled first call: the packages it imported (top-level names new to the
    process, from ``sys.modules``), and for the modules of :data:`TRACED_IMPORTS` (those a warm GPU call
    should not need) the stack that asked for them: knngraph's frames and the libraries' own (a CuPy
    operator that imports ``cupyx`` shows where in CuPy)."""

    def __init__(self):
        self.before = set(sys.modules)
        self.stacks: dict = {}

    def find_spec(self, name, path=None, target=None):
        if name in TRACED_IMPORTS and name not in sys.modules and name not in self.stacks:
            import traceback

            frames = [f"{f.filename.rpartition('site-packages/')[2].rpartition('src/')[2]}:{f.lineno}"
                      for f in traceback.extract_stack()[:-1] if "importlib" not in f.filename]
            self.stacks[name] = " <- ".join(reversed(frames[-14:]))
        return None

    def report(self) -> list:
        had = {m.partition(".")[0] for m in self.before}
        new = sorted({m.partition(".")[0] for m in sys.modules} - had - set(sys.stdlib_module_names))
        return [f"first call imported packages: {', '.join(new) or '(none)'}"] + \
            [f"first call imported {name} <- {where}" for name, where in self.stacks.items()]


#: modules whose import by a profiled first call is traced back to the code that asked for it
TRACED_IMPORTS = ("numba", "numba.core.dispatcher", "scipy.sparse", "cupyx", "cupyx.scipy", "cupyx.scipy.special")


# --------------------------------------------------------------------------------------------------
# the parent: fresh processes, caches, lines


#: Python's bytecode of every module the children import, written once (by :func:`_compile_bytecode`) and
#: read by every child: a user's install has its bytecode (pip writes it), so a first call of theirs does
#: not compile knngraph's, NumPy's or CuPy's sources. Without it a machine that sets PYTHONDONTWRITEBYTECODE
#: (the lent GPU machines do) compiled about 150 modules in every child, about 0.4 s of each first call.
_BYTECODE: dict = {}


def _env(caches: Path) -> dict:
    env = dict(os.environ, NUMBA_CACHE_DIR=str(caches / "numba"), KNNGRAPH_CACHE_DIR=str(caches / "knngraph"),
               **_BYTECODE)
    if _BYTECODE:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def _compile_bytecode(device: str, tmp: Path) -> None:
    """Fill a bytecode folder of this study's own (PYTHONPYCACHEPREFIX) by running one case once, in caches
    that are then thrown away, before any measured child."""
    _BYTECODE["PYTHONPYCACHEPREFIX"] = str(tmp / "bytecode")
    _child_run("knn" if device == "cuda" else "nndescent_5k", device, tmp / "bytecode-pass")
    _command(["demo", "--device", device], tmp / "bytecode-pass")


def _child_run(case: str, device: str, caches: Path) -> dict:
    done = subprocess.run([sys.executable, __file__, "--child", case, "--device", device], capture_output=True,
                          text=True, env=_env(caches), cwd=str(ROOT), timeout=3600)
    if done.returncode:
        raise RuntimeError(f"{case} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _command(args: list, caches: Path) -> dict:
    """``python -m knngraph ARGS --json`` in a fresh process: its wall seconds and compilation."""
    t = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "knngraph", *args, "--json"], capture_output=True, text=True,
                          env=_env(caches), cwd=str(ROOT), timeout=3600)
    wall = time.perf_counter() - t
    if done.returncode:
        raise RuntimeError(f"knngraph {' '.join(args)} failed:\n{done.stderr[-3000:]}")
    res = json.loads(done.stdout.strip().splitlines()[-1])
    out = {"wall_s": wall, "compile_s": res.get("compile_seconds")}
    out.update({key: res[key] for key in ("processes", "tasks") if key in res})
    return out


def _line(log, device: str, case: str, cache: str, target: float | None, fields: dict) -> dict:
    seconds = fields.get("first_s", fields.get("wall_s"))
    # the machine's load when the line is written: other work on a shared machine slows every process
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    return log.write(study="first_call", device=device, case=case, cache=cache, **fields, target_s=target,
                     meets_target=None if target is None else bool(seconds <= target), load_1min=load)


def measure(device: str, log, tmp: Path) -> None:
    """Every case of ``device``, cold then warm, each in caches of its own under ``tmp``."""
    targets = TARGETS[device]
    _compile_bytecode(device, tmp)
    if device == "cuda":
        for case in GPU_CASES:
            for cache in ("cold", "warm"):
                _line(log, device, case, cache, targets[case] if cache == "warm" else None,
                      _child_run(case, device, tmp / case))
        for cache in ("cold", "warm"):
            _line(log, device, "demo", cache, targets["demo" if cache == "warm" else "demo_cold"],
                  _command(["demo", "--device", "cuda"], tmp / "demo"))
        return
    # a first NN-Descent graph with nothing compiled, the warm-up (cold, then again: nothing left to do),
    # and a first NN-Descent graph after the warm-up
    _line(log, device, "nndescent_5k", "cold", None, _child_run("nndescent_5k", device, tmp / "nothing"))
    for cache in ("cold", "warm"):
        _line(log, device, "warmup", cache, targets["warmup"] if cache == "cold" else None,
              _command(["warmup", "--device", "cpu"], tmp / "warmup"))
    _line(log, device, "nndescent_5k", "warm", targets["nndescent_5k"],
          _child_run("nndescent_5k", device, tmp / "warmup"))
    for cache in ("cold", "warm"):
        _line(log, device, "demo", cache, None, _command(["demo", "--device", "cpu"], tmp / "demo"))


def plot(rows, png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases = list(dict.fromkeys(r["case"] for r in rows))
    fig, ax = plt.subplots(figsize=(1.6 * len(cases) + 3, 4))
    width = 0.27
    for j, (label, cache, key) in enumerate((("cold: first call", "cold", "first_s"),
                                             ("warm: first call", "warm", "first_s"),
                                             ("warm: second call", "warm", "second_s"))):
        vals = []
        for case in cases:
            r = next((r for r in rows if r["case"] == case and r["cache"] == cache), None)
            vals.append(None if r is None else r.get(key, r.get("wall_s") if key == "first_s" else None))
        xs = [i + (j - 1) * width for i, v in enumerate(vals) if v is not None]
        ax.bar(xs, [v for v in vals if v is not None], width, label=label)
    for r in rows:  # each target over the bar it holds: a cold or a warm first call
        if r["target_s"] is not None:
            x = cases.index(r["case"]) + (-width if r["cache"] == "cold" else 0.0)
            ax.plot([x - width / 2, x + width / 2], [r["target_s"]] * 2, "k--", lw=1)
    ax.set_xticks(range(len(cases)), cases)
    ax.set_yscale("log")
    ax.set_ylabel("seconds (dashed: target)")
    ax.set_title(f"first calls of a new process ({rows[0]['device']}; demo and warm-up: wall time)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=120)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="out")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--profile", metavar="CASES",
                    help="instead of the study: where a warm first call of each case (comma list) spends its time "
                         "(a new process after one that filled the caches; cProfile's 40 costliest entries and "
                         "the packages the call imported, with the frames that asked for them)")
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.device, profile=bool(os.environ.get("FIRST_CALL_PROFILE")))))
        return
    if args.profile:
        with tempfile.TemporaryDirectory(prefix="knngraph-first-call-") as tmp:
            _compile_bytecode(args.device, Path(tmp))
            for case in args.profile.split(","):
                _child_run(case, args.device, Path(tmp) / "caches")  # fills the kernel caches
                env = dict(_env(Path(tmp) / "caches"), FIRST_CALL_PROFILE="1")
                done = subprocess.run([sys.executable, __file__, "--child", case, "--device", args.device],
                                      capture_output=True, text=True, env=env, cwd=str(ROOT), timeout=3600)
                print(f"== {case}\n{done.stderr[-12000:]}")
                print(done.stdout.strip().splitlines()[-1] if done.stdout.strip() else "")
        return
    from benchmarks.runner.measure import JsonLines

    name = f"first_call_{'gpu' if args.device == 'cuda' else 'cpu'}"
    log = JsonLines(Path(args.out) / f"{name}.jsonl")
    with tempfile.TemporaryDirectory(prefix="knngraph-first-call-") as tmp:
        measure(args.device, log, Path(tmp))
    plot(log.rows, Path(args.out) / f"{name}.png")


if __name__ == "__main__":
    main()
