"""The project's eBPF toolkit, shared by every package that loads a program.

- ``build``: compiles the C sources in ``src/`` for the running kernel into build/bpf/ (``python3 -m
  testbed.bpf.build``); the marker, the struct_ops DCTCP, the kernel queue telemetry, flowlet switching and the
  PFC controller's watcher.
- ``libbpf``: libbpf over ctypes (object loading, maps, ring buffers); ``bpfsys``: the few bpf(2) commands on
  pinned maps; ``sysrun``: tc, bpftool and sysctl in a network namespace, the BPF filesystem and its pins.

The loaders themselves live with what they serve: the marker and DCTCP in testbed/ecn/, the queue telemetry in
testbed/telemetry/, flowlets in testbed/fabric/, the PFC controller in testbed/pfc/.
"""

from testbed.bpf.errors import BpfError

__all__ = ["BpfError"]
