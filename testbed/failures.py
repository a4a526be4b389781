"""Link failures on a built fabric: down and up, with routing that reconverges after a detection delay.

A link goes down at both ends at once (admin down): each end's kernel drops its next hops through it at once, as
a switch does on loss of signal. The rest of the fabric learns of it only after ``detection_s``, as BFD and a
routing protocol would tell it: then every router gets the more specific routes that steer around the failed
links (``testbed.spec.reroute``), and loses those it no longer needs. Bringing a link up restores its two ends'
routes at once (the kernel deleted those whose only next hop it was) and the rest after ``detection_s``.

Every change goes through netlink sockets opened in each router's namespace beforehand (pyroute2), so a
reconvergence costs well under a millisecond rather than a process per namespace. Each step is logged with its
time: ``down``/``up`` when the link changed, ``rerouted`` when the fabric had converged on it.
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from testbed.fabric import tc
from testbed.spec.events import LinkEvent
from testbed.spec.link import ETH_HEADER, LinkSpec
from testbed.spec.reroute import Override, find_link, overrides
from testbed.spec.topology import Link, Topology
from testbed.telemetry.netns import run_in_netns

Log = Callable[[dict[str, Any]], None]


class LinkFailures:
    """Owns the netlink sockets and detection timers of one fabric's link events; ``close`` cancels the timers
    (the routes stay as they are: the fabric is torn down next)."""

    def __init__(self, topo: Topology, netns_of: Callable[[str], str], detection_s: float, log: Log):
        from pyroute2 import IPRoute

        self.topo = topo
        self.netns_of = netns_of
        self.detection_s = detection_s
        self.log = log
        self.failed: list[Link] = []
        self.errors: list[str] = []  # what a detection timer could not apply (the run fails with it)
        self._installed: dict[tuple[str, str], Override] = {}
        self._timers: list[threading.Timer] = []
        self._lock = threading.Lock()
        self._ipr: dict[str, Any] = {}
        self._ifindex: dict[tuple[str, str], int] = {}
        for name in topo.nodes:
            ipr = run_in_netns(netns_of(name), IPRoute)  # a netlink socket stays in the namespace it was made in
            self._ipr[name] = ipr
            for link in ipr.get_links():
                self._ifindex[(name, link.get_attr("IFLA_IFNAME"))] = link["index"]

    # --- events ----------------------------------------------------------------------------------------------
    def down(self, link: Link, detection_s: float | None = None) -> None:
        with self._lock:
            for node, dev in ((link.a, link.a_dev), (link.b, link.b_dev)):
                self._set_state(node, dev, "down")
            if link not in self.failed:
                self.failed.append(link)
            t = time.time()
            self.log({"t": t, "event": "down", "link": f"{link.a}-{link.b}"})
            self._detect(link, list(self.failed), t, detection_s)

    def up(self, link: Link, detection_s: float | None = None) -> None:
        with self._lock:
            for node, dev in ((link.a, link.a_dev), (link.b, link.b_dev)):
                self._set_state(node, dev, "up")
            for node in (link.a, link.b):
                for r in self.topo.routes[node]:
                    self._route_replace(node, r.dst, r.nexthops)
            self.failed = [lk for lk in self.failed if lk != link]
            t = time.time()
            self.log({"t": t, "event": "up", "link": f"{link.a}-{link.b}"})
            self._detect(link, list(self.failed), t, detection_s)

    def degrade(self, link: Link, rate_bps: int | None, loss: float | None) -> None:
        """The link's rate cut and random loss raised, both directions; routing does not notice."""
        with self._lock:
            for node, dev, spec in ((link.a, link.a_dev, link.a_spec), (link.b, link.b_dev, link.b_spec)):
                if rate_bps is not None:
                    self._rate(node, dev, replace(spec, rate_bps=rate_bps))
                self._loss(node, dev, loss or 0.0)
            detail = f"rate {rate_bps} bit/s" if rate_bps is not None else ""
            detail += f"{', ' if detail else ''}loss {loss}" if loss else ""
            self.log({"t": time.time(), "event": "degrade", "link": f"{link.a}-{link.b}", "detail": detail})

    def restore(self, link: Link) -> None:
        """The link's own rate, loss and MTU back."""
        with self._lock:
            for node, dev, spec in ((link.a, link.a_dev, link.a_spec), (link.b, link.b_dev, link.b_spec)):
                self._rate(node, dev, spec)
                self._loss(node, dev, 0.0)
                self._ipr[node].link("set", index=self._ifindex[(node, dev)], mtu=spec.mtu)
            self.log({"t": time.time(), "event": "restore", "link": f"{link.a}-{link.b}"})

    def mtu(self, link: Link, end: str, mtu: int) -> None:
        """One side's interface MTU: a mismatch drops the frames it receives above it (veth, like a switch port,
        does not fragment), silently: no ICMP, so path MTU discovery cannot help."""
        with self._lock:
            dev = link.a_dev if end == link.a else link.b_dev
            self._ipr[end].link("set", index=self._ifindex[(end, dev)], mtu=mtu)
            self.log({"t": time.time(), "event": "mtu", "link": f"{link.a}-{link.b}", "detail": f"{end} mtu {mtu}"})

    def close(self) -> None:
        for timer in self._timers:
            timer.cancel()
        with self._lock:  # a timer already running finishes first
            for ipr in self._ipr.values():
                ipr.close()
            self._ipr.clear()

    # --- routing ---------------------------------------------------------------------------------------------
    def _detect(self, link: Link, failed: list[Link], t_event: float, detection_s: float | None) -> None:
        """Reconverge on the failed set as it was at this event, ``detection_s`` after it."""
        wanted = overrides(self.topo, failed)  # computed now, applied when detected
        delay = self.detection_s if detection_s is None else detection_s
        timer = threading.Timer(delay, self._reconverge, (link, wanted, t_event))
        timer.daemon = True
        self._timers.append(timer)
        timer.start()

    def _reconverge(self, link: Link, wanted: list[Override], t_event: float) -> None:
        try:
            self._apply(link, wanted, t_event)
        except Exception as exc:  # a timer thread has no caller: keep it for the run to fail with
            self.errors.append(f"rerouting around {link.a}-{link.b}: {type(exc).__name__}: {exc}")

    def _apply(self, link: Link, wanted: list[Override], t_event: float) -> None:
        with self._lock:
            if not self._ipr:
                return
            keep = {(o.node, o.dst): o for o in wanted}
            for key, o in list(self._installed.items()):
                if key not in keep:
                    self._ipr[o.node].route("del", dst=o.dst)
                    del self._installed[key]
            for key, o in keep.items():
                if self._installed.get(key) != o:
                    self._route_replace(o.node, o.dst, o.nexthops)
                    self._installed[key] = o
            t = time.time()
            self.log(
                {
                    "t": t,
                    "event": "rerouted",
                    "link": f"{link.a}-{link.b}",
                    "after_s": t - t_event,
                    "routes": len(keep),
                }
            )

    def _rate(self, node: str, dev: str, spec: LinkSpec) -> None:
        burst, frame = tc.htb_burst(spec), spec.mtu + ETH_HEADER
        line = (
            f"class change dev {dev} parent {tc.ROOT_HANDLE} classid {tc.CLASS_ID} htb rate {spec.rate_bps}bit "
            f"ceil {spec.rate_bps}bit burst {burst} cburst {burst} quantum {frame}"
        )
        subprocess.run(["tc", "-n", self.netns_of(node), *line.split()], check=True, capture_output=True)

    def _loss(self, node: str, dev: str, loss: float) -> None:
        """An nftables table of this port's own (``testbed_events_<dev>``), made or deleted."""
        table = f"testbed_events_{dev.replace('-', '_')}"
        ns = ["ip", "netns", "exec", self.netns_of(node), "nft"]
        subprocess.run([*ns, "delete", "table", "inet", table], capture_output=True)  # absent at first: fine
        if loss > 0:
            rule = f'oifname "{dev}" numgen random mod 1000000 < {round(loss * 1_000_000)} counter drop'
            hook = "type filter hook postrouting priority 0; policy accept;"
            script = f"table inet {table} {{\n  chain postrouting {{\n    {hook}\n    {rule}\n  }}\n}}\n"
            subprocess.run([*ns, "-f", "-"], input=script, text=True, check=True, capture_output=True)

    def _set_state(self, node: str, dev: str, state: str) -> None:
        self._ipr[node].link("set", index=self._ifindex[(node, dev)], state=state)

    def _route_replace(self, node: str, dst: str, hops: tuple[tuple[str, str], ...]) -> None:
        ipr = self._ipr[node]
        dst = "0.0.0.0/0" if dst == "default" else dst
        if not hops:
            ipr.route("replace", dst=dst, type="unreachable")
        elif len(hops) == 1:
            ipr.route("replace", dst=dst, gateway=hops[0][0], oif=self._ifindex[(node, hops[0][1])])
        else:
            paths = [{"gateway": gw, "oif": self._ifindex[(node, dev)]} for gw, dev in hops]
            ipr.route("replace", dst=dst, multipath=paths)


class EventRunner:
    """Applies a scenario's link events (``testbed.spec.events``) at their times after traffic starts, from a
    thread; ``stop`` ends it early (the run ended or failed)."""

    def __init__(self, failures: LinkFailures, events: tuple[LinkEvent, ...], t0: float):
        self.failures = failures
        links = [find_link(failures.topo, ev.link, "events") for ev in events]  # checked before the run built
        self.steps = sorted(
            ((t0 + at, i, action, ev, links[i]) for i, ev in enumerate(events) for at, action in ev.steps()),
            key=lambda s: (s[0], s[1]),
        )
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="link-events", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        f = self.failures
        for t, _, action, ev, link in self.steps:
            if self._stop.wait(max(0.0, t - time.time())):
                return
            try:
                if action == "down":
                    f.down(link, ev.detection_s)
                elif action == "up":
                    f.up(link, ev.detection_s)
                elif action == "degrade":
                    f.degrade(link, ev.rate_bps, ev.loss)
                elif action == "mtu":
                    f.mtu(link, ev.end, int(ev.mtu or 0))
                else:
                    f.restore(link)
            except Exception as exc:  # netlink or tc refused: the run records it and fails
                self.errors.append(f"{action} {ev.link}: {type(exc).__name__}: {exc}")
                return

    def stop(self) -> list[str]:
        """End the thread; the errors it and the reroutes met (empty when every event was applied)."""
        self._stop.set()
        self._thread.join(timeout=10)
        return self.errors + self.failures.errors
