"""The one speed trick kept for building frozen dataclasses on the hot path (#32).

The protocol core builds a :class:`CachedResource` per arrived resource and a
:class:`ResourceUpdated` per resource a watcher takes: 10,000 of each for a SotW push
of 10,000 clusters. A frozen dataclass's ``__init__`` sets each field with
``object.__setattr__``; per 7-field event (measured, CPU time, 100,000 builds):

- the dataclass's ``__init__``: about 1,240 ns;
- ``object.__new__`` and the slots' own setters: about 670 ns;
- a mutable twin (below), filled and then given the frozen class: about 290 ns.

Two objects per resource at the dataclass's price put the SotW push rows about 7% worse
in their SDK/raw ratio; the twin holds them. ``docs/performance.md`` ("Lazy imports
and import costs", and the #32 notes) has the numbers.
"""

from __future__ import annotations

import types
from typing import Any

__all__ = ["mutable_twin"]


def mutable_twin(final: type) -> type[Any] | None:
    """A class with the slots of the slotted frozen dataclass ``final`` and none of its
    frozen setters: an instance is filled by plain attribute stores, then becomes a
    ``final`` by ``__class__`` assignment (same slots, same layout). Made by calling it
    (it has no ``__init__``).

    None where the interpreter refuses the assignment: callers then build ``final``
    through its slot setters.
    """
    slots = vars(final)["__slots__"]
    bases = vars(final).get("__orig_bases__", final.__bases__)  # the same layout: Generic[M]
    twin: type[Any] = types.new_class(
        f"_{final.__name__}Twin",
        bases,
        exec_body=lambda namespace: namespace.update(__slots__=slots),
    )
    try:
        probe = twin()
        probe.__class__ = final
    except TypeError:
        return None
    return twin
