"""Plain payloads exchanged between strategies and learners, and their Flower records."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, MetricRecord, RecordDict

from flowerbed.platform import keys

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
        return ArrayRecord(
            array_dict={k: Array(np.ascontiguousarray(v)) for k, v in self.arrays.items()}
        )

    @staticmethod
    def from_record_arrays(record: ArrayRecord) -> Arrays:
        """Numpy arrays of a Flower ``ArrayRecord``, order preserved."""
        return {k: v.numpy() for k, v in record.items()}

    def to_record(self, array_record: ArrayRecord | None = None) -> RecordDict:
        """Pack into a ``RecordDict`` (arrays, config, metrics with num-examples).

        ``array_record`` is this payload's arrays already packed (by
        :meth:`to_array_record`): a broadcast serialises its arrays once and
        shares the record between messages, as Flower's own strategies do.
        """
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
            arrays.update({k: v.numpy() for k, v in arecord.items()})
        for crecord in content.config_records.values():
            config.update(_decode_config(dict(crecord)))
        for mrecord in content.metric_records.values():
            metrics.update({k: float(v) for k, v in mrecord.items()})  # type: ignore[arg-type]
        num = int(metrics.pop(keys.NUM_EXAMPLES, 0))
        return cls(arrays=arrays, config=config, metrics=metrics, num_examples=num)


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
