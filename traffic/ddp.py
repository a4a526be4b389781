"""A PyTorch-DDP-style training step (``kind: ddp``) as a trace graph (traffic.trace_graph's form), replayed like an
imported trace.

Per rank: the forward through the layers, then the backward from the last layer. Gradients fill buckets of
``bucket`` bytes in backward order (a bucket closes when it holds at least that much, as DDP's do, and the last one
with what is left). With ``overlap`` a bucket's all-reduce depends on the backward of the last layer it holds; without
it, on the whole backward. Each all-reduce also waits for the one before (DDP launches them in order on one stream).
The optimizer step waits for every all-reduce. Compute alone, one step takes the sum of the forward, backward and
optimizer times: what the iteration takes beyond that is the exposed communication.
"""

from __future__ import annotations

from typing import Any

from testbed.spec.workload import DdpJob


def ddp_graph(spec: DdpJob, ranks: int) -> dict[str, Any]:
    layers, time_scale = spec.per_layer(), spec.time_scale
    nodes: list[dict[str, Any]] = []

    def add(name: str, deps: list[int], **kw: Any) -> int:
        nodes.append({"id": len(nodes), "name": name, "deps": deps, **kw})
        return len(nodes) - 1

    last: list[int] = []
    for i, (_, fwd, _) in enumerate(layers):
        last = [add(f"layer{i}.fwd", last, kind="comp", seconds=fwd * time_scale)]
    buckets: list[tuple[int, int]] = []  # (bytes, the backward node that fills it last)
    filling = 0
    for i in reversed(range(len(layers))):
        grad, _, bwd = layers[i]
        last = [add(f"layer{i}.bwd", last, kind="comp", seconds=bwd * time_scale)]
        filling += grad
        if filling >= spec.bucket or i == 0:
            buckets.append((filling, last[0]))
            filling = 0
    end_of_backward = last[0]
    prev: list[int] = []
    for b, (size, filler) in enumerate(buckets):
        if size == 0:
            continue
        ready = filler if spec.overlap else end_of_backward
        prev = [add(f"bucket{b}.allreduce", [ready, *prev], kind="coll", coll="allreduce", size=size,
                    algorithm=spec.algorithm)]  # fmt: skip
    add("optimizer", [end_of_backward, *prev], kind="comp", seconds=spec.optimizer * time_scale)
    return {"ranks": ranks, "nodes": [[dict(x) for x in nodes] for _ in range(ranks)]}
