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
    with caplog.at_level(logging.INFO):
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


# pictures (framework/graph_drawing.py): the DOT text and the PNG, with Graphviz and without it

def drawing_process(tmp_path):
    return process(tmp_path, {"a": {"type": "TAdd"}, "f": {"type": "TEvenFilter"},
                              "b": {"type": "TAdd", "src": "a:value"}})


def test_dot_colours_modules_by_kind_with_a_legend(tmp_path):
    from sonic_hep.framework.graph_drawing import KIND_COLOURS, KIND_NAMES, to_dot

    text = to_dot(drawing_process(tmp_path).graph, drawing_process(tmp_path).prototypes)
    assert f'fillcolor="{KIND_COLOURS["filter"]}"' in text and f'fillcolor="{KIND_COLOURS["producer"]}"' in text
    assert "cluster_legend" in text and KIND_NAMES["filter"] in text
    assert KIND_NAMES["analyzer"] not in text  # the legend lists only the kinds the picture shows
    assert '"a\\nTAdd"' in text and 'label="a:value"' in text  # label over type; the keys along the edge


def test_labels_fit():
    from sonic_hep.framework.graph_drawing import LABEL_WIDTH, MAX_KEYS_ON_EDGE, _fit, edge_label

    keys = [f"producer:key{n}" for n in range(MAX_KEYS_ON_EDGE + 2)]
    assert edge_label(keys).split("\n") == [*keys[:MAX_KEYS_ON_EDGE], "+2 more"]
    wrapped = _fit("a_rather_long_module_label_that_would_widen_its_box")
    assert max(map(len, wrapped.split("\n"))) <= LABEL_WIDTH
    assert wrapped.replace("\n", "") == "a_rather_long_module_label_that_would_widen_its_box"


def test_png_without_graphviz_is_drawn_by_matplotlib(tmp_path, monkeypatch):
    import io
    import shutil

    from sonic_hep.framework import graph_drawing

    monkeypatch.setattr(shutil, "which", lambda name, *args, **kwargs: None)  # as on a machine without dot
    p = drawing_process(tmp_path)
    stream = io.BytesIO()
    assert graph_drawing.draw_png(p.graph, p.prototypes, stream) == "matplotlib"
    assert stream.getvalue()[:4] == b"\x89PNG"


def test_matplotlib_drawing_puts_the_product_keys_on_the_edges(tmp_path, monkeypatch):
    """Without Graphviz the picture must say the same as with it: each module-to-module edge carries the
    product keys it stands for (read from the figure's texts just before it is saved)."""
    import io

    from matplotlib.figure import Figure

    from sonic_hep.framework import graph_drawing

    texts: list[str] = []
    save = Figure.savefig

    def record(figure, *args, **kwargs):
        texts.extend(text.get_text() for axes in figure.axes for text in axes.texts)
        return save(figure, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", record)
    p = drawing_process(tmp_path)
    assert graph_drawing.draw_png(p.graph, p.prototypes, io.BytesIO(), graphviz=False) == "matplotlib"
    assert "a:value" in texts, texts  # the one edge a -> b is labelled with the key b consumes


@pytest.mark.skipif(__import__("shutil").which("dot") is None, reason="Graphviz's dot is not installed")
def test_png_with_graphviz_is_drawn_by_dot(tmp_path):
    import io

    from sonic_hep.framework import graph_drawing

    p = drawing_process(tmp_path)
    stream = io.BytesIO()
    assert graph_drawing.draw_png(p.graph, p.prototypes, stream) == "Graphviz"
    assert stream.getvalue()[:4] == b"\x89PNG"


def test_a_failing_graphviz_still_gives_a_picture(tmp_path, monkeypatch, caplog):
    import io
    import os

    from sonic_hep.framework import graph_drawing

    fake = tmp_path / "dot"
    fake.write_text("#!/bin/sh\necho 'dot: broken install' >&2\nexit 3\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    p = drawing_process(tmp_path)
    stream = io.BytesIO()
    with caplog.at_level(logging.WARNING):
        assert graph_drawing.draw_png(p.graph, p.prototypes, stream) == "matplotlib"
    assert stream.getvalue()[:4] == b"\x89PNG" and "dot: broken install" in caplog.text
