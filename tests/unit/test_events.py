"""Scheduled link events (testbed.spec.events): parsing, the one-line refusals, and a flap's steps."""

from __future__ import annotations

from typing import Any

import pytest

from testbed.spec.events import LinkEvent
from testbed.spec.fields import SpecError
from testbed.spec.scenario import build_scenario, resolved


def _scenario(events: Any, **fabric: Any) -> Any:
    return build_scenario(
        {
            "name": "ev",
            "fabric": {"spines": 2, "leaves": 2, "hosts_per_leaf": 1, **fabric},
            "workload": [],
            "events": events,
            "duration": "10s",
        }
    )


def test_events_parse_and_land_in_the_manifest() -> None:
    s = _scenario(
        [
            {"at": "2s", "action": "down", "link": "l2-s1", "detection": "50ms"},
            {"at": "4s", "action": "up", "link": "s1-l2"},
            {"at": "1s", "action": "degrade", "link": "s2-l1", "rate": "50Mbit", "loss": 0.001},
            {"at": "6s", "action": "restore", "link": "s2-l1"},
            {"at": "0s", "action": "mtu", "link": "s1-l2", "end": "l2", "mtu": 1500},
        ]
    )
    down, up, degrade, _, mtu = s.events
    assert (mtu.action, mtu.end, mtu.mtu) == ("mtu", "l2", 1500)
    assert down == LinkEvent(2.0, "down", "s1-l2", detection_s=0.05)  # named as the fabric names the link
    assert up.detection_s == 0.1 and degrade.rate_bps == 50_000_000 and degrade.loss == 0.001
    assert resolved(s)["events"][0]["link"] == "s1-l2"
    assert "events" not in resolved(_scenario(None))  # a scenario without events resolves as before


def test_a_flap_is_downs_and_ups() -> None:
    (flap,) = _scenario([{"at": "1s", "action": "flap", "link": "s1-l1", "count": 3, "period": "400ms"}]).events
    times = [1.0, 1.2, 1.4, 1.6, 1.8, 2.0]
    assert [t for t, _ in flap.steps()] == pytest.approx(times)
    assert [a for _, a in flap.steps()] == ["down", "up"] * 3 and flap.end_s == pytest.approx(2.0)


@pytest.mark.parametrize(
    ("event", "where", "reason"),
    [
        ({"at": "1s", "action": "down", "link": "l1-l2"}, "events[0].link", "no link 'l1-l2' in this fabric"),
        ({"at": "1s", "action": "down", "link": "l1h1-l1"}, "events[0].link", "a host link"),
        ({"at": "1s", "action": "explode", "link": "s1-l1"}, "events[0].action", "must be one of down, up"),
        (
            {"at": "1s", "action": "down", "link": "s1-l1", "rate": "1Mbit"},
            "events[0].rate",
            "not a setting of action down",
        ),
        ({"at": "1s", "action": "degrade", "link": "s1-l1"}, "events[0]", "needs a rate, a loss, or both"),
        ({"at": "1s", "action": "degrade", "link": "s1-l1", "rate": "1Gbit"}, "events[0].rate", "at most the link's"),
        ({"at": "1s", "action": "degrade", "link": "s1-l1", "loss": 1.5}, "events[0].loss", "must be in"),
        ({"at": "12s", "action": "down", "link": "s1-l1"}, "events[0].at", "after the run's 10 s"),
        ({"at": "9s", "action": "flap", "link": "s1-l1", "count": 3}, "events[0].at", "ends at 11.5 s"),
        ({"action": "down", "link": "s1-l1"}, "events[0].at", "missing"),
        ({"at": "0s", "action": "mtu", "link": "s1-l1", "mtu": 1500}, "events[0]", "needs mtu and end (one of s1, l1"),
        ({"at": "0s", "action": "mtu", "link": "s1-l1", "end": "l2", "mtu": 1500}, "events[0]", "needs mtu and end"),
        ({"at": "0s", "action": "mtu", "link": "s1-l1", "end": "l1", "mtu": 20}, "events[0].mtu", "must be in"),
        ({"at": "0s", "action": "down", "link": "s1-l1", "mtu": 1500}, "events[0].mtu", "not a setting of action"),
    ],
)
def test_bad_events_get_one_line(event: dict[str, Any], where: str, reason: str) -> None:
    with pytest.raises(SpecError) as exc:
        _scenario([event])
    assert str(exc.value).startswith(where) and reason in str(exc.value), str(exc.value)


def test_events_need_static_ecmp() -> None:
    with pytest.raises(SpecError, match=r"link events need ecmp\.mode static"):
        _scenario([{"at": "1s", "action": "down", "link": "s1-l1"}], ecmp={"mode": "spray"})


def test_a_degraded_links_ports_are_not_judged_on_their_own_rate() -> None:
    from results.fidelity import _rate_changed

    s = _scenario(
        [
            {"at": "1s", "action": "degrade", "link": "l1-s2", "rate": "50Mbit"},
            {"at": "2s", "action": "degrade", "link": "s1-l2", "loss": 0.01},  # loss only: the rate holds
            {"at": "3s", "action": "down", "link": "s1-l1"},
        ]
    )
    assert _rate_changed({"scenario": resolved(s)}) == {("s2", "s2-l1"), ("l1", "l1-s2")}
    assert _rate_changed({"scenario": resolved(_scenario(None))}) == set()
