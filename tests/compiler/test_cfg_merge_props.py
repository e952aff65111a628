"""Properties: deep_merge never mutates inputs, later layers win (R5); canonical encoding is stable."""

from __future__ import annotations

import copy
import functools

from hypothesis import given
from hypothesis import strategies as st

from acx.compiler import deep_merge
from acx.ir import ExecutionSpec, canonical_json, content_hash

keys = st.sampled_from(["a", "b", "c", "d", "max_retries", "setup"])
scalars = st.none() | st.booleans() | st.integers(-5, 5) | st.text(max_size=3)
values = st.recursive(
    scalars | st.lists(scalars, max_size=3),
    lambda inner: st.dictionaries(keys, inner, max_size=4),
    max_leaves=12,
)
mappings = st.dictionaries(keys, values, max_size=5)


def _leaves(d, prefix=()):
    for k, v in d.items():
        if isinstance(v, dict) and v:
            yield from _leaves(v, (*prefix, k))
        else:
            yield (*prefix, k), v


def _get(d, path):
    for p in path:
        d = d[p]
    return d


@given(mappings, mappings)
def test_deep_merge_never_mutates_its_inputs(a, b) -> None:  # contract R5
    a0, b0 = copy.deepcopy(a), copy.deepcopy(b)
    out = deep_merge(a, b)
    assert a == a0 and b == b0
    # and the result shares no mutable container with the inputs
    out_copy = copy.deepcopy(out)
    for v in list(a.values()) + list(b.values()):
        if isinstance(v, (dict, list)):
            v.clear()
    assert out == out_copy


@given(mappings, mappings)
def test_later_layer_wins_on_every_leaf(a, b) -> None:  # contract R5
    out = deep_merge(a, b)
    for path, value in _leaves(b):
        if value == {}:
            continue  # an empty mapping merges into, it does not replace
        assert _get(out, path) == value


@given(mappings, mappings)
def test_keys_of_the_earlier_layer_survive_unless_replaced(a, b) -> None:  # contract R5
    out = deep_merge(a, b)
    for key in a:
        assert key in out


@given(st.lists(mappings, min_size=1, max_size=4))
def test_provenance_merger_agrees_with_deep_merge(layers) -> None:  # contract R5 (resolver = deep_merge)
    from acx.compiler._resolve import _Frag, _Merger

    merger = _Merger(lambda rel: rel, lambda path: False)
    for i, layer in enumerate(layers):
        merger.add(_Frag(f"layer{i}", "cli", layer, flag=f"--l{i}"))
    assert merger.data == functools.reduce(deep_merge, layers, {})
    # the winner of every leaf is the last layer that set it
    for path, value in _leaves(merger.data):
        setters = [i for i, layer in enumerate(layers) if _has(layer, path)]
        if setters and value != {}:
            assert merger.recs[path][-1].layer == f"layer{setters[-1]}"


def _has(d, path):
    for p in path:
        if not isinstance(d, dict) or p not in d:
            return False
        d = d[p]
    return not (isinstance(d, dict) and d)


@given(st.dictionaries(st.text(max_size=5), st.integers(), max_size=8), st.randoms())
def test_canonical_encoding_is_stable_under_dict_key_order(params, rnd) -> None:
    items = list(params.items())
    rnd.shuffle(items)
    shuffled = dict(items)
    a = ExecutionSpec(analysis_params=params)
    b = ExecutionSpec(analysis_params=shuffled)
    assert canonical_json(a) == canonical_json(b)
    assert content_hash(a) == content_hash(b)
