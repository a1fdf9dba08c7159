"""The simulator: the same scheduling core, driven by a simulated cluster, against four baselines.

``kernel`` orders events, ``fluid`` shares links max-min fairly among the bursts in flight,
``workload`` turns a scenario into jobs, ``engine`` runs the jobs (and the runtime helper that aligns
their bursts to the published offsets), ``policies`` decide where (and when) gangs run, ``report``
and ``plots`` turn runs into the JSON report and PNG figures. See docs/simulator.md.
"""
