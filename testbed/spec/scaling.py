"""Rate scaling: a scenario states real-world link rates and a scale factor; the fabric is emulated at rate / factor.

::

    fabric:
      scale: {factor: 4000, rtt: 12us, buffers: bdp}     # or just `scale: 4000` (buffers: keep)
      host_link: {rate: 400Gbit, buffer: 32MB, mtu: 9000, ecn: {mode: step, k: 1MB}}

``apply_scale(raw_fabric) -> (emulated_fabric, notes)``: a pure map from the raw ``fabric:`` dict (with
``scale:``) to the dict ``FabricSpec.from_dict`` accepts (without ``scale:``), plus JSON notes holding both scales
for the manifest. Rates (every ``rate``) are divided by ``factor``. MTU, packet sizes and message sizes stay.
Bytes (``buffer``, ECN ``k``/``kmin``/``kmax``) follow ``buffers``:

- ``keep`` (default): unchanged. Scaling rate down by F is a time dilation: serialisation times grow by F, bytes
  in flight stay the same, so buffer / BDP is preserved for the part of the RTT that is serialisation. The real
  fixed latencies (propagation, switch, NIC) would have to grow by F too; without netem they cannot, and the
  emulator's own per-hop latency (~tens of us) stands in for them.
- ``bdp``: keep each buffer and threshold the same multiple of the BDP: bytes x (rate_emu x rtt_emu) /
  (rate_real x rtt_real). Needs the real base RTT ``rtt``; ``emulated_rtt`` defaults to an estimate (per-hop
  serialisation of one frame at the emulated rate both ways over the longest path, plus 30 us per hop of stack
  latency). Values are clamped to at least 2 frames (a threshold to 1 frame) and the clamps are listed in notes.
  Packet-unit sizes (``20pkt``) are never rescaled.

``delay`` (propagation) is multiplied by the factor when given (that needs netem, which this kernel lacks);
it is otherwise the one thing that does not scale, and the notes say so.
"""

from __future__ import annotations

import copy
from typing import Any

from testbed.spec.fields import SpecError
from testbed.spec.link import ETH_HEADER
from testbed.spec.units import UnitError, parse_duration, parse_rate, parse_size, parse_tc_time

STACK_LATENCY_S = 30e-6  # per hop, one way, of the emulator's kernel stack (from kernel timestamps)
SCALE_KEYS = {"factor", "rtt", "emulated_rtt", "buffers"}
LINK_SECTIONS = ("host_link", "fabric_link")


def _parse_scale(value: Any) -> dict[str, Any]:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = {"factor": value}
    if not isinstance(value, dict):
        raise SpecError("fabric.scale", f"expected a factor or a mapping with factor, got {value!r}")
    unknown = sorted(set(value) - SCALE_KEYS)
    if unknown:
        raise SpecError(f"fabric.scale.{unknown[0]}", f"unknown key (allowed: {', '.join(sorted(SCALE_KEYS))})")
    f = value.get("factor")
    if isinstance(f, bool) or not isinstance(f, (int, float)) or f < 1:
        raise SpecError("fabric.scale.factor", f"expected a number >= 1, got {f!r}")
    mode = value.get("buffers", "bdp" if "rtt" in value else "keep")
    if mode not in ("keep", "bdp"):
        raise SpecError("fabric.scale.buffers", f"must be keep or bdp, got {mode!r}")
    out: dict[str, Any] = {"factor": float(f), "buffers": mode}
    for key in ("rtt", "emulated_rtt"):
        if key in value:
            try:
                out[key] = parse_duration(value[key])
            except UnitError as exc:
                raise SpecError(f"fabric.scale.{key}", str(exc)) from None
    if mode == "bdp" and "rtt" not in out:
        raise SpecError("fabric.scale.rtt", "buffers: bdp needs the real base RTT (e.g. rtt: 12us)")
    return out


def _hops(fab: dict[str, Any]) -> int:
    """veth links crossed one way on the longest host-to-host path."""
    return 6 if fab.get("topology") == "fat-tree" else 4


def _rate_text(bps: float) -> str:
    return f"{bps / 1e6:.6g}Mbit"


def _bytes_text(n: float) -> str:
    return str(int(round(n)))


class _Scaler:
    def __init__(self, sc: dict[str, Any], fab: dict[str, Any]):
        self.sc = sc
        self.mtu = int((fab.get("host_link") or {}).get("mtu", 9000))
        self.frame = self.mtu + ETH_HEADER
        self.hops = _hops(fab)
        self.links: list[dict[str, Any]] = []
        self.clamped: list[str] = []

    def emulated_rtt(self, rate_emu: float) -> float:
        if "emulated_rtt" in self.sc:
            return float(self.sc["emulated_rtt"])
        return 2 * self.hops * (self.frame * 8 / rate_emu + STACK_LATENCY_S)

    def size(
        self, where: str, value: Any, rate_real: float, rate_emu: float, minimum: int
    ) -> tuple[Any, dict[str, Any]]:
        try:
            s = parse_size(value)
        except UnitError as exc:
            raise SpecError(where, str(exc)) from None
        if s.unit != "bytes" or self.sc["buffers"] == "keep":
            return value, {"real": str(value), "emulated": str(value)}
        rtt_real = float(self.sc["rtt"])
        rtt_emu = self.emulated_rtt(rate_emu)
        bdp_real = rate_real * rtt_real / 8
        bdp_emu = rate_emu * rtt_emu / 8
        n = s.value * bdp_emu / bdp_real
        if n < minimum:
            self.clamped.append(
                f"{where}: {s.value:.0f} B = {s.value / bdp_real:.2f} BDP would be {n:.0f} B; clamped to {minimum} B"
            )
            n = minimum
        return _bytes_text(n), {
            "real": str(value),
            "emulated": f"{n:.0f}B",
            "bdp_multiple": round(s.value / bdp_real, 3),
        }

    def link(self, where: str, data: dict[str, Any], base_rate: float | None) -> tuple[dict[str, Any], float | None]:
        out = dict(data)
        info: dict[str, Any] = {"where": where}
        rate_real = base_rate
        if "rate" in data:
            try:
                rate_real = float(parse_rate(data["rate"]))
            except UnitError as exc:
                raise SpecError(f"{where}.rate", str(exc)) from None
        if rate_real is None:
            rate_real = 100e6 * self.sc["factor"]  # LinkSpec's default rate, read as emulated
        rate_emu = rate_real / self.sc["factor"]
        if "rate" in data:
            out["rate"] = _rate_text(rate_emu)
            info["rate"] = {"real": str(data["rate"]), "emulated": out["rate"]}
        if "buffer" in data:
            out["buffer"], info["buffer"] = self.size(
                f"{where}.buffer", data["buffer"], rate_real, rate_emu, 2 * self.frame
            )
        ecn = data.get("ecn")
        if isinstance(ecn, dict):
            ecn = dict(ecn)
            for key in ("k", "kmin", "kmax"):
                if key in ecn:
                    ecn[key], info[f"ecn.{key}"] = self.size(
                        f"{where}.ecn.{key}", ecn[key], rate_real, rate_emu, self.frame
                    )
            out["ecn"] = ecn
        if "delay" in data:
            try:
                d = parse_tc_time(data["delay"])
            except UnitError as exc:
                raise SpecError(f"{where}.delay", str(exc)) from None
            out["delay"] = f"{d * self.sc['factor'] * 1e6:.6g}us"
            info["delay"] = {"real": str(data["delay"]), "emulated": out["delay"], "needs": "netem"}
        if self.sc["buffers"] == "bdp":
            info["bdp_bytes"] = {
                "real": round(rate_real * float(self.sc["rtt"]) / 8),
                "emulated": round(rate_emu * self.emulated_rtt(rate_emu) / 8),
            }
        self.links.append(info)
        return out, rate_real


def apply_scale(raw: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Map a raw ``fabric:`` dict with ``scale:`` to the emulated one; without ``scale:`` return it unchanged.

    Returns (emulated fabric dict, notes). Notes (JSON): ``factor``, ``buffers``, ``rtt_real_s``, ``links`` (per
    section/override: rate, buffer, ECN thresholds, delay, BDP at both scales), ``clamped``, ``not_scaled``.
    """
    if "scale" not in raw:
        return copy.deepcopy(raw), {}
    fab = copy.deepcopy(raw)
    sc = _parse_scale(fab.pop("scale"))
    s = _Scaler(sc, fab)
    host_rate: float | None = None
    if "host_link" in fab:
        fab["host_link"], host_rate = s.link("host_link", fab["host_link"] or {}, None)
    if "fabric_link" in fab:
        fab["fabric_link"], _ = s.link("fabric_link", fab["fabric_link"] or {}, host_rate)
    for i, ov in enumerate(fab.get("overrides") or []):
        fab["overrides"][i], _ = s.link(f"overrides[{i}]", ov, host_rate)
    not_scaled = [
        "MTU and packet sizes (bytes per packet are real)",
        "message and flow sizes in the workload (bytes)",
        "workload rates and times (iperf rate, compute_gap, pipeline compute): scale them in the workload yourself; "
        "trace and ddp compute times do stretch by the factor",
    ]
    if not any("delay" in li for li in s.links):
        not_scaled.insert(
            0,
            "propagation delay: the emulated base RTT is the emulator's own latency, not the real RTT x factor "
            "(no netem on this kernel)",
        )
    notes = {
        "factor": sc["factor"],
        "buffers": sc["buffers"],
        "rtt_real_s": sc.get("rtt"),
        "emulated_rtt_s": sc.get("emulated_rtt"),
        "links": s.links,
        "clamped": s.clamped,
        "not_scaled": not_scaled,
    }
    return fab, notes


def describe(notes: dict[str, Any]) -> list[str]:
    """One line per scaled link section, for logs and reports."""
    if not notes:
        return []
    lines = [f"scale 1/{notes['factor']:g} (buffers: {notes['buffers']})"]
    for li in notes["links"]:
        parts = [
            f"{k} {v['real']} -> {v['emulated']}"
            for k, v in li.items()
            if isinstance(v, dict) and "real" in v and "emulated" in v
        ]
        lines.append(f"  {li['where']}: " + ", ".join(parts))
    lines += [f"  clamped: {c}" for c in notes["clamped"]]
    lines += [f"  not scaled: {n}" for n in notes["not_scaled"]]
    return lines
