"""The DAG: order from consumes/produces, cycles and missing producers named, pruning, filters."""

from __future__ import annotations

import logging

import pytest

import tests.framework.modules_for_tests  # noqa: F401  (registers the test module types)
from sonic_hep.framework import ConfigError, GraphError, Process
from sonic_hep.framework import config as cfgmod


def process(tmp_path, modules, products=("*",), path=None):
    data = {"modules": modules, "output": {"products": list(products)}}
    if path:
        data["path"] = path
    return Process(cfgmod.parse(data, file="test.yaml"), open_source=False)


def test_order_follows_dependencies_not_config_order(tmp_path):
    p = process(tmp_path, {"c": {"type": "TAdd", "src": "b:value"}, "b": {"type": "TAdd", "src": "a:value"},
                           "a": {"type": "TAdd"}})
    assert p.graph.order == ["a", "b", "c"]
    assert p.graph.upstream("c") == ["b"]


def test_cycle_is_named(tmp_path):
    with pytest.raises(GraphError) as err:
        process(tmp_path, {"a": {"type": "TCycleA"}, "b": {"type": "TAdd", "src": "a:value"}})
    assert "cycle" in str(err.value) and "'a'" in str(err.value) and "'b'" in str(err.value)


def test_missing_producer_named(tmp_path):
    with pytest.raises(GraphError) as err:
        process(tmp_path, {"x": {"type": "TAdd", "src": "nobody:value"}})
    assert "'x'" in str(err.value) and "nobody:value" in str(err.value)
    with pytest.raises(GraphError) as err:
        process(tmp_path, {"a": {"type": "TAdd"}, "x": {"type": "TAdd", "src": "a:other"}})
    assert "produces only ['a:value']" in str(err.value)


def test_unneeded_modules_pruned_with_notice(tmp_path, caplog):
    with caplog.at_level(logging.WARNING):
        p = process(tmp_path, {"a": {"type": "TAdd"}, "b": {"type": "TAdd", "src": "a:value"},
                               "unused": {"type": "TAdd"}}, products=["b:*"])
    assert p.graph.order == ["a", "b"]
    assert p.graph.pruned == ["unused"]
    assert "unused" in caplog.text


def test_filter_precedes_everything_after_it_in_path(tmp_path):
    p = process(tmp_path, {"early": {"type": "TAdd"}, "f": {"type": "TEvenFilter"}, "late": {"type": "TAdd"}})
    assert p.graph.upstream("late") == ["f"]
    assert p.graph.upstream("early") == []
    assert p.graph.filter_descendants["f"] == {"late"}


def test_output_pattern_matching_nothing_is_an_error(tmp_path):
    with pytest.raises(ConfigError) as err:
        process(tmp_path, {"a": {"type": "TAdd"}}, products=["zz:*"])
    assert "'zz:*' matches no product" in str(err.value)
