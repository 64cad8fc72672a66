"""One-line error reports."""


def test_a_long_error_is_cut_between_words_and_says_so():
    from unstable_core.errors import describe_error

    words = " ".join(f"word{i}" for i in range(100))  # 589 characters
    text = describe_error(ValueError(words + "\nsecond line"))
    assert text.startswith("ValueError: word0 word1") and text.endswith("...") and len(text) <= len("ValueError: ") + 300
    assert text[len("ValueError: "):-3].split(" ")[-1] in words.split(" ")  # the last word is whole
    assert describe_error(ValueError("short\nsecond")) == "ValueError: short"
    assert describe_error(ValueError("x" * 400)).endswith("x...")  # one long word: cut, marked
