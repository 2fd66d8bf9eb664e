"""Compile every GPU kernel to PTX for sm_90 on a machine without a GPU, to compare code generation.

    python scripts/kernel_ptx.py OUT_DIR [NAME_PART]  # needs numba-cuda with NVVM (pip install numba-cuda[cu13])
    KNNGRAPH_SRC=../old/src python scripts/kernel_ptx.py before/      # the same for another checkout
    diff before/summary.txt OUT_DIR/summary.txt   # same PTX: the change cannot have moved kernel speed

With ``ptxas`` on PATH or from pip's ``nvidia-cuda-nvcc`` package, each line also gives registers, stack
frame, spill bytes and shared memory (with the register caps the library launches with).

Each kernel is compiled for a few representative argument signatures (the types the library's launches
pass: C-contiguous arrays, int64 scalars). Symbol names are normalised (numba mangles the module path into
them and numbers shared arrays process-wide), comments are dropped, and ``summary.txt`` lists a hash per kernel, so a refactor that moves code
between modules but leaves the generated code alone shows no difference.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
import time
from pathlib import Path

# KNNGRAPH_SRC: another checkout's src/ (e.g. a worktree of the commit before a change)
sys.path.insert(0, os.environ.get("KNNGRAPH_SRC") or str(Path(__file__).resolve().parents[1] / "src"))

from numba import cuda, types  # noqa: E402

A = types.Array
f64, f32, f16, i32, i64, u8, u32, u64 = (types.float64, types.float32, types.float16, types.int32, types.int64,
                                         types.uint8, types.uint32, types.uint64)


def arr(dtype, ndim=2):
    return A(dtype, ndim, "C")


#: registers per thread the library caps kernels at (ptxas -maxrregcount), by case-name prefix
REGISTER_CAPS = {"nnd_join": 64, "nnd_init": 64, "beam": 64, "ggnn_search": 128, "ggnn_merge": 128, "ggnn_sym": 128}


def kernels():
    """(name, python function, signature) for every kernel the library launches."""
    import importlib.util

    if importlib.util.find_spec("knngraph.primitives") is None:
        return _legacy_kernels()
    from knngraph.graphops import _kernels as go
    from knngraph.nndescent import _kernels as nk
    from knngraph.primitives import _kselect_kernels as sk
    from knngraph.primitives import _rescore_kernel as rf
    from knngraph.song import _kernels as gk

    return (_cases(sk, rf, nk, gk, prune=go.prune_kernel, merge_lists=go.merge_lists_kernel) + _beam_cases()
            + _grnnd_cases() + _ggnn_cases())


def _ggnn_cases():
    """GGNN's search kernel (uint8 vectors, the default cache: best 10, queue 64, ring 182) and its build's
    merge (best 24, queue 32, ring 64) and path-search (symmetric linking) kernels on float32 vectors, and
    the cooperative kernel that places the inverse links."""
    import importlib.util

    if importlib.util.find_spec("knngraph.ggnn") is None:
        return []
    from knngraph.ggnn import _kernels as gg
    from knngraph.ggnn import _link_kernels as lk

    return [("ggnn_search_u8", gg.search_kernel(10, 64, 182).py_func,
             (arr(i32), arr(u8), arr(f32), arr(f32, 1), arr(f32, 1), i64, arr(i32, 1), i64, f32, f32, i64, arr(f32),
              arr(i32), arr(i32, 1), arr(i32, 1))),
            ("ggnn_merge_f32", gg.merge_kernel(24, 32, 64).py_func,
             (arr(f32), arr(f32, 1), i64, arr(i32), arr(i32, 1), arr(i32, 1), i64, i64, i64, arr(i32, 1), i64, i64,
              i64, f32, f32, i64, arr(i32), arr(f32))),
            ("ggnn_sym_f32", gg.sym_kernel(12, 32, 64, 8, 20, 0.4).py_func,
             (arr(f32), arr(f32, 1), i64, arr(i32), arr(i32, 1), i64, i64, i64, i64, i64, arr(i32), arr(i32, 1), f32,
              f32, arr(i32, 3), arr(f32, 3), arr(i32))),
            ("ggnn_place", lk.place_kernel.py_func,
             (arr(i32), i64, i64, arr(i32), arr(f32), arr(i32, 1), i64, i64, arr(i32, 1), i64, arr(i32, 3),
              arr(f32, 3), arr(i32), arr(i32, 1), arr(i32, 3), arr(i32, 3), arr(i32, 1)))]


def _grnnd_cases():
    """GRNND's propose kernel (float32 and uint8 vectors, pools of 64; the rows also as the 64-bit words
    that ``grnnd.cuda.row_layout`` passes, read with dp4a for uint8) and merge kernel."""
    from knngraph.grnnd import _kernels as rk

    out = []
    for label, xt in (("f32", f32), ("u8", u8)):
        out.append((f"grnnd_propose_{label}_c64", rk.propose_kernel(64).py_func,
                    (arr(xt), arr(u64), i64, arr(f32, 1), i64, i64, i64, f32, arr(i32), arr(f32), arr(i32, 1),
                     arr(i32), arr(i32), arr(f32), arr(i32, 1))))
    out.append(("grnnd_merge_c64", rk.merge_kernel(64).py_func,
                (arr(i32, 1), arr(f32, 1), arr(i64, 1), i64, arr(i32), arr(f32), arr(i32, 1))))
    return out


def _beam_cases():
    """The fast searcher (``beam/_kernels``) in every distance mode: dp4a on 8-bit words (uint8, int8),
    float16 read four or two halves at a time (minilm-words' dim 384; an even dim) and element by element (an
    odd dim), float32, 8-bit vectors with float queries; warp per query and block per query (width 4); with
    GGNN's slack stop and with a filter (bitset) on uint8."""
    import numpy as np

    from knngraph.primitives.distances import DIST_COS, DIST_L2SQ
    from knngraph.beam import _kernels as bk
    from knngraph.beam.cuda import beam_config, beam_mode

    i8 = types.int8
    out = []
    for label, base_dtype, query_dtype, dim in (("u8", np.uint8, np.uint8, 128), ("i8", np.int8, np.int8, 64),
                                                ("f16", np.float16, np.float32, 384),
                                                ("f16x2", np.float16, np.float32, 66),
                                                ("f16odd", np.float16, np.float32, 33),
                                                ("f32", np.float32, np.float32, 96), ("f32x2", np.float32, np.float32, 98),
                                                ("u8fq", np.uint8, np.float32, 128)):
        mode = beam_mode(base_dtype, query_dtype, dim)
        base_t = arr({bk.MODE_DP4A_U8: u32, bk.MODE_DP4A_I8: u32, bk.MODE_HALF4: u64, bk.MODE_F32X2: u64, bk.MODE_HALF2: u32}.get(
            mode, {np.uint8: u8, np.int8: i8, np.float16: f16, np.float32: f32}[base_dtype]))
        q_t = arr(u32) if mode in (bk.MODE_DP4A_U8, bk.MODE_DP4A_I8) else arr(f32)
        cases = ((24, 1, False), (64, 1, False), (24, 4, False)) if label in ("u8", "f16", "f32") else \
            ((24, 1, False), (24, 4, False))
        cases = tuple(c + (False,) for c in cases)
        if label == "u8":  # GGNN's slack stop (ggnn.search with cache='sorted'); filtered searches
            cases += ((128, 1, True, False), (128, 4, True, False), (128, 1, False, True), (128, 4, False, True))
        for qs, width, slack, filtered in cases:
            kern, _ = beam_config(qs, dim, mode, DIST_COS if label.startswith("f16") else DIST_L2SQ, width=width,
                                  slack=slack, filtered=filtered)
            # ..., kb, tau, nn1, max_exp, allowed (the bitset of a filtered kernel, else the query counter: unread)
            name = f"beam_{label}_q{qs}_w{width}" + ("_slack" if slack else "") + ("_filtered" if filtered else "")
            out.append((name, kern.py_func,
                        (arr(i32), base_t, q_t, arr(f32, 1), arr(i32, 1), i64, i64, i64, arr(i32, 1), arr(f32),
                         arr(i32), arr(i32, 1), arr(i32, 1), i64, f64, f64, i64, arr(u32 if filtered else i32, 1))))
    return out


def _legacy_kernels():
    """The same table, before the module contract refactor (modules as of a30c331)."""
    from knngraph.bruteforce import _refine as rf
    from knngraph.bruteforce import _select_kernels as sk
    from knngraph.nndescent import _kernels as nk
    from knngraph.song import _kernels as gk

    return _cases(sk, rf, nk, gk, prune=gk.prune_kernel, merge_lists=nk.merge_lists_kernel)


def _cases(sk, rf, nk, gk, *, prune, merge_lists):
    out = []
    sel_args = lambda dots: (i64, i64, i64, i64, i64, arr(dots), arr(f32, 1), f32, i64, i64, arr(f32), arr(i32),  # noqa: E731
                             arr(f32), arr(i32), i64, arr(f32), arr(i32))
    for dots in (f32, i32):
        for src in (sk.SRC_DOTS, sk.SRC_PAIRS):
            out.append((f"warp_filter_cap64_src{src}_{dots}", sk.warp_filter_kernel(64, src).py_func, sel_args(dots)))
    out.append(("quickselect_f32", sk.quickselect_kernel.py_func,
                (i64, i64, i64, i64, i64, i64, arr(f32), arr(f32, 1), f32, i64, i64, arr(f32), arr(i32), arr(f32),
                 arr(i32), arr(f32), arr(i32), arr(f32), arr(i32))))
    if hasattr(rf, "rescore_rows_kernel"):  # float64 rescoring of the exact search's candidates
        out.append(("rescore_rows_f32", rf.rescore_rows_kernel.py_func,
                    (arr(f32), arr(f32), arr(i32), arr(types.float64), arr(i32), i64)))
    else:
        out.append(("refine_rows_f32", rf.refine_rows_kernel.py_func,
                    (arr(f32), arr(f32), arr(i32), arr(f32), arr(i32), i64)))
    for dt in (u8, f32):
        out.append((f"nnd_init_{dt}", nk.init_kernel(64).py_func,
                    (arr(dt), arr(f32, 1), i64, arr(f32), arr(i32), arr(u8), i64, i64, i64)))
    out.append(("nnd_sample", nk.sample_kernel.py_func,
                (arr(i32), arr(u8), i64, i64, arr(i32), arr(i32, 1), arr(i32), arr(i32, 1), arr(i32), arr(i32, 1),
                 arr(i32), arr(i32, 1))))
    for dt, packed in ((f32, 0), (u8, 1), (f16, 0)):
        out.append((f"nnd_join_{dt}_packed{packed}", nk.join_kernel(32, "lock", 64, 64, packed, 32).py_func,
                    (arr(dt), arr(f32, 1), i64, arr(f32), arr(i32), arr(u8), arr(i32), arr(i32, 1), arr(i32),
                     arr(i32, 1), arr(i32), arr(i32, 1), arr(i32), arr(i32, 1), i64, i64, arr(u64), arr(i32, 1),
                     arr(i64, 1), arr(i32 if packed else dt), arr(f32, 1))))
    out.append(("nnd_merge_candidates", nk.merge_kernel(64).py_func,
                (arr(f32), arr(i32), arr(u8), arr(u64), arr(i64, 1))))
    out.append(("nnd_merge_lists", merge_lists(128).py_func,
                (arr(f32), arr(i32), arr(f32), arr(i32), arr(f32), arr(i32))))
    for qcap, mode, base_t in ((32, gk.MODE_PACKED_U8, arr(u32)), (64, gk.MODE_PACKED_U8, arr(u32)),
                               (64, gk.MODE_GENERIC, arr(f32)), (64, gk.MODE_GENERIC, arr(f16))):
        dpad = 128 if mode == gk.MODE_PACKED_U8 else 128
        for filtered in (False, True) if (qcap, mode) == (64, gk.MODE_GENERIC) else (False,):
            fn = gk.search_kernel(qcap, False, 4 * qcap, dpad, mode, 4, None, filtered).py_func
            out.append((f"song_search_q{qcap}_mode{mode}_{base_t.dtype}" + ("_filtered" if filtered else ""), fn,
                        (arr(i32), base_t, arr(f32), arr(f32, 1), arr(f32, 1), i64, arr(i32, 1), i64, i64, i64, i64,
                         arr(u32, 1), arr(i32, 1), arr(f32), arr(i32), arr(i32, 1), arr(i32, 1))))
    out.append(("song_prune_u8", prune(192, 32, 4).py_func,
                (arr(u8), arr(f32, 1), i64, types.float64, arr(i32), arr(i32), arr(i32), i64, types.boolean,
                 arr(i32), arr(f32))))
    return out


def _pretend_sm90():
    """Device functions compile for "the current device": with no GPU, say it is an sm_90 one."""
    import types as pytypes

    from numba.cuda import dispatcher

    fake = pytypes.SimpleNamespace(compute_capability=(9, 0))
    dispatcher.get_current_device = lambda: fake


def _find_ptxas():
    """pip's ptxas first (the same CUDA release as the NVVM that wrote the PTX), else one on PATH."""
    import shutil

    try:
        import nvidia

        for root in nvidia.__path__:
            for cand in Path(root).glob("**/bin/ptxas"):
                return str(cand)
    except ImportError:
        pass
    return shutil.which("ptxas")


def _resources(ptxas: str, ptx: str, cap) -> str:
    """ptxas -v's registers, spill bytes and shared memory of the (single) entry, as 'regs=.. spill=..'."""
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "k.ptx"
        src.write_text(ptx)
        cmd = [ptxas, "-arch=sm_90", "-v", "-o", str(Path(tmp) / "k.cubin"), str(src)]
        if cap:
            cmd.insert(1, f"-maxrregcount={cap}")
        res = subprocess.run(cmd, capture_output=True, text=True)
    log = res.stderr
    regs = re.search(r"Used (\d+) registers", log)
    spill = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)
    smem = re.search(r"(\d+) bytes smem", log)
    stack = re.search(r"(\d+) bytes stack frame", log)
    return (f"regs={regs.group(1) if regs else '?'} stack={stack.group(1) if stack else '?'} "
            f"spill={spill.group(1) + '/' + spill.group(2) if spill else '?'} smem={smem.group(1) if smem else '0'}")


def normalise(ptx: str) -> str:
    lines = []
    names: dict = {}
    for line in ptx.splitlines():
        if line.strip().startswith("//"):
            continue
        line = re.sub(r"_Z\w+|_cudapy_smem_\d+", lambda m: names.setdefault(m.group(0), f"SYM{len(names)}"), line)
        lines.append(line)
    return "\n".join(lines) + "\n"


def main():
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "ptx")
    only = sys.argv[2] if len(sys.argv) > 2 else ""
    out.mkdir(parents=True, exist_ok=True)
    _pretend_sm90()
    try:
        cases = kernels()
    except ImportError:
        cases = _legacy_kernels()
    summary = []
    ptxas = _find_ptxas()
    for name, fn, sig in cases:
        if only not in name:
            continue
        t0 = time.perf_counter()
        ptx, _ = cuda.compile_ptx(fn, sig, cc=(9, 0))
        seconds = time.perf_counter() - t0
        text = normalise(ptx)
        (out / f"{name}.ptx").write_text(text)
        line = f"{name} {hashlib.sha256(text.encode()).hexdigest()[:16]} {len(text.splitlines())}"
        if ptxas:
            cap = next((v for k, v in REGISTER_CAPS.items() if name.startswith(k)), None)
            line += " " + _resources(ptxas, ptx, cap)
        summary.append(line)
        print(f"{line}  [{seconds:.1f} s to PTX]", flush=True)
    (out / "summary.txt").write_text("\n".join(summary) + "\n")


if __name__ == "__main__":
    main()
