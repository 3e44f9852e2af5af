"""Test infrastructure that benchmarks and users may reach too.

``tfdist.testing.netlab`` builds several "hosts" on one Linux machine (network namespaces on a
bridge, an OpenSSH server per host, per-host link rates, CPU quotas and link cuts) so that
multi-host jobs run, and are tested, over real links::

    from tfdist.testing.netlab import Lab

    with Lab(["h0", "h1"]) as lab:       # needs root
        lab.run("h0", ["ssh", "-p", str(lab.ssh_port), "-i", str(lab.identity_file), "h1", "hostname"])

Importing this package starts nothing and needs no privileges.

Layering: the top (beside ``tfdist.cli``): it may import :mod:`tfdist.launch`, :mod:`tfdist.cluster`
and the ground modules.
"""
