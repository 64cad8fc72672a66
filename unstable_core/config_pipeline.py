"""Whether the reward pipeline, the buffer, the learner and grouped games fit together, from what
each component declares on its record (``RewardTransformSpec.needs_groups`` / ``mixes_batch``,
``BufferSpec.keeps_episodes``, ``LearnerSpec.computes_advantages`` / ``needs_episodes`` /
``needs_groups``, ``ModelSamplerSpec.exact_payoffs`` / ``least_exploitable``): one line a conflict, naming the keys, for
``config check`` and the start of a run."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from .config import RunConfig, env_provider_of

Resolved = dict[str, tuple[Any, BaseModel]]


def _name(resolved: Resolved, key: str) -> str:
    return f"{key} ({resolved[key][0].name})"


def pipeline_problems(cfg: RunConfig, resolved: Resolved, source: str = "<config>") -> list[str]:
    problems: list[str] = []
    group_size = cfg.collection.group_size
    sampling = [f"reward.sampling.{i}" for i in range(len(cfg.reward.sampling)) if f"reward.sampling.{i}" in resolved]
    buffer = resolved.get("buffer")
    keeps_episodes = buffer is not None and buffer[0].keeps_episodes
    if group_size > 1 and cfg.training.learning_steps > 0 and buffer is not None and not keeps_episodes:
        problems.append(f"{source}: collection.group_size = {group_size}: buffer {buffer[0].name!r} stores single steps and "
                        "would split the groups: choose one that keeps episodes whole ([buffer] name = \"episode\")")
    if cfg.collection.branch_turn and group_size < 2:
        problems.append(f"{source}: collection.branch_turn = {cfg.collection.branch_turn} branches the games of a group: set "
                        "collection.group_size to 2 or more, or leave branch_turn at 0")
    mixed: str | None = None
    for key in sampling:
        spec = resolved[key][0]
        if spec.needs_groups and group_size < 2:
            problems.append(f"{source}: {_name(resolved, key)} compares the games of a group: set collection.group_size "
                            "to 2 or more (8 is usual)")
        if spec.needs_groups and mixed is not None:
            problems.append(f"{source}: {_name(resolved, key)} comes after {_name(resolved, mixed)}, which mixes the "
                            "rewards of the whole batch: put the group baseline first")
        if spec.mixes_batch and mixed is None:
            mixed = key
    if cfg.training.colocate:
        problems += colocate_problems(cfg, resolved, source)
    problems += payoff_problems(cfg, resolved, source)
    if cfg.collection.answers == "choice":
        problems += choice_problems(cfg, resolved, source)
    learner = resolved.get("learner")
    if learner is None:
        return problems
    spec = learner[0]
    if spec.computes_advantages and sampling:
        names = ", ".join(resolved[k][0].name for k in sampling)
        problems.append(f"{source}: learner {spec.name!r} computes its own advantages from the step rewards: remove the "
                        f"[reward] sampling transforms ({names}), which rewrite the rewards it reads")
    if spec.needs_groups and group_size < 2:
        problems.append(f"{source}: learner {spec.name!r} compares the games of a group: set collection.group_size to 2 "
                        "or more (8 is usual)")
    if spec.needs_episodes and buffer is not None and not keeps_episodes:
        problems.append(f"{source}: learner {spec.name!r} needs whole episodes in each batch: buffer {buffer[0].name!r} "
                        "draws single steps; set [buffer] name = \"episode\"")
    return problems


def colocate_problems(cfg: RunConfig, resolved: Resolved, source: str) -> list[str]:
    """``training.colocate``: a sync run whose trained model's backend can release its memory."""
    problems = []
    if cfg.collection.mode != "sync":
        problems.append(f"{source}: training.colocate = true puts the inference backend to sleep during every update, "
                        "while async games would still generate: set collection.mode = \"sync\"")
    inference = resolved.get("inference")
    if inference is not None and not inference[0].releases_memory:
        problems.append(f"{source}: training.colocate = true: inference {inference[0].name!r} cannot release its memory "
                        "(it declares no releases_memory); use a backend that can (hf, vllm) or set colocate = false")
    return problems


def choice_problems(cfg: RunConfig, resolved: Resolved, source: str) -> list[str]:
    """collection.answers = "choice" offers the legal actions' answers: every env's provider must
    name them (``legal_actions``) and the trained model's backend must choose among them
    (``answers_choices``; in a tournament each backend that does, does)."""
    what = f"{source}: collection.answers = \"choice\""
    problems = []
    for env_id in dict.fromkeys(e.env_id for e in [*cfg.train_envs, *cfg.evaluation_envs]):
        name = env_provider_of(env_id, cfg.env.name)
        provider = resolved.get("env" if name == cfg.env.name else f"env_providers.{name}")
        if provider is not None and not provider[0].legal_actions:
            problems.append(f"{what} needs the legal actions of {env_id}: env provider {provider[0].name!r} offers none "
                            "(legal_actions; openspiel does)")
    inference = resolved.get("inference")
    learner = resolved.get("learner")
    if cfg.training.learning_steps > 0 and learner is not None and learner[0].computes_advantages:
        problems.append(f"{what}: learner {learner[0].name!r} computes its own advantages from the step rewards, which "
                        "the rows of the choices not taken would corrupt (expand_choices): use one that trains on the "
                        "rewards it is given (reinforce)")
    if cfg.model_ref() is not None and inference is not None and not inference[0].answers_choices:
        problems.append(f"{what}: inference {inference[0].name!r} cannot answer one of the given choices "
                        "(answers_choices; hf can)")
    return problems


def payoff_problems(cfg: RunConfig, resolved: Resolved, source: str) -> list[str]:
    """A model sampler that reads exact payoffs or least exploitable mixtures
    (``ModelSamplerSpec.exact_payoffs`` / ``least_exploitable``): every training env's provider
    computes exact figures and the trained model's backend scores completions; a least exploitable
    mixture is of one game, so there is one training env."""
    sampler = resolved.get("model_sampler")
    if sampler is None:
        return []
    spec, options = sampler
    payoffs = spec.exact_payoffs is not None and spec.exact_payoffs(options)
    least = spec.least_exploitable is not None and spec.least_exploitable(options)
    if not (payoffs or least):
        return []
    reads = "exact payoffs between checkpoints" if payoffs else "the least exploitable mixture of checkpoints"
    what = f"{source}: {_name(resolved, 'model_sampler')} reads {reads}"
    problems = []
    if least and len(cfg.train_envs) != 1:
        problems.append(f"{source}: {_name(resolved, 'model_sampler')} reads the least exploitable mixture of checkpoints "
                        f"on one game: train_envs has {len(cfg.train_envs)}")
    for env in cfg.train_envs:
        name = env_provider_of(env.env_id, cfg.env.name)
        provider = resolved.get("env" if name == cfg.env.name else f"env_providers.{name}")
        if provider is not None and not provider[0].policy_metrics:
            problems.append(f"{what}: env provider {provider[0].name!r} of {env.env_id} computes none (an exact game's: openspiel)")
        elif least and provider is not None and provider[0].check_least_exploitable is not None:
            try:
                provider[0].check_least_exploitable(env, provider[1])
            except ValueError as exc:
                problems.append(f"{source}: {_name(resolved, 'model_sampler')} reads the least exploitable mixture of "
                                f"checkpoints: {exc}")
    inference = resolved.get("inference")
    if inference is not None and not inference[0].scores_completions:
        problems.append(f"{what}: inference {inference[0].name!r} scores no completions (scores_completions), so no "
                        "checkpoint's policy can be read exactly")
    return problems
