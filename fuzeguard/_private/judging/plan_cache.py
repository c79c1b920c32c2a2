"""Plans shared by every run of a replay: one per function configuration, not one per run.

A plan is the same for every run whose function has the same name, the same effective settings
(``Config.settings_for``: defaults < file < ``[functions.NAME]`` < run settings < guard settings,
so the same values set over the defaults) and the same layer stack; live, a guard shares its plan
across the runs of one configuration in the same way. Replaying a directory of traces resolves
each of its few configurations once instead of once per run and function (each resolution checks
every layer's optional hooks).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from fuzeguard._private.configuration.config import Config
from fuzeguard._private.judging.plan import Plan, build_plan

# Plans kept at most; past this many (a trace naming a million functions), all are forgotten at
# once and made again as needed, so memory stays bounded whatever a trace holds.
MAX_PLANS = 4096


class _Unkeyable(Exception):
    """A setting's value that cannot be part of a key (such a plan is built, not shared)."""


def _frozen(value: Any) -> Any:
    """A hashable stand-in for a setting's value that equals another's only when the values are
    equal and of the same types (``1``, ``1.0`` and ``True`` stay apart)."""
    t = type(value)
    if t is dict or t is MappingProxyType:
        return (dict, tuple(sorted(((_frozen(k), _frozen(v)) for k, v in value.items()), key=repr)))
    if t is list or t is tuple or t is frozenset or t is set:
        items = tuple(_frozen(v) for v in value)
        return (t, tuple(sorted(items, key=repr)) if t is frozenset or t is set else items)
    try:
        hash(value)
    except TypeError:
        raise _Unkeyable from None
    return (t, value)


class PlanCache:
    """Plans by (function name, effective settings, layer stack), for functions that bind no
    arguments of their own (``fn`` is the same stand-in for every name, as in replay)."""

    __slots__ = ("_by_config", "_fn", "_plans", "built")

    def __init__(self, fn: Callable[..., Any]) -> None:
        self._fn = fn
        self._plans: dict[Any, Plan] = {}
        # The plans of functions without guard settings or layers of their own, by name and config
        # object: the runs of a replay share one config, so most plans are found here without
        # computing a key from the settings.
        self._by_config: dict[tuple[str, int], tuple[Config, Plan]] = {}
        self.built = 0  # plans resolved (a repeat of a configuration costs none)

    def plan(
        self, name: str, config: Config, options: Mapping[str, Any], layers: tuple[str, ...] | None
    ) -> Plan:
        """``build_plan(fn, name, config, options, layers)``, made once per configuration. Raises
        the ``ConfigError`` build_plan raises (a plan that cannot be made is not kept)."""
        plain = not options and layers is None
        if plain:
            entry = self._by_config.get((name, id(config)))
            if entry is not None and entry[0] is config:
                return entry[1]
        plan = self._keyed(name, config, options, layers)
        if plain:
            if len(self._by_config) >= MAX_PLANS:
                self._by_config.clear()
            self._by_config[(name, id(config))] = (config, plan)
        return plan

    def _keyed(
        self, name: str, config: Config, options: Mapping[str, Any], layers: tuple[str, ...] | None
    ) -> Plan:
        """``plan``, found by its function configuration."""
        try:
            run_wide, table = config.set_for(name)
            key = (name, _frozen(run_wide), _frozen(table), _frozen(options), layers)
        except _Unkeyable:
            key = None  # a value that cannot be compared: the plan is built, not shared
        plans = self._plans
        if key is not None:
            plan = plans.get(key)
            if plan is not None:
                return plan
        plan = build_plan(self._fn, name, config, options, layers)
        self.built += 1
        if key is not None:
            if len(plans) >= MAX_PLANS:
                plans.clear()
            plans[key] = plan
        return plan
