"""The AWS limits sluice relies on, each defined once.

Every module that sends, delays or hides a message takes its bound from here, so a limit AWS raises
(as it did for the message size in 2025) is changed in one place.
"""

from __future__ import annotations

__all__ = [
    "MAX_ATTRIBUTES",
    "MAX_BATCH_BYTES",
    "MAX_BATCH_ENTRIES",
    "MAX_DELAY_SECONDS",
    "MAX_LONG_DELAY_SECONDS",
    "MAX_MESSAGE_BYTES",
    "MAX_VISIBILITY_SECONDS",
]

# --- SQS ---------------------------------------------------------------------------------------
MAX_MESSAGE_BYTES = 1024 * 1024
"""One message: the body plus every attribute's name, type and value, in bytes (1 MiB)."""
MAX_BATCH_BYTES = 1024 * 1024
"""One SendMessageBatch call: all its entries together (1 MiB)."""
MAX_BATCH_ENTRIES = 10
"""Entries of one SendMessageBatch / DeleteMessageBatch / ChangeMessageVisibilityBatch call."""
MAX_ATTRIBUTES = 10
"""Message attributes one message may carry."""
MAX_DELAY_SECONDS = 900
"""DelaySeconds of one message (15 minutes)."""
MAX_VISIBILITY_SECONDS = 43_200
"""How long a received message can stay invisible (12 hours)."""

# --- Step Functions ----------------------------------------------------------------------------
MAX_LONG_DELAY_SECONDS = 365 * 86_400
"""The long-delay pipeline's horizon: a Standard execution lives at most one year."""
