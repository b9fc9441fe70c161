"""kafka-configs.sh's --add-config syntax, as `hightide configs` parses it."""

from __future__ import annotations

import click
import pytest

from hightide.cli.configs import parse_add_config


def test_commas_separate_configs_except_inside_brackets():
    assert parse_add_config("retention.ms=1000,cleanup.policy=[compact,delete], segment.ms = 5") == [
        ("retention.ms", "1000"), ("cleanup.policy", "compact,delete"), ("segment.ms", "5")]


def test_values_may_contain_equals_and_be_empty():
    assert parse_add_config("a=b=c,d=") == [("a", "b=c"), ("d", "")]


@pytest.mark.parametrize("bad", ["retention.ms", "=1", "a=1,b"])
def test_items_without_key_and_value_are_refused(bad):
    with pytest.raises(click.BadParameter, match='key=val'):
        parse_add_config(bad)
