"""What moto and the SAM translator print on every deploy that a user cannot act on, said once instead.

moto logs "No Moto CloudFormation support for AWS::SQS::QueuePolicy" (and warns the same) for each
resource of a type its CloudFormation does not create, and the SAM translator's unpublished metrics warn
when it is garbage-collected: some 25 lines before a stack's endpoint. :func:`install_quiet` silences
them while a stack runs; :func:`not_created` names what moto's CloudFormation leaves out, for one line
of the runtime's log; :func:`layer_arns` gives an output that ``Ref``s a layer version its ARN (moto's
CloudFormation gives the object's repr).
"""

from __future__ import annotations

import logging
import re
import warnings
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from sluice_local.emulation.moto_adapter.attributes import Undo

__all__ = ["install_quiet", "layer_arns", "not_created"]

_LOGGERS = ("samtranslator.metrics.metrics",)
_MOTO_NOTICE = "No Moto CloudFormation support for"


class _NoUnsupportedNotice(logging.Filter):
    """moto's cloudformation parser logs on its package logger ("moto"), which says other things too."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(_MOTO_NOTICE)


_UNSUPPORTED = r"Tried to parse AWS::\S+ but it's not supported by moto's CloudFormation implementation"
_LAYER_REPR = re.compile(r"<moto\.awslambda\.models\.LayerVersion object at 0x[0-9a-f]+>")


def install_quiet() -> Undo:
    """Silence moto's per-resource "not supported" lines and the translator's metrics warning."""
    levels = {name: logging.getLogger(name).level for name in _LOGGERS}
    for name in _LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)
    notice = _NoUnsupportedNotice()
    logging.getLogger("moto").addFilter(notice)
    warnings.filterwarnings("ignore", message=_UNSUPPORTED, category=UserWarning)

    def undo() -> None:
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)
        logging.getLogger("moto").removeFilter(notice)

    return undo


def not_created(types: Iterable[str]) -> Counter[str]:
    """The resource types (with their counts) moto's CloudFormation creates nothing for."""
    from moto.cloudformation import parsing  # noqa: PLC0415

    return Counter(
        kind
        for kind in types
        if not kind.startswith("Custom::")
        and kind not in parsing.NULL_MODELS
        and parsing.resource_class_from_type(kind) is None  # as patched: the runtime's own types count
    )


def layer_arns(
    outputs: Mapping[str, str], declared: Mapping[str, Any], lambda_client: Any, stack_name: str
) -> dict[str, str]:
    """``outputs`` with each one that ``Ref``s a layer version (``declared``: the template's Outputs) given
    the layer version's ARN, as CloudFormation gives it (moto names it ``<stack>-<logical id>-<id>``)."""
    fixed = dict(outputs)
    layers: list[dict[str, Any]] | None = None
    for key, value in outputs.items():
        ref = (declared.get(key) or {}).get("Value")
        if not (_LAYER_REPR.fullmatch(value) and isinstance(ref, dict) and isinstance(ref.get("Ref"), str)):
            continue
        if layers is None:
            layers = list(lambda_client.list_layers().get("Layers", []))
        named = [
            layer["LatestMatchingVersion"]["LayerVersionArn"]
            for layer in layers
            if str(layer.get("LayerName", "")).startswith(f"{stack_name}-{ref['Ref']}-")
        ]
        if len(named) == 1:
            fixed[key] = str(named[0])
    return fixed
