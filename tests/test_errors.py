"""One-line error reports."""

import pytest


def test_a_long_error_is_cut_between_words_and_says_so():
    from unstable_core.errors import describe_error

    words = " ".join(f"word{i}" for i in range(100))  # 589 characters
    text = describe_error(ValueError(words + "\nsecond line"))
    assert text.startswith("ValueError: word0 word1") and text.endswith("...") and len(text) <= len("ValueError: ") + 300
    assert text[len("ValueError: "):-3].split(" ")[-1] in words.split(" ")  # the last word is whole
    assert describe_error(ValueError("short\nsecond")) == "ValueError: short"
    assert describe_error(ValueError("x" * 400)).endswith("x...")  # one long word: cut, marked


def test_a_missing_checkpoint_is_named_with_a_short_list_of_those_the_run_has(tmp_path):
    """`run_model`: a checkpoint the run has is served from its folder; one it lacks is one line
    that names the first and last few of its checkpoints, not all of them."""
    import json

    from unstable_core import UnstableError, run_model

    (tmp_path / "config.json").write_text(json.dumps({"config": {"model": {"model": "m"}, "inference": {"name": "hf"}}}))
    for step in range(5, 105, 5):
        (tmp_path / "checkpoints" / f"ckpt-{step}").mkdir(parents=True)
    found = run_model(tmp_path, "ckpt-10")
    assert (found.version, found.adapter_path) == (10, str(tmp_path / "checkpoints" / "ckpt-10"))
    with pytest.raises(UnstableError) as caught:
        run_model(tmp_path, "ckpt-7")
    message = str(caught.value)
    assert "no checkpoint 'ckpt-7' (it has ckpt-5, ckpt-10, ckpt-15, ... 14 more ..., ckpt-90, ckpt-95, ckpt-100;" in message
    assert "ckpt-50" not in message and "\n" not in message
