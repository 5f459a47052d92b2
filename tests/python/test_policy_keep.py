"""kvdice.policy_keep: a policy's keep rule on NumPy arrays, the same rule the engine runs."""
import numpy as np
import pytest

import kvdice


def test_random_pp_keeps_what_the_engine_kept(llm):
    # The first round of a sequence: its resident slots are still in position order, so the
    # candidates are positions [0, len - r) and the window [len - r, len) is kept whole.
    kv = kvdice.KVConfig("random_pp", budget=32, window=16)
    [r] = llm.generate("The capital of France is", kv=kv, max_new_tokens=60, ignore_eos=True, retention_log=True)
    length = int(r.retention.at_token[0])
    candidates = np.arange(length - 16, dtype=np.int32)
    n_protected = r.stats["protected_prompt_slots"]
    for layer in range(llm.info["layers"]):
        for head in range(llm.info["kv_heads"]):
            keep = kvdice.policy_keep("random_pp", candidates, 16, n_protected=n_protected, sequence_id=r.id,
                                      round=0, budget=32, layer=layer, kv_head=head)
            expected = np.concatenate([candidates[keep], np.arange(length - 16, length)])
            assert r.retention.kept_positions[0, layer, head].tolist() == expected.tolist()


def test_keep_rule_properties():
    positions = np.arange(100)
    keep = kvdice.policy_keep("random_pp", positions, 30, n_protected=10, seed=7)
    assert keep.dtype == np.bool_ and keep.shape == (100,) and keep.sum() == 30 and keep[:10].all()
    again = kvdice.policy_keep("random_pp", positions, 30, n_protected=10, seed=7)
    other = kvdice.policy_keep("random_pp", positions, 30, n_protected=10, seed=8)
    assert (keep == again).all() and (keep != other).any()
    recency = kvdice.policy_keep("recency", positions, 30)
    assert np.flatnonzero(recency).tolist() == list(range(70, 100))


def test_a_scoring_policy_reads_keys_and_queries():
    rng = np.random.default_rng(0)
    keys = rng.standard_normal((64, 32))
    queries = rng.standard_normal((2, 16, 32))
    keep = kvdice.policy_keep("snapkv", np.arange(64), 20, keys=keys, window_queries=queries)
    assert keep.sum() == 20
    # The key most aligned with every query is kept.
    keys[5] = queries.mean(axis=(0, 1)) * 50
    assert kvdice.policy_keep("snapkv", np.arange(64), 20, keys=keys, window_queries=queries)[5]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(policy="full", positions=np.arange(8), keep=4), "never evicts"),
        (dict(policy="random_pp", positions=np.arange(8), keep=9), "keep must be in"),
        (dict(policy="random_pp", positions=np.arange(8), keep=4, n_protected=5), "n_protected"),
        (dict(policy="snapkv", positions=np.arange(8), keep=4), "reads the candidates' keys"),
        (dict(policy="h2o", positions=np.arange(8), keep=4), "attention_mass"),
        (dict(policy="h2o", positions=np.arange(8), keep=4, attention_mass=np.ones(3)), r"must be \[8\]"),
        (dict(policy="nope", positions=np.arange(8), keep=4), "unknown eviction policy"),
    ],
)
def test_bad_keep_rule_input(kwargs, message):
    with pytest.raises(kvdice.Error, match=message):
        kvdice.policy_keep(**kwargs)
