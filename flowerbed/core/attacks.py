"""The ``clients.attack`` schema: which clients are malicious and what they send.

A pure, light module (no torch, no flwr): the scenario validates against it,
and :func:`malicious_clients` says which partition ids attack, from the root
seed alone, so every engine, strategy and resumed run sees the same set. The
transforms themselves are in :mod:`flowerbed.algorithms.attacks`, applied on
the client by :mod:`flowerbed.clients.attacks`.

Examples
--------
>>> from pydantic import TypeAdapter
>>> spec = TypeAdapter(AttackParams).validate_python({"name": "sign_flip", "fraction": 0.2})
>>> spec.scale, malicious_count(spec, 10)
(1.0, 2)
>>> malicious_clients(spec, num_clients=10, root_seed=0) == malicious_clients(spec, 10, 0)
True
>>> malicious_clients(NoAttack(), 10, 0)
()
"""

from __future__ import annotations

import difflib
import math
from typing import Annotated, Any, Literal, Union

from pydantic import BeforeValidator, Field
from pydantic_core import PydanticCustomError

from flowerbed.core.registry import Params
from flowerbed.core.seeds import rng


class NoAttack(Params):
    """Every client is honest (the default)."""

    name: Literal["none"] = "none"


class _Malicious(Params):
    """What every attack has: the share of clients that run it."""

    fraction: float = Field(
        ge=0,
        le=1,
        description="share of the clients that attack: round(fraction * num_clients), "
        "drawn once from the root seed",
    )


class LabelFlip(_Malicious):
    """Malicious clients train on flipped labels ``y -> C - 1 - y`` (Fang et al., 2020)."""

    name: Literal["label_flip"] = "label_flip"


class SignFlip(_Malicious):
    """Malicious clients send ``w - scale * (w_local - w)``: their update reversed and scaled."""

    name: Literal["sign_flip"] = "sign_flip"
    scale: float = Field(1.0, gt=0, description="length of the reversed update, in updates")


class GaussianNoise(_Malicious):
    """Malicious clients send ``w + N(0, std^2)`` per weight (Blanchard et al., 2017)."""

    name: Literal["gaussian"] = "gaussian"
    std: float = Field(1.0, gt=0, description="standard deviation of the sent update")


class LittleIsEnough(_Malicious):
    """Baruch et al. (2019), "a little is enough": ``w + mean - z * std`` of honest updates."""

    name: Literal["alie"] = "alie"
    z: float | None = Field(
        None,
        gt=0,
        description="standard deviations to shift by; null: the paper's z_max from "
        "num_clients and the number of malicious clients",
    )


#: Attack name -> its params model, in the order errors list them.
_ATTACKS: dict[str, type[Params]] = {
    "none": NoAttack,
    "label_flip": LabelFlip,
    "sign_flip": SignFlip,
    "gaussian": GaussianNoise,
    "alie": LittleIsEnough,
}
ATTACK_NAMES = tuple(_ATTACKS)


def _check_block(value: Any) -> Any:
    """One-line errors for an unknown attack name or field (the block's own path)."""
    if isinstance(value, str):
        value = {"name": value}
    if not isinstance(value, dict):
        return value  # pydantic names the wrong type
    if "name" not in value:
        raise PydanticCustomError(
            "unknown_nested_field",
            f"required field is missing; known attacks: {', '.join(ATTACK_NAMES)}",
            {"field": "name"},
        )
    name = value["name"]
    if not isinstance(name, str) or name not in _ATTACKS:
        close = difflib.get_close_matches(str(name), ATTACK_NAMES, n=1)
        mean = f" (did you mean {close[0]!r}?)" if close else ""
        raise PydanticCustomError(
            "unknown_nested_field",
            f"unknown attack {name!r}{mean}; known: {', '.join(ATTACK_NAMES)}",
            {"field": "name"},
        )
    allowed = [f for f in _ATTACKS[name].model_fields if f != "name"]
    for key in value:
        if key != "name" and key not in allowed:
            close = difflib.get_close_matches(str(key), allowed, n=1)
            mean = f" (did you mean {close[0]!r}?)" if close else ""
            # ``field`` lets the scenario's error say the key's own path.
            raise PydanticCustomError(
                "unknown_nested_field",
                f"unknown field of attack {name!r}{mean}; "
                f"allowed: {', '.join(allowed) or '(none)'}",
                {"field": str(key)},
            )
    return value


AttackParams = Annotated[
    Union[NoAttack, LabelFlip, SignFlip, GaussianNoise, LittleIsEnough],  # noqa: UP007
    Field(discriminator="name"),
    BeforeValidator(_check_block),
]
MaliciousAttack = LabelFlip | SignFlip | GaussianNoise | LittleIsEnough


def malicious_count(spec: Params, num_clients: int) -> int:
    """How many clients attack: ``fraction * num_clients`` rounded half up (0 for none)."""
    fraction = float(getattr(spec, "fraction", 0.0))
    return min(num_clients, math.floor(fraction * num_clients + 0.5))


def malicious_clients(spec: Params, num_clients: int, root_seed: int) -> tuple[int, ...]:
    """Sorted partition ids of the malicious clients, drawn from the root seed alone.

    The draw does not depend on the attack's kind or strength, so a sweep over
    attacks with one ``fraction`` puts the same clients in the malicious role.
    """
    count = malicious_count(spec, num_clients)
    if count == 0:
        return ()
    chosen = rng(root_seed, "attack", "malicious").choice(num_clients, count, replace=False)
    return tuple(sorted(int(i) for i in chosen))
