"""The command line reports the speed of the work itself: in a new process the first kernel call loads
numba's compiled kernels (and builds nothing), which the commands time in a warm-up call and report apart
(``load_seconds``), so that no kernel is loaded while the call they report runs
(:func:`knngraph.cli.common.warm_up`)."""

import json
import subprocess
import sys

import numpy as np
import pytest

import knngraph
from knngraph import song


# Run in a new process: the command line with a probe that notes every kernel numba adds to a dispatcher
# (compiled, or loaded from its disk cache) and the moments the command's timers start and stop.
_PROBE = r"""
import json, sys, time
from numba.core.dispatcher import Dispatcher
import knngraph.cli.common as common

added, marks = [], []
add_overload = Dispatcher.add_overload
def noting_add_overload(self, cres, *args, **kwargs):
    added.append((time.perf_counter(), getattr(self.py_func, "__qualname__", "?")))
    return add_overload(self, cres, *args, **kwargs)
Dispatcher.add_overload = noting_add_overload
enter, exit_ = common.Timer.__enter__, common.Timer.__exit__
def noting_enter(self):
    marks.append(("start", time.perf_counter()))
    return enter(self)
def noting_exit(self, *exc):
    marks.append(("stop", time.perf_counter()))
    return exit_(self, *exc)
common.Timer.__enter__, common.Timer.__exit__ = noting_enter, noting_exit

from knngraph.cli import main
status = main(sys.argv[1:])
start = max(t for m, t in marks if m == "start")  # the timed call's timer starts last, after the warm-up's
stop = max(t for m, t in marks if m == "stop")
print(json.dumps({"status": status, "kernels_added": len(added),
                  "added_while_timed": [name for t, name in added if start <= t <= stop],
                  "timer_order": stop > start}), file=sys.stderr)
"""


def _cli_json(*args) -> tuple[dict, dict]:
    """``knngraph ARGS --json`` in a new process (a user's run: nothing loaded yet): its JSON object, and
    the probe's record of the kernels numba added in that process and those added while the command's
    timed call ran."""
    done = subprocess.run([sys.executable, "-c", _PROBE, *args, "--json", "--quiet", "--device", "cpu"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    probe = json.loads(done.stderr.strip().splitlines()[-1])
    assert probe["status"] == 0 and probe["timer_order"], probe
    return json.loads(done.stdout.strip().splitlines()[-1]), probe


def _check_timed_call_loads_nothing(payload: dict, probe: dict, seconds_key: str) -> None:
    """The process loaded kernels (its first kernel call did), and none while the command's timed call ran:
    the warm-up call took them all, so the figure is the search's own. Before the warm-up call the figure
    counted loading the kernels, 15-60x below the search's speed. How the figure compares with a search in
    a warm process is measured by the benchmark ``benchmarks/studies/cpu_defaults.py`` (part 'cli'), not
    here: two timings on a machine that other work shares make no test."""
    assert probe["kernels_added"] > 0, probe
    assert probe["added_while_timed"] == [], probe
    assert payload[seconds_key] > 0 and payload["queries_per_second"] == pytest.approx(
        payload["n_queries"] / payload[seconds_key])
    assert payload["warmup_queries"] == 64


@pytest.fixture(scope="module")
def sample_files(tmp_path_factory, sample):
    """The bundled sample as files, and a SONG index of it (the CPU's default build) saved beside them."""
    folder = tmp_path_factory.mktemp("cli_throughput")
    knngraph.io.write(str(folder / "base.u8bin"), sample.base)
    np.save(folder / "queries.npy", sample.queries)
    index = song.build(song.IndexParams(), sample.base, device="cpu", verbose=False)
    song.save(str(folder / "base.song"), index)
    return folder, index


def test_search_reports_the_queries_per_second_of_the_search(sample_files, sample):
    folder, index = sample_files
    payload, probe = _cli_json("search", str(folder / "base.song"), str(folder / "queries.npy"), "-k", "10",
                               "--out", str(folder / "ids.npy"))
    _check_timed_call_loads_nothing(payload, probe, "search_seconds")
    assert payload["search_load_seconds"] > 0
    ids = np.load(folder / "ids.npy")
    np.testing.assert_array_equal(ids, song.search(index, sample.queries, 10, device="cpu", verbose=False)[1])


def test_knn_reports_the_queries_per_second_of_the_search(sample_files, sample):
    folder, _ = sample_files
    payload, probe = _cli_json("knn", str(folder / "base.u8bin"), str(folder / "queries.npy"), "-k", "10",
                               "--out", str(folder / "exact.npy"))
    _check_timed_call_loads_nothing(payload, probe, "seconds")
    assert payload["load_seconds"] > 0
    ids = knngraph.knn(sample.base, sample.queries, 10, device="cpu", verbose=False)[1]
    np.testing.assert_array_equal(np.load(folder / "exact.npy"), ids)
