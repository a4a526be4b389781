"""The build layer: a fabric spec made real as Mininet namespaces, routed links, tc shaping and ECMP.

Modules: ``tc`` (tc command lines per port), ``routing`` (route commands, the routers' ECMP sysctls, path
prediction by the kernel), ``mininet_compat`` (importing Debian's Mininet), ``build`` (``Fabric``: build and
teardown).
"""
