"""Pictures of a module DAG for ``sonic graph``: DOT text, and a PNG drawn by Graphviz when present.

Both the DOT text and the PNG show the same things, so the picture reads without the configuration:
each module as ``label`` over its type, filled by its kind (one colour table, :data:`KIND_COLOURS`), a
double border when it uses the inference service, the source's branches as grey boxes, the product
keys along the edges, and a legend of the kinds present. Graphviz's ``dot`` lays out a DAG far better
than anything drawn by hand, so it draws the PNG when installed; without it, matplotlib draws the
same content in columns by dependency depth (boxes sized to their text), so the command never needs
a system package.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import textwrap
from typing import BinaryIO

import networkx as nx

from .graph import ModuleGraph
from .module import Module

log = logging.getLogger(__name__)

#: fill colour by module kind (``Module.kind``); the legend lists them in this order
KIND_COLOURS: dict[str, str] = {
    "producer": "#ffffff",
    "filter": "#c6e2ff",
    "analyzer": "#d4f4d4",
    "external": "#ffd9a0",
}
KIND_NAMES: dict[str, str] = {
    "producer": "producer",
    "filter": "filter (rejected events stop)",
    "analyzer": "analyzer (summaries)",
    "external": "external work (asynchronous)",
}
SOURCE_COLOUR = "#e8e8e8"
#: edge labels list at most this many product keys, then "+N more" (labels that fit beside the arrow)
MAX_KEYS_ON_EDGE = 3
#: characters per line of a label before it wraps
LABEL_WIDTH = 24


def _uses_inference(module: Module) -> bool:
    return "inference" in getattr(type(module), "requires", ())


def _fit(text: str, width: int = LABEL_WIDTH) -> str:
    """Wraps ``text`` at ``width`` characters (at dots and underscores too), so long names stay narrow."""
    if len(text) <= width:
        return text
    spaced = text.replace("_", "_\u200b").replace(".", ".\u200b")
    lines = textwrap.wrap(spaced, width, break_long_words=True, break_on_hyphens=True)
    return "\n".join(line.replace("\u200b", "") for line in lines)


def edge_label(keys: list[str]) -> str:
    """The product keys on an edge, one a line, the list cut at :data:`MAX_KEYS_ON_EDGE`."""
    shown = [_fit(key) for key in keys[:MAX_KEYS_ON_EDGE]]
    if len(keys) > MAX_KEYS_ON_EDGE:
        shown.append(f"+{len(keys) - MAX_KEYS_ON_EDGE} more")
    return "\n".join(shown)


def node_label(label: str, module: Module) -> str:
    """``label`` over the module's type name, each wrapped to fit."""
    return f"{_fit(label)}\n{_fit(type(module).__name__)}"


def _quote(text: str) -> str:
    """A DOT double-quoted string (newlines as DOT's centred line breaks)."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def to_dot(mg: ModuleGraph, modules: dict[str, Module]) -> str:
    """DOT text of the DAG with kinds coloured and a legend (``dot -Tpng`` renders it)."""
    import pydot

    dot = pydot.Dot("process", graph_type="digraph", rankdir="LR", fontname="Helvetica", nodesep="0.3")
    dot.set_node_defaults(fontname="Helvetica", fontsize="11")
    dot.set_edge_defaults(fontname="Helvetica", fontsize="9", color="#555555")
    for key in mg.source_keys:
        dot.add_node(pydot.Node(_quote(f"src:{key}"), label=_quote(_fit(key)), shape="box", style="filled",
                                fillcolor=SOURCE_COLOUR))
    for label in mg.order:
        module = modules[label]
        kind = type(module).kind
        dot.add_node(pydot.Node(_quote(label), label=_quote(node_label(label, module)), shape="box",
                                style='"rounded,filled"', fillcolor=KIND_COLOURS.get(kind, "white"),
                                peripheries=2 if _uses_inference(module) else 1))
    for key, consumers in mg.source_keys.items():
        for label in consumers:
            dot.add_edge(pydot.Edge(_quote(f"src:{key}"), _quote(label)))
    for a, b, data in mg.graph.edges(data=True):
        keys = list(data.get("keys", []))
        attrs = {"label": _quote(edge_label(keys))} if keys else {"style": "dashed"}  # dashed: order only
        dot.add_edge(pydot.Edge(_quote(a), _quote(b), **attrs))
    legend = pydot.Cluster("legend", label='"legend"', fontname="Helvetica", fontsize="10", color="#999999")
    entries = _legend_entries(mg, modules)
    for before, after in zip(entries, entries[1:]):  # invisible edges: the legend is one row, not a column
        legend.add_edge(pydot.Edge(_quote(f"legend:{before[0]}"), _quote(f"legend:{after[0]}"), style="invis"))
    for kind, colour in entries:
        legend.add_node(pydot.Node(_quote(f"legend:{kind}"), label=_quote(kind), shape="box", style='"rounded,filled"',
                                   fillcolor=colour, fontsize="9",
                                   peripheries=2 if kind == "uses the inference service" else 1))
    dot.add_subgraph(legend)
    return dot.to_string()


def _legend_entries(mg: ModuleGraph, modules: dict[str, Module]) -> list[tuple[str, str]]:
    """(text, fill colour) for what this picture shows: its kinds, source branches, inference users."""
    kinds = {type(modules[label]).kind for label in mg.order}
    entries = [(KIND_NAMES[kind], colour) for kind, colour in KIND_COLOURS.items() if kind in kinds]
    entries += [(kind, "white") for kind in sorted(kinds - KIND_COLOURS.keys())]
    if mg.source_keys:
        entries.append(("branch of the input file", SOURCE_COLOUR))
    if any(_uses_inference(modules[label]) for label in mg.order):
        entries.append(("uses the inference service", "white"))
    return entries


def graphviz_available() -> bool:
    """Whether Graphviz's ``dot`` is on ``PATH``."""
    return shutil.which("dot") is not None


def draw_png(mg: ModuleGraph, modules: dict[str, Module], stream: BinaryIO, graphviz: bool | None = None) -> str:
    """Writes a PNG of the DAG to ``stream``; returns what drew it (``"Graphviz"`` or ``"matplotlib"``).

    ``graphviz`` None: Graphviz when ``dot`` is on ``PATH``, else the matplotlib fallback.
    """
    if graphviz is None:
        graphviz = graphviz_available()
    if graphviz:
        try:
            png = subprocess.run(["dot", "-Tpng"], input=to_dot(mg, modules).encode(), capture_output=True,
                                 check=True, timeout=120).stdout
        except (OSError, subprocess.SubprocessError) as err:  # a broken Graphviz still gives a picture
            failed = isinstance(err, subprocess.CalledProcessError) and err.stderr
            detail = err.stderr.decode(errors="replace").strip() if failed else str(err)
            log.warning("Graphviz's dot failed (%s); drawing with matplotlib instead", detail)
        else:
            stream.write(png)
            return "Graphviz"
    _draw_with_matplotlib(mg, modules, stream)
    return "matplotlib"


def _untangle(g: nx.DiGraph, columns: list[list[str]]) -> None:
    """Reorders each column by the mean row of its nodes' neighbours (a barycentre sweep), fewer crossings."""
    row = {n: i for col in columns for i, n in enumerate(col)}
    for _ in range(2):
        for index, col in enumerate(columns):
            neighbours = g.predecessors if index else g.successors
            col.sort(key=lambda n: sum(row[m] for m in neighbours(n)) / max(1, len(list(neighbours(n)))))
            row.update({n: i for i, n in enumerate(col)})


def _draw_with_matplotlib(mg: ModuleGraph, modules: dict[str, Module], stream: BinaryIO) -> None:
    """Columns by dependency depth, boxes sized to their text, arrows between box edges, a legend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyBboxPatch, Patch

    g = nx.DiGraph(mg.graph)
    texts: dict[str, str] = {label: node_label(label, modules[label]) for label in mg.order}
    fills: dict[str, str] = {label: KIND_COLOURS.get(type(modules[label]).kind, "white") for label in mg.order}
    for key, consumers in mg.source_keys.items():
        node = f"src:{key}"
        texts[node], fills[node] = _fit(key), SOURCE_COLOUR
        for label in consumers:
            g.add_edge(node, label)
    columns = [sorted(nodes) for nodes in nx.topological_generations(g)]
    _untangle(g, columns)
    # sizes in inches at 8 pt: ~0.075 in per character, 0.17 in per line, plus padding
    size = {n: (0.075 * max(map(len, texts[n].split("\n"))) + 0.3, 0.17 * (texts[n].count("\n") + 1) + 0.2)
            for n in g.nodes}
    col_width = [max(size[n][0] for n in col) for col in columns]
    # the product keys along module-to-module edges, as the DOT picture has them; columns part wide enough
    edge_texts = {(a, b): edge_label(list(data["keys"])) for a, b, data in mg.graph.edges(data=True)
                  if data.get("keys")}
    widest = max((max(map(len, text.split("\n"))) for text in edge_texts.values()), default=0)
    gap_x, gap_y = max(0.9, 0.065 * widest + 0.3), 0.35
    heights = [sum(size[n][1] for n in col) + gap_y * (len(col) - 1) for col in columns]
    width, height = sum(col_width) + gap_x * (len(columns) + 1), max(heights, default=1) + 2 * gap_y
    pos: dict[str, tuple[float, float]] = {}
    x = gap_x
    for col, w, h in zip(columns, col_width, heights):
        y = (height + h) / 2
        for n in col:
            y -= size[n][1] / 2
            pos[n] = (x + w / 2, y)
            y -= size[n][1] / 2 + gap_y
        x += w + gap_x
    legend = _legend_entries(mg, modules)
    column_of = {n: index for index, col in enumerate(columns) for n in col}
    bends: dict[tuple[str, str], float] = {}
    for a, b in g.edges:
        span = column_of[b] - column_of[a]
        # an edge skipping columns arcs over the boxes between (drawn beneath them) instead of crossing their text
        bends[a, b] = 0.0 if span == 1 else min(0.5, 0.12 * span) * (1 if (column_of[a] + column_of[b]) % 2 else -1)
    # an arc rises about rad * length / 2 beyond its ends: room for it above and below
    arc = max((abs(bend) * abs(pos[b][0] - pos[a][0]) / 2 for (a, b), bend in bends.items()), default=0.0)
    legend_height = 0.22 * len(legend) + 0.2
    fig = plt.figure(figsize=(max(width, 4.0), height + legend_height + 2 * arc))
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, max(width, 4.0))
    ax.set_ylim(-legend_height - arc, height + arc)
    ax.set_axis_off()
    for (a, b), bend in bends.items():
        (xa, ya), (xb, yb) = pos[a], pos[b]
        ax.annotate("", xy=(xb - size[b][0] / 2, yb), xytext=(xa + size[a][0] / 2, ya), zorder=1,
                    arrowprops={"arrowstyle": "-|>", "color": "#555555", "lw": 0.8, "shrinkA": 0, "shrinkB": 2,
                                "connectionstyle": f"arc3,rad={bend}"})
        if (a, b) in edge_texts:  # at the middle of the arc (a quadratic curve: half its control point's offset)
            (x0, y0), (x1, y1) = (xa + size[a][0] / 2, ya), (xb - size[b][0] / 2, yb)
            ax.text((x0 + x1) / 2 + bend * (y1 - y0) / 2, (y0 + y1) / 2 - bend * (x1 - x0) / 2, edge_texts[a, b],
                    ha="center", va="center", fontsize=7, color="#333333", family="sans-serif", zorder=1.5,
                    bbox={"facecolor": "white", "edgecolor": "none", "pad": 0.5})
    for n, (cx, cy) in pos.items():
        w, h = size[n]
        module = modules.get(n)
        double = module is not None and _uses_inference(module)
        ax.add_patch(FancyBboxPatch((cx - w / 2, cy - h / 2), w, h, boxstyle="round,pad=0,rounding_size=0.06",
                                    facecolor=fills[n], edgecolor="black", linewidth=2.2 if double else 0.8, zorder=2))
        ax.text(cx, cy, texts[n], ha="center", va="center", fontsize=8, family="sans-serif", zorder=3)
    handles = [Patch(facecolor=colour, edgecolor="black", linewidth=2.2 if text.startswith("uses") else 0.8,
                     label=text + (" (thick border)" if text.startswith("uses") else "")) for text, colour in legend]
    ax.legend(handles=handles, loc="lower left", fontsize=8, frameon=False)
    fig.savefig(stream, format="png", dpi=110)
    plt.close(fig)
