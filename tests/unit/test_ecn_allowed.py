"""Two congestion-control managers alive at once (a run and a test, say) must each take out only what they added:
restoring a snapshot left 'reno bbr cubic' behind on this machine when two overlapped."""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed.ecn import cc as ccmod


@pytest.fixture
def fake_sysctl(monkeypatch, tmp_path):
    store = {ccmod.ALLOWED: "reno bbr", ccmod.AVAILABLE: "reno bbr cubic"}
    monkeypatch.setattr(ccmod, "sysctl_read", lambda key, netns=None: store[key])
    monkeypatch.setattr(ccmod, "sysctl_write", lambda key, value, netns=None: store.__setitem__(key, value))
    monkeypatch.setattr(ccmod, "LOCK", tmp_path / "allowed.lock")
    return store


def test_overlapping_managers_restore_the_original_list_in_any_order(fake_sysctl):
    a = ccmod.CongestionControl("tbaaaa", Path("/nonexistent"))
    b = ccmod.CongestionControl("tbbbbb", Path("/nonexistent"))
    a.prepare({"cubic"})
    b.prepare({"cubic", "reno"})
    assert fake_sysctl[ccmod.ALLOWED] == "reno bbr cubic"
    assert a.added == ["cubic"] and b.added == []
    a.close()  # a leaves first: b's namespaces already have their default; the list is back to the original
    assert fake_sysctl[ccmod.ALLOWED] == "reno bbr"
    b.close()
    assert fake_sysctl[ccmod.ALLOWED] == "reno bbr"


def test_close_keeps_what_others_added_meanwhile(fake_sysctl):
    a = ccmod.CongestionControl("tbaaaa", Path("/nonexistent"))
    a.prepare({"cubic"})
    fake_sysctl[ccmod.ALLOWED] += " dctcp_tbbbbb"  # another run registered its BPF DCTCP meanwhile
    a.close()
    assert fake_sysctl[ccmod.ALLOWED] == "reno bbr dctcp_tbbbbb"


def test_each_global_change_is_recorded_before_it_is_made(fake_sysctl, monkeypatch, tmp_path):
    """The state file heard of the sysctl write and the struct_ops registration only after them, so a
    run killed in between left them behind. The intent now comes first."""
    events: list[tuple[str, object]] = []
    write = ccmod.sysctl_write
    monkeypatch.setattr(ccmod, "sysctl_write", lambda k, v, netns=None: (events.append(("write", k)), write(k, v)))

    def fake_run(argv, check=True, **kw):
        events.append(("run", " ".join(argv[1:3])))
        fake_sysctl[ccmod.AVAILABLE] += " dctcp_tbaaaa"
        return type("R", (), {"returncode": 0, "stdout": "Registered tcp_congestion_ops dctcp id 42", "stderr": ""})

    monkeypatch.setattr(ccmod, "run", fake_run)
    monkeypatch.setattr(ccmod, "tool", lambda name: name)
    monkeypatch.setattr(ccmod, "_modprobe", lambda cc: False)
    (tmp_path / "dctcp.bpf.o").write_bytes(b"x" + ccmod.DCTCP_NAME_PLACEHOLDER + b"y")
    mgr = ccmod.CongestionControl("tbaaaa", tmp_path, intent=lambda kind, value: events.append((kind, value)))
    mgr.prepare({"dctcp"})
    assert events == [
        ("struct_ops", "cc dctcp_tbaaaa"),
        ("run", "struct_ops register"),
        ("sysctls", {"key": ccmod.ALLOWED, "remove_words": "dctcp_tbaaaa"}),
        ("write", ccmod.ALLOWED),
    ]
