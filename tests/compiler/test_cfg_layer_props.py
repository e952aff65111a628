"""Property: across any number of config files, the later file wins (R4, R5, R10), and the
provenance chain lists every file that set the field, in order, winner last."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from acx.compiler._resolve import ConfigDoc, resolve_orchestration
from acx.compiler._yaml import parse_yaml_text

ORCH = (
    "version: 1\nrequests:\n  - name: a\n    benchmark: {id: exact_match, dataset: q.jsonl}\n    harness: {id: none}\n"
)
FIELDS = st.sampled_from(["max_retries", "run_timer_compensation_seconds"])
LAYER = st.dictionaries(FIELDS, st.integers(0, 50), max_size=2)


@given(st.lists(LAYER, max_size=5), st.one_of(st.none(), st.integers(0, 50)))
def test_later_config_files_win_and_provenance_lists_them(layers, cli) -> None:  # contract R4, R5, R10
    spec = parse_yaml_text(ORCH, "orch.yaml")
    configs = [
        ConfigDoc("--config", parse_yaml_text(f"execution: {layer}\n" if layer else "{}\n", f"c{i}.yaml"))
        for i, layer in enumerate(layers)
    ]
    params = {"max_retries": cli} if cli is not None else None
    compiled = resolve_orchestration(spec, configs, execution_params=params, environ={})
    execution = compiled.orchestration.requests[0].request.execution
    for field, default in (("max_retries", 0), ("run_timer_compensation_seconds", 120.0)):
        setters = [(f"c{i}.yaml", layer[field]) for i, layer in enumerate(layers) if field in layer]
        if field == "max_retries" and cli is not None:
            setters.append(("--execution-params", cli))
        expected = setters[-1][1] if setters else default
        assert getattr(execution, field) == expected
        chain = compiled.provenance["a"][f"execution.{field}"]
        assert [c.source.split(":")[0] for c in chain[1:]] == [s for s, _ in setters]
        assert chain[0].kind == "default" and chain[-1].value == (expected if setters else default)
