"""Measuring hosts and models over ssh, for ``tfdist advise --probe`` and ``tfdist launch --backend auto``.

=====================================  ===================================================================
module                                 what it is for
=====================================  ===================================================================
:mod:`tfdist.probe.driver`             starts the agents (through :mod:`tfdist.launch.processes` and the
                                       ssh runner), measures links and step times: ``probe_hosts``,
                                       ``time_step_here``
:mod:`tfdist.probe.result`             what was measured, pure: ``ProbeResult``, ``aggregate``, the
                                       advisor's inputs from it (``build_inputs``), ``render_measured``
:mod:`tfdist.probe.agent`              ``python -m tfdist.probe.agent``, on each probed host
:mod:`tfdist.probe.wire`               the lines the driver and its agents exchange
:mod:`tfdist.probe.host_memory`        a host's usable memory (cgroup limit, /proc/meminfo)
=====================================  ===================================================================

Layering: the probe may import :mod:`tfdist.launch` (hosts, processes, the ssh runner),
:mod:`tfdist.advise` (the cost model's inputs and errors), :mod:`tfdist.errors` and
:mod:`tfdist.cgroup_memory`; the advisor never imports the probe (it is a pure cost model), and
:mod:`tfdist.auto` and the CLI sit above it. This package imports nothing itself, so the agent on a
remote host loads only what its role needs.
"""
