"""Which clients' XTransfer models can be averaged: same structure, classes and shapes.

Each subject's search picks its own chain of source layers and prunes its own
channels, so two recombined models share an architecture only when the chosen
layers, the class set their linear heads map to and every parameter's shape
agree. FedAvg (McMahan et al. 2017) is defined within such a group only; a
client alone in its group keeps its local model.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence


def signature(structure: str, classes: Sequence[int], shapes: Mapping[str, Sequence[int]]) -> str:
    """A short digest of what must agree for two models to be averaged.

    Examples
    --------
    >>> a = signature("minilm_0", [0, 1], {"w": (2, 3)})
    >>> a == signature("minilm_0", [0, 1], {"w": [2, 3]})
    True
    >>> a == signature("minilm_0", [0, 2], {"w": (2, 3)})
    False
    """
    text = json.dumps(
        {"structure": structure, "classes": [int(c) for c in classes],
         "shapes": sorted((k, [int(d) for d in v]) for k, v in shapes.items())},
        sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def groups(signatures: Mapping[int, str], min_size: int = 2) -> list[list[int]]:
    """Client ids sharing a signature, groups of at least ``min_size``, largest first.

    Ties in size are ordered by their smallest client id, so the order (and the
    seeds derived from a group's index) does not depend on reply order.

    Examples
    --------
    >>> groups({0: "a", 1: "b", 2: "a", 3: "c", 4: "b", 5: "a"})
    [[0, 2, 5], [1, 4]]
    """
    if min_size < 1:
        raise ValueError(f"min_size must be >= 1, got {min_size}")
    by_sig: dict[str, list[int]] = {}
    for pid in sorted(signatures):
        by_sig.setdefault(signatures[pid], []).append(pid)
    found = [ids for ids in by_sig.values() if len(ids) >= min_size]
    return sorted(found, key=lambda ids: (-len(ids), ids[0]))
