"""scripts/soak.py judges a leak by the slope of the server's RSS once warmed up, not by end minus start."""

from __future__ import annotations

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "soak.py"


def _soak():
    spec = importlib.util.spec_from_file_location("soak_script", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


MIB = 2**20


def test_a_one_off_allocation_is_not_a_leak_and_a_steady_slope_is() -> None:
    soak = _soak()
    base = 1500 * MIB
    # +300 MiB in the first seconds (arenas, caches), then flat: the old rule (256 MiB or 15 %) called it a leak
    warm = [(t, base + (300 * MIB if t >= 4 else 0)) for t in range(0, 62, 2)]
    assert abs(soak.rss_slope_mib_per_min(warm)) < 1.0
    # +20 MiB a minute, steadily: 20 MiB over a 60 s soak, which the old rule let through
    leak = [(t, base + int(20 * MIB * t / 60)) for t in range(0, 62, 2)]
    assert 19.0 < soak.rss_slope_mib_per_min(leak) < 21.0
    allowed = max(soak.RSS_SLOPE_MIB_PER_MIN, soak.RSS_SLOPE_FRACTION_PER_MIN * base / MIB)
    assert soak.rss_slope_mib_per_min(warm) <= allowed < soak.rss_slope_mib_per_min(leak)


def test_too_few_samples_cannot_be_judged() -> None:
    soak = _soak()
    assert soak.rss_slope_mib_per_min([]) is None
    assert soak.rss_slope_mib_per_min([(0, 1), (10, 2), (20, 3)]) is None  # two samples after the first third
