"""The names a physicist sees in a TTree or RNTuple, and what uproot must read for each.

ROOT files spell one column several ways. A split-object TTree (Delphes, bacon, any class written with
a split level) has branches whose full path is ``Jet/Jet.PT`` while ``TTree::Draw``, ``TBrowser`` and
uproot's own short names say ``Jet.PT``; the top branch ``Jet`` holds only the object count, but a
physicist means "the jets, a record of their leaves". An RNTuple has nested fields
(``my_struct.sub_struct.i``) that uproot reads as part of their top-level field. A :class:`Catalog`
indexes one tree's names once per file so that the source can

* find a column under any of its names (full path, short name, short name without a ``[N]`` array
  suffix), and tell uproot the one exact name to read (``Leaf.read``) and where the values sit in what it
  returns (``Leaf.path``, for RNTuple sub-fields);
* list the members of a collection (``Catalog.members``): the leaves under a split object or an RNTuple
  record, by field name (``Jet.PT`` → ``PT``), the leaves of a leaf-list struct (one branch written with
  ``"mom/F:d0/F"``, as Mu2e's ``deent``: ``deent.mom``), or NanoAOD's ``Jet_pt`` branches;
* say in one line why a column cannot be read (a type uproot has no interpretation for), and suggest
  close names for one that does not exist.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import uproot
from uproot.interpretation.numerical import AsDtype, AsDtypeInPlace

from . import uproot_errors
from .errors import did_you_mean

#: a fixed-size array suffix of a leaf name (``Jet.FracPt[5]``), which ``TTree::Draw`` users leave out
_ARRAY_SUFFIX = re.compile(r"\[\d+\]$")


#: quotes a source name that contains ``:`` where a module's input would otherwise mean ``label:product``
QUOTE = "`"


def is_quoted(key: str) -> bool:
    """True for a key written `` `AnalysisElectronsAuxDyn:pt` ``: a name in the file, whatever it contains."""
    return len(key) > 2 and key[0] == QUOTE and key[-1] == QUOTE


def unquote(key: str) -> str:
    """The name in the file that ``key`` stands for (the key itself unless it is quoted)."""
    return key[1:-1] if is_quoted(key) else key


@dataclass(frozen=True)
class Leaf:
    """One readable column of a tree.

    Attributes:
        name: the name a physicist sees (uproot's short name for a TTree branch, the dotted name for an
            RNTuple field or a leaf-list struct's leaf).
        read: the leaf's identity among a file's leaves, and the exact name passed to uproot unless
            ``branch`` is set (a TTree branch's full path; an RNTuple field's dotted name).
        path: for an RNTuple sub-field or a leaf-list struct's leaf, the fields to descend into from the
            record uproot returns.
        branch: for a leaf-list struct's leaf, the struct's branch: uproot reads the struct whole, as one
            record per entry, so several leaves share one read.
    """

    name: str
    read: str
    path: tuple[str, ...] = ()
    branch: str | None = None

    @property
    def fetch(self) -> str:
        """The name passed to uproot for this leaf."""
        return self.branch or self.read

    @property
    def top(self) -> str:
        """The key of uproot's returned dict that holds this leaf (its top-level field for an RNTuple)."""
        if self.branch is not None:
            return self.branch
        return self.read.split(".")[0] if self.path else self.read


def _unreadable(branch: Any) -> str | None:
    """Why uproot cannot give ``branch`` as an awkward array (``None`` when it can).

    Asked only of the leaves a job reads: building the awkward form of every branch of a NanoAOD file
    (~1,000) would cost more than reading a chunk.
    """
    try:
        interpretation = branch.interpretation
        if isinstance(interpretation, uproot.interpretation.identify.UnknownInterpretation):
            return f"uproot has no interpretation for it ({uproot_errors.clip(str(interpretation.reason), 80)})"
        if type(interpretation) in (AsDtype, AsDtypeInPlace):
            # plain numbers, or a leaf-list struct of them: uproot reads every such dtype, though its
            # awkward_form fails for a struct with an array leaf (``float[2] MphiK``)
            return None
        interpretation.awkward_form(branch.file)
    except Exception as err:  # noqa: BLE001 - uproot raises many types for a class it cannot stream
        return uproot_errors.reason(err, f"branch {branch.name!r}")
    return None


def _struct_fields(branch: Any) -> list[str]:
    """The leaves of a leaf-list struct (a plain TBranch of several leaves, ``"mom/F:d0/F:om/F"``), by the
    names uproot gives the fields of the record it reads; none for any other branch."""
    if getattr(branch, "classname", "") != "TBranch":
        return []
    leaves = branch.member("fLeaves")
    return [str(leaf.member("fName")) for leaf in leaves] if len(leaves) > 1 else []


class Catalog:
    """The names of one TTree or RNTuple (built once per file).

    Args:
        tree: an uproot TTree or RNTuple.
    """

    def __init__(self, tree: Any):
        self.tree = tree
        self.is_rntuple = not isinstance(tree, uproot.behaviors.TBranch.HasBranches)
        #: every name a column may be asked for → its leaf
        self.leaves: dict[str, Leaf] = {}
        #: collections (split objects, RNTuple records): name → {field: leaf}
        self.groups: dict[str, dict[str, Leaf]] = {}
        #: TTree branches by full path, for the readability check
        self._branches: dict[str, Any] = {}
        #: names of leaf-list struct branches: a column (the struct as a record) and a collection (its leaves)
        self._structs: set[str] = set()
        self._checked: dict[str, str | None] = {}
        (self._index_rntuple if self.is_rntuple else self._index_ttree)()
        #: leaves by full path, for NanoAOD-style `<collection>_<field>` members
        self._plain = {name: leaf for name, leaf in self.leaves.items() if name == leaf.read and leaf.branch is None}

    # -- indexing ------------------------------------------------------------------------------------
    def _index_ttree(self) -> None:
        short_count: dict[str, int] = {}
        entries: list[tuple[str, Any]] = list(self.tree.iteritems(recursive=True, full_paths=True))
        for _, branch in entries:
            short_count[branch.name] = short_count.get(branch.name, 0) + 1
        children: dict[str, list[tuple[str, Leaf]]] = {}
        structs: dict[str, list[str]] = {}
        for full, branch in entries:
            if branch.branches:  # a split object: its own value is a count, its meaning is its leaves
                children.setdefault(full, [])
                continue
            leaf = Leaf(branch.name, full, ())
            self.leaves.setdefault(full, leaf)
            self._branches.setdefault(full, branch)
            if fields := _struct_fields(branch):
                structs[full] = fields
            parts = full.split("/")
            for depth in range(1, len(parts)):
                children.setdefault("/".join(parts[:depth]), []).append((full, leaf))
        # short names (and TTree::Draw's name without [N]) where they name one leaf only
        for full, leaf in list(self.leaves.items()):
            if short_count.get(leaf.name) == 1:
                self.leaves.setdefault(leaf.name, leaf)
                bare = _ARRAY_SUFFIX.sub("", leaf.name)
                if bare != leaf.name and bare not in short_count:
                    self.leaves.setdefault(bare, leaf)
        for full, members in children.items():
            group_name = full.split("/")[-1]
            prefix = group_name if group_name.endswith(".") else group_name + "."
            fields: dict[str, Leaf] = {}
            for leaf_full, leaf in members:
                field = leaf.name[len(prefix):] if leaf.name.startswith(prefix) else leaf.name
                if field in fields:  # two sub-objects with a leaf of the same name: keep them apart
                    field = ".".join(leaf_full[len(full) + 1:].split("/"))
                fields[field] = leaf
            self.groups.setdefault(full, fields)
            if short_count.get(group_name) == 1:
                self.groups.setdefault(group_name, fields)
                for field, leaf in fields.items():  # TTree::Draw's "Info.runNum" for bacon's Info/runNum
                    self.leaves.setdefault(f"{group_name.rstrip('.')}.{field}", leaf)
                if group_name.endswith("."):  # a top-level object branch named "Beam." is "Beam" to a user
                    self.groups.setdefault(group_name[:-1], fields)
        for full, names in structs.items():
            self._index_struct(full, names, short_count)

    def _index_struct(self, full: str, names: list[str], short_count: dict[str, int]) -> None:
        """A leaf-list struct ``full``: each leaf a column ``<struct>.<leaf>`` (as ``TTree::Draw`` spells it)
        and the struct a collection of them, while the struct's own name still reads it whole."""
        short = full.split("/")[-1]
        members = {name: Leaf(f"{short}.{name}", f"{full}.{name}", (name,), branch=full) for name in names}
        for struct in dict.fromkeys([full] + ([short] if short_count.get(short) == 1 else [])):
            self.groups.setdefault(struct, members)
            self._structs.add(struct)
            for name, leaf in members.items():
                self.leaves.setdefault(f"{struct}.{name}", leaf)

    def _index_rntuple(self) -> None:
        names = list(self.tree.keys())
        nested = {name.rsplit(".", 1)[0] for name in names if "." in name}
        for name in names:
            self.leaves[name] = Leaf(name, name, tuple(name.split(".")[1:]))
            if name in nested:
                self.groups[name] = {}
        for name in names:
            if "." in name:
                parent, field = name.rsplit(".", 1)
                self.groups[parent][field] = self.leaves[name]

    # -- lookups -------------------------------------------------------------------------------------
    def leaf(self, name: str) -> Leaf | None:
        """The column ``name`` (any of its names), or ``None``. A split object's count is not a column."""
        name = unquote(name)
        leaf = self.leaves.get(name)
        if leaf is None or (not self.is_rntuple and name in self.groups and name not in self._structs):
            return None
        return leaf

    def members(self, name: str) -> dict[str, Leaf] | None:
        """The fields of collection ``name``: a split object's or RNTuple record's leaves, else the flat
        branches ``<name>_<field>`` (NanoAOD), ``<name>.<field>`` or ``<name>:<field>`` (ATLAS's
        ``AnalysisElectronsAuxDyn.pt``), the first separator that has any (``None`` when none has)."""
        name = unquote(name)
        if name in self.groups:
            return self.groups[name]
        for separator in ("_", ".", ":"):
            prefix = name + separator
            found = {n[len(prefix):]: leaf for n, leaf in self._plain.items() if n.startswith(prefix) and "/" not in n}
            if found:
                return found
        return None

    def suggest(self, name: str) -> str:
        """`` (did you mean ...?)`` for a name that is not in the tree (never the name itself: a name that is in
        the tree as another kind of thing is explained by the caller)."""
        return did_you_mean(name, [n for n in dict.fromkeys([*self.leaves, *self.groups]) if n != name])

    def typename(self, leaf: Leaf) -> str:
        """The C++ type of ``leaf``, for messages (asked lazily: it costs uproot an interpretation)."""
        branch = self._branches.get(leaf.fetch)
        try:
            name = str(branch.typename) if branch is not None else str(getattr(self.tree[leaf.read], "type_name", ""))
        except Exception:  # noqa: BLE001 - only for messages
            return "unknown"
        return uproot_errors.typename(name)

    def unreadable(self, leaf: Leaf) -> str | None:
        """Why uproot cannot read ``leaf`` as an awkward array (``None``: it can); checked once per leaf."""
        if leaf.fetch not in self._checked:
            branch = self._branches.get(leaf.fetch)
            self._checked[leaf.fetch] = _unreadable(branch) if branch is not None else None
        return self._checked[leaf.fetch]

    def unreadable_error(self, leaf: Leaf, file: str) -> str:
        """The one-line reason a leaf cannot be read, naming branch, type and file."""
        return (f"branch {leaf.name!r} in {file!r} has type {self.typename(leaf)!r}, which uproot cannot read: "
                f"{self.unreadable(leaf)}")
