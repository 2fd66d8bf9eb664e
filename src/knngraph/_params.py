"""Declarative parameter constraints for the frozen, keyword-only params dataclasses.

Each algorithm's ``IndexParams`` / ``SearchParams`` is a ``@dataclass(frozen=True, kw_only=True)`` that
subclasses :class:`Params` and lists its rules in ``_constraints``; ``__post_init__`` checks them and
raises a message naming the field, the allowed values and the value given (scikit-learn style).
"""

from __future__ import annotations

import collections.abc
import dataclasses
import math
import numbers

import numpy as np

from ._device import parse_memory
from .metrics import canonical_metric

__all__ = ["Interval", "Options", "Boolean", "Mapping", "GraphBuilder", "Params", "MemoryLimit", "Metric"]


@dataclasses.dataclass(frozen=True)
class Interval:
    """A number in [low, high] (None = unbounded); ``integer`` requires an int."""

    low: float | None = None
    high: float | None = None
    integer: bool = True
    allow_none: bool = False

    def check(self, owner: str, field: str, value):
        if value is None and self.allow_none:
            return value
        kind = numbers.Integral if self.integer else numbers.Real
        lo = "-inf" if self.low is None else self.low
        hi = "inf" if self.high is None else self.high
        what = "an int" if self.integer else "a finite number"
        # written so that NaN fails every comparison; infinities are refused for float parameters
        if isinstance(value, bool) or not isinstance(value, kind) or not math.isfinite(value) or \
                (self.low is not None and not value >= self.low) or (self.high is not None and not value <= self.high):
            raise ValueError(f"The {field!r} parameter of {owner} must be {what} in the range [{lo}, {hi}]"
                             f"{' or None' if self.allow_none else ''}. Got {value!r} instead.")
        return int(value) if self.integer else float(value)


@dataclasses.dataclass(frozen=True)
class Options:
    """One of a fixed set of strings."""

    values: tuple

    def check(self, owner: str, field: str, value):
        if value not in self.values:
            raise ValueError(f"The {field!r} parameter of {owner} must be one of "
                             f"{{{', '.join(repr(v) for v in self.values)}}}. Got {value!r} instead.")
        return value


@dataclasses.dataclass(frozen=True)
class Boolean:
    """True or False (NumPy booleans accepted), stored as a Python bool; with ``allow_none`` also None."""

    allow_none: bool = False

    def check(self, owner: str, field: str, value):
        if value is None and self.allow_none:
            return value
        if not isinstance(value, (bool, np.bool_)):
            raise ValueError(f"The {field!r} parameter of {owner} must be True or False"
                             f"{' or None' if self.allow_none else ''}. Got {value!r} instead.")
        return bool(value)


class Mapping:
    """None or a mapping of parameter names (str) to values; stored as a plain dict (or None)."""

    def check(self, owner: str, field: str, value):
        if value is None:
            return None
        if not isinstance(value, collections.abc.Mapping) or not all(isinstance(k, str) for k in value):
            raise ValueError(f"The {field!r} parameter of {owner} must be None or a dict of parameter names to "
                             f"values. Got {value!r} instead.")
        return dict(value)


@dataclasses.dataclass(frozen=True)
class GraphBuilder:
    """The name of a graph builder of :mod:`knngraph.registry`; with ``auto``, also 'auto' (listed last)."""

    auto: bool = False

    def check(self, owner: str, field: str, value):
        from .registry import graph_builders

        names = graph_builders() + (("auto",) if self.auto else ())
        if value not in names:
            raise ValueError(f"The {field!r} parameter of {owner} must be one of "
                             f"{{{', '.join(repr(v) for v in names)}}}. Got {value!r} instead.")
        return value


class Metric:
    """A metric name (aliases accepted, stored canonical)."""

    def check(self, owner: str, field: str, value):
        try:
            return canonical_metric(value)
        except ValueError as exc:
            raise ValueError(f"The {field!r} parameter of {owner}: {exc}") from None


class MemoryLimit:
    """None (automatic) or a byte count / size string; stored as int bytes or None."""

    def check(self, owner: str, field: str, value):
        return parse_memory(value)


class Params:
    """Base class: runs ``_constraints`` on construction and stores normalised values."""

    _constraints: dict = {}

    def __post_init__(self):
        owner = type(self).__name__
        for field, rule in self._constraints.items():
            value = rule.check(owner, field, getattr(self, field))
            object.__setattr__(self, field, value)
