"""RunConfig: one TOML file describes a run.

A section per component picks it by ``name`` and gives its options, e.g.::

    [learner]
    name = "reinforce"
    lr = 1e-5

The chosen component's options are validated by its own pydantic model (from the plugin's spec
record), so a typo in a plugin option is a clear error before any work starts. ``--set a.b=c``
overrides any key (values are parsed as TOML, falling back to a plain string). Nothing from a
config is executed.
"""

from __future__ import annotations

import copy
import difflib
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .errors import ConfigError
from .types import EnvSpec, ModelRef

if TYPE_CHECKING:  # pragma: no cover
    from .plugins import PluginSystem


#: config sections that pick one component; each is named after its component kind
SINGLE_SECTIONS = ("env", "env_sampler", "model_sampler", "rater", "buffer", "inference", "executor", "learner")


class ComponentChoice(BaseModel):
    """``name`` picks a component; every other key is one of its options."""

    model_config = ConfigDict(extra="allow")

    name: str

    @property
    def options(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


MAX_NESTING = 64  # tables and lists in a config or an override nest at most this deep
MAX_IN_FLIGHT = 65_536


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class CollectionConfig(Section):
    mode: Literal["async", "sync"] = Field(
        "async",
        description="'async': games are played while the learner trains (UnstableBaselines' way; faster, not reproducible). "
        "'sync': each learner step plays the games it needs with the current policy, then updates; games move in "
        "fixed batches, in turn rounds (every game's request reaches the backend together) and are counted in game "
        "order, so that two runs of one config on one machine give the same "
        "metrics, transcripts and weights.",
    )
    num_train_games: int = Field(8, ge=1, le=MAX_IN_FLIGHT, description="Training (or tournament) games kept in flight.")
    num_eval_games: int = Field(4, ge=1, le=MAX_IN_FLIGHT, description="Evaluation games kept in flight.")
    eval_games: int = Field(
        16, ge=0, le=1_000_000, description="Evaluation games per (checkpoint, env, opponent): the cap of one evaluation round."
    )
    tournament_games: int = Field(100, ge=0, description="Without a learner: games played in the tournament.")
    max_turns: int = Field(200, ge=1, le=1_000_000, description="A game with more turns than this is truncated (reward 0 for all).")
    max_action_chars: int = Field(
        1000, ge=1, le=1_000_000,
        description="An extracted action longer than this is cut to this length before the env sees it (a huge action can stall a game for seconds).",
    )
    env_calls: Literal["auto", "loop", "threads"] = Field(
        "auto",
        description="Where env calls (make, reset, observe, step, close) run: 'loop' on the event loop the games share "
        "(fastest; a slow call stalls every game in flight), 'threads' on worker threads (a slow or blocking call stalls "
        "only its own game; tens of microseconds more per call), 'auto' on the loop until a call of an env id takes longer "
        "than slow_env_call_ms, then on threads for that env id.",
    )
    slow_env_call_ms: float = Field(20.0, ge=0, le=3_600_000, description="In env_calls = 'auto': what a slow env call is.")
    transcripts: float = Field(
        0.1, ge=0, le=1, description="Fraction of training and tournament games whose transcript is written to games/."
    )
    eval_transcripts: float = Field(1.0, ge=0, le=1, description="Fraction of evaluation games whose transcript is written.")
    max_game_failures: int | None = Field(None, ge=0, description="Stop the run after this many failed games (None: never).")


class TrainingConfig(Section):
    learning_steps: int = Field(0, ge=0, description="Learner updates to make; exactly this many.")
    batch_size: int = Field(64, ge=1, le=10_000_000, description="Steps per learner update.")
    eval_every: int = Field(0, ge=0, description="Evaluate every N updates (0: only before and after training).")
    save_every: int = Field(1, ge=1, description="Save a checkpoint and a run snapshot (for --resume) every N updates.")
    keep_snapshots: int = Field(2, ge=0, description="Run snapshots kept in RUN_DIR/state (0: none are written; such a run cannot be resumed).")
    filter_zero_advantage: bool | None = Field(
        None,
        description="Drop steps whose reward (advantage) is exactly zero before the update; None: as the learner "
        "declares (`drop_zero_advantage` on its record: REINFORCE drops them, an actor-critic keeps them).",
    )
    max_empty_batches: int = Field(
        1000, ge=1, description="Fail the run after this many drawn batches in a row were emptied by the filter."
    )


class RewardConfig(Section):
    final: list[ComponentChoice] = Field(
        default_factory=lambda: [ComponentChoice(name="win-draw-loss")],
        description="Transforms of a game's final rewards, in order (stage 'final').",
    )
    step: list[ComponentChoice] = Field(default_factory=list, description="Transforms of each step's reward (stage 'step').")
    sampling: list[ComponentChoice] = Field(default_factory=list, description="Transforms of a drawn batch (stage 'sampling').")


class OpponentConfig(Section):
    uid: str = Field(description="Registry id of the opponent (also its name in metrics).")
    backend: str = Field("scripted", description="Inference component that serves it.")
    model: str = Field("", description="What the backend loads (scripted: the agent name; default: the uid).")
    options: dict[str, Any] = Field(default_factory=dict, description="Backend-specific options for this model.")

    @model_validator(mode="before")
    @classmethod
    def _from_str(cls, v: Any) -> Any:
        if isinstance(v, str):  # "random-valid" is a scripted agent of that name
            return {"uid": v, "backend": "scripted", "model": v}
        return v

    def ref(self) -> ModelRef:
        return ModelRef(uid=self.uid, kind="fixed", backend=self.backend, model=self.model or self.uid, options=self.options)


class ModelConfig(Section):
    """The model being trained."""

    uid: str = Field("base", description="Registry id of the untrained model; checkpoints are ckpt-N.")
    backend: str | None = Field(None, description="Inference backend; defaults to [inference].name.")
    model: str = Field(description="Hub id, local path, or for the scripted backend an agent name.")
    options: dict[str, Any] = Field(default_factory=dict, description="Backend-specific options for this model.")


class RunConfig(Section):
    """The whole run. See docs/config.md for every key."""

    name: str = Field(
        "run", pattern=r"^[A-Za-z0-9][A-Za-z0-9 ._-]{0,99}$",
        description="Name of the run (default run directory runs/NAME-TIME): letters, digits, spaces, '.', '_', '-' (no path).",
    )
    seed: int = Field(0, description="Run seed: every game's seed and scheduling draw derive from it and the game index.")
    run_dir: str | None = Field(None, description="Run directory (the CLI's --run-dir wins).")
    model: ModelConfig | None = Field(None, description="The model being trained (needed with a learner).")
    opponents: list[OpponentConfig] = Field(default_factory=list, description="Fixed opponents; a plain string is a scripted agent.")
    train_envs: list[EnvSpec] = Field(default_factory=list, description="Training environments; a plain string is an env id.")
    eval_envs: list[EnvSpec] | None = Field(None, description="Evaluation environments (default: the training ones).")

    env: ComponentChoice = Field(default_factory=lambda: ComponentChoice(name="textarena"), description="Env provider component.")
    env_sampler: ComponentChoice = Field(default_factory=lambda: ComponentChoice(name="uniform"), description="Env sampler component.")
    model_sampler: ComponentChoice = Field(default_factory=lambda: ComponentChoice(name="mirror"), description="Opponent sampler component.")
    rater: ComponentChoice = Field(default_factory=lambda: ComponentChoice(name="wins"), description="Rater component.")
    buffer: ComponentChoice = Field(default_factory=lambda: ComponentChoice(name="step"), description="Buffer component.")
    learner: ComponentChoice | None = Field(None, description="Learner component; none: play a tournament.")
    inference: ComponentChoice = Field(default_factory=lambda: ComponentChoice(name="scripted"), description="Inference backend of the model being trained.")
    executor: ComponentChoice = Field(default_factory=lambda: ComponentChoice(name="local"), description="Executor component.")
    trackers: list[ComponentChoice] = Field(
        default_factory=lambda: [ComponentChoice(name="jsonl"), ComponentChoice(name="console")],
        description="Tracker components, each a table with `name`.",
    )
    backends: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="Options of inference backends used only by opponents, by backend name."
    )

    reward: RewardConfig = Field(default_factory=RewardConfig, description="Reward transform pipelines.")
    collection: CollectionConfig = Field(default_factory=CollectionConfig, description="Games in flight, evaluation, transcripts.")
    training: TrainingConfig = Field(default_factory=TrainingConfig, description="Learner steps, batches, checkpoints, evaluation.")

    @field_validator("train_envs", "eval_envs", mode="before")
    @classmethod
    def _env_strs(cls, v: Any) -> Any:
        if isinstance(v, list):
            return [{"env_id": e} if isinstance(e, str) else e for e in v]
        return v

    @model_validator(mode="after")
    def _check(self) -> RunConfig:
        if not self.train_envs and not self.eval_envs:
            raise ValueError("at least one of train_envs or eval_envs must list an environment")
        if self.learner is not None and self.model is None:
            raise ValueError("a learner needs a [model] section (the model being trained)")
        if self.learner is None and not self.opponents:
            raise ValueError("without a learner, [[opponents]] must list the agents of the tournament")
        uids = [o.uid for o in self.opponents]
        dup = {u for u in uids if uids.count(u) > 1}
        if dup:
            raise ValueError(f"opponent uid(s) listed twice: {', '.join(sorted(dup))}")
        return self

    @property
    def evaluation_envs(self) -> list[EnvSpec]:
        return list(self.eval_envs if self.eval_envs is not None else self.train_envs)

    def model_ref(self) -> ModelRef | None:
        if self.model is None:
            return None
        return ModelRef(
            uid=self.model.uid,
            kind="base",
            backend=self.model.backend or self.inference.name,
            model=self.model.model,
            options=self.model.options,
        )

    def component_choices(self) -> list[tuple[str, str, ComponentChoice]]:
        """(key path, kind, choice) for every component section in the config."""
        out: list[tuple[str, str, ComponentChoice]] = [
            (key, key, getattr(self, key)) for key in SINGLE_SECTIONS if getattr(self, key) is not None
        ]
        out += [(f"trackers.{i}", "tracker", c) for i, c in enumerate(self.trackers)]
        for stage in ("final", "step", "sampling"):
            out += [(f"reward.{stage}.{i}", "reward_transform", c) for i, c in enumerate(getattr(self.reward, stage))]
        return out


# ---------------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------------


def _type_name(value: Any) -> str:
    return {dict: "a table", list: "a list", str: "a string", bool: "a boolean", int: "an integer", float: "a number"}.get(
        type(value), type(value).__name__
    )


#: the error type of a validator that must not echo its input (``PydanticCustomError(SECRET_ERROR, msg)``)
SECRET_ERROR = "unstable_secret"


def format_validation_error(exc: ValidationError, source: str, prefix: str = "", model: type[BaseModel] | None = None) -> str:
    """One line per problem: ``source: key.path: what was expected (found ...)``."""
    lines = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in (prefix.split(".") if prefix else []) + list(err["loc"]))
        if err["type"] == "extra_forbidden":
            key = str(err["loc"][-1]) if err["loc"] else "?"
            hint = ""
            if model is not None:
                target = model
                close = difflib.get_close_matches(key, list(target.model_fields), n=1)
                if close:
                    hint = f"; did you mean {close[0]!r}?"
            lines.append(f"{source}: {loc}: unknown option{hint}")
            continue
        where = f"{loc}: " if loc else ""
        found = err.get("input")
        # a value that may be a secret (an API key where its variable's name belongs) is never shown
        found_s = "" if err["type"] in ("missing", SECRET_ERROR) else f" (found {found!r}, {_type_name(found)})"
        msg = err["msg"]
        lines.append(f"{source}: {where}{msg[:1].lower()}{msg[1:]}{found_s}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------------------------


def nesting_depth(value: Any, limit: int = MAX_NESTING) -> int:
    """How deep tables and lists nest in ``value`` (counted up to ``limit + 1``)."""
    depth, level = 0, [value]
    while level and depth <= limit:
        level = [v for x in level for v in (x.values() if isinstance(x, dict) else x if isinstance(x, list) else ())]
        depth += 1 if level else 0
    return depth


def _parse_toml(text: str, where: str) -> dict[str, Any]:
    try:
        data = tomllib.loads(text)
    except RecursionError:
        raise ConfigError(f"{where}: tables or lists nest too deeply (at most {MAX_NESTING} levels)") from None
    if nesting_depth(data) > MAX_NESTING:
        raise ConfigError(f"{where}: tables or lists nest too deeply (at most {MAX_NESTING} levels)")
    return data


def parse_value(text: str) -> Any:
    """Parse an override's value as a TOML value; fall back to the plain string."""
    try:
        return _parse_toml(f"v = {text}", f"--set value {text[:40]!r}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def apply_overrides(data: dict[str, Any], overrides: Iterable[str]) -> dict[str, Any]:
    """Apply ``a.b=c`` overrides to a config dict (integers index lists: ``train_envs.0.env_id``)."""
    data = copy.deepcopy(data)
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"--set {item!r}: expected KEY=VALUE, e.g. --set training.learning_steps=10")
        key, _, raw = item.partition("=")
        parts = [p for p in key.strip().split(".") if p]
        if not parts:
            raise ConfigError(f"--set {item!r}: empty key")
        if len(parts) > MAX_NESTING:
            raise ConfigError(f"--set {key[:60]}...: the key nests {len(parts)} levels deep (at most {MAX_NESTING})")
        node: Any = data
        for i, part in enumerate(parts[:-1]):
            if isinstance(node, list):
                if not part.isdigit() or int(part) >= len(node):
                    raise ConfigError(f"--set {key}: {'.'.join(parts[:i + 1])} is not an index of a {len(node)}-item list")
                node = node[int(part)]
            elif isinstance(node, dict):
                node = node.setdefault(part, {})
            else:
                raise ConfigError(f"--set {key}: {'.'.join(parts[:i])} is {_type_name(node)}, not a table")
        last = parts[-1]
        value = parse_value(raw.strip())
        if isinstance(node, list):
            if not last.isdigit() or int(last) >= len(node):
                raise ConfigError(f"--set {key}: {last!r} is not an index of a {len(node)}-item list")
            node[int(last)] = value
        elif isinstance(node, dict):
            node[last] = value
        else:
            raise ConfigError(f"--set {key}: {'.'.join(parts[:-1])} is {_type_name(node)}, not a table")
    return data


def read_toml(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{path}: no such config file")
    try:
        return _parse_toml(p.read_text(encoding="utf-8"), str(path))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not valid TOML: the file is not UTF-8 text") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None


def validate_config(data: Mapping[str, Any], source: str = "<config>") -> RunConfig:
    if nesting_depth(dict(data)) > MAX_NESTING:
        raise ConfigError(f"{source}: tables or lists nest too deeply (at most {MAX_NESTING} levels)")
    try:
        return RunConfig.model_validate(dict(data))
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, source, model=RunConfig)) from None


def load_config(path: str | Path, overrides: Iterable[str] = ()) -> RunConfig:
    """Read a TOML run config, apply ``--set`` overrides and validate it (not the plugin options:
    see ``resolve_components``)."""
    data = apply_overrides(read_toml(path), overrides)
    return validate_config(data, str(path))


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
    from .errors import UnknownComponentError

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
    from .errors import UnknownComponentError

    try:
        system.get("template", name)
    except UnknownComponentError as exc:
        problems.append(f"{where}: {exc}")


# ---------------------------------------------------------------------------------------------
# JSON Schema
# ---------------------------------------------------------------------------------------------

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

