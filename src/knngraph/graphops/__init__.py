"""Operations on neighbour graphs that every algorithm may use (they sit on :mod:`knngraph.primitives`
and never on an algorithm):

* :func:`optimize_graph`: diversity (RNG) pruning with reverse edges to a fixed out-degree, which turns
  any builder's k-NN graph into a search graph;
* :func:`reverse_edges`: for each node, the nodes pointing at it;
* :func:`default_entry_points` / :func:`medoid`: where graph searches start;
* :func:`connect_graph`: every vertex reachable from the entry points (links the components a k-NN graph
  of separated clusters falls into); :func:`reachable` / :func:`unreachable_count` check it;
* :func:`merge_sorted_lists` / :func:`merge_topk`: top-k merge of partial results (sharded searches,
  per-cluster builds, graph merges).

CPU and GPU implementations of the kernels are :mod:`knngraph.graphops.cpu` and
:mod:`knngraph.graphops.cuda` (the library's dispatch idiom, :func:`knngraph._device.implementation`).
"""

from .connect import UnreachableVerticesWarning, connect_graph, reachable, unreachable_count, warn_unreachable
from .entry_points import default_entry_points, medoid
from .merge import merge_sorted_lists, merge_topk
from .prune import occlusion_factor, optimize_graph
from .reverse import reverse_edges

__all__ = ["optimize_graph", "occlusion_factor", "reverse_edges", "default_entry_points", "medoid",
           "merge_sorted_lists", "merge_topk", "connect_graph", "reachable", "unreachable_count", "warn_unreachable",
           "UnreachableVerticesWarning"]
