"""Mid-run checkpoints: a long run killed at round 80 continues from round 80, exactly.

Every ``checkpoint.every`` rounds the strategy hands its state (global arrays,
server optimiser moments, counters: whatever its ``state_dict()`` returns) to
:meth:`Checkpoints.save`, which writes ``<run>/checkpoints/round_<r>/``:

- ``arrays.npz``: every array of the state, bit for bit;
- ``meta.json``: the rest of the state as JSON, the scenario digest, the round,
  the random generators' states (Python's, NumPy's and torch's global ones)
  and how long ``metrics.jsonl`` and ``client_metrics.jsonl`` were then;
- ``client_state/``: a copy of the clients' state folders (in ``simulation``
  and ``inline`` runs they live in the run folder).

A folder is built beside its final place and renamed whole, so a process killed
mid-save leaves the previous checkpoint; the newest ``checkpoint.keep`` are kept.
:func:`prepare_resume` checks the newest one against the scenario, truncates
the metrics files to where they were when it was written (rows after it are
recomputed, never duplicated) and puts the clients' state back.

Examples
--------
>>> import numpy as np
>>> tree = {"m_t": {"w": np.ones(2)}, "t": 3, "name": "adam"}
>>> packed, arrays = pack(tree)
>>> packed
{'m_t': {'w': {'__array__': 'a0'}}, 't': 3, 'name': 'adam'}
>>> unpack(packed, arrays)["m_t"]["w"]
array([1., 1.])
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import random
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from pydantic import Field

from flowerbed.core.records import (
    CLIENT_METRICS_FILE,
    METRICS_FILE,
    STATE_DIR_NAME,
    publish_folder,
)
from flowerbed.core.registry import Params

if TYPE_CHECKING:
    from flowerbed.core.scenario import Scenario

#: Folder of a run's checkpoints.
CHECKPOINT_DIR = "checkpoints"
#: Version of the checkpoint layout; another version is refused.
FORMAT = 1
_META, _ARRAYS = "meta.json", "arrays.npz"
#: Files truncated on resume to their length at the checkpoint.
TRUNCATED = (METRICS_FILE, CLIENT_METRICS_FILE)


class CheckpointConfig(Params):
    """When a run saves what it needs to continue after being killed."""

    every: int = Field(0, ge=0, description="checkpoint every N rounds (0: never)")
    keep: int = Field(2, ge=1, description="newest checkpoints kept")


class CheckpointError(ValueError):
    """A checkpoint that cannot be used: unreadable, corrupted or another scenario's."""


def pack(tree: Any) -> tuple[Any, dict[str, np.ndarray]]:
    """Split a state tree into JSON-able data and its arrays (``{"__array__": key}`` leaves).

    Dicts need string keys; tuples come back as lists; NumPy scalars as
    Python numbers. Anything else raises ``TypeError`` naming its path, so no
    piece of state is dropped silently.
    """
    arrays: dict[str, np.ndarray] = {}

    def walk(value: Any, path: str) -> Any:
        if isinstance(value, np.ndarray):
            key = f"a{len(arrays)}"
            arrays[key] = value
            return {"__array__": key}
        if isinstance(value, np.generic):
            return value.item()
        if value is None or isinstance(value, (bool, int, float, str)):
            return value
        if isinstance(value, dict):
            bad = [k for k in value if not isinstance(k, str)]
            if bad:
                raise TypeError(f"state {path or '<root>'}: key {bad[0]!r} is not a string")
            return {k: walk(v, f"{path}/{k}") for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [walk(v, f"{path}/{i}") for i, v in enumerate(value)]
        raise TypeError(f"state {path or '<root>'}: cannot checkpoint a {type(value).__name__}")

    return walk(tree, ""), arrays


def unpack(packed: Any, arrays: dict[str, np.ndarray]) -> Any:
    """The inverse of :func:`pack`."""
    if isinstance(packed, dict):
        if set(packed) == {"__array__"}:
            return arrays[packed["__array__"]]
        return {k: unpack(v, arrays) for k, v in packed.items()}
    if isinstance(packed, list):
        return [unpack(v, arrays) for v in packed]
    return packed


def rng_states() -> dict[str, Any]:
    """The global generators a server may draw from: Python's, NumPy's, torch's (if loaded)."""
    version, internal, gauss = random.getstate()
    name, keys, pos, has_gauss, cached = np.random.get_state()  # type: ignore[misc]
    states: dict[str, Any] = {
        "python": [version, list(internal), gauss],
        "numpy": [name, np.asarray(keys), int(pos), int(has_gauss), float(cached)],
    }
    torch = _loaded_torch()
    if torch is not None:
        states["torch"] = torch.get_rng_state().numpy().copy()
    return states


def set_rng_states(states: dict[str, Any]) -> None:
    """Restore what :func:`rng_states` returned."""
    version, internal, gauss = states["python"]
    random.setstate((int(version), tuple(int(v) for v in internal), gauss))
    name, keys, pos, has_gauss, cached = states["numpy"]
    np.random.set_state((str(name), np.asarray(keys, np.uint32), pos, has_gauss, cached))
    torch = _loaded_torch()
    if torch is not None and "torch" in states:
        torch.set_rng_state(torch.from_numpy(np.asarray(states["torch"], np.uint8)))


def _loaded_torch() -> Any:
    import sys

    return sys.modules.get("torch")


def checkpoint_folders(run_dir: Path) -> list[Path]:
    """A run's checkpoint folders, oldest first."""
    root = Path(run_dir) / CHECKPOINT_DIR
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir() and p.name.startswith("round_"))


def read_checkpoint(folder: Path, digest: str | None = None) -> dict[str, Any]:
    """A checkpoint's metadata and state, checked; :class:`CheckpointError` names the file.

    ``digest``, when given, must be the digest of the scenario it was written by.
    """
    meta_file, arrays_file = folder / _META, folder / _ARRAYS
    try:
        meta = json.loads(meta_file.read_text())
        data = arrays_file.read_bytes()
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"checkpoint {folder}: unreadable ({_reason(exc)})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise CheckpointError(
            f"checkpoint {meta_file}: not a flowerbed checkpoint (format {FORMAT})"
        )
    if hashlib.sha256(data).hexdigest() != meta.get("arrays_sha256"):
        raise CheckpointError(f"checkpoint {arrays_file}: corrupted (checksum does not match)")
    if digest is not None and meta.get("digest") != digest:
        raise CheckpointError(
            f"checkpoint {meta_file}: written by another scenario "
            f"(digest {meta.get('digest')}, this run's is {digest})"
        )
    with np.load(io.BytesIO(data), allow_pickle=False) as npz:
        arrays = {k: npz[k] for k in npz.files}
    meta["state"] = unpack(meta.get("state"), arrays)
    meta["rng"] = unpack(meta.get("rng"), arrays)
    return meta


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.strerror}: {exc.filename}"
    return f"{type(exc).__name__}: {exc}"


@dataclass
class Checkpoints:
    """Saves a run's checkpoints and hands a resumed run its last one.

    ``resume_from`` is the checkpoint folder :func:`prepare_resume` chose;
    ``state_root`` the clients' state folder to copy with each checkpoint.
    """

    scenario: Scenario
    run_dir: Path | None
    state_root: Path | None = None
    resume_from: Path | None = None

    @property
    def enabled(self) -> bool:
        """Whether this run writes checkpoints (``checkpoint.every`` > 0 and a run folder)."""
        return self.scenario.checkpoint.every > 0 and self.run_dir is not None

    def due(self, server_round: int) -> bool:
        """Whether round ``server_round`` ends with a checkpoint."""
        every = self.scenario.checkpoint.every
        return self.enabled and server_round % every == 0

    def save(self, server_round: int, state: dict[str, Any]) -> Path | None:
        """Write the checkpoint of the round just finished; keep the newest ``keep``."""
        if not self.due(server_round):
            return None
        assert self.run_dir is not None  # enabled
        packed, arrays = pack(state)
        rng_packed, rng_arrays = pack(rng_states())
        buf = io.BytesIO()
        all_arrays = {**arrays, **{f"r{k}": v for k, v in rng_arrays.items()}}
        np.savez(buf, **all_arrays)  # type: ignore[arg-type]
        data = buf.getvalue()
        meta = {
            "format": FORMAT,
            "digest": self.scenario.digest(),
            "scenario": self.scenario.name,
            "round": server_round,
            "lengths": {name: _length(self.run_dir / name) for name in TRUNCATED},
            "arrays_sha256": hashlib.sha256(data).hexdigest(),
            "state": packed,
            "rng": _renamed(rng_packed, "r"),
        }
        out = self.run_dir / CHECKPOINT_DIR / f"round_{server_round:06d}"
        out.parent.mkdir(parents=True, exist_ok=True)

        def fill(tmp: Path) -> None:
            (tmp / _ARRAYS).write_bytes(data)
            clients = self.state_root
            if clients is not None and clients.is_dir():
                shutil.copytree(clients, tmp / STATE_DIR_NAME)
            (tmp / _META).write_text(json.dumps(meta) + "\n")
            _sync(tmp)

        publish_folder(out, fill)
        for old in checkpoint_folders(self.run_dir)[: -self.scenario.checkpoint.keep]:
            shutil.rmtree(old, ignore_errors=True)
        return out

    def load(self) -> dict[str, Any] | None:
        """The resumed run's checkpoint (``round``, ``state``, ``rng``), or ``None``."""
        if self.resume_from is None:
            return None
        return read_checkpoint(self.resume_from, self.scenario.digest())

    def restore(self) -> tuple[int, dict[str, Any]] | None:
        """Load the checkpoint, put the random generators back; ``(round, state)`` or ``None``."""
        meta = self.load()
        if meta is None:
            return None
        set_rng_states(meta["rng"])
        return int(meta["round"]), meta["state"]


def _renamed(packed: Any, prefix: str) -> Any:
    """``packed`` with every array key prefixed (the RNG arrays share the state's file)."""
    if isinstance(packed, dict):
        if set(packed) == {"__array__"}:
            return {"__array__": prefix + packed["__array__"]}
        return {k: _renamed(v, prefix) for k, v in packed.items()}
    if isinstance(packed, list):
        return [_renamed(v, prefix) for v in packed]
    return packed


def _length(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _sync(folder: Path) -> None:
    """Flush the checkpoint's own files to disk before it is renamed into place."""
    for name in (_ARRAYS, _META):
        fd = os.open(folder / name, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def latest_checkpoint(run_dir: Path, digest: str) -> Path | None:
    """The newest checkpoint of ``run_dir`` (checked against ``digest``), or ``None``.

    Raises :class:`CheckpointError` when the newest one is unusable: resuming
    from an older one silently would repeat rounds the user thinks are saved.
    """
    folders = checkpoint_folders(run_dir)
    if not folders:
        return None
    read_checkpoint(folders[-1], digest)
    return folders[-1]


def prepare_resume(run_dir: Path, digest: str) -> Path | None:
    """Make ``run_dir`` look as it did at its newest checkpoint; return that checkpoint.

    ``metrics.jsonl`` and ``client_metrics.jsonl`` are cut back to their length
    then, and the clients' state folder replaced by the checkpoint's copy.
    ``None`` when the run has no checkpoint (it starts from round 0).
    """
    folder = latest_checkpoint(run_dir, digest)
    if folder is None:
        return None
    meta = json.loads((folder / _META).read_text())
    for name, length in meta["lengths"].items():
        path = Path(run_dir) / name
        if path.exists() and path.stat().st_size > length:
            os.truncate(path, length)
    saved, live = folder / STATE_DIR_NAME, Path(run_dir) / STATE_DIR_NAME
    shutil.rmtree(live, ignore_errors=True)
    if saved.is_dir():
        shutil.copytree(saved, live)
    return folder
