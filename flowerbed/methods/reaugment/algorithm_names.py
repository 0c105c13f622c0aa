"""ReAugment's arm names, in one light module: the scenario schema reads them without torch."""

from __future__ import annotations

from typing import Literal, get_args

Arm = Literal[
    "none", "jitter", "scaling", "magnitude_warp", "window_warp", "freq_mask", "freq_mix",
    "vmae", "rl_random", "reaugment", "reaugment_v1", "reaugment_gap",
]  # fmt: skip
#: Every arm, in the order tables list them.
ARMS: tuple[Arm, ...] = get_args(Arm)
