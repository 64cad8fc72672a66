"""A run config against the installed plugins: every chosen component looked up and its options
validated by the plugin's own model (every problem reported at once), and the JSON Schema of
the whole config with each component section expanded to its plugins' options."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError

from .config import SINGLE_SECTIONS, RunConfig
from .config_loading import format_validation_error
from .errors import ConfigError, UnknownComponentError

if TYPE_CHECKING:  # pragma: no cover
    from .plugins import PluginSystem


def validate_options(spec: Any, options: Mapping[str, Any], source: str, key: str) -> BaseModel:
    """Validate one component's options with its own model; errors name the key path."""
    try:
        return spec.config.model_validate(dict(options))
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, source, prefix=key, model=spec.config)) from None


def resolve_components(cfg: RunConfig, system: PluginSystem, source: str = "<config>") -> dict[str, tuple[Any, BaseModel]]:
    """Look every chosen component up in the catalog and validate its options.

    Returns key path -> (spec, validated options). Raises ConfigError / UnknownComponentError
    with every problem found, so a user fixes them all at once.
    """
    resolved: dict[str, tuple[Any, BaseModel]] = {}
    problems: list[str] = []
    for key, kind, choice in cfg.component_choices():
        try:
            spec = system.get(kind, choice.name)
        except UnknownComponentError as exc:
            problems.append(f"{source}: {key}.name: {exc}")
            continue
        stage = key.split(".")[1] if key.startswith("reward.") else None
        if stage is not None and getattr(spec, "stage", None) != stage:
            problems.append(f"{source}: {key}.name: {choice.name!r} is a {spec.stage} transform, not a {stage} one")
            continue
        try:
            resolved[key] = (spec, validate_options(spec, choice.options, source, key))
        except ConfigError as exc:
            problems.append(str(exc))
    # templates named by environments
    for i, env in enumerate(cfg.train_envs):
        _check_template(system, env.template, f"{source}: train_envs.{i}.template", problems)
    for i, env in enumerate(cfg.eval_envs or []):
        _check_template(system, env.template, f"{source}: eval_envs.{i}.template", problems)
    # backends named by the model and opponents
    refs = [(f"opponents.{i}.backend", o.backend) for i, o in enumerate(cfg.opponents)]
    ref = cfg.model_ref()
    if ref is not None:
        refs.append(("model.backend", ref.backend))
    for key, backend in refs:
        try:
            system.get("inference", backend)
        except UnknownComponentError as exc:
            problems.append(f"{source}: {key}: {exc}")
    for name, opts in cfg.backends.items():
        try:
            spec = system.get("inference", name)
            validate_options(spec, opts, source, f"backends.{name}")
        except (UnknownComponentError, ConfigError) as exc:
            problems.append(str(exc) if isinstance(exc, ConfigError) else f"{source}: backends.{name}: {exc}")
    if problems:
        raise ConfigError("\n".join(dict.fromkeys(problems)))
    return resolved


def _check_template(system: PluginSystem, name: str, where: str, problems: list[str]) -> None:
    try:
        system.get("template", name)
    except UnknownComponentError as exc:
        problems.append(f"{where}: {exc}")


def _choice_schema(system: PluginSystem, kind: str, stage: str | None = None) -> dict[str, Any]:
    variants = []
    defs: dict[str, Any] = {}
    for name in system.names(kind):
        spec = system.get(kind, name)
        if stage is not None and getattr(spec, "stage", None) != stage:
            continue
        sch = spec.config.model_json_schema()
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
    reward = {"type": "object", "additionalProperties": False, "properties": {}}
    for stage in ("final", "step", "sampling"):
        reward["properties"][stage] = {"type": "array", "items": place(_choice_schema(system, "reward_transform", stage))}
    props["reward"] = reward
    schema["title"] = "unstable run config"
    return schema
