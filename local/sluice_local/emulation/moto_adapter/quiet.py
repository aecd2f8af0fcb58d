"""What moto and the SAM translator print on every deploy that a user cannot act on, said once instead.

moto logs "No Moto CloudFormation support for AWS::SQS::QueuePolicy" (and warns the same) for each
resource of a type its CloudFormation does not create, and the SAM translator's unpublished metrics warn
when it is garbage-collected: some 25 lines before a stack's endpoint. :func:`install_quiet` silences
them while a stack runs; :func:`not_created` names what moto's CloudFormation leaves out, for one line
of the runtime's log; :func:`install_layer_version_refs` makes a ``Ref`` of a layer version its ARN
(moto's CloudFormation gave the object's repr, in an output as in an SSM parameter).
"""

from __future__ import annotations

import logging
import warnings
from collections import Counter
from collections.abc import Iterable

from sluice_local.emulation.moto_adapter.attributes import Undo

__all__ = ["install_layer_version_refs", "install_quiet", "not_created"]

_LOGGERS = ("samtranslator.metrics.metrics",)
_MOTO_NOTICE = "No Moto CloudFormation support for"


class _NoUnsupportedNotice(logging.Filter):
    """moto's cloudformation parser logs on its package logger ("moto"), which says other things too."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(_MOTO_NOTICE)


_UNSUPPORTED = r"Tried to parse AWS::\S+ but it's not supported by moto's CloudFormation implementation"


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


def install_layer_version_refs() -> Undo:
    """A ``Ref`` of a layer version is its ARN, as CloudFormation gives it, wherever the template uses it
    (an output, an SSM parameter's value, a function's ``Layers``): moto's model has no physical id, so its
    CloudFormation put the object's repr there."""
    from moto.awslambda.models import LayerVersion  # noqa: PLC0415 - moto's model, patched while a stack runs

    had = "physical_resource_id" in vars(LayerVersion)
    previous = vars(LayerVersion).get("physical_resource_id")
    LayerVersion.physical_resource_id = property(lambda self: self.arn)  # type: ignore[attr-defined]

    def undo() -> None:
        if had:
            LayerVersion.physical_resource_id = previous  # type: ignore[attr-defined]
        else:
            del LayerVersion.physical_resource_id  # type: ignore[attr-defined]

    return undo
