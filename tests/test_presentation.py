"""One presentation layer: colour table, eliding inside values, 120 columns, explicit cases hypothesis once found."""

from __future__ import annotations

import pytest

from hoststate.errors import PolicyError
from hoststate.policy import parse_rules
from tests.conftest import IN_CI


@pytest.mark.parametrize("path", ["a\n", "\n", "a.\n", '"a\nb"', "*\n*", "a\x1b[2J"])
def test_a_policy_path_with_a_control_character_gives_a_one_line_error(path):
    """Found by hypothesis (test_bad_inputs.test_fuzz_policy_rules) on a clean clone: a rule path holding a
    newline made a two-line error. Kept as explicit cases."""
    with pytest.raises(PolicyError) as err:
        parse_rules({"rule": [{"path": path}]}, "fuzz.toml")
    assert "\n" not in str(err.value) and "\x1b" not in str(err.value)
    assert "rule 1 (" in str(err.value)


def test_hypothesis_is_derandomised_under_ci():
    from hypothesis import settings

    assert settings.get_profile("ci").derandomize is True
    assert settings.get_profile("ci").database is None
    if IN_CI:
        assert settings.default.derandomize is True
