"""sluice: resilient SQS processing on AWS Lambda.

The package is kept import-light on purpose (cold starts): import the module you need,
e.g. ``from sluice.consumer import Consumer`` or ``from sluice.errors import PermanentError``.
"""

__version__ = "0.1.0"
