"""Scenarios that drive a deployed sluice stack and check what really happened.

``make demo`` and the e2e tests run the same scenarios, from these modules:

- :mod:`~sluice_local.app.observer` — the stack seen from outside (AWS state, the example's
  ledger table, log lines found by the layer's own message constants);
- :mod:`~sluice_local.demo.scenarios.runner` — the scenario contract and the runner;
- :mod:`~sluice_local.demo.scenarios.consumer`, :mod:`~sluice_local.demo.scenarios.delay`,
  :mod:`~sluice_local.demo.scenarios.redrive` — each capability's scenarios.
"""
