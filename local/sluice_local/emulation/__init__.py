"""The generic emulation: any SAM template deployed into embedded AWS (moto) and run for real.

Template deploy (:mod:`~sluice_local.emulation.template`, :mod:`~sluice_local.emulation.cloud`), the
functions and their event source mappings (:mod:`~sluice_local.emulation.functions`,
:mod:`~sluice_local.emulation.pollers`), schedules and alarms (:mod:`~sluice_local.emulation.emulated`,
:mod:`~sluice_local.emulation.metric_math`), everything done to moto
(:mod:`~sluice_local.emulation.moto_adapter`) and seeded fault injection
(:mod:`~sluice_local.emulation.faults`).

It knows nothing of the demo, the soak, the job store or the operator CLI
(``tests/unit/test_local_imports.py``): what a stack is deployed with beyond its template and parameters
(a database, ...) is plugged in by whoever starts it (:class:`~sluice_local.emulation.cloud.Attachment`).
"""
