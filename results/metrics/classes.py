"""Which traffic class each job's packets ride, from the resolved scenario in the manifest: the hosts' classes
(``fabric.host_link.classes``, their first hop) and the job's ``dscp``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def class_of_jobs(manifest: Mapping[str, Any]) -> dict[str, str]:
    """job name -> traffic class name; empty when the hosts' links have no classes."""
    scenario = manifest.get("scenario") or {}
    classes = ((scenario.get("fabric") or {}).get("host_link") or {}).get("classes") or []
    if not classes:
        return {}
    by_dscp = {int(d): str(c["name"]) for c in classes for d in c.get("dscp") or []}
    default = next((str(c["name"]) for c in classes if c.get("default")), by_dscp.get(0))
    out = {}
    for job in scenario.get("workload") or []:
        dscp = int(job.get("dscp") or 0)
        cls = by_dscp.get(dscp, default)
        if job.get("name") is not None and cls is not None:
            out[str(job["name"])] = cls
    return out
