"""Per-client persistent state: a folder per client and run that outlives any one message.

A learner must not keep per-client state in ``self`` (one instance serves many
clients, and a Ray worker may die between rounds). What has to survive from one
round to the next (prototypes, control variates, personal models, a restored
image) goes here instead, through :meth:`TaskContext.client_state
<flowerbed.clients.learner.TaskContext.client_state>`.

Where the folder lives:

- ``simulation`` and ``inline``: ``<run folder>/client_state/client_<pid>/<name>/``;
- ``deployment``: on each SuperNode's own disk, under the node's ``state-dir``
  node-config entry (``flower-supernode --node-config "state-dir='/data/fb'"``),
  else under the artefact cache (``$FLOWERBED_CACHE/client_state``), then
  ``<scenario>/<run>/client_<pid>/<name>/``.

Every write is atomic (a temporary file, then a rename), so a process killed
mid-write leaves the previous version, never half a file. The folders are kept
after the run for inspection unless the scenario sets ``clients.keep_state:
false``.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from flowerbed.core.records import atomic_write_bytes

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def _check_name(name: str, what: str) -> str:
    if not _NAME.match(name) or ".." in name:
        raise ValueError(
            f"client state {what} {name!r}: use letters, digits, '_', '-' and '.' only"
        )
    return name


def client_folder(root: Path, partition_id: int) -> Path:
    """``root/client_<pid>``; the pooled virtual client (pid < 0) is ``root/pooled``."""
    return root / ("pooled" if partition_id < 0 else f"client_{partition_id}")


class ClientState:
    """One client's named state folder: arrays and small JSON values, written atomically.

    The folder is created on the first write, so a learner that never writes
    leaves nothing behind.

    Examples
    --------
    >>> import tempfile
    >>> state = ClientState(Path(tempfile.mkdtemp()) / "client_0" / "demo")
    >>> state.load_array("w") is None
    True
    >>> state.save_array("w", np.arange(3.0))
    >>> state.load_array("w")
    array([0., 1., 2.])
    >>> state.put("round", 2); state.get("round")
    2
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def file(self, name: str) -> Path:
        """Path of file ``name`` inside the folder (the folder is created)."""
        self.path.mkdir(parents=True, exist_ok=True)
        return self.path / _check_name(name, "file")

    def exists(self, name: str) -> bool:
        """Whether file ``name`` has been written."""
        return (self.path / _check_name(name, "file")).is_file()

    def write_bytes(self, name: str, data: bytes) -> Path:
        """Write ``data`` to file ``name`` atomically; return its path."""
        path = self.file(name)
        atomic_write_bytes(path, data)
        return path

    def save_array(self, name: str, array: np.ndarray) -> None:
        """Store one array as ``<name>.npy``."""
        import io

        buf = io.BytesIO()
        np.save(buf, np.asarray(array), allow_pickle=False)
        self.write_bytes(f"{_check_name(name, 'array')}.npy", buf.getvalue())

    def load_array(self, name: str) -> np.ndarray | None:
        """The array stored as ``name``, or ``None`` if there is none yet."""
        path = self.path / f"{_check_name(name, 'array')}.npy"
        if not path.is_file():
            return None
        loaded: np.ndarray = np.load(path, allow_pickle=False)
        return loaded

    def put(self, key: str, value: Any) -> None:
        """Store a JSON-serialisable value under ``key``."""
        text = json.dumps(value)
        self.write_bytes(f"{_check_name(key, 'key')}.json", text.encode())

    def get(self, key: str, default: Any = None) -> Any:
        """The value stored under ``key``, else ``default``."""
        path = self.path / f"{_check_name(key, 'key')}.json"
        if not path.is_file():
            return default
        return json.loads(path.read_text())


def remove_client(root: Path, partition_id: int) -> None:
    """Delete every state folder of one client (``clients.keep_state: false``)."""
    shutil.rmtree(client_folder(root, partition_id), ignore_errors=True)
