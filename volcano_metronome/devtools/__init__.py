"""Developer and test tooling: binaries built from Go modules, a local control plane, a dev cluster.

Nothing here is imported by the product itself; tests, ``.ci/prepare`` and the ``tools`` and
``dev-cluster`` commands use it.
"""
