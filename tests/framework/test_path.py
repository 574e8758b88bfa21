"""What ``path`` decides, as in CMSSW: a filter on the path selects the events written, one off it does not run
unless its products are needed and then selects nothing; an analyzer off it does not run; a producer off it
runs when needed, skipped on the events a path filter before all its consumers rejects. Each side is run as a
job of 10 events (TEvenFilter keeps the 5 of even index)."""

from __future__ import annotations

import logging

import pytest

import tests.framework.modules_for_tests  # noqa: F401  (registers the test module types)
from sonic_hep.framework import Filter, Output, Process
from sonic_hep.framework import config as cfgmod


class TTagEven(Filter):
    """Keeps events of even index, and puts their index (a filter with a product)."""

    value = Output("int")

    def filter(self, event):
        event.put("value", event.index)
        return event.index % 2 == 0


def run(tmp_path, modules: dict, path: list[str] | None, products: list[str]):
    data = {"source": {"type": "empty", "events": 10}, "modules": modules,
            "output": {"file": str(tmp_path / "out.root"), "products": products}, "options": {"progress": False}}
    if path is not None:
        data["path"] = path
    process = Process(cfgmod.parse(data), module_types={"tag": TTagEven})
    result = process.run(progress=False)
    visited = {m["label"]: m["visited"] for m in result.timing.report()["modules"]}
    return process, result, visited


def test_a_filter_on_the_path_selects_the_events_written(tmp_path):
    _, result, _ = run(tmp_path, {"a": {"type": "TAdd"}, "f": {"type": "TEvenFilter"}}, ["a", "f"], ["a:*"])
    assert result.events == 10 and result.written == 5


def test_a_filter_off_the_path_does_not_run_or_select(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="sonic_hep.framework.graph"):
        process, result, visited = run(tmp_path, {"a": {"type": "TAdd"}, "f": {"type": "TEvenFilter"},
                                                  "h": {"type": "Histogram1D", "src": "a:value"}}, ["a"], ["a:*"])
    assert result.written == 10 and "f" not in visited and "h" not in visited
    assert process.graph.order == ["a"] and result.histograms == {}
    assert "not on path, so they do not run: f, h; add them to path to run them" in caplog.text


def test_a_filter_off_the_path_whose_product_is_needed_runs_but_selects_nothing(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="sonic_hep.framework.graph"):
        _, result, visited = run(tmp_path, {"tag": {"type": "TTagEven"}, "b": {"type": "TAdd", "src": "tag:value"}},
                                 ["b"], ["b:*"])
    assert visited["tag"] == 10 and visited["b"] == 10 and result.written == 10
    assert "filters not on path run only for their products and select no events: tag" in caplog.text
    _, on_path, _ = run(tmp_path, {"tag": {"type": "TTagEven"}, "b": {"type": "TAdd", "src": "tag:value"}},
                        ["tag", "b"], ["b:*"])
    assert on_path.written == 5


@pytest.mark.parametrize("path, visits", [(["f", "b"], 5), (["b", "f"], 10), (["f"], 5)])
def test_a_producer_off_the_path_runs_on_the_events_that_reach_its_consumers(tmp_path, path, visits):
    """``a`` is on no path: ``b`` (or only the output) needs it. After the filter it runs on the 5 events the
    filter keeps; needed before the filter, on all 10."""
    products = ["b:*"] if "b" in path else ["a:*"]
    _, result, visited = run(tmp_path, {"f": {"type": "TEvenFilter"}, "a": {"type": "TAdd"},
                                        "b": {"type": "TAdd", "src": "a:value"}}, path, products)
    assert visited["a"] == visits and result.written == 5


def test_without_a_path_every_module_is_on_it_in_configuration_order(tmp_path):
    _, result, visited = run(tmp_path, {"a": {"type": "TAdd"}, "f": {"type": "TEvenFilter"},
                                        "b": {"type": "TAdd", "src": "a:value"}}, None, ["a:*", "b:*"])
    assert result.written == 5 and visited == {"a": 10, "f": 10, "b": 5}
