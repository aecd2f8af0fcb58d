"""The sluice app on the emulation: what the demo, the soak and the e2e tests share.

- :mod:`~sluice_local.app.stack` — a sluice stack deployed locally: samconfig.toml's parameters and the
  job store attached (its PostgreSQL schema and secret, its connections released with their environment);
- :mod:`~sluice_local.app.postgres` — the real PostgreSQL the job store uses;
- :mod:`~sluice_local.app.fast` — the parameters that run the stack in seconds;
- :mod:`~sluice_local.app.observer` — the deployed stack seen from outside;
- :mod:`~sluice_local.app.messages` — the example's messages (an order, a claim check).
"""
