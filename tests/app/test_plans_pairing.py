"""How n/N pairs the plans' collectives: by the value each carries, the k-th of a value with the k-th."""

from __future__ import annotations

from types import SimpleNamespace

from shardscope.app.views.plans.plans_view import pair_by_value


def _plans(values_per_plan: dict[str, list[str]]) -> dict[str, tuple]:
    return {name: tuple(SimpleNamespace(value=v) for v in values) for name, values in values_per_plan.items()}


def test_collectives_pair_by_value_in_the_first_plans_order_and_the_kth_of_a_value_with_the_kth():
    plans = _plans({"reference": [], "naive": ["W", "b", "W"], "deferred": ["b", "W", "c"]})
    assert pair_by_value(plans) == [
        {"naive": 0, "deferred": 1},  # the first W of each plan
        {"naive": 1, "deferred": 0},  # b
        {"naive": 2},  # the second W: the deferred plan has one W only
        {"deferred": 2},  # c: no partner, a step of its own, after the steps of the plans before
    ]
    assert pair_by_value(_plans({"a": [], "b": []})) == []


def test_a_leaf_left_without_a_partner_pairs_with_the_same_leaf_under_another_root():
    plans = _plans({"step": ["grad(params['W2'])", "grad(params['W1'])"],
                    "fixed": ["out['W1']", "out['W2']", "out['W2']"]})
    assert pair_by_value(plans) == [
        {"step": 0, "fixed": 1},  # grad(params['W2']) (the sum in the loop) and out['W2'] (after it)
        {"step": 1, "fixed": 0},  # grad(params['W1']) and out['W1']
        {"fixed": 2},  # a second out['W2']: step has no second W2
    ]
    exact = _plans({"a": ["params['W']", "out['W']"], "b": ["out['W']", "params['W']"]})
    assert pair_by_value(exact) == [{"a": 0, "b": 1}, {"a": 1, "b": 0}]  # exact values pair first
    bare = _plans({"naive": ["grad(W)"], "deferred": ["W"]})  # a bare argument has no leaf below its root
    assert pair_by_value(bare) == [{"naive": 0, "deferred": 0}]
