"""``benchmarks/REPORT.md`` and its plots, generated from the runner's JSON lines and nothing else.

Each figure of :data:`FIGURES` says which lines it draws (device, dataset, task, tags) and which
methods must be there: knngraph's own methods need measured ('ok') lines; each
baseline needs measured lines or a 'skipped' line whose note says why (a library that was not
installed), never nothing. The scaling figure also needs its range of sizes. :func:`generate` checks
every figure first and raises :class:`MissingDataError` naming everything that is missing, before it
writes any file: a report is either complete or not written. The one exception is a figure added before
the machine that measures it has run (``allow_unmeasured``: the GPU suite's new figures, measured when
the GPU suite runs next): while none of its required methods has a measured line, the report says "not
yet measured" in its place; once any has, it is checked like every other figure.

Where a file holds several measurements of the same point (a suite run again), the latest one is used.
Lines of an earlier vocabulary are read in today's (:func:`load_lines`: SONG's graph parameters).
"""

from __future__ import annotations

import dataclasses
import json
import shlex
from pathlib import Path

__all__ = ["Figure", "FIGURES", "MissingDataError", "load_lines", "latest", "check", "unmeasured", "generate",
           "draw_all"]


class MissingDataError(Exception):
    """A figure's data is missing from the JSON lines (the message lists every gap)."""


@dataclasses.dataclass(frozen=True)
class Figure:
    """One plot and its table.

    Parameters
    ----------
    name : str
        File stem of the PNG.
    kind : {'pareto', 'build', 'batch', 'latency', 'scaling'}
        recall@10 against queries per second / build time against graph recall@10 / queries per second
        against batch size / time per call against batch size / build time against n.
    title : str
    device : {'cpu', 'cuda'}
    dataset : str
        The ``dataset`` field of the lines (for 'scaling': a prefix, e.g. 'synth:').
    required : tuple of str
        Methods that must have measured lines.
    baselines : tuple of str
        Methods that must have measured lines or a 'skipped' line with a note.
    tags : tuple of str
        Tags of the lines drawn.
    min_n, max_n : int
        'scaling' only: the in-memory series must reach down to min_n and up to max_n, and the out-of-core
        series (tag 'ooc') up to max_n.
    allow_unmeasured : bool
        A figure added before its data: "not yet measured" in the report while no required method has a
        measured line, instead of refusing (see the module docs). Only for new figures.
    suite_part : str
        The part of the suite (``python -m benchmarks suite ... --parts``) that measures the figure, named
        where the report says it is not yet measured.
    """

    name: str
    kind: str
    title: str
    device: str
    dataset: str
    required: tuple = ()
    baselines: tuple = ()
    tags: tuple = ("",)
    min_n: int = 0
    max_n: int = 0
    allow_unmeasured: bool = False
    suite_part: str = ""

    @property
    def task(self) -> str:
        return "search" if self.kind in ("pareto", "batch", "latency") else "graph"


CPU_BASELINES_SEARCH = ("faiss-flat", "faiss-hnsw", "faiss-ivf", "hnswlib", "pynndescent")
#: the GPU reference (measured, or 'skipped' with the install note where cuVS is absent)
GPU_BASELINES_SEARCH = ("torch-exact", "cuvs-brute-force", "cuvs-cagra", "cuvs-cagra-on-knngraph")
GPU_BASELINES_GRAPH = ("torch-exact", "cuvs-brute-force", "cuvs-nn-descent")
#: knngraph's search graphs (GGNN's own search, the fast searcher on GGNN's and GRNND's graphs as built);
#: their runs (tag 'search-graphs') also measure the fast searcher on its prepared k-NN graph for reference
SEARCH_GRAPHS = ("knngraph-ggnn", "knngraph-song-on-ggnn", "knngraph-song-on-grnnd")

FIGURES: tuple[Figure, ...] = (
    Figure("pareto_cpu_sift100k", "pareto", "sift-photos 100k, CPU: recall@10 against queries per second", "cpu",
           "sift-photos-100k", ("knngraph-exact", "knngraph-song"), CPU_BASELINES_SEARCH),
    Figure("pareto_cpu_minilm", "pareto", "minilm-words (cosine), CPU: recall@10 against queries per second", "cpu",
           "minilm-words", ("knngraph-exact", "knngraph-song"), CPU_BASELINES_SEARCH),
    Figure("build_cpu_sift100k", "build", "sift-photos 100k, CPU: k=32 graph build time against graph recall@10",
           "cpu", "sift-photos-100k", ("knngraph-nndescent", "knngraph-exact"), ("pynndescent",)),
    Figure("build_cpu_minilm", "build", "minilm-words (cosine), CPU: k=32 graph build time against graph recall@10",
           "cpu", "minilm-words", ("knngraph-nndescent", "knngraph-exact"), ("pynndescent",)),
    Figure("pareto_gpu_sift450k", "pareto", "sift-photos 450k, GPU: recall@10 against queries per second", "cuda",
           "sift-photos-450k", ("knngraph-exact", "knngraph-song"), GPU_BASELINES_SEARCH),
    Figure("build_gpu_sift450k", "build", "sift-photos 450k, GPU: k=64 graph build time against graph recall@10",
           "cuda", "sift-photos-450k", ("knngraph-nndescent", "knngraph-exact"), GPU_BASELINES_GRAPH),
    Figure("batch_gpu_sift450k", "batch", "sift-photos 450k, GPU: queries per second against queries per call",
           "cuda", "sift-photos-450k", ("knngraph-exact", "knngraph-song"), GPU_BASELINES_SEARCH, tags=("batch",)),
    Figure("latency_gpu_sift450k", "latency", "sift-photos 450k, GPU: time per call against queries per call",
           "cuda", "sift-photos-450k", ("knngraph-exact", "knngraph-song"), GPU_BASELINES_SEARCH, tags=("batch",)),
    Figure("scaling_gpu_synth", "scaling", "Synthetic Gaussian mixture, 128-d, GPU: k=32 graph build time against n",
           "cuda", "synth:", ("knngraph-nndescent",), tags=("scaling", "ooc", "ooc-probe"), min_n=10_000,
           max_n=10_000_000),
    Figure("search_graphs_cpu_sift100k", "pareto", "sift-photos 100k, CPU: search graphs of GGNN and GRNND, "
           "recall@10 against queries per second", "cpu", "sift-photos-100k", SEARCH_GRAPHS, tags=("search-graphs",),
           suite_part="search_graphs"),
    Figure("search_graphs_gpu_sift450k", "pareto", "sift-photos 450k, GPU: search graphs of GGNN and GRNND, "
           "recall@10 against queries per second", "cuda", "sift-photos-450k", SEARCH_GRAPHS, tags=("search-graphs",),
           allow_unmeasured=True, suite_part="search_graphs"),
)



# ------------------------------------------------------------------------------------------ data


#: SONG's build parameters in lines written before they were ``knngraph.song.IndexParams`` fields
_LEGACY_SONG_PARAMS = {"graph": "build_algo", "graph_k": "intermediate_graph_degree", "degree": "graph_degree"}


def _upgrade(row: dict) -> dict:
    """A line in today's vocabulary: knngraph-song's ``graph`` / ``graph_k`` / ``degree`` build parameters
    are ``song.IndexParams``' ``build_algo`` / ``intermediate_graph_degree`` / ``graph_degree``."""
    params = row.get("build_params")
    if row.get("method") == "knngraph-song" and isinstance(params, dict) and set(params) & set(_LEGACY_SONG_PARAMS):
        row["build_params"] = {_LEGACY_SONG_PARAMS.get(k, k): v for k, v in params.items()}
    return row


def load_lines(paths) -> list[dict]:
    """Every JSON line of ``paths``, in today's vocabulary (:func:`_upgrade`; a missing file is a
    :class:`MissingDataError`)."""
    lines = []
    for path in paths:
        path = Path(path)
        if not path.exists():
            raise MissingDataError(f"results file {path} does not exist")
        for number, text in enumerate(path.read_text().splitlines(), 1):
            if text.strip():
                try:
                    row = json.loads(text)
                except json.JSONDecodeError as exc:
                    raise MissingDataError(f"{path}:{number}: not JSON ({exc})") from exc
                row["_file"] = str(path)
                lines.append(_upgrade(row))
    return lines


def _key(row: dict) -> str:
    """What makes a measured point: an out-of-core build is also told apart by how it was cut (the
    strategy is a library default, not a build parameter of the line)."""
    fields = ("task", "method", "dataset", "device", "tag", "k", "build_params", "search_params", "batch_size")
    ooc = [_ooc_strategy(row), _ooc_overlap(row)] if row.get("tag") == "ooc" else []
    return json.dumps([row.get(f) for f in fields] + ooc, sort_keys=True, default=str)


def latest(lines) -> list[dict]:
    """One line per measured point, the latest by date. A 'skipped' or 'error' line is kept (latest per
    method, dataset and status) unless the same method was measured on the same data after it."""
    measured: dict = {}
    others: dict = {}
    for row in lines:
        if row.get("status") == "ok":
            key = _key(row)
            if key not in measured or str(row.get("date", "")) >= str(measured[key].get("date", "")):
                measured[key] = row
        else:
            key = json.dumps([row.get(f) for f in ("task", "method", "dataset", "device", "tag", "status")])
            if key not in others or str(row.get("date", "")) >= str(others[key].get("date", "")):
                others[key] = row
    last_ok: dict = {}
    for r in measured.values():
        group = (r.get("task"), r.get("method"), r.get("dataset"), r.get("device"), r.get("tag"))
        last_ok[group] = max(last_ok.get(group, ""), str(r.get("date", "")))
    kept = [r for r in others.values()
            if last_ok.get((r.get("task"), r.get("method"), r.get("dataset"), r.get("device"), r.get("tag")), "")
            < str(r.get("date", ""))]
    return list(measured.values()) + kept


def _select(fig: Figure, lines) -> list[dict]:
    out = []
    for r in lines:
        if r.get("device") != fig.device or r.get("task") != fig.task or (r.get("tag") or "") not in fig.tags:
            continue
        ds = str(r.get("dataset", ""))
        if (fig.kind == "scaling" and ds.startswith(fig.dataset)) or ds == fig.dataset:
            out.append(r)
    return out


def unmeasured(fig: Figure, lines) -> bool:
    """Whether ``fig`` is a figure added before its data (``allow_unmeasured``) that no required method has
    a measured line of yet: the report then says "not yet measured" instead of drawing it."""
    return fig.allow_unmeasured and not any(
        r.get("status") == "ok" and r["method"] in fig.required for r in _select(fig, lines))


def check(fig: Figure, lines) -> list[str]:
    """What is missing for ``fig`` (empty when it can be drawn, or is not yet measured: :func:`unmeasured`)."""
    if unmeasured(fig, lines):
        return []
    rows = _select(fig, lines)
    ok = [r for r in rows if r.get("status") == "ok"]
    problems = []
    for m in fig.required:
        if not any(r["method"] == m for r in ok):
            why = [r.get("note") for r in rows if r["method"] == m and r.get("note")]
            problems.append(f"{fig.name}: no measurement of {m}" + (f" ({why[-1]})" if why else ""))
    for m in fig.baselines:
        if not any(r["method"] == m for r in ok) and not any(
                r["method"] == m and r.get("status") == "skipped" and r.get("note") for r in rows):
            problems.append(f"{fig.name}: baseline {m} neither measured nor skipped with a note")
    if fig.kind in ("batch", "latency"):
        for m in fig.required:
            sizes = {r.get("batch_size") for r in ok if r["method"] == m}
            if len(sizes) < 2:
                problems.append(f"{fig.name}: {m} has {len(sizes)} batch size(s), needs at least 2")
    if fig.kind == "scaling":
        mem = [r["n"] for r in ok if r["method"] == "knngraph-nndescent" and r.get("tag") == "scaling"]
        ooc = [r["n"] for r in ok if r["method"] == "knngraph-nndescent" and r.get("tag") == "ooc"]
        if not mem or min(mem) > fig.min_n or max(mem) < fig.max_n:
            problems.append(f"{fig.name}: in-memory NN-Descent series must span n = {fig.min_n} .. {fig.max_n}, "
                            f"has {sorted(mem)}")
        if not ooc or max(ooc) < fig.max_n:
            problems.append(f"{fig.name}: no out-of-core NN-Descent run at n >= {fig.max_n} (has {sorted(ooc)})")
    return problems


# -------------------------------------------------------------------------------------- drawing

_COLOURS = {"knngraph-song": "#d62728", "knngraph-exact": "#1f77b4", "knngraph-nndescent": "#ff7f0e",
            "hnswlib": "#2ca02c", "faiss-hnsw": "#9467bd", "faiss-ivf": "#8c564b", "faiss-flat": "#7f7f7f",
            "pynndescent": "#e377c2", "torch-exact": "#17becf", "cuvs-cagra": "#76b900",
            "cuvs-cagra-on-knngraph": "#3d6b00", "cuvs-nn-descent": "#bcbd22", "cuvs-brute-force": "#393b79",
            "knngraph-ggnn": "#8b0a50", "knngraph-song-on-ggnn": "#e7969c", "knngraph-song-on-grnnd": "#fdae6b",
            "knngraph-grnnd": "#a55194"}


def _params_label(params: dict, vary: set) -> str:
    return ", ".join(f"{k}={v}" for k, v in params.items() if k in vary)


def _series(rows, by_params: str, along_last: bool = False):
    """Group rows by method and by the ``by_params`` parameters that vary within the method; with
    ``along_last`` the last varying parameter (in sweep order) is left out of the grouping, so that each
    series is a curve along it (e.g. NN-Descent's ``max_iterations``)."""
    groups: dict = {}
    for m in dict.fromkeys(r["method"] for r in rows):
        mine = [r for r in rows if r["method"] == m]
        keys = list(dict.fromkeys(k for r in mine for k in (r.get(by_params) or {})))
        vary = [k for k in keys if len({json.dumps((r.get(by_params) or {}).get(k), default=str) for r in mine}) > 1]
        if along_last and vary:
            vary = vary[:-1]
        for r in mine:
            label = m + (f" ({_params_label(r.get(by_params) or {}, set(vary))})" if vary else "")
            groups.setdefault(label, []).append(r)
    return groups


_STYLES = (("-", "o"), ("--", "s"), (":", "^"), ("-.", "D"))


def _styled(groups: dict):
    """(label, rows, colour, line style, marker): one colour per method, a style per series within it."""
    seen: dict = {}
    for label, rs in groups.items():
        m = rs[0]["method"]
        i = seen.get(m, 0)
        seen[m] = i + 1
        yield label, rs, _COLOURS.get(m), *_STYLES[i % len(_STYLES)]


def pareto(points):
    """Points (recall, qps) not dominated by another (higher recall and higher qps), by recall."""
    front = []
    for p in sorted(points, key=lambda p: (-p[0], -p[1])):
        if not front or p[1] > front[-1][1]:
            front.append(p)
    return sorted(front)


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def draw(fig: Figure, rows, path: Path) -> Path:
    """Draw ``fig`` from its measured ``rows`` into ``path`` (PNG)."""
    plt = _plt()
    ok = [r for r in rows if r.get("status") == "ok"]
    f, ax = plt.subplots(figsize=(10.5, 5))
    if fig.kind == "pareto":
        groups = _series([r for r in ok if r.get("batch_size") is None], "build_params")
        for label, rs, colour, ls, marker in _styled(groups):
            pts = [(r[f"recall@{r['k']}"], r["qps"]) for r in rs]
            ax.scatter(*zip(*pts), color=colour, alpha=0.35, s=14)
            front = pareto(pts)
            ax.plot(*zip(*front), marker=marker, color=colour, label=label, ls=ls if len(front) > 1 else "none")
        ax.set_yscale("log")
        ax.set_xlabel("recall@10")
        ax.set_ylabel("queries per second (log)")
    elif fig.kind == "build":
        for label, rs, colour, ls, marker in _styled(_series(ok, "build_params", along_last=True)):
            rs = sorted(rs, key=lambda r: r["build_s"])
            ax.plot([r["build_s"] for r in rs], [r["graph_recall@10"] for r in rs], marker=marker, color=colour,
                    label=label, ls=ls if len(rs) > 1 else "none")
        ax.set_xscale("log")
        ax.set_xlabel("build time, s (log)")
        ax.set_ylabel("graph recall@10")
    elif fig.kind == "batch":
        for label, rs, colour, ls, marker in _styled(_series(ok, "search_params")):
            rs = sorted(rs, key=lambda r: r["batch_size"] or r["nq"])
            ax.plot([r["batch_size"] or r["nq"] for r in rs], [r["qps"] for r in rs], marker=marker, color=colour,
                    ls=ls, label=label)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("queries per call (log)")
        ax.set_ylabel("queries per second (log)")
    elif fig.kind == "latency":
        for label, rs, colour, ls, marker in _styled(_series(ok, "search_params")):
            rs = sorted(rs, key=lambda r: r["batch_size"] or r["nq"])
            xs, ys = [r["batch_size"] or r["nq"] for r in rs], [call_seconds(r) * 1e3 for r in rs]
            ax.plot(xs, ys, marker=marker, color=colour, ls=ls, label=label)
            for x, y, r in zip(xs, ys, rs):  # calls compare only at the same recall: print it at each point
                ax.annotate(f"{r['recall@' + str(r['k'])]:.3f}", (x, y), fontsize=6, color=colour,
                            textcoords="offset points", xytext=(3, -9))
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("queries per call (log)")
        ax.set_ylabel("milliseconds per call, median (log); labels: recall@10")
    elif fig.kind == "scaling":
        series = {"NN-Descent, in GPU memory": ("knngraph-nndescent", "scaling", None, "o-"),
                  "exact graph (GEMM + selection)": ("knngraph-exact", "scaling", None, "^:")}
        for strategy, style in (("shard_pairs", "s--"), ("clusters", "D-.")):
            for overlap in sorted({_ooc_overlap(r) for r in ok if _ooc_strategy(r) == strategy}, key=str):
                what = "shard-pair merges" if strategy == "shard_pairs" else f"clusters, overlap {overlap}"
                series[f"NN-Descent, out-of-core, {what} (memory_limit = data size / 4)"] = (
                    "knngraph-nndescent", "ooc", (strategy, overlap), style)
        for label, (method, tag, ooc_kind, style) in series.items():
            rs = sorted((r for r in ok if r["method"] == method and r.get("tag") == tag
                         and (ooc_kind is None or (_ooc_strategy(r), _ooc_overlap(r)) == ooc_kind)),
                        key=lambda r: r["n"])
            if rs:
                ax.plot([r["n"] for r in rs], [r["build_s"] for r in rs], style, color=_COLOURS.get(method),
                        label=label, alpha=0.8 if tag != "ooc" else 1.0)
                for r in rs:
                    ax.annotate(f"{r['graph_recall@10']:.3f}", (r["n"], r["build_s"]), fontsize=6,
                                textcoords="offset points", xytext=(3, -9))
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("n (log)")
        ax.set_ylabel("build time, s (log); labels: graph recall@10")
    _plain_log_ticks(ax)
    where = _where(ok)
    ax.set_title(f"{fig.title}\n{where}", fontsize=9)
    ax.grid(alpha=0.3, which="both")
    # a fixed place beside the axes: loc="best" searches over every point drawn, which takes seconds (and warns)
    # on plots of many lines, and can still cover a curve
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)
    f.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    f.savefig(path, dpi=110)
    plt.close(f)
    return path


def call_seconds(r) -> float:
    """Seconds per search call of a line: ``call_s`` (median over calls); lines written before that field
    existed: the pass time over its number of calls."""
    if r.get("call_s") is not None:
        return r["call_s"]
    nq = r.get("nq_searched") or r["nq"]
    calls = r.get("calls") or -(-nq // (r.get("batch_size") or nq))
    return r["search_s"] / calls


def _ooc_strategy(r) -> str | None:
    """How an out-of-core line was built: info['out_of_core'] (lines written before that key existed
    come from shard-pair merges, the only strategy then)."""
    if r.get("tag") != "ooc":
        return None
    info = r.get("info") or {}
    return info.get("out_of_core") or ("shard_pairs" if "shards" in info else "unknown")


def _ooc_overlap(r):
    return (r.get("info") or {}).get("overlap")


def _plain_log_ticks(ax):
    """Log axes labelled 0.2, 0.5, 1, 2, 1e+05 ... rather than 2x10^-1 (which overlap)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    for axis, scale in ((ax.xaxis, ax.get_xscale()), (ax.yaxis, ax.get_yscale())):
        if scale == "log":
            axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
            axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
            axis.set_minor_formatter(NullFormatter())


def _where(rows) -> str:
    names = sorted({str(r.get("device_name")) for r in rows})
    threads = sorted({r.get("threads") for r in rows if r.get("device") == "cpu"})
    cores = sorted({(r.get("env") or {}).get("cpu_count") for r in rows})
    if rows and rows[0].get("device") == "cpu":
        return f"{', '.join(names)}, {'/'.join(map(str, cores))} cores, {'/'.join(map(str, threads))} threads"
    return ", ".join(names)


def draw_all(lines, out_dir) -> list[Path]:
    """Draw every figure that has data (no checks; for a quick look at a suite's output)."""
    lines = latest(lines)
    paths = []
    for fig in FIGURES:
        rows = [r for r in _select(fig, lines) if r.get("status") == "ok"]
        if rows:
            paths.append(draw(fig, rows, Path(out_dir) / f"{fig.name}.png"))
    return paths


# -------------------------------------------------------------------------------------- tables


def _fmt(v, digits=3):
    """Numbers for tables: thousands with separators, others to ``digits`` significant digits."""
    if v is None:
        return ""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return str(v)
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    return f"{v:.{digits}g}"


def _gib(b):
    return "" if b is None else f"{b / 2**30:.2f}"


def _params(p) -> str:
    return ", ".join(f"{k}={v}" for k, v in (p or {}).items())


def _table(header, rows) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return out


#: facts of a search index shown in its table (the search-graph degrees, the cuVS baselines' settings)
_SEARCH_INFO = ("graph_degree", "mean_degree", "from_graph_s", "knngraph_graph_degree", "edges_filled", "nlist",
                "dtype", "rmm_pool")


def _search_table(rows) -> list[str]:
    rows = sorted(rows, key=lambda r: (r["method"], _params(r.get("build_params")), r.get("batch_size") or 0,
                                       r.get(f"recall@{r['k']}") or 0))
    body = []
    for r in rows:
        info = ", ".join(f"{k}={_fmt(v)}" for k, v in (r.get("info") or {}).items() if k in _SEARCH_INFO)
        searched = r.get("nq_searched") or r["nq"]
        body.append([r["method"], _params(r.get("build_params")) + (f" ({info})" if info else ""),
                     _params(r.get("search_params")),
                     f"{r.get('batch_size') or r['nq']}" + (f" ({searched:,} queries)" if searched != r["nq"] else ""),
                     _fmt(r.get(f"recall@{r['k']}"), 4), _fmt(r.get("R@10"), 4),
                     _fmt(r["qps"]), _fmt(call_seconds(r) * 1e3), _fmt(r.get("search_s")), _fmt(r.get("first_call_s")),
                     f"{_fmt(r.get('build_s'))}" + (f" ({r['build_repeats']}x)" if r.get("build_s") else ""),
                     _gib(r.get("peak_host_bytes")), _gib(r.get("peak_gpu_bytes"))])
    return _table(["method", "build", "search", "queries/call", "recall@10", "R@10", "QPS", "ms/call", "search s",
                   "first call s", "build s (runs)", "peak host GiB", "peak GPU GiB"], body)


def _graph_table(rows) -> list[str]:
    rows = sorted(rows, key=lambda r: (r.get("tag") or "", r["method"], r["n"], r["build_s"]))
    body = []
    for r in rows:
        info = r.get("info") or {}
        facts = ", ".join(f"{k}={_fmt(v)}" for k, v in info.items() if k in (
            "iterations", "shards", "merges", "mean_merge_iterations", "clusters", "overlap", "pieces",
            "piece_rows_max", "memory_limit_bytes"))
        if _ooc_strategy(r):
            facts = f"out_of_core={_ooc_strategy(r)}" + (", " + facts if facts else "")
        where = {"ooc": " (out-of-core)", "ooc-probe": " (out-of-core probe: the 10M run's shard size)"}
        body.append([r["method"] + where.get(r.get("tag"), ""), f"{r['n']:,}", r["k"],
                     _params(r.get("build_params")), f"{_fmt(r['build_s'])} ({r['build_repeats']}x)",
                     _fmt(r.get("warmup_s")), _fmt(r.get("graph_recall@10"), 4), _fmt(r.get(f"graph_recall@{r['k']}"), 4),
                     _gib(r.get("peak_host_bytes")), _gib(r.get("peak_gpu_bytes")), facts])
    return _table(["method", "n", "k", "parameters", "build s (runs)", "warm-up s", "graph recall@10",
                   "graph recall@k", "peak host GiB", "peak GPU GiB", "info"], body)


def _provenance(rows) -> list[str]:
    env = rows[0].get("env") or {}
    versions = {}
    for r in rows:
        for k, v in ((r.get("env") or {}).get("versions") or {}).items():
            if v:
                versions.setdefault(k, set()).add(v)
    dates = sorted(str(r.get("date")) for r in rows)
    sources = sorted({(((r.get("env") or {}).get("source") or {}).get("commit") or "?")[:10]
                      + (" + uncommitted changes to " + ((r.get("env") or {}).get("source") or {}).get("modified")
                         if ((r.get("env") or {}).get("source") or {}).get("modified") else "") for r in rows})
    commands = sorted({_command_text(r.get("command")) for r in rows})
    files = sorted({Path(r["_file"]).name for r in rows if r.get("_file")})
    out = [f"- Ran on: {_where(rows)}" + (f"; host: {env.get('cpu')}, {env.get('cpu_count')} cores, "
                                          f"{_gib(env.get('host_memory_bytes'))} GiB RAM" if rows[0].get("device") == "cuda" else ""),
           "- Versions: " + ", ".join(f"{k} {'/'.join(sorted(v))}" for k, v in sorted(versions.items())),
           f"- Measured: {dates[0]} .. {dates[-1]} (UTC); data: `{'`, `'.join(files)}`",
           "- knngraph source: " + "; ".join(sources),
           "- Command: " + "; ".join(f"`{c}`" for c in commands)]
    if rows[0].get("device") == "cuda":
        out.append("  (started on the lent GPU machine by `scripts/gpu_check.sh bench suite`; "
                   "the commands above are what ran, with any `BENCH_ARGS` applied)")
    return out


def _command_text(command) -> str:
    """A line's command as the report shows it: absolute paths (the output folder of the machine that ran
    it, e.g. the lent GPU machine's ``$OUT``) as ``$OUT/<file name>``; paths already made portable by
    :func:`benchmarks.runner.measure.portable_paths` (``$OUT/...``, ``~/...``) as they are."""
    if not command:
        return str(command)
    try:
        words = shlex.split(command)
    except ValueError:
        return command
    return " ".join(f"$OUT/{Path(w).name}" if w.startswith("/") else w if w.startswith(("$OUT", "~"))
                    else shlex.quote(w) for w in words)


def _not_yet_measured(fig: Figure, lines) -> list[str]:
    """What the report says in place of a figure added before its data (:func:`unmeasured`): which methods
    and run it lacks, which result files of its device were read (and when they were measured), and the
    suite part that measures it."""
    suite = "gpu" if fig.device == "cuda" else "cpu"
    tags = ", ".join(f"`{t}`" for t in fig.tags if t)
    mine = [r for r in lines if r.get("device") == fig.device]
    files = sorted({Path(r["_file"]).name for r in mine if r.get("_file")})
    dates = sorted(str(r.get("date"))[:10] for r in mine if r.get("date"))
    read = (f" The {suite.upper()} lines read (`{'`, `'.join(files)}`, measured {dates[0]} .. {dates[-1]}) come from "
            f"runs without them." if files and dates else f" No {suite.upper()} lines were read.")
    part = (f"; its `{fig.suite_part}` part alone: `python -m benchmarks suite {suite} --parts {fig.suite_part}`"
            if fig.suite_part else "")
    return [f"## {fig.title}", "", f"Not yet measured: the results hold no line of {', '.join(fig.required)} on "
            f"{fig.dataset}" + (f" (tag {tags})" if tags else "") + "." + read
            + f" The {suite.upper()} suite measures them (`python -m benchmarks suite {suite}`{part}).", ""]


def _notes(rows) -> list[str]:
    return [f"- {r['method']}: {r.get('status')}: {r.get('note')}" for r in rows if r.get("status") != "ok"]


def _best_at(rows, threshold) -> dict:
    """Highest measured QPS of each method among points with recall@10 >= threshold."""
    out = {}
    for r in rows:
        rec = r.get(f"recall@{r['k']}")
        if r.get("batch_size") is None and rec is not None and rec >= threshold:
            if r["method"] not in out or r["qps"] > out[r["method"]]["qps"]:
                out[r["method"]] = r
    return out


# -------------------------------------------------------------------------------------- report


def missing_baselines(fig: Figure, lines) -> list[str]:
    """The baselines of ``fig`` that its lines neither measured nor skipped with a note."""
    if unmeasured(fig, lines):
        return []
    rows = _select(fig, lines)
    return [m for m in fig.baselines
            if not any(r["method"] == m and (r.get("status") == "ok" or (r.get("status") == "skipped" and r.get("note")))
                       for r in rows)]


def generate(results, out_md: Path, figures_dir: Path, figures=FIGURES, allow_missing_baselines: bool = False) -> Path:
    """Check every figure, then draw the PNGs into ``figures_dir`` and write ``out_md``.

    ``allow_missing_baselines``: a figure whose runs did not measure a baseline (result files of runs made
    without cuVS installed) is drawn without it, and the report says under the figure which baselines its
    runs lack; without it such a figure is an error like any missing data.

    Raises
    ------
    MissingDataError
        If any figure lacks data (nothing is written then).
    """
    lines = latest(load_lines(results))
    problems = [p for fig in figures for p in check(fig, lines)]
    if allow_missing_baselines:
        problems = [p for p in problems if "neither measured nor skipped" not in p]
    if problems:
        raise MissingDataError("; ".join(problems))
    out_md = Path(out_md)
    rel = Path(_relpath(figures_dir, out_md.parent))
    cpu_rows = [r for r in lines if r.get("device") == "cpu" and r.get("status") == "ok"]
    gpu_rows = [r for r in lines if r.get("device") == "cuda" and r.get("status") == "ok"]
    md = ["# knngraph benchmark report", "",
          "Generated by `python -m benchmarks report" + (" --allow-missing-baselines" if allow_missing_baselines else "")
          + "` from the JSON lines in "
          + ", ".join(f"`{_relpath(p, out_md.parent)}`" for p in results)
          + ". Every number below is a field of one of those lines (or, in the summary tables, the best of "
            "them); nothing is typed in by hand. Timing protocol: a warm-up call first (its time is the "
            "'first call' column: JIT compilation), then the median of the timed calls; GPU work is "
            "synchronised before each clock read; searches answer all queries (10,000 for sift-photos, "
            "5,000 for minilm-words) in one call unless the batch column says otherwise (then each call is timed "
            "alone, the GPU synchronised before and after it, 'ms/call' is the median over calls, and a pass makes "
            "at most 1,000 calls, so batch 1 searches the first 1,000 queries, as the column says); build times are the "
            "median of the number of timed builds shown as (Nx), after an untimed warm-up build on the first "
            "20,000 rows (the CPU suite times its index builds once to stay near 30 minutes on 2 cores). "
            "Peak host memory is the benchmark process's resident-set peak (dataset included); peak GPU "
            "memory is what CuPy's pool and PyTorch's allocator held (resident data included). Recall definitions "
            "are those of `knngraph.evaluate` (the README's recall@k and graph recall: ties at the true k-th "
            "distance count as correct; distances of returned ids are recomputed in float64 for every method "
            "alike).", ""]
    md += _summary(figures, lines)
    for fig in figures:
        if unmeasured(fig, lines):
            md += _not_yet_measured(fig, lines)
            continue
        rows = _select(fig, lines)
        ok = [r for r in rows if r.get("status") == "ok"]
        png = draw(fig, ok, Path(figures_dir) / f"{fig.name}.png")
        md += [f"## {fig.title}", "", f"![{fig.name}]({(rel / png.name).as_posix()})", ""]
        lacking = missing_baselines(fig, lines)
        if lacking:
            md += [f"Not in these runs: {', '.join(lacking)} (cuVS was not installed where they ran; the suite "
                   f"measures its baselines in the same run wherever it is).", ""]
        md += _provenance(ok)
        if fig.kind in ("pareto", "batch", "latency"):
            md += [""] + _search_table(ok)
        else:
            md += [""] + _graph_table(ok)
        notes = _notes(rows)
        if notes:
            md += ["", "Not measured:"] + notes
        md.append("")
    md += _machines(cpu_rows, gpu_rows)
    out_md.parent.mkdir(parents=True, exist_ok=True)
    out_md.write_text("\n".join(md) + "\n")
    return out_md


#: graph recall@10 the out-of-core NN-Descent build must reach (the in-memory build's quality at a
#: quarter of the memory)
OOC_RECALL_TARGET = 0.95


def _summary(figures, lines) -> list[str]:
    md = ["## Summary", ""]
    pareto = [f for f in figures if f.kind == "pareto" and not unmeasured(f, lines)]
    if pareto:
        md += ["Highest measured queries per second at recall@10 >= 0.90 / 0.95 / 0.99 (search task, k=10, "
               "all queries in one call):", ""]
        body = []
        for fig in pareto:
            ok = [r for r in _select(fig, lines) if r.get("status") == "ok"]
            where = "CPU" if fig.device == "cpu" else "GPU"
            # a run of its own (a tag) names it: the same method may stand in two runs of the same data
            runs = "".join(f" ({t})" for t in fig.tags if t)
            tiers = [_best_at(ok, t) for t in (0.90, 0.95, 0.99)]
            for m in sorted({r["method"] for r in ok}):
                cells = []
                for tier in tiers:
                    r = tier.get(m)
                    cells.append(f"{_fmt(r['qps'])} ({_params(r.get('search_params')) or 'exact'})" if r else "-")
                body.append([fig.dataset + runs, where, m] + cells)
        md += _table(["dataset", "where", "method", "QPS @ 0.90", "QPS @ 0.95", "QPS @ 0.99"], body) + [""]
    for fig in (f for f in figures if f.kind == "latency" and not unmeasured(f, lines)):
        md += _latency_summary(fig, [r for r in _select(fig, lines) if r.get("status") == "ok"])
    builds = [f for f in figures if f.kind == "build" and not unmeasured(f, lines)]
    if builds:
        md += ["Fastest measured graph build (median time) reaching graph recall@10 >= 0.95 / 0.99:", ""]
        body = []
        for fig in builds:
            ok = [r for r in _select(fig, lines) if r.get("status") == "ok"]
            for m in sorted({r["method"] for r in ok}):
                cells = []
                for t in (0.95, 0.99):
                    hit = [r for r in ok if r["method"] == m and r["graph_recall@10"] >= t]
                    r = min(hit, key=lambda r: r["build_s"]) if hit else None
                    cells.append(f"{_fmt(r['build_s'])} s (recall {_fmt(r['graph_recall@10'], 4)})" if r else "-")
                body.append([fig.dataset, "CPU" if fig.device == "cpu" else "GPU", m, ok[0]["k"]] + cells)
        md += _table(["dataset", "where", "method", "k", "build @ 0.95", "build @ 0.99"], body) + [""]
    for fig in (f for f in figures if f.kind == "scaling" and not unmeasured(f, lines)):
        ok = [r for r in _select(fig, lines) if r.get("status") == "ok" and r["method"] == "knngraph-nndescent"]
        ooc = [r for r in ok if r.get("tag") == "ooc"]
        same = {m["n"]: m for m in ok if m.get("tag") == "scaling"}
        target = OOC_RECALL_TARGET
        for kind in sorted({(_ooc_strategy(r), _ooc_overlap(r)) for r in ooc}, key=str):
            r = max((r for r in ooc if (_ooc_strategy(r), _ooc_overlap(r)) == kind), key=lambda r: r["n"])
            info = r.get("info") or {}
            if kind[0] == "shard_pairs":
                how = f"shard pairs: {info.get('shards')} shards, {info.get('merges')} shard-pair merges"
            else:
                how = (f"clusters: {info.get('clusters')} k-means clusters, overlap {info.get('overlap')}, "
                       f"{info.get('pieces')} pieces of at most {info.get('piece_rows_max'):,} rows")
            md += [f"Out-of-core NN-Descent on the GPU (k={r['k']}, {how}), n = {r['n']:,} x {r['d']} {r['dtype']} "
                   f"({r['n'] * r['d'] * 4 / 1e9:.2f} GB) with memory_limit = "
                   f"{info.get('memory_limit_bytes', 0) / 1e9:.2f} GB (a quarter of the data): {_fmt(r['build_s'])} s, "
                   f"graph recall@10 {_fmt(r['graph_recall@10'], 4)} on {r['graph_recall_sample']} sampled nodes (peak "
                   f"GPU memory through CuPy {r['peak_gpu_bytes'] / 1e9:.2f} GB, peak host memory "
                   f"{r['peak_host_bytes'] / 1e9:.1f} GB). The out-of-core target of graph recall@10 >= {target} "
                   f"is {'met' if r['graph_recall@10'] >= target else 'not met'}."
                   + (f" The same data built in GPU memory: {_fmt(same[r['n']]['build_s'])} s, graph recall@10 "
                      f"{_fmt(same[r['n']]['graph_recall@10'], 4)}." if r["n"] in same else ""), ""]
    return md


def _latency_summary(fig, ok, thresholds=(0.90, 0.95, 0.99)) -> list[str]:
    """Milliseconds per call at each batch size: for each method and recall floor, the fastest measured
    setting whose recall@10 reaches it (searchers compare only at the same recall)."""
    sizes = sorted({r.get("batch_size") or r["nq"] for r in ok})
    if not sizes:
        return []
    body = []
    for t in thresholds:
        for m in sorted({r["method"] for r in ok}):
            cells = []
            for b in sizes:
                hit = [r for r in ok if r["method"] == m and (r.get("batch_size") or r["nq"]) == b
                       and (r.get(f"recall@{r['k']}") or 0) >= t]
                r = min(hit, key=call_seconds) if hit else None
                cells.append(f"{_fmt(call_seconds(r) * 1e3)} ({_params(r.get('search_params')) or 'exact'})" if r else "-")
            body.append([f"{t:.2f}", m] + cells)
    return ([f"{fig.dataset}, GPU: milliseconds per search call (median over calls, each call synchronised) at "
             "each batch size, for the fastest setting reaching the recall@10 floor (\"-\": no setting reached it):",
             ""] + _table(["recall@10 >=", "method"] + [f"batch {b:,}" for b in sizes], body) + [""])


def _machines(cpu_rows, gpu_rows) -> list[str]:
    md = ["## Machines", ""]
    for label, rows in (("CPU runs", cpu_rows), ("GPU runs", gpu_rows)):
        if not rows:
            continue
        env = rows[-1].get("env") or {}
        md.append(f"- {label}: {env.get('cpu')}, {env.get('cpu_count')} cores, "
                  f"{_gib(env.get('host_memory_bytes'))} GiB RAM, GPU: {env.get('gpu') or 'none'}; "
                  f"{env.get('platform')}; threads used: {sorted({r.get('threads') for r in rows})}")
    md += ["", "The CPU machine is shared with other work, so CPU timings carry noise of a few tens of percent; "
               "compare methods measured in the same run."]
    return md


def _relpath(path, start) -> str:
    import os

    return os.path.relpath(Path(path).resolve(), Path(start).resolve())
