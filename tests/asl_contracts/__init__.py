"""Check a state machine definition's JSONPaths against the contracts of the data they read.

The definition is walked as Step Functions runs it: from the execution input's contract, through every
state's InputPath, Parameters/ItemSelector (``.$`` paths and intrinsic functions), the Task's result
(a Lambda's return contract, read from its handler's annotations; an AWS API's output shape, from
botocore's service model), ResultSelector, ResultPath and OutputPath, into Choice rules, Wait paths,
Map items and Catch outputs. Every path must resolve in the shape of the data at that point, and what
a Task is given must match its function's input contract. Each problem names the definition, the
state (``Map/Inner``), the field and the path. Task timeout paths, Map tolerance, ItemReader,
ItemBatcher and ResultWriter paths are followed too; any other ``*Path`` or ``.$`` key of a state the
walk reached (``sweep.py``) is reported as not checked, never passed over.

Shapes are built from ``TypedDict``s with :func:`typing.get_type_hints` and ``__required_keys__``.
Where a state can be reached with different shapes (a Choice, a loop, a Map's several outcomes), the
alternatives are kept apart: a path must resolve in every one (in at least one under ``[*]`` and
``IsPresent``), and a Choice comparing a field with a constant narrows them.
"""

from tests.asl_contracts.sources import Handler, handlers, load_template
from tests.asl_contracts.walk import check

__all__ = ["Handler", "check", "handlers", "load_template"]
