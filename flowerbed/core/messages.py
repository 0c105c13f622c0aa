"""Plain payloads exchanged between strategies and learners, and their Flower records."""

from __future__ import annotations

import functools
import io
import json
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from flowerbed.core import keys

if TYPE_CHECKING:
    from flwr.app import Array, ArrayRecord, RecordDict

Arrays = dict[str, np.ndarray]

_SCALARS = (bool, int, float, str, bytes)


@dataclass
class Payload:
    """What a message carries, in plain Python.

    Attributes
    ----------
    arrays
        Named numpy arrays (model weights, statistics...), order preserved.
    config
        Instructions or descriptive values; anything JSON-serialisable.
    metrics
        Scalar metrics (client replies).
    num_examples
        Examples behind the reply; Flower's FedAvg weights by it.
    """

    arrays: Arrays = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    num_examples: int = 0

    def to_array_record(self) -> ArrayRecord:
        """The arrays alone, as a Flower ``ArrayRecord``."""
        # Flower only once records are built: validating a scenario must stay light.
        from flwr.app import ArrayRecord

        return ArrayRecord(array_dict={k: encode_array(v) for k, v in self.arrays.items()})

    @staticmethod
    def from_record_arrays(record: ArrayRecord) -> Arrays:
        """Numpy arrays of a Flower ``ArrayRecord``, order preserved."""
        return {k: decode_array(v) for k, v in record.items()}

    def to_record(self, array_record: ArrayRecord | None = None) -> RecordDict:
        """Pack into a ``RecordDict`` (arrays, config, metrics with num-examples).

        ``array_record`` is this payload's arrays already packed (by
        :meth:`to_array_record`): a broadcast serialises its arrays once and
        shares the record between messages, as Flower's own strategies do.
        """
        from flwr.app import ConfigRecord, MetricRecord, RecordDict

        content = RecordDict()
        if array_record is not None:
            content[keys.ARRAYS] = array_record
        elif self.arrays:
            content[keys.ARRAYS] = self.to_array_record()
        content[keys.CONFIG] = ConfigRecord(_encode_config(self.config))  # type: ignore[assignment]
        metrics = {k: float(v) for k, v in self.metrics.items()}
        metrics[keys.NUM_EXAMPLES] = int(self.num_examples)
        content[keys.METRICS] = MetricRecord(metrics)  # type: ignore[arg-type,assignment]
        return content

    @classmethod
    def from_record(cls, content: RecordDict) -> Payload:
        """Unpack a ``RecordDict`` built by :meth:`to_record` or by a Flower strategy."""
        arrays: Arrays = {}
        config: dict[str, Any] = {}
        metrics: dict[str, float] = {}
        for arecord in content.array_records.values():
            arrays.update({k: decode_array(v) for k, v in arecord.items()})
        for crecord in content.config_records.values():
            config.update(_decode_config(dict(crecord)))
        for mrecord in content.metric_records.values():
            metrics.update({k: float(v) for k, v in mrecord.items()})  # type: ignore[arg-type]
        num = int(metrics.pop(keys.NUM_EXAMPLES, 0))
        return cls(arrays=arrays, config=config, metrics=metrics, num_examples=num)


# Flower stores an array as the bytes ``np.save`` writes: an ``.npy`` header, then
# the raw data. ``np.save``/``np.load`` spend most of their time writing and
# parsing that header (``ast.literal_eval``), about 0.1 ms per array, paid four
# times per client update (client and server, each way). The header depends
# only on dtype and shape, so it is built once per (dtype, shape) here; the
# bytes are exactly those of ``Array(ndarray)`` (checked in the tests), so
# Flower's own ``Array.numpy()`` and every other reader still read them.
_NPY_MAGIC = b"\x93NUMPY"
_NUMPY_STYPE = "numpy.ndarray"


@functools.lru_cache(maxsize=4096)
def _npy_header(dtype: np.dtype[Any], shape: tuple[int, ...]) -> bytes | None:
    """The ``.npy`` header ``np.save`` writes for a C-ordered array (``None``: not v1.0)."""
    if dtype.hasobject:
        return None
    buf = io.BytesIO()
    meta = {
        "descr": np.lib.format.dtype_to_descr(dtype),
        "fortran_order": False,
        "shape": shape,
    }
    try:
        np.lib.format.write_array_header_1_0(buf, meta)
    except ValueError:  # header too long for format 1.0: np.save writes 2.0
        return None
    return buf.getvalue()


def encode_array(x: np.ndarray) -> Array:
    """A Flower ``Array`` with the same bytes as ``Array(x)``, built without ``np.save``."""
    from flwr.app import Array

    x = np.asarray(x)
    header = _npy_header(x.dtype, x.shape)
    if header is None:
        return Array(np.ascontiguousarray(x))
    data = header + np.ascontiguousarray(x).tobytes()
    return Array(dtype=str(x.dtype), shape=tuple(x.shape), stype=_NUMPY_STYPE, data=data)


def decode_array(a: Array) -> np.ndarray:
    """``a.numpy()`` without parsing the header when it is the one :func:`encode_array` writes.

    Any other layout (Fortran order, format 2.0, a header that disagrees with
    the array's metadata) goes through Flower's ``Array.numpy()``.
    """
    data = a.data
    if a.stype == _NUMPY_STYPE and data[:6] == _NPY_MAGIC and data[6:7] == b"\x01":
        try:
            dtype = np.dtype(a.dtype)
        except TypeError:
            return a.numpy()
        shape = tuple(int(d) for d in a.shape)
        header = _npy_header(dtype, shape)
        if header is not None and data[: len(header)] == header:
            flat = np.frombuffer(data, dtype=dtype, offset=len(header))
            if flat.size == math.prod(shape):
                # A private, writable copy, as ``np.load`` returns.
                return flat.reshape(shape).copy()
    return a.numpy()


def _fits_config_record(value: Any) -> bool:
    if isinstance(value, _SCALARS):
        return True
    if isinstance(value, list) and value:
        kinds = {type(v) for v in value}
        return len(kinds) == 1 and kinds.pop() in _SCALARS
    return False


def _encode_config(config: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in config.items():
        if _fits_config_record(value):
            out[key] = value
        else:
            out[keys.JSON_PREFIX + key] = json.dumps(value)
    return out


def _decode_config(record: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in record.items():
        if key.startswith(keys.JSON_PREFIX):
            out[key[len(keys.JSON_PREFIX) :]] = json.loads(value)
        else:
            out[key] = value
    return out


def check_reply(payload: Payload, expected: Arrays | None = None) -> str | None:
    """Return why a client reply is unusable, or ``None`` when it is fine.

    A reply is rejected for non-finite metrics or arrays and, when ``expected``
    is given, for arrays whose names, shapes or dtypes differ from it.
    """
    for name, value in payload.metrics.items():
        if not math.isfinite(value):
            return f"metric {name!r} is {value}"
    for name, arr in payload.arrays.items():
        if arr.dtype.kind in "fc" and not np.all(np.isfinite(arr)):
            return f"array {name!r} has non-finite values"
    if expected is None:
        return None
    if list(payload.arrays) != list(expected):
        return f"array names {sorted(payload.arrays)} differ from {sorted(expected)}"
    for name, ref in expected.items():
        got = payload.arrays[name]
        if got.shape != ref.shape or got.dtype != ref.dtype:
            return (
                f"array {name!r} is {got.dtype}{list(got.shape)}, "
                f"expected {ref.dtype}{list(ref.shape)}"
            )
    return None


@dataclass
class Replies:
    """Outcome of one :meth:`Federation.ask`, keyed by partition id.

    Attributes
    ----------
    ok
        Usable replies.
    failed
        Replies that came back as errors or failed validation, with the reason.
    missing
        Clients that did not answer: timed out, or (virtual time) dropped or
        late by the scenario's availability profile.
    dropped, late
        The availability profile's share of ``missing`` this round.
    virtual_time
        Simulated duration of the phase (slowest on-time client, or the deadline).

    ``empty()`` names the usable replies that counted no example (a client with
    no local test rows answering ``evaluate``): weighted by their size, they
    weigh nothing, and they carry no metrics to average.
    """

    ok: dict[int, Payload] = field(default_factory=dict)
    failed: dict[int, str] = field(default_factory=dict)
    missing: list[int] = field(default_factory=list)
    dropped: list[int] = field(default_factory=list)
    late: list[int] = field(default_factory=list)
    virtual_time: float = 0.0

    def empty(self) -> list[int]:
        """Partition ids of usable replies with ``num_examples == 0``."""
        return [pid for pid, body in self.ok.items() if body.num_examples == 0]

    def counts(self) -> dict[str, int]:
        """``{"ok": .., "failed": .., "missing": ..}`` for logs and progress."""
        return {"ok": len(self.ok), "failed": len(self.failed), "missing": len(self.missing)}
