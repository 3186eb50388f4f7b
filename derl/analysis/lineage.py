"""The lineage graph of a run: who descends from whom, and a tidy layout for drawing a family tree."""

from __future__ import annotations

from collections.abc import Iterable

from derl.analysis.records import Morphology


class LineageGraph:
    """Parent and children of every morphology, from the ``lineage`` of each record.

    Lineages are complete chains from an initial ancestor, so the graph holds every ancestor
    of a published morphology even when the view is partial.

    Attributes:
        parent: each morphology's parent id (None for the initial population).
        children: each morphology's children ids, sorted (empty for a leaf).
    """

    def __init__(self, records: Iterable[Morphology]):
        self.parent: dict[str, str | None] = {}
        for record in records:
            chain = record.lineage
            for depth, node in enumerate(chain):
                self.parent.setdefault(node, chain[depth - 1] if depth else None)
        self.children: dict[str, list[str]] = {node: [] for node in self.parent}
        for node, parent in self.parent.items():
            if parent is not None:
                self.children.setdefault(parent, []).append(node)
        for kids in self.children.values():
            kids.sort()

    @property
    def roots(self) -> list[str]:
        """The initial ancestors, sorted."""
        return sorted(node for node, parent in self.parent.items() if parent is None)

    def ancestors(self, node: str) -> list[str]:
        """The chain from the initial ancestor down to ``node`` (inclusive)."""
        chain = [node]
        while (parent := self.parent.get(chain[-1])) is not None:
            chain.append(parent)
        return chain[::-1]

    def family(self, nodes: Iterable[str]) -> set[str]:
        """``nodes`` and all their ancestors: the family tree of ``nodes``."""
        return {ancestor for node in nodes for ancestor in self.ancestors(node)}

    def descendants(self, node: str) -> int:
        """How many morphologies descend from ``node``."""
        stack, count = list(self.children.get(node, [])), 0
        while stack:
            count += 1
            stack.extend(self.children.get(stack.pop(), []))
        return count


def tree_layout(graph: LineageGraph, nodes: set[str]) -> dict[str, tuple[float, int]]:
    """``(x, depth)`` of each node of a family tree: leaves side by side, a parent over its children.

    Depth is the generation (roots at 0); the trees of different roots sit next to each other.
    """
    positions: dict[str, tuple[float, int]] = {}
    next_x = 0.0
    roots = sorted(node for node in nodes if graph.parent.get(node) is None)
    # Iterative post-order (lineages can be deeper than Python's recursion limit).
    stack: list[tuple[str, int, bool]] = [(root, 0, False) for root in reversed(roots)]
    while stack:
        node, depth, expanded = stack.pop()
        kids = [kid for kid in graph.children.get(node, []) if kid in nodes]
        if not kids:
            positions[node] = (next_x, depth)
            next_x += 1.0
        elif expanded:
            positions[node] = ((positions[kids[0]][0] + positions[kids[-1]][0]) / 2, depth)
        else:
            stack.append((node, depth, True))
            stack.extend((kid, depth + 1, False) for kid in reversed(kids))
    return positions
