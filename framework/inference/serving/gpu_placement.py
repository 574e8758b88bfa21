"""Which GPUs a server uses: the operator's choice, laid over the cards this process may see.

Triton spreads each ``KIND_GPU`` instance group's ``count`` over every card it sees, *per card*: a server
on a four-card node runs four times the count, and two servers on one node each put their instances on
every card, so no server owns a card and the memory grows with servers × instances per card. The project
therefore decides where GPU work goes, here, in one place:

* **The cards a process may use** (:func:`visible_cards`): ``CUDA_VISIBLE_DEVICES`` when set (an operator's
  choice, or Slurm's for a job that asked for ``--gres=gpu:N``: the cards the batch system assigned), else
  Slurm's ``SLURM_STEP_GPUS`` / ``SLURM_JOB_GPUS`` (set where a site does not export the CUDA variable),
  else every card of the machine (``nvidia-smi -L``).
* **The cards a server uses** (:func:`cards_for`): ``gpus`` of :class:`ServerOptions` are *positions* among
  those visible cards (``--gpus 1`` under Slurm's ``CUDA_VISIBLE_DEVICES=4,5`` is card 5), so a batch
  system's assignment is respected and never escaped. The server gets them as its ``CUDA_VISIBLE_DEVICES``.
* **Instances per card** (``runtime_repository.runtime_config``): every ``KIND_GPU`` group lists the server's
  cards explicitly, so a count is what each card runs, whatever the number of cards (a group that names
  cards the server does not have is placed on those it has, with a notice), and the server says so
  (:func:`instances_per_card`: what ``sonic server status`` and ``sonic fleet status`` show).
* **Servers of one node** (:func:`share_of`): server ``k`` of a local fleet or bench with ``per_server``
  cards each takes the ``k``-th slice of the node's cards (one server per card with ``per_server=1``);
  more servers than slices share cards round the node, which is said where it happens.

::

    cards_for([1], {"CUDA_VISIBLE_DEVICES": "4,5"})     # ["5"]
    share_of(2, 1, ["0", "1", "2", "3"])                # ["2"]
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from typing import Any

from ...errors import InferenceError

#: where a batch system names a job's cards when the CUDA variable is not set (Slurm: the step's, then the job's)
SLURM_VARIABLES = ("SLURM_STEP_GPUS", "SLURM_JOB_GPUS")


def _names(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def visible_cards(environ: Mapping[str, str] | None = None) -> list[str] | None:
    """The cards this process may use, by the names CUDA takes (indices, UUIDs or MIG names); None when
    nothing narrows them (then every card of the machine: :func:`machine_cards`).

    ``CUDA_VISIBLE_DEVICES=""`` (set, empty) is an empty list: no card at all.
    """
    env = os.environ if environ is None else environ
    if "CUDA_VISIBLE_DEVICES" in env:
        return _names(env["CUDA_VISIBLE_DEVICES"])
    for name in SLURM_VARIABLES:
        if env.get(name, "").strip():
            return _names(env[name])
    return None


def machine_cards() -> list[str]:
    """Every card ``nvidia-smi -L`` lists, as indices ("0", "1", ...); empty without nvidia-smi or a card."""
    if not shutil.which("nvidia-smi"):
        return []
    try:
        listing = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [str(i) for i, line in enumerate(line for line in listing.splitlines() if line.startswith("GPU "))]


def available_cards(environ: Mapping[str, str] | None = None) -> list[str]:
    """The cards this process may use (:func:`visible_cards`, else the machine's)."""
    visible = visible_cards(environ)
    return machine_cards() if visible is None else visible


def cards_for(gpus: Sequence[int], environ: Mapping[str, str] | None = None,
              available: Sequence[str] | None = None) -> list[str]:
    """The ``CUDA_VISIBLE_DEVICES`` entries of a server given ``gpus`` (positions among the cards this process
    may use; see the module docstring).

    Raises:
        InferenceError: a position past the cards there are (one line naming them and where they came from).
    """
    cards = list(available) if available is not None else available_cards(environ)
    env = os.environ if environ is None else environ
    if not cards and visible_cards(env) is None:  # nothing to check against (no nvidia-smi): the positions are the cards
        return [str(g) for g in gpus]
    missing = [g for g in gpus if g >= len(cards)]
    if missing:
        source = next((f"{name}={env[name]}" for name in ("CUDA_VISIBLE_DEVICES", *SLURM_VARIABLES) if name in env),
                      "nvidia-smi -L")
        raise InferenceError(f"server gpus {list(gpus)}: {'GPU' if len(missing) == 1 else 'GPUs'} {missing} not among "
                             f"the {len(cards)} this process may use ({source}); give positions 0-{len(cards) - 1}"
                             if cards else f"server gpus {list(gpus)}: this process may use no GPU ({source})")
    return [cards[g] for g in gpus]


def share_of(index: int, per_server: int, cards: Sequence[Any]) -> list[Any]:
    """The cards of server ``index`` of a node when each of its servers takes ``per_server`` cards: the
    ``index``-th slice, round the node's cards when there are more servers than slices (then cards are
    shared; :func:`shared_note` says so)."""
    if per_server < 1 or not cards:
        return []
    per_server = min(per_server, len(cards))
    slices = len(cards) // per_server
    first = (index % slices) * per_server
    return list(cards[first:first + per_server])


def node_shares(servers: int, cards: Sequence[Any]) -> tuple[list[list[int]], str]:
    """``servers`` servers of one node over its ``cards``: each server's positions (an equal slice, at least one
    card: one server per card where there are as many) and :func:`shared_note` ("" when none share)."""
    if not cards:
        return [[] for _ in range(servers)], ""
    per_server = max(1, len(cards) // max(1, servers))
    return ([share_of(k, per_server, list(range(len(cards)))) for k in range(servers)],
            shared_note(servers, per_server, cards))


def shared_note(servers: int, per_server: int, cards: Sequence[Any]) -> str:
    """A one-line notice when ``servers`` servers of ``per_server`` cards each do not fit the node's cards
    (they then share cards, each card's memory holding every sharing server's instances); "" when they fit."""
    slices = len(cards) // max(1, per_server) if cards else 0
    if slices and servers > slices:
        return (f"{servers} servers of {per_server} GPU(s) each on {len(cards)} card(s): cards are shared "
                f"(each holds the instances of up to {-(-servers // slices)} servers)")
    return ""


def instances_per_card(groups: Sequence[Mapping[str, Any]], cards: Sequence[str] | None) -> dict[str, int]:
    """``{card: instances}`` of a model's ``KIND_GPU`` groups (as ``runtime_config`` placed them: each lists
    the server's own positions), by the cards' names outside the server (``cards``: the server's
    ``CUDA_VISIBLE_DEVICES``; None: the positions are the names)."""
    out: dict[str, int] = {}
    for group in groups:
        if group.get("kind") != "KIND_GPU":
            continue
        for position in group.get("gpus") or []:
            name = cards[position] if cards is not None and position < len(cards) else str(position)
            out[name] = out.get(name, 0) + int(group.get("count", 1))
    return out


def placement_lines(description: Mapping[str, Any]) -> list[str]:
    """What ``sonic server status`` says about a server's cards (from :meth:`TritonServer.describe`): which
    cards it uses and how many instances of each model each card runs; nothing for a CPU server."""
    if description.get("device") != "gpu":
        return []
    cards = description.get("gpus")
    lines = [f"  GPUs: {', '.join(cards) if cards else 'every card it sees'}"
             + (" (CUDA_VISIBLE_DEVICES of the server)" if cards else "")]
    for model, per_card in sorted((description.get("gpu_instances") or {}).items()):
        spread = ", ".join(f"card {card}: {count}" for card, count in per_card.items())
        lines.append(f"    {model}: {spread or 'no KIND_GPU instances'}")
    return lines


def server_cards(device: str, gpus: Sequence[int] | None,
                 environ: Mapping[str, str] | None = None) -> list[str] | None:
    """A server's ``CUDA_VISIBLE_DEVICES`` entries: the chosen ``gpus`` (:func:`cards_for`), else the cards this
    process may use when something narrows them (a batch system's), else None (every card; the variable is
    left as it is). None for a CPU server, which hides every card anyway."""
    if device != "gpu":
        return None
    return cards_for(gpus, environ) if gpus is not None else visible_cards(environ)


def card_count(cards: Sequence[str] | None) -> int | None:
    """How many cards a server with ``cards`` (:func:`server_cards`) has; None when unknown (no nvidia-smi)."""
    return len(cards) if cards is not None else (len(machine_cards()) or None)


def gpu_instances(repo_dir: Any, names: Sequence[str], cards: Sequence[str] | None) -> dict[str, dict[str, int]]:
    """``{model: {card: instances}}`` of a runtime repository as written (``repo_dir/<model>/config.pbtxt``)."""
    from pathlib import Path

    from google.protobuf import json_format, text_format
    from tritonclient.grpc import model_config_pb2 as mc

    out = {}
    for name in names:
        config = text_format.Parse((Path(repo_dir) / name / "config.pbtxt").read_text(), mc.ModelConfig())
        groups = json_format.MessageToDict(config).get("instanceGroup", [])
        out[name] = instances_per_card([{"kind": g.get("kind", "KIND_AUTO"), "gpus": g.get("gpus"),
                                         "count": g.get("count", 1)} for g in groups], cards)
    return out
