"""The queue controller: watches gangs, asks the core where and when they run, writes the answer.

Functional core, imperative shell: ``observe`` turns Kubernetes objects (plain dicts) into core
values, ``reconcile`` turns those plus the core's decisions into a plan of writes (both pure),
``writer`` applies the plan through :mod:`volcano_metronome.kube`, and ``loop`` runs the cycles
under ``leader`` election. See docs/controller.md.
"""
