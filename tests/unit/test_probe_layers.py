"""The whole capability probe joins the host's trials and testbed.ecn's from the fabric layer (no root: the host's
namespace trials are replaced by a stand-in that runs the handed-in trials in a fake namespace)."""

from __future__ import annotations

from typing import Any

import pytest

from testbed.fabric import probe as fabric_probe
from testbed.host import probe as host_probe


def test_the_host_probe_runs_the_handed_in_trials_in_its_scratch_namespace(monkeypatch: pytest.MonkeyPatch) -> None:
    def netns(results: dict[str, Any], trials: Any) -> None:
        for trial in trials:
            trial(results, "tbprobe-fake")

    monkeypatch.setattr(host_probe, "_probe_netns", netns)
    monkeypatch.setattr(host_probe.os, "geteuid", lambda: 0)
    seen: list[str] = []
    host_probe.probe(netns_trials=(lambda results, ns: seen.append(ns),))
    assert seen == ["tbprobe-fake"]


def test_the_whole_probe_asks_testbed_ecn_in_the_scratch_namespace(monkeypatch: pytest.MonkeyPatch) -> None:
    import testbed.ecn

    handed: list[Any] = []
    monkeypatch.setattr(host_probe, "probe", lambda netns_trials=(): handed.extend(netns_trials))
    fabric_probe.probe()
    assert handed == [fabric_probe.probe_ecn]
    monkeypatch.setattr(testbed.ecn, "probe", lambda netns: {"marking_auto": "kernel", "netns": netns})
    results: dict[str, Any] = {}
    fabric_probe.probe_ecn(results, "tbprobe-fake")
    assert results == {"ecn": {"marking_auto": "kernel", "netns": "tbprobe-fake"}}
