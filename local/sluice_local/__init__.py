"""Local development tooling for sluice (never deployed): the whole stack on a laptop.

Three rooms: :mod:`sluice_local.emulation` (any SAM template on embedded AWS, generic),
:mod:`sluice_local.demo` (``make demo`` and its scenarios) and :mod:`sluice_local.soak` (``make soak``);
what the demo and the soak share about this app is in :mod:`sluice_local.app`, and
``python -m sluice_local`` wires them together (docs/local.md).
"""
