"""Pydantic types that cross component boundaries.

Every type is a pydantic v2 model, so a plugin that hands the core a malformed value gets a
validation error naming the field instead of a crash three stages later. Models are built lazily
(``defer_build``) so that importing this module stays cheap for the CLI.

The flow (see docs/architecture.md):

``EnvSpec`` + seats (``ModelRef``) -> ``GameSpec`` -> played -> ``GameResult`` holding one
``PlayerTrajectory`` of ``Turn`` s per seat -> the buffer turns trained seats' turns into
``Step`` s -> a ``Batch`` of steps goes to the learner -> the learner writes a ``Checkpoint``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

from .basemodel import Model, lazy_property


class EnvSpec(Model):
    """Which game to play and how a model sees it."""

    env_id: str = Field(description="Environment id known to the env provider, e.g. 'KuhnPoker-v0-train'.")
    num_players: int = Field(2, ge=1, le=64, description="Seats at the table.")
    num_actors: int = Field(
        1, ge=0, le=64, description="Seats taken by the model being trained in a training game; the rest are sampled opponents."
    )
    template: str = Field("default", description="Name of the template component that renders prompts and extracts actions.")
    weight: float = Field(1.0, gt=0, le=1e6, allow_inf_nan=False, description="Relative weight used by weighted env samplers.")
    kwargs: dict[str, Any] = Field(default_factory=dict, description="Extra keyword arguments for the env provider's make().")

    @model_validator(mode="after")
    def _actors_fit(self) -> EnvSpec:
        if self.num_actors > self.num_players:
            raise PydanticCustomError("num_actors", "num_actors = {actors} is more than the game's num_players = {players}",
                                      {"actors": self.num_actors, "players": self.num_players})
        return self


ModelKind = Literal["base", "checkpoint", "fixed"]


class ModelRef(Model):
    """A reference to something that can play a seat: the base model, a checkpoint, or a fixed agent."""

    uid: str = Field(description="Unique id in the model registry, e.g. 'ckpt-3' or 'random-valid'.")
    kind: ModelKind = Field("fixed", description="'base' (untrained learner), 'checkpoint' (a learner snapshot) or 'fixed' (an opponent that never trains).")
    backend: str = Field("scripted", description="Name of the inference component that serves this model.")
    model: str = Field("", description="What the backend loads: a hub id or local path, or the scripted agent's name.")
    adapter_path: str | None = Field(None, description="Path to a LoRA adapter (checkpoints only).")
    version: int = Field(0, ge=0, description="Policy version: the number of learner updates behind this model.")
    options: dict[str, Any] = Field(default_factory=dict, description="Backend-specific options (temperature, ...).")


class GameSpec(Model):
    """One game to play: the environment, the seed, and who sits where."""

    game_idx: int = Field(ge=0, description="Index of the game in this run; with the run seed it determines `seed`.")
    seed: int = Field(description="Seed handed to the environment's reset.")
    env: EnvSpec
    seats: list[ModelRef] = Field(description="seats[i] plays player id i.")
    train_seats: list[int] = Field(default_factory=list, description="Player ids whose turns go to the buffer.")
    mode: Literal["train", "eval", "tournament"] = Field("train", description="Why the game is played.")
    eval_step: int | None = Field(None, description="For evaluation games: the learner step being evaluated.")
    group_id: int | None = Field(None, description="Grouped training games (`collection.group_size`): the game_idx of the "
                                 "group's first game; every game of a group has the same seed and seats. None: not grouped.")
    group_index: int = Field(0, ge=0, description="Position of the game in its group; from it the game's sampling seeds "
                             "(position 0 samples as an ungrouped game would).")
    branch_turn: int = Field(0, ge=0, description="Turns (all players', in play order) sampled with the group's shared "
                             "seeds before the games of a group branch (`collection.branch_turn`).")


class Turn(Model):
    """One decision of one player."""

    player_id: int
    index: int = Field(0, ge=0, description="Position of this turn in the game, counting every player's turns (play order).")
    observation: str = Field(description="What the environment showed the player.")
    prompt: str = Field(description="The rendered prompt sent to inference.")
    prompt_token_ids: list[int] = Field(default_factory=list, description="Token ids of the prompt as the policy saw them.")
    completion: str = Field(description="Generated text.")
    completion_token_ids: list[int] = Field(default_factory=list, description="Token ids the policy generated (train on these, never re-tokenize).")
    logprobs: list[float] = Field(default_factory=list, description="Rollout logprob of each completion token.")
    policy_version: int = Field(0, description="Version of the policy that generated the completion.")
    action: str = Field(description="The action extracted from the completion and sent to the environment.")
    format_ok: bool = Field(description="Whether the completion followed the template's answer format.")
    invalid: bool = Field(False, description="Whether the environment rejected the action as an invalid move.")
    trainable: bool = Field(True, description="Whether a learner may train on this turn (its backend gave token ids).")
    truncated: bool = Field(False, description="Whether the completion was cut at the token limit instead of ending.")
    choice_token_ids: list[list[int]] = Field(
        default_factory=list, description="With `collection.answers = \"choice\"`: the token ids of every answer the "
        "backend chose among (the chosen one included); the learner's batch gets a row for each (``expand_choices``).")
    choice_probabilities: list[float] = Field(
        default_factory=list, description="The probability the backend gave each of choice_token_ids, renormalised over them.")


class PlayerTrajectory(Model):
    """Everything one seat did in one game."""

    player_id: int
    model: ModelRef
    turns: list[Turn] = Field(default_factory=list)
    final_reward: float = Field(0.0, description="The environment's reward for this player at the end of the game.")
    info: dict[str, Any] = Field(default_factory=dict, description="Per-player info from the environment (role, invalid_move, reason...).")

    @property
    def made_invalid_move(self) -> bool:
        """Whether any of this seat's moves was rejected as invalid."""
        for t in self.turns:
            if t.invalid:
                return True
        return False


class GameResult(Model):
    """A finished (or failed) game."""

    game: GameSpec
    trajectories: list[PlayerTrajectory] = Field(default_factory=list, description="One per seat, indexed by player id.")
    rewards: dict[int, float] = Field(default_factory=dict, description="Final reward per player id.")
    outcome: Literal["finished", "truncated", "failed"] = "finished"
    error: str | None = Field(None, description="For failed games: the exception's type and message.")
    num_turns: int = 0
    duration_s: float = 0.0

    @lazy_property
    def outcomes(self) -> dict[int, Literal["win", "draw", "loss"]]:
        """Win/draw/loss per player id, by comparing each reward with the best other reward
        (a single player: the sign of its reward). Empty for a failed game."""
        out: dict[int, Literal["win", "draw", "loss"]] = {}
        items = list(self.rewards.items())
        for pid, mine in items:  # plain loops: this runs for every game
            best_other = None
            for p, r in items:
                if p != pid and (best_other is None or r > best_other):
                    best_other = r
            if best_other is None:
                best_other = 0.0
            out[pid] = "win" if mine > best_other else ("loss" if mine < best_other else "draw")
        return out

    def outcome_for(self, player_id: int) -> Literal["win", "draw", "loss"]:
        """Win/draw/loss of one player (see ``outcomes``)."""
        return self.outcomes.get(player_id, "draw")


class Step(Model):
    """One training sample: a turn with the reward the learner should use."""

    env_id: str
    game_idx: int
    player_id: int
    turn_index: int = Field(description="Index of this turn among the player's turns in the game.")
    num_turns: int = Field(description="Number of turns this player took in the game.")
    turn: Turn
    final_reward: float = Field(description="Reward after final transforms, before step transforms.")
    reward: float = Field(description="Reward after every transform; learners use it as the advantage signal.")
    group_id: int | None = Field(None, description="The group of games this step's game belongs to (the group's first "
                                 "game_idx; an ungrouped game is a group of one: its own game_idx).")
    group_index: int = Field(0, ge=0, description="Position of this step's game in its group.")
    choice_advantage: float | None = Field(
        None, description="On a row that `expand_choices` made of a step answered among choices: the step's advantage "
        "times the batch's rows / steps. The row's reward is choice_advantage * ([its answer was drawn] - p) + "
        "choice_mass * p, p its answer's choice probability; a learner whose policy moved since the draw re-forms it "
        "with its own p (reinforce with importance_sampling).")
    choice_mass: float = Field(0.0, description="On such a row: collection.choice_mass times the batch's rows / steps.")


class Batch(Model):
    """What the learner receives for one update."""

    steps: list[Step]
    learner_version: int = Field(description="Learner version the batch is drawn for (number of updates so far).")
    dropped: int = Field(0, description="Steps dropped by the filter stage before this batch reached the learner.")
    figures: dict[str, float] = Field(default_factory=dict, description="Figures of the drawn steps the run logs with "
                                      "the update (grouped games: group_reward_std_mean, group_zero_std_frac).")


class Checkpoint(Model):
    """A saved learner snapshot."""

    uid: str
    version: int = Field(description="Number of learner updates behind it.")
    path: str = Field(description="Directory holding the adapter (safetensors) and its config.")
    base_model: str = ""
    created_at: float = 0.0
    metrics: dict[str, float] = Field(default_factory=dict)


class AdapterShape(Model):
    """The LoRA adapter a learner writes (``LearnerSpec.adapter``): what a backend that serves
    the learner's checkpoints must be able to load."""

    rank: int = Field(ge=1, description="LoRA rank r.")
    alpha: float = Field(gt=0, description="LoRA alpha.")
    target_modules: list[str] = Field(default_factory=list, description="Module names that get adapters.")
    modules_to_save: list[str] = Field(default_factory=list, description="Modules saved whole beside the LoRA weights.")


class GenerationRequest(Model):
    """A prompt for an inference backend."""

    model: ModelRef
    prompt: str
    observation: str = Field("", description="Raw observation (scripted agents read it; LLMs read the prompt).")
    env_id: str = ""
    player_id: int = 0
    seed: int = Field(0, description="Seed for sampling, derived from the game seed and turn.")
    game_seed: int = Field(0, description="The game's seed, the same on every turn of one game: a backend that plays one "
                           "of several policies per game (the `mixture` backend) draws it from this and player_id.")
    choices: list[str] | None = Field(
        None, description="The answers open to the model (`collection.answers = \"choice\"`: each legal action's "
        "answer text): a backend that declares `answers_choices` answers one of them, drawn with the probability the "
        "model gives each, renormalised over them. None: the model answers freely.")


class Completion(Model):
    """What an inference backend returns for one request."""

    text: str
    prompt_token_ids: list[int] = Field(default_factory=list)
    completion_token_ids: list[int] = Field(default_factory=list)
    logprobs: list[float] = Field(default_factory=list)
    policy_version: int = 0
    trainable: bool = Field(True, description="False when the backend could not give the token ids a learner needs "
                            "(a hosted API): a learner never trains on it.")
    truncated: bool = Field(False, description="The completion stopped at the backend's token limit (max_tokens), "
                            "not at an end token.")
    choice_token_ids: list[list[int]] = Field(
        default_factory=list, description="When the request offered choices: the token ids of each answer chosen among "
        "(the one given included), in the order offered; answers the backend cannot write are left out.")
    choice_probabilities: list[float] = Field(
        default_factory=list, description="The probability of each of choice_token_ids the answer was drawn with.")


# ---------------------------------------------------------------------------------------------
# Lifecycle hook contexts. Each hook takes one of these, so new fields never break old plugins.
# ---------------------------------------------------------------------------------------------


class HookContext(BaseModel):
    """Base of every lifecycle context; extra fields are allowed so the payload can grow."""

    model_config = ConfigDict(extra="allow", arbitrary_types_allowed=True, defer_build=True)

    run_dir: str = Field("", description="The run directory.")


class RunStartContext(HookContext):
    config: dict[str, Any] = Field(default_factory=dict, description="The resolved run config.")
    plugins: list[dict[str, Any]] = Field(default_factory=list, description="Plugin records (name, package, version, status).")


class RunEndContext(HookContext):
    learner_steps: int = 0
    games_played: int = 0
    status: Literal["completed", "interrupted", "failed"] = "completed"
    error: str | None = None


class GameEndContext(HookContext):
    result: GameResult


class BatchEndContext(HookContext):
    learner_step: int = Field(description="Learner updates made so far, this one included.")
    metrics: dict[str, float] = Field(default_factory=dict)
    batch_size: int = 0


class CheckpointContext(HookContext):
    checkpoint: Checkpoint


class ValidationStartContext(HookContext):
    learner_step: int
    model: ModelRef | None = None
    env_ids: list[str] = Field(default_factory=list)
    opponents: list[str] = Field(default_factory=list)


class ValidationEndContext(HookContext):
    learner_step: int
    records: list[dict[str, Any]] = Field(default_factory=list, description="One record per (env, opponent).")
