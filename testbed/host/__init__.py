"""Host resources a run owns or needs: processes (``procs``), names and state files with ``clean``
(``ownership``), the sampler's /dev/shm stage (``staging``), sysctl writes (``sysctls``), importing Mininet
(``mininet_compat``), and what this machine can do (``probe`` tries it; ``capabilities`` is the typed result).
"""
