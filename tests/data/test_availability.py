"""Availability profiles: defaults, laws, deadlines, determinism, cohort independence."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from flowerbed.core.availability import (
    AvailabilityParams,
    client_speed,
    round_availability,
)


def test_defaults_mean_everyone_on_time_instantly():
    r = round_availability(AvailabilityParams(), 0, 1, range(20))
    assert r.on_time == tuple(range(20)) and not r.dropped and not r.late
    assert set(r.latency.values()) == {0.0} and r.round_time == 0.0


def test_params_are_strict():
    with pytest.raises(ValidationError):
        AvailabilityParams(dropuot=0.1)
    with pytest.raises(ValidationError):
        AvailabilityParams(dropout=1.5)


def test_dropout_frequency_matches_probability():
    params = AvailabilityParams(dropout=0.3)
    drops = [len(round_availability(params, 7, rnd, range(100)).dropped) for rnd in range(50)]
    assert abs(np.mean(drops) / 100 - 0.3) < 0.02


def test_lognormal_latency_median_and_deadline():
    params = AvailabilityParams(latency="lognormal", latency_median=2.0, latency_sigma=0.5,
                                deadline=3.0)
    rounds = [round_availability(params, 1, rnd, range(200)) for rnd in range(10)]
    lat = np.array([v for r in rounds for v in r.latency.values()])
    assert abs(np.median(lat) / 2.0 - 1) < 0.05
    assert abs(np.log(lat).std() - 0.5) < 0.03
    expected_late = np.mean(lat > 3.0)
    late = np.mean([len(r.late) / 200 for r in rounds])
    assert late == pytest.approx(expected_late)
    for r in rounds:
        assert all(r.latency[p] > 3.0 for p in r.late)
        assert all(r.latency[p] <= 3.0 for p in r.on_time)
        assert r.round_time == 3.0


def test_client_speed_is_persistent():
    params = AvailabilityParams(latency="lognormal", latency_sigma=0.0, client_speed_sigma=1.0)
    a = round_availability(params, 5, 1, range(30)).latency
    b = round_availability(params, 5, 9, range(30)).latency
    assert a == pytest.approx(b)
    assert a[4] == pytest.approx(client_speed(params, 5, 4))
    assert client_speed(AvailabilityParams(), 5, 4) == 1.0


def test_determinism_and_cohort_independence():
    params = AvailabilityParams(dropout=0.4, latency="lognormal", deadline=1.2)
    full = round_availability(params, 3, 4, range(40))
    again = round_availability(params, 3, 4, range(40))
    assert full == again
    cohort = round_availability(params, 3, 4, [5, 17, 33])
    for pid in (5, 17, 33):
        assert (pid in cohort.dropped) == (pid in full.dropped)
        assert (pid in cohort.late) == (pid in full.late)
    other = round_availability(params, 4, 4, range(40))
    assert other.dropped != full.dropped
