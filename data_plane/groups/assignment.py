"""Sticky partition assignment for consumer groups (sans-IO).

Given the current owners and the members now in the group, produce an assignment in which every
partition has exactly one owner, owners' counts differ by at most one, and as few partitions as
possible move. Deterministic: the same inputs always give the same output, so any replica that
computes a generation's assignment computes the same one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

Assignment = dict[str, list[int]]


def assign(
    partitions: int, members: Iterable[str], previous: Mapping[str, Iterable[int]] | None = None
) -> Assignment:
    """The sticky assignment of ``range(partitions)`` over ``members``."""
    names = sorted(set(members))
    if not names:
        return {}
    quotas = _quotas(partitions, names, previous or {})
    kept = _keep_previous(partitions, quotas, previous or {})
    return _fill(partitions, quotas, kept)


def _quotas(
    partitions: int, names: list[str], previous: Mapping[str, Iterable[int]]
) -> dict[str, int]:
    """How many partitions each member gets: ``base`` or ``base + 1``.

    The extra partitions go first to the members that already hold the most, so fewer move.
    """
    base, extra = divmod(partitions, len(names))
    held = {name: len({p for p in previous.get(name, ()) if 0 <= p < partitions}) for name in names}
    by_holding = sorted(names, key=lambda name: (-held[name], name))
    return {name: base + (1 if rank < extra else 0) for rank, name in enumerate(by_holding)}


def _keep_previous(
    partitions: int, quotas: dict[str, int], previous: Mapping[str, Iterable[int]]
) -> Assignment:
    """Each remaining member keeps what it held, up to its quota; a partition is kept once."""
    kept: Assignment = {name: [] for name in quotas}
    taken: set[int] = set()
    for name in sorted(quotas):
        for partition in sorted(set(previous.get(name, ()))):
            if len(kept[name]) >= quotas[name]:
                break
            if 0 <= partition < partitions and partition not in taken:
                kept[name].append(partition)
                taken.add(partition)
    return kept


def _fill(partitions: int, quotas: dict[str, int], kept: Assignment) -> Assignment:
    """Hand the unowned partitions, lowest first, to members below quota, most room first."""
    owned = {p for held in kept.values() for p in held}
    free = [p for p in range(partitions) if p not in owned]
    result = {name: list(held) for name, held in kept.items()}
    for partition in free:
        name = min(result, key=lambda n: (len(result[n]) - quotas[n], n))
        result[name].append(partition)
    return {name: sorted(held) for name, held in result.items()}


def moved(before: Mapping[str, Iterable[int]], after: Mapping[str, Iterable[int]]) -> int:
    """How many partitions changed owner between two assignments (unowned before counts as moved)."""
    owner_before = {p: name for name, held in before.items() for p in held}
    return sum(1 for name, held in after.items() for p in held if owner_before.get(p) != name)
