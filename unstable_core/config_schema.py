"""The JSON Schema of a whole run config, each component section expanded to the options of the
installed plugins' components (``unstable config schema``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .config import SINGLE_SECTIONS, RunConfig
from .errors import describe_error

if TYPE_CHECKING:  # pragma: no cover
    from .plugins import PluginSystem


def _choice_schema(system: PluginSystem, kind: str, stage: str | None = None) -> dict[str, Any]:
    variants: list[dict[str, Any]] = []
    defs: dict[str, Any] = {}
    for name in system.names(kind):
        spec = system.get(kind, name)
        if stage is not None and getattr(spec, "stage", None) != stage:
            continue
        try:
            sch = spec.config.model_json_schema()
        except Exception as exc:  # a field JSON Schema cannot express (a Callable): the others are still described
            variants.append({"type": "object", "title": f"{kind}:{name}", "required": ["name"],
                             "properties": {"name": {"const": name, "description": spec.summary}},
                             "description": f"its options cannot be written as JSON Schema ({describe_error(exc)})"})
            continue
        defs.update(sch.pop("$defs", {}))
        props = {"name": {"const": name, "description": spec.summary}, **sch.get("properties", {})}
        variants.append(
            {
                "type": "object",
                "title": f"{kind}:{name}",
                "properties": props,
                "required": ["name", *sch.get("required", [])],
                "additionalProperties": False,
            }
        )
    # no plugin offers this kind: nothing validates (jsonschema rejects an empty oneOf)
    out: dict[str, Any] = {"oneOf": variants} if variants else {"not": {}, "description": f"no {kind} component is installed"}
    if defs:
        out["$defs"] = defs
    return out


def config_json_schema(system: PluginSystem) -> dict[str, Any]:
    """JSON Schema of RunConfig, each component section expanded to its plugins' options."""
    schema = RunConfig.model_json_schema()
    props = schema["properties"]
    all_defs = schema.setdefault("$defs", {})

    def place(sub: dict[str, Any]) -> dict[str, Any]:
        all_defs.update(sub.pop("$defs", {}))
        return sub

    for key in SINGLE_SECTIONS:  # each section is named after its component kind
        sub = place(_choice_schema(system, key))
        if key == "learner":
            props[key] = {"anyOf": [sub, {"type": "null"}], "default": None}
        else:
            props[key] = sub
    # shorthands: an opponent or an env may be given as a plain string
    def allow_str(sub: dict[str, Any], what: str) -> None:
        for variant in [sub, *sub.get("anyOf", [])]:
            if variant.get("type") == "array":
                variant["items"] = {"anyOf": [{"type": "string", "description": what}, variant["items"]]}

    allow_str(props["opponents"], "a scripted agent's name")
    allow_str(props["train_envs"], "an env id")
    allow_str(props["eval_envs"], "an env id")
    props["trackers"] = {"type": "array", "items": place(_choice_schema(system, "tracker"))}
    stages: dict[str, Any] = {}
    reward = {"type": "object", "additionalProperties": False, "properties": stages}
    for stage in ("final", "step", "sampling"):
        stages[stage] = {"type": "array", "items": place(_choice_schema(system, "reward_transform", stage))}
    props["reward"] = reward
    schema["title"] = "unstable run config"
    return schema
