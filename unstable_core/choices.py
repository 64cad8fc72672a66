"""The policy gradient of answers drawn among choices (``collection.answers = "choice"``).

A backend that answers one of the offered texts plays the model's probabilities renormalised over
them, ``pi(a) = p(a) / sum_b p(b)``, and the gradient of ``log pi(c)`` is

    grad log p(c) - sum_a pi(a) grad log p(a)

the chosen answer's own log-probability gradient less the ``pi``-weighted mean of every offered
answer's. A learner that trains each row's ``log p`` with the row's reward as its advantage takes
exactly that step when a step of advantage ``A`` becomes one row per offered answer ``a``, of
advantage ``A * ([a = c] - pi(a))``. Pushing down every answer of a state alike (a state where
every move loses) then changes nothing, as it should (``pi`` is unchanged); training the chosen
answer alone would push the mass off all the legal answers onto texts that are never played, and
the renormalised policy would stop moving.

The tokens every offered answer starts with (``\\boxed{[``) have weights that sum to zero over the
rows: they move to the rows' prompts, where no learner trains them. Left in the completions they
would cancel only while every row's term has the same form; under PPO's clip, the rows of
opposite sign are clipped at different ratios and that shared prefix would be pushed down alone.
A row also ends at its answer's deciding token (the first that no other choice shares): the tokens
after it only spell the answer out.
The rows' advantages are scaled by rows / steps, so that a learner that averages over its batch's
rows takes the step that the steps' mean describes. Each row keeps the step's advantage and the
mass, so scaled (``Step.choice_advantage``, ``Step.choice_mass``): the baseline ``pi`` is the
drawing policy's, and the rows' step is ``A * grad log pi(c)`` only while the learner's policy is
that one; off-policy (importance sampling) ``A * grad log p(c) - A * sum_a pi_old(a) grad log p(a)``
is not ``A * grad log pi(c)`` (two answers, pi_old (0.5, 0.5), pi (0.8, 0.2), A = -1 after either:
the weighted rows' expected step is nonzero where the true one is 0), so ``reinforce`` re-forms
each row's advantage with ``pi`` at the update's start. A row of an answer not chosen carries that
answer's token ids (no rollout logprobs); its text fields stay the chosen turn's.

That gradient leaves the offered answers' total probability ``sum_a p(a)`` free: nothing in it
holds the deciding position's distribution on them, and with the tiny model it flattened over the
whole vocabulary (the legal answers' logits fell to the level of the others, about 1, where free
answers keep them at 8-13) while the policy lost what it knew of the cards. ``mass``
(``collection.choice_mass``) adds the gradient of ``mass * log sum_a p(a)``: ``mass * pi(a)`` on
each row's advantage.
"""

from __future__ import annotations

from .types import Step


def expand_choices(steps: list[Step], mass: float = 0.0) -> list[Step]:
    """Each step whose turn was answered among choices as a row per choice (see the module);
    other steps as they are. ``mass`` > 0 adds ``mass * pi(a)`` to each row's advantage: the
    gradient of ``mass * log sum_a p(a)``, which keeps the offered answers' total probability up."""
    rows: list[Step] = []
    for step in steps:
        turn = step.turn
        chosen = list(turn.completion_token_ids)
        if not turn.choice_token_ids or chosen not in turn.choice_token_ids:
            rows.append(step)
            continue
        choices = [list(ids) for ids in turn.choice_token_ids]
        shared = common_prefix(choices)
        prompt = list(turn.prompt_token_ids) + chosen[:shared]
        for ids, p in zip(choices, turn.choice_probabilities, strict=True):
            mine = ids == chosen
            end = deciding_end(ids, choices)
            row_turn = turn.model_copy(update={"prompt_token_ids": prompt, "completion_token_ids": ids[shared:end],
                                               "logprobs": list(turn.logprobs[shared:end]) if mine else []})
            advantage = step.reward * (float(mine) - p) + mass * p
            rows.append(step.model_copy(update={"turn": row_turn, "reward": advantage, "choice_advantage": step.reward,
                                                "choice_mass": mass}))
    if len(rows) == len(steps):
        return rows
    scale = len(rows) / len(steps)
    return [row.model_copy(update={"reward": row.reward * scale, **({} if row.choice_advantage is None else {
        "choice_advantage": row.choice_advantage * scale, "choice_mass": row.choice_mass * scale})}) for row in rows]


def common_prefix(sequences: list[list[int]]) -> int:
    """How many leading tokens every sequence shares, short of the shortest one's last token
    (each row keeps at least one completion token)."""
    shortest = min(len(ids) for ids in sequences)
    n = 0
    while n < shortest - 1 and all(ids[n] == sequences[0][n] for ids in sequences):
        n += 1
    return n


def deciding_end(ids: list[int], choices: list[list[int]]) -> int:
    """Where ``ids`` stops sharing a prefix with every other choice, plus one: its tokens up to
    there decide it among the choices; the rest only spell it out."""
    longest = 0
    for other in choices:
        if other == ids:
            continue
        n = 0
        while n < min(len(ids), len(other)) and ids[n] == other[n]:
            n += 1
        longest = max(longest, n)
    return min(len(ids), longest + 1)
