"""The module DAG: built from declared consumes/produces with networkx, checked, pruned and ordered.

Edges run from the module that produces a key to every module that consumes it. What runs is decided as in
CMSSW, by the ``path`` (every module, in configuration order, when a configuration gives none):

* a filter on the path selects events: it gets an edge to every module after it in the path, so "the rest of
  the path" is skipped for the events it rejects, deterministically, and only events that every filter on the
  path accepts are written; an analyzer on the path runs;
* a module not on the path runs only when something that runs needs its products (a consumer, or
  ``output.products``), as CMSSW's unscheduled producers do, and then only on the events that reach all of
  its consumers: a path filter before every one of them skips it too. A filter run this way selects nothing
  (CMSSW ignores an unscheduled filter's decision); a filter or analyzer nothing needs does not run. Both are
  said in a warning, since a reader of the configuration might expect otherwise;
* a producer whose products nobody needs is pruned wherever it is listed (unscheduled execution would never
  run it).

Pictures of the DAG are drawn by :mod:`.graph_drawing`.
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
        filter_descendants: for each filter on the path (the filters that select events), the modules skipped
            when it rejects an event.
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
        path: labels in path order (filters act on what follows them); a module not on it runs only when
            needed (see the module docstring).
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

    on_path = position_on(path)
    position = dict(on_path)
    for label in modules:
        position.setdefault(label, len(position))
    needed = _needed(g, modules, path, [producer_of[k] for k in selected(list(producer_of), output_patterns)])
    unscheduled = [label for label in modules if label in needed and label not in on_path]
    # a module off the path that only modules after a path filter need (or only the output, which holds the
    # events every path filter accepts) is skipped with them: CMSSW would not ask for it on those events
    demanders = {label: {d for d in nx.descendants(g, label) if d in needed and d in on_path} for label in unscheduled}
    for label in path:
        if isinstance(modules[label], Filter):
            guarded = path[position[label] + 1:] + [m for m in unscheduled
                                                     if all(position[d] > position[label] for d in demanders[m])]
            for later in guarded:
                if not g.has_edge(label, later):
                    g.add_edge(label, later, keys=["<filter>"])

    try:
        cycle = nx.find_cycle(g)
    except nx.NetworkXNoCycle:
        cycle = None
    if cycle:
        hops = " → ".join(f"'{a}' ({', '.join(g.edges[a, b]['keys'])})" for a, b in cycle)
        raise GraphError(f"the modules form a cycle: {hops} → '{cycle[0][0]}'")

    _say_what_the_path_leaves_out(modules, path, needed)
    pruned = [label for label in position if label not in needed]
    if pruned:
        # a notice, not a warning: unscheduled execution skipping what nothing needs is the intended
        # behaviour (configs/exatrkx.yaml ships both pipelines and one is always pruned); a module a
        # consumer names but nothing produces is an error above, not here
        log.info("pruned modules nothing needs (not consumed, not in output.products): %s", ", ".join(pruned))
        g.remove_nodes_from(pruned)
        source_keys = {key: [c for c in consumers if c not in pruned] for key, consumers in source_keys.items()}
        source_keys = {key: consumers for key, consumers in source_keys.items() if consumers}

    order = list(nx.lexicographical_topological_sort(g, key=lambda label: position[label]))
    descendants = {label: frozenset(nx.descendants(g, label)) for label in order
                   if isinstance(modules[label], Filter) and label in on_path}
    return ModuleGraph(graph=g, order=order, source_keys=source_keys, pruned=pruned, filter_descendants=descendants)


def position_on(path: list[str]) -> dict[str, int]:
    """Each label on the path by its position."""
    return {label: i for i, label in enumerate(path)}


def _needed(g: nx.DiGraph, modules: dict[str, Module], path: list[str], output_producers: list[str]) -> set[str]:
    """The modules that run: the path's filters and analyzers, the producers of the output's products, and every
    module whose products (through ``g``'s product edges) one of these needs."""
    wanted = set(output_producers) | {label for label in path if isinstance(modules[label], (Filter, Analyzer))}
    needed = set(wanted)
    for label in wanted:
        needed |= nx.ancestors(g, label)
    return needed


def _say_what_the_path_leaves_out(modules: dict[str, Module], path: list[str], needed: set[str]) -> None:
    """Warns of filters and analyzers that are not on the path: a reader of the configuration may think they
    select events or fill histograms."""
    on_path = position_on(path)
    idle = [label for label, m in modules.items()
            if label not in on_path and label not in needed and isinstance(m, (Filter, Analyzer))]
    if idle:
        log.warning("not on path, so they do not run: %s; add them to path to run them", ", ".join(idle))
    selecting_nothing = [label for label, m in modules.items()
                         if label not in on_path and label in needed and isinstance(m, Filter)]
    if selecting_nothing:
        log.warning("filters not on path run only for their products and select no events: %s; add them to path "
                    "to select events", ", ".join(selecting_nothing))
