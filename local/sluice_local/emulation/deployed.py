"""The stack's functions as Lambda holds them once deployed: each read back through the Lambda API
(name, ARN, handler, environment, timeout, memory, reserved concurrency), as AWS would run it, and
given the code folder its template packaged (:mod:`sluice_local.emulation.template`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sluice_local.emulation.functions import FunctionHost, FunctionSpec, Handler
from sluice_local.emulation.template import Translated

__all__ = ["deployed_functions"]


def deployed_functions(
    lam: Any,
    translated: Translated,
    physical_ids: Mapping[str, str],
    on_drop: Sequence[Callable[[Handler], None]],
) -> dict[str, FunctionHost]:
    """A host for each function of ``translated`` the stack created (``physical_ids``: logical id →
    name), keyed by logical id; ``on_drop``: called with each execution environment it drops."""
    layer_dirs = [d for key, d in translated.code_dirs.items() if _is_layer(translated, key)]
    hosts: dict[str, FunctionHost] = {}
    for logical_id, resource in translated.template["Resources"].items():
        if resource.get("Type") != "AWS::Lambda::Function" or logical_id not in physical_ids:
            continue  # not a function, or its Condition left it out of the stack
        name = physical_ids[logical_id]
        config = lam.get_function_configuration(FunctionName=name)
        key = resource["Properties"]["Code"]["S3Key"]
        hosts[logical_id] = FunctionHost(
            FunctionSpec(
                logical_id=logical_id,
                name=config["FunctionName"],
                arn=config["FunctionArn"],
                code_dir=translated.code_dirs[key],
                handler=config["Handler"],
                environment={k: str(v) for k, v in _variables(config).items()},
                timeout=float(config.get("Timeout", 3)),
                memory=int(config.get("MemorySize", 128)),
                layer_dirs=layer_dirs,
                role_arn=config.get("Role"),
                # read back through the Lambda API, as it was deployed
                reserved_concurrency=_int_or_none(
                    lam.get_function_concurrency(FunctionName=name).get("ReservedConcurrentExecutions")
                ),
                # as written in the template (the Lambda API's recursion config is not emulated)
                recursive_loop=_recursive_loop(resource["Properties"].get("RecursiveLoop")),
            ),
            on_drop=list(on_drop),
        )
    return hosts


def _recursive_loop(value: object) -> str:
    """The function's RecursiveLoop: ``Allow`` only when the template says so (AWS's default: Terminate)."""
    return "Allow" if value == "Allow" else "Terminate"


def _is_layer(translated: Translated, key: str) -> bool:
    return any(
        r.get("Type") == "AWS::Lambda::LayerVersion"
        and r["Properties"].get("Content", {}).get("S3Key") == key
        for r in translated.template["Resources"].values()
    )


def _variables(config: dict[str, Any]) -> dict[str, Any]:
    return dict(config.get("Environment", {}).get("Variables", {}))


def _int_or_none(value: Any) -> int | None:
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None
