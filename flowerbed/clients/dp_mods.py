"""Client half of the client-side DP strategies: Flower's clipping mods on train messages.

``dp_client_fixed`` and ``dp_client_adaptive`` (Flower's
``DifferentialPrivacyClientSide*Clipping``, :mod:`flowerbed.strategies.flower_dp`)
send the clipping norm in the train config and expect each client to clip its
update ``w - wᵗ`` to it before replying: Flower's ``fixedclipping_mod`` and
``adaptiveclipping_mod`` (which also reports whether it clipped, the bit the
server adapts the norm with) do exactly that, and run here around the
ClientApp's handler, on train messages only, for those two strategies only.
"""

from __future__ import annotations

from collections.abc import Callable

from flwr.app import Context, Message
from flwr.app.message_type import MessageType

from flowerbed.core import keys, registry

#: Strategy name -> the Flower mod its clients apply (``flwr.clientapp.mod``).
CLIENT_MODS = {"dp_client_fixed": "fixedclipping_mod", "dp_client_adaptive": "adaptiveclipping_mod"}

Handler = Callable[[Message, Context], Message]


def mod_for(strategy_name: str) -> Callable[[Message, Context, Handler], Message] | None:
    """The Flower mod clients of strategy ``strategy_name`` apply, if any."""
    if strategy_name not in CLIENT_MODS:
        return None
    from flwr.clientapp import mod

    found: Callable[[Message, Context, Handler], Message] = getattr(mod, CLIENT_MODS[strategy_name])
    return found


def with_dp_mods(msg: Message, context: Context, handle: Handler) -> Message:
    """``handle(msg, context)``, through the strategy's clipping mod when it is a train message."""
    clip = None
    if msg.metadata.message_type == MessageType.TRAIN:
        clip = mod_for(_strategy_name(context))
    if clip is None:
        return handle(msg, context)
    return clip(msg, context, handle)


def _strategy_name(context: Context) -> str:
    """The strategy of the scenario this node was set up with ("" before setup)."""
    from flowerbed.clients import client_app

    if client_app._STATE_KEY not in context.state:
        return ""
    record = context.state[client_app._STATE_KEY]
    scenario = client_app._scenario(str(record[keys.SCENARIO_YAML]))  # type: ignore[index]
    return registry.name_of(scenario.component("strategy"))
