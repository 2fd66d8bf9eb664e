"""Shared fixtures of the fast searcher's tests."""

import pytest

import knngraph
from knngraph import nndescent, song


@pytest.fixture(scope="module")
def nnd_index(sample):
    """A SONG index over an NN-Descent graph of the 20k sample, prepared (the ``query()`` recipe)."""
    g = nndescent.build(nndescent.IndexParams(graph_degree=32), sample.base, device="cpu", verbose=False).graph
    prepared = knngraph.optimize_graph(g, sample.base, graph_degree=24, device="cpu", verbose=False)
    return song.from_graph(prepared, sample.base, device="cpu", verbose=False)
