"""ECN marking on egress queues and congestion control, on any kernel.

- marking implementations: ``kernel`` (sch_red as the port's leaf qdisc, see ``red``) or ``bpf`` (the project's
  eBPF marker on clsact egress reading the real qdisc backlog, see ``marker``); ``choose_impl`` picks one (``class_impl`` for a traffic class: the marker then reads the class's
  own queue).
- congestion control: kernel modules, or the project's BPF struct_ops DCTCP (``cc``).
"""

from testbed.ecn.cc import CongestionControl
from testbed.ecn.choose import Impl, choose_impl, class_impl, leaf_qdisc_args
from testbed.ecn.errors import EcnError
from testbed.ecn.marker import MarkerSet
from testbed.ecn.probe import probe
from testbed.ecn.red import red_args, red_params

__all__ = [
    "CongestionControl",
    "EcnError",
    "Impl",
    "MarkerSet",
    "choose_impl",
    "class_impl",
    "leaf_qdisc_args",
    "probe",
    "red_args",
    "red_params",
]
