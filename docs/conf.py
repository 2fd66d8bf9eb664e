"""Sphinx configuration of the knngraph documentation.

Build (CONTRIBUTING.md): ``python -m sphinx -W -b html docs docs/_build/html`` with the ``docs`` extra
installed. The build reads nothing from the network (no intersphinx): references to NumPy, SciPy or
scikit-learn are plain text. The API reference is generated from the numpydoc docstrings (autodoc +
napoleon) of the package in ``src/``, imported from the checkout, so the docs describe the code next to
them even where the package is installed elsewhere.
"""

import importlib.util
import os
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "src"))
import numba  # noqa: E402,F401  (imported before any stand-in below: numba checks the SciPy it finds)

import knngraph  # noqa: E402

project = "knngraph"
copyright = "the knngraph contributors, Apache-2.0"
author = "the knngraph contributors"
release = knngraph.__version__
version = ".".join(release.split(".")[:2])

extensions = ["sphinx.ext.autodoc", "sphinx.ext.napoleon"]

exclude_patterns = ["_build", ".gitignore"]
root_doc = "index"
source_suffix = {".rst": "restructuredtext"}

# numpydoc docstrings
napoleon_google_docstring = False
napoleon_numpy_docstring = True
napoleon_use_rtype = False
napoleon_use_param = False
napoleon_use_ivar = True

autodoc_default_options = {"members": True}
# the pages of knngraph.distributed and knngraph.sklearn import Dask, scikit-learn and SciPy; where the docs
# extra is installed without them, autodoc reads those modules against stand-ins instead of failing
autodoc_mock_imports = [m for m in ("dask", "distributed", "sklearn", "scipy") if importlib.util.find_spec(m) is None]
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_preserve_defaults = True
# the signatures name the aliases of knngraph._typing, not what they stand for
autodoc_type_aliases = {name: f"knngraph._typing.{name}"
                        for name in ("Array", "DeviceLike", "Devices", "MemoryLimit", "PathLike", "FileTarget")}

html_theme = "alabaster"
html_theme_options = {"description": "k-NN graphs and nearest-neighbour search on NVIDIA GPUs and CPUs",
                      "page_width": "1100px", "sidebar_width": "240px"}
html_static_path = []
html_show_sourcelink = False

# a public name is documented where users import it (knngraph.KNNResult, knngraph.song.IndexParams) and
# recorded under its defining module too (autodoc's canonical names), and words such as "shape" in the
# numpydoc type fields are tried as references: Sphinx links the first match of such an ambiguous name,
# which is what is wanted, so its "more than one target" notice is not an error
suppress_warnings = ["ref.python"]
