"""Whole-config validation against the installed plugins, in one place: every chosen component
looked up and its options validated by the plugin's own model (``resolve_components``), then
each component's, environment's and model's own checks (``check_run``). Every problem is
reported at once, so a user fixes them all in one go. (The config's own shape is checked by
pydantic in ``config.py``.)"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError

from .components import ChosenComponents, InferenceSpec
from .config import RunConfig, env_provider_of
from .config_loading import format_validation_error
from .config_pipeline import pipeline_problems
from .errors import ConfigError, UnknownComponentError, UnstableError, describe_error
from .types import AdapterShape

CHECKPOINT_UID = re.compile(r"ckpt-\d+")

if TYPE_CHECKING:  # pragma: no cover
    from .plugins import PluginSystem
    from .runtime.plan import RunPlan


def validate_options(spec: Any, options: Mapping[str, Any], source: str, key: str, strict: bool = False) -> BaseModel:
    """Validate one component's options with its own model; errors name the key path. ``strict``
    (a config's own values): no coercion, so that "yes" or 1 is no boolean and true no integer.
    An unknown option is refused, naming the component and the closest known option, unless the
    model says ``extra="allow"`` or ``extra="ignore"`` itself (pydantic's default would drop a typo
    silently)."""
    model = spec.config
    unknown = unknown_options(model, options)
    if unknown:
        where = f"{key}." if key else ""
        lines = []
        for name in unknown:
            close = difflib.get_close_matches(name, list(model.model_fields), n=1)
            lines.append(f"{source}: {where}{name}: unknown option of {spec.kind} {spec.name!r}"
                         + (f"; did you mean {close[0]!r}?" if close else ""))
        raise ConfigError("\n".join(lines))
    try:
        return model.model_validate(dict(options), strict=strict)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, source, prefix=key, model=model)) from None


def unknown_options(model: type[BaseModel], options: Mapping[str, Any]) -> list[str]:
    """The keys of ``options`` that ``model`` does not know (none where the model itself says
    ``extra="allow"`` or ``"ignore"``)."""
    if model.model_config.get("extra") in ("allow", "ignore"):
        return []
    known = set(model.model_fields)
    known |= {f.alias for f in model.model_fields.values() if f.alias}
    known |= {f.validation_alias for f in model.model_fields.values() if isinstance(f.validation_alias, str)}
    return [str(k) for k in options if k not in known]


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
            problems.append(f"{source}: {_where_named(cfg, key)}: {exc}")
            continue
        stage = key.split(".")[1] if key.startswith("reward.") else None
        spec_stage = getattr(spec, "stage", None)
        if stage is not None and spec_stage != stage:
            problems.append(f"{source}: {key}.name: {choice.name!r} is a {spec_stage} transform, not a {stage} one")
            continue
        try:
            resolved[key] = (spec, validate_options(spec, choice.options, source, key, strict=True))
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
            validate_options(spec, opts, source, f"backends.{name}", strict=True)
        except (UnknownComponentError, ConfigError) as exc:
            problems.append(str(exc) if isinstance(exc, ConfigError) else f"{source}: backends.{name}: {exc}")
    if problems:
        raise ConfigError(summarize(list(dict.fromkeys(problems))))
    return resolved


#: problems a config check lists before it says how many more there are
MAX_PROBLEMS_SHOWN = 20


def summarize(problems: list[str], limit: int = MAX_PROBLEMS_SHOWN) -> str:
    """The problems, one a line; past ``limit``, the first ``limit`` and "... and N more"."""
    if len(problems) <= limit:
        return "\n".join(problems)
    return "\n".join([*problems[:limit], f"... and {len(problems) - limit} more problems"])


def _where_named(cfg: RunConfig, key: str) -> str:
    """Where the config names the component at ``key``: an env provider named only by an env
    id's prefix is named by the first env id that uses it."""
    name = key.removeprefix("env_providers.")
    if key.startswith("env_providers.") and name not in cfg.env_providers:
        for section, envs in (("train_envs", cfg.train_envs), ("eval_envs", cfg.eval_envs or [])):
            for i, env in enumerate(envs):
                if env_provider_of(env.env_id, cfg.env.name) == name:
                    return f"{section}.{i}.env_id ({env.env_id!r})"
    return f"{key}.name"


def _check_template(system: PluginSystem, name: str, where: str, problems: list[str]) -> None:
    try:
        system.get("template", name)
    except UnknownComponentError as exc:
        problems.append(f"{where}: {exc}")


def check_run(cfg: RunConfig, system: PluginSystem, source: str = "<config>") -> dict[str, tuple[Any, BaseModel]]:
    """Everything that can be checked without playing: the components and their options
    (``resolve_components``), each component's options against the rest of the run (its
    ``check_run``), every environment (its provider's ``check_env``), every model
    (its backend's ``check_model`` and per-model ``options``). Raises one ConfigError listing
    every problem."""
    resolved = resolve_components(cfg, system, source)
    problems: list[str] = []
    seen: set[str] = set()
    envs = [("train_envs", i, e) for i, e in enumerate(cfg.train_envs)]
    envs += [("eval_envs", i, e) for i, e in enumerate(cfg.eval_envs or [])]
    for section, i, env in envs:
        name = env_provider_of(env.env_id, cfg.env.name)
        provider = resolved.get("env" if name == cfg.env.name else f"env_providers.{name}")
        key = env.model_dump_json(include={"env_id", "num_players", "kwargs"})
        if provider is None or provider[0].check_env is None or key in seen:
            continue  # an unknown provider is reported under its key
        seen.add(key)
        try:
            provider[0].check_env(env, provider[1])
        except UnstableError:
            raise
        except Exception as exc:  # a ValueError is the provider's own message
            reason = str(exc) if isinstance(exc, ValueError) and str(exc) else describe_error(exc)
            problems.append(f"{source}: {section}.{i}: {reason}")
    adapter = None
    learner = resolved.get("learner")
    if learner is not None and learner[0].adapter is not None:
        try:
            adapter = learner[0].adapter(learner[1])
        except Exception as exc:
            problems.append(f"{source}: learner: its adapter declaration raised {describe_error(exc)}")
        if adapter is not None and not isinstance(adapter, AdapterShape):
            problems.append(f"{source}: learner: its adapter declaration returned {type(adapter).__name__}, not an AdapterShape")
            adapter = None
    model = cfg.model_ref()
    chosen = ChosenComponents({key: opts for key, (_, opts) in resolved.items()}, adapter=adapter,
                              colocate=cfg.training.colocate, model=model.model if model is not None else None,
                              executor=cfg.executor.name, model_options=model.options if model is not None else None,
                              answers=cfg.collection.answers)
    for key, (spec, opts) in resolved.items():
        if spec.check_run is not None:
            try:
                spec.check_run(opts, chosen)
            except Exception as exc:
                problems.append(f"{source}: {key}: {exc if isinstance(exc, ValueError) else describe_error(exc)}")
    problems += pipeline_problems(cfg, resolved, source)
    refs = [(f"opponents.{i}", o.ref()) for i, o in enumerate(cfg.opponents)]
    base = cfg.model_ref()
    if base is not None:
        refs.append(("model", base))
    for key, ref in refs:
        spec = system.spec(InferenceSpec, ref.backend)
        try:
            spec.model_options.model_validate(ref.options, strict=True)
        except ValidationError as exc:
            problems.append(format_validation_error(exc, source, prefix=f"{key}.options", model=spec.model_options))
        if spec.check_model is not None:
            try:
                spec.check_model(ref)
            except Exception as exc:
                problems.append(f"{source}: {key}: {exc}")
    if base is not None and cfg.learner is not None and not system.spec(InferenceSpec, base.backend).serves_checkpoints:
        problems.append(f"{source}: model: backend {base.backend!r} serves fixed models only and cannot load the learner's "
                        "checkpoints: serve the trained model with a backend that can (hf, vllm); use this one for opponents")
    if base is not None and base.uid in {o.uid for o in cfg.opponents}:
        problems.append(f"{source}: model.uid {base.uid!r} is also an opponent uid")
    for key, ref in refs:
        if CHECKPOINT_UID.fullmatch(ref.uid):
            problems.append(f"{source}: {key}.uid {ref.uid!r} is the name the learner's checkpoints take (ckpt-N): choose another")
    if problems:
        raise ConfigError(summarize(problems))
    return resolved


def config_warnings(cfg: RunConfig) -> list[str]:
    """What a valid config does that its author may not expect, a line each (``config check``
    and ``unstable run`` print them as warnings)."""
    t = cfg.training
    if cfg.learner is None or not t.eval_every or t.eval_every % t.save_every == 0:
        return []
    saved = t.eval_every // t.save_every * t.save_every
    return [f"training.eval_every = {t.eval_every} is not a multiple of training.save_every = {t.save_every}: an "
            f"evaluation plays the latest saved checkpoint (at step {t.eval_every}: {f'ckpt-{saved}' if saved else 'base'}), "
            "which its records name"]


#: kinds whose factories are cheap and write nothing: ``config check`` builds them once, so that a
#: factory that raises is reported before a run (learners, backends, executors, trackers and env
#: providers are built by the run: models to load, files to open)
CHEAP_KINDS = ("env_sampler", "model_sampler", "rater", "buffer", "reward_transform")


def factory_problems(plan: RunPlan, system: PluginSystem) -> list[str]:
    """Build every component of a cheap kind (``CHEAP_KINDS``) of a checked plan (``make_plan``,
    no run directory); one line for each whose factory fails."""
    from .runtime.building import Builder

    builder = Builder(plan, system)
    problems = []
    for key, recipe in plan.recipes.items():
        if recipe.kind in CHEAP_KINDS:
            try:
                built = builder.build(key)
            except UnstableError as exc:
                problems.append(f"{plan.source}: {key}: {exc}")
                continue
            if key == "buffer" and plan.trains:
                problems += capacity_problems(plan, built)
    return problems


def capacity_problems(plan: RunPlan, buffer: Any) -> list[str]:
    """A training run draws ``training.batch_size`` steps from the buffer: one that holds fewer
    (its ``capacity``) could never give a batch, and the run would refuse it after its models
    loaded."""
    capacity, batch_size = getattr(buffer, "capacity", None), plan.config.training.batch_size
    if not isinstance(capacity, int) or capacity >= batch_size:
        return []
    return [f"{plan.source}: buffer.capacity = {capacity} is smaller than training.batch_size = {batch_size}: a batch "
            "could never be drawn; raise buffer.capacity or lower training.batch_size"]
