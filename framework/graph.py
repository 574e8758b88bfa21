"""The module DAG: built from declared consumes/produces with networkx, checked, pruned and ordered.

Edges run from the module that produces a key to every module that consumes it. A filter also gets
an edge to every module after it in the path, so "the rest of the path" is skipped for rejected
events deterministically. Modules whose products nobody needs (not consumed, not selected for
output) are pruned, as CMSSW's unscheduled execution would never run them; filters and analyzers are
always kept. Pictures of the DAG are drawn by :mod:`.graph_drawing`.
"""

from __future__ import annotations

import fnmatch
import logging
from dataclasses import dataclass, field

import networkx as nx

from .errors import GraphError, did_you_mean
from .module import Analyzer, Filter, Module
from .names import is_quoted

log = logging.getLogger(__name__)


@dataclass
class ModuleGraph:
    """The checked DAG of one process.

    Attributes:
        graph: networkx DiGraph over module labels (edge attribute ``keys``: what flows along it).
        order: labels in a deterministic topological order (ties broken by path position).
        source_keys: keys read from the source, with the labels of their consumers.
        pruned: labels removed because nothing needs them.
        filter_descendants: for each filter, the modules skipped when it rejects an event.
    """

    graph: nx.DiGraph
    order: list[str]
    source_keys: dict[str, list[str]]
    pruned: list[str] = field(default_factory=list)
    filter_descendants: dict[str, frozenset[str]] = field(default_factory=dict)

    def upstream(self, label: str) -> list[str]:
        return sorted(self.graph.predecessors(label), key=self.order.index)

    def downstream(self, label: str) -> list[str]:
        return sorted(self.graph.successors(label), key=self.order.index)


def selected(keys: list[str], patterns: list[str]) -> list[str]:
    """Keys matching any of the glob ``patterns`` (``"*"``, ``"pnet:*"``, ``"met:met"``)."""
    return [k for k in keys if any(fnmatch.fnmatchcase(k, p) for p in patterns)]


def build(modules: dict[str, Module], path: list[str], output_patterns: list[str]) -> ModuleGraph:
    """Builds, checks and prunes the DAG.

    Args:
        modules: module instances by label (one stream's set).
        path: labels in path order (filters act on what follows them).
        output_patterns: product globs wanted in the output; products matching none are not needed.

    Raises:
        GraphError: a product consumed but never produced, or a cycle (naming the modules and keys).
    """
    producer_of: dict[str, str] = {}
    for label, module in modules.items():
        for key in module.produces():
            producer_of[key] = label

    g = nx.DiGraph()
    g.add_nodes_from(modules)
    source_keys: dict[str, list[str]] = {}
    for label, module in modules.items():
        for key in module.consumes():
            if key in producer_of:
                upstream = producer_of[key]
                if upstream == label:
                    raise GraphError(f"module '{label}' consumes its own product {key!r}")
                if g.has_edge(upstream, label):
                    g.edges[upstream, label]["keys"].append(key)
                else:
                    g.add_edge(upstream, label, keys=[key])
                continue
            owner, sep, instance = key.partition(":")
            if sep and not is_quoted(key):  # `Name:in:file` is a source column, not label:product
                if owner in modules:
                    raise GraphError(f"module '{label}' consumes {key!r}, but module '{owner}' "
                                     f"({type(modules[owner]).__name__}) produces only "
                                     f"{modules[owner].produces() or 'nothing'}")
                raise GraphError(f"module '{label}' consumes {key!r}, but no module is labelled {owner!r}"
                                 f"{did_you_mean(owner, modules)}")
            source_keys.setdefault(key, []).append(label)

    position = {label: i for i, label in enumerate(path)}
    for label in modules:
        position.setdefault(label, len(position))
    for label in path:
        if isinstance(modules[label], Filter):
            for later in path[position[label] + 1:]:
                if not g.has_edge(label, later):
                    g.add_edge(label, later, keys=["<filter>"])

    try:
        cycle = nx.find_cycle(g)
    except nx.NetworkXNoCycle:
        cycle = None
    if cycle:
        hops = " → ".join(f"'{a}' ({', '.join(g.edges[a, b]['keys'])})" for a, b in cycle)
        raise GraphError(f"the modules form a cycle: {hops} → '{cycle[0][0]}'")

    all_products = list(producer_of)
    wanted = {producer_of[k] for k in selected(all_products, output_patterns)}
    wanted |= {label for label, m in modules.items() if isinstance(m, (Filter, Analyzer))}
    needed = set(wanted)
    for label in wanted:
        needed |= nx.ancestors(g, label)
    pruned = [label for label in path if label not in needed]
    if pruned:
        # a notice, not a warning: unscheduled execution skipping what nothing needs is the intended
        # behaviour (configs/exatrkx.yaml ships both pipelines and one is always pruned); a module a
        # consumer names but nothing produces is an error above, not here
        log.info("pruned modules nothing needs (not consumed, not in output.products): %s", ", ".join(pruned))
        g.remove_nodes_from(pruned)
        source_keys = {key: [c for c in consumers if c not in pruned] for key, consumers in source_keys.items()}
        source_keys = {key: consumers for key, consumers in source_keys.items() if consumers}

    order = list(nx.lexicographical_topological_sort(g, key=lambda label: position[label]))
    descendants = {label: frozenset(nx.descendants(g, label)) for label in order if isinstance(modules[label], Filter)}
    return ModuleGraph(graph=g, order=order, source_keys=source_keys, pruned=pruned, filter_descendants=descendants)
