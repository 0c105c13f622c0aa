"""The ``sweep:`` block's schema: validate it and list its points' assignments."""

from __future__ import annotations

import itertools
import re
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from flowerbed.core.scenario import ScenarioError

RESERVED = ("name", "grid", "zip", "seeds")
_KEY_RE = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")

Axis = list[dict[str, Any]]


def _check_key(key: str) -> str:
    if not _KEY_RE.match(key):
        raise ValueError(f"{key!r} is not a dotted scenario key (e.g. partition.alpha)")
    if key.split(".")[0] == "sweep":
        raise ValueError(f"{key!r}: a sweep cannot sweep itself")
    return key


class SweepSpec(BaseModel):
    """The ``sweep:`` block of a scenario file: strict, frozen, no unknown reserved keys.

    Attributes
    ----------
    name
        Folder of the sweep under the output dir (default ``<scenario>-sweep``).
    grid
        Dotted key to value list; axes combine as a cartesian product. Keys
        written directly in the block (not under a reserved name) land here.
    zip
        Groups of keys whose value lists have equal length and vary together.
    seeds
        Root seeds, the innermost axis (sets the scenario's ``seed``).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str | None = Field(None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    grid: dict[str, list[Any]] = Field(default_factory=dict)
    zip: list[dict[str, list[Any]]] = Field(default_factory=list)
    seeds: list[Annotated[int, Field(ge=0)]] | None = None

    @model_validator(mode="before")
    @classmethod
    def _bare_keys_are_grid(cls, data: Any) -> Any:
        """``partition.alpha: [..]`` directly in the block is a grid axis."""
        if not isinstance(data, dict):
            return data
        bare = {k: v for k, v in data.items() if k not in RESERVED}
        if not bare:
            return data
        grid = dict(data.get("grid") or {}) if isinstance(data.get("grid"), dict) else {}
        for key in bare:
            if key in grid:
                raise ValueError(f"{key!r} is given both directly and under grid")
        rest = {k: v for k, v in data.items() if k in RESERVED}
        return {**rest, "grid": {**grid, **bare}}

    @field_validator("grid")
    @classmethod
    def _grid_axes(cls, grid: dict[str, list[Any]]) -> dict[str, list[Any]]:
        for key, values in grid.items():
            _check_key(key)
            if not values:
                raise ValueError(f"{key!r} has an empty value list")
        return grid

    @field_validator("zip")
    @classmethod
    def _zip_groups(cls, groups: list[dict[str, list[Any]]]) -> list[dict[str, list[Any]]]:
        for i, group in enumerate(groups):
            if not group:
                raise ValueError(f"zip group {i} is empty")
            for key in group:
                _check_key(key)
            lengths = {k: len(v) for k, v in group.items()}
            if len(set(lengths.values())) != 1 or 0 in lengths.values():
                raise ValueError(f"zip group {i}: value lists must have one length: {lengths}")
        return groups

    @field_validator("seeds")
    @classmethod
    def _seed_list(cls, seeds: list[int] | None) -> list[int] | None:
        if seeds is not None and (not seeds or len(set(seeds)) != len(seeds)):
            raise ValueError("seeds must be a non-empty list without repeats")
        return seeds

    @model_validator(mode="after")
    def _distinct_axes(self) -> SweepSpec:
        keys = [*self.grid, *(k for g in self.zip for k in g)]
        repeated = sorted({k for k in keys if keys.count(k) > 1})
        if repeated:
            raise ValueError(f"keys swept twice: {', '.join(repeated)}")
        if self.seeds is not None and "seed" in keys:
            raise ValueError("'seed' is swept as a key and by seeds; keep one")
        return self

    def axes(self) -> list[Axis]:
        """Each axis as its list of assignments, in expansion order (seeds last)."""
        out: list[Axis] = [[{key: v} for v in values] for key, values in self.grid.items()]
        for group in self.zip:
            length = len(next(iter(group.values())))
            out.append([{k: vals[i] for k, vals in group.items()} for i in range(length)])
        if self.seeds is not None:
            out.append([{"seed": s} for s in self.seeds])
        return out

    def keys(self) -> list[str]:
        """Swept keys in column order."""
        return [*self.grid, *(k for g in self.zip for k in g), *(["seed"] if self.seeds else [])]


def _pydantic_problems(exc: ValidationError) -> list[str]:
    """One ``sweep.<path>: message`` line per pydantic error."""
    lines = []
    for err in exc.errors():
        loc = "".join(f"[{p!r}]" if "." in str(p) else f".{p}" for p in err["loc"])
        msg = str(err["msg"]).removeprefix("Value error, ")
        msg = msg[:1].lower() + msg[1:]
        got = err.get("input")
        if err["type"] != "value_error" and not isinstance(got, (dict, list)):
            msg += f" (got {got!r})"
        lines.append(f"sweep{loc}: {msg}")
    return lines


def parse_sweep(block: Any, source: str = "sweep") -> SweepSpec:
    """Validate a ``sweep:`` block (``None`` means a single point).

    Raises
    ------
    ScenarioError
        One line per problem, each naming its path under ``sweep``.
    """
    if block is None:
        return SweepSpec()
    if not isinstance(block, dict):
        raise ScenarioError(["sweep: must be a mapping of dotted keys to value lists"], source)
    try:
        return SweepSpec.model_validate(block)
    except ValidationError as exc:
        raise ScenarioError(_pydantic_problems(exc), source) from None


def combinations(spec: SweepSpec) -> list[dict[str, Any]]:
    """Every point's assignments (dotted key to value), in index order.

    Examples
    --------
    >>> spec = parse_sweep({"partition.alpha": [0.1, 1.0], "seeds": [0, 1]})
    >>> [tuple(c.values()) for c in combinations(spec)]
    [(0.1, 0), (0.1, 1), (1.0, 0), (1.0, 1)]
    """
    out = []
    for combo in itertools.product(*spec.axes()):
        merged: dict[str, Any] = {}
        for part in combo:
            merged.update(part)
        out.append(merged)
    return out
