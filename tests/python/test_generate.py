"""LLM.generate / stream / score against the kvdice binary and the engine's own invariants."""
import json
import os
import signal
import subprocess
import threading
import time

import numpy as np
import pytest

import kvdice
from conftest import BINARY, FIXTURES, QWEN3

BUDGETED = kvdice.KVConfig("random_pp", budget=32, window=16)


def cli_generate(tmp_path, prompt, *flags):
    log = tmp_path / "retention.jsonl"
    out = subprocess.run(
        [BINARY, "generate", "--model", QWEN3, "--backend", "cpu", "--threads", "1", "--prompt", prompt,
         "--json", "--retention-log", str(log), *flags],
        check=True, capture_output=True, text=True,
    )
    header, *rounds = [json.loads(line) for line in log.read_text().splitlines()]
    assert header["format"] == "kvdice-retention" and header["version"] == 1
    return json.loads(out.stdout), rounds


def test_generate_matches_the_command_line(llm, tmp_path):
    prompt = "The capital of France is"
    record, rounds = cli_generate(tmp_path, prompt, "--policy", "random_pp", "--budget", "32", "--window", "16",
                                  "-n", "60", "--ignore-eos")
    [r] = llm.generate(prompt, kv=BUDGETED, max_new_tokens=60, ignore_eos=True, retention_log=True)
    assert r.token_ids.tolist() == record["generated_ids"]
    assert r.prompt_ids.tolist() == record["prompt_ids"]
    assert r.text == record["text"]
    assert r.finish == record["finish_reason"] == "length"
    for key in ("eviction_rounds", "resident_slots", "peak_resident_slots", "full_attention_kv_bytes"):
        assert r.stats[key] == record["stats"][key], key
    # The retention log as arrays holds what the command line's JSON lines hold.
    assert r.stats["eviction_rounds"] == len(rounds) >= 1
    assert r.retention.kept_positions.dtype == np.int32
    assert r.retention.kept_positions.shape == (len(rounds), llm.info["layers"], llm.info["kv_heads"], 32)
    assert r.retention.kept_positions.tolist() == [x["kept_positions"] for x in rounds]
    assert r.retention.at_token.tolist() == [x["at_token"] for x in rounds]


def test_batch_with_a_policy_and_budget_per_request(llm):
    kvs = [BUDGETED, kvdice.KVConfig("full"), kvdice.KVConfig("recency", budget=48, window=16)]
    results = llm.generate(["one", "two", "three"], kv=kvs, max_new_tokens=70, ignore_eos=True)
    assert [r.index for r in results] == [0, 1, 2]
    assert len({r.id for r in results}) == 3
    budgeted, full, recency = results
    assert budgeted.stats["eviction_rounds"] >= 1 and budgeted.stats["peak_resident_slots"] <= 32 + 16
    assert full.stats["eviction_rounds"] == 0
    assert full.stats["resident_slots"] == full.stats["prompt_tokens"] + 70 - 1
    assert recency.stats["eviction_rounds"] >= 1 and recency.kv.policy == "recency"
    # Each sequence decodes the same alone as in the mixed batch.
    [alone] = llm.generate("one", kv=BUDGETED, max_new_tokens=70, ignore_eos=True, stream_ids=[budgeted.id])
    assert alone.token_ids.tolist() == budgeted.token_ids.tolist()
    assert budgeted.record()["policy"] == "random_pp" and budgeted.record()["eviction_rounds"] >= 1


def test_batch_of_policies_reading_different_signals(llm):
    # h2o reads the attention mass, vase the query ring and value ranges: one engine records all three.
    kvs = [kvdice.KVConfig("h2o", budget=32, window=16), kvdice.KVConfig("vase", budget=32, window=16)]
    h2o, vase = llm.generate(["one", "two"], kv=kvs, max_new_tokens=70, ignore_eos=True)
    assert h2o.kv.policy == "h2o" and h2o.stats["eviction_rounds"] >= 1
    assert vase.kv.policy.startswith("vase") and vase.stats["eviction_rounds"] >= 1
    [alone] = llm.generate("two", kv=kvs[1], max_new_tokens=70, ignore_eos=True, stream_ids=[vase.id])
    assert alone.token_ids.tolist() == vase.token_ids.tolist()


def test_stream_yields_tokens_then_each_result(llm):
    prompts = ["alpha", "beta"]
    events, results = [], []
    for item in llm.stream(prompts, kv=BUDGETED, max_new_tokens=20, ignore_eos=True):
        (results if isinstance(item, kvdice.Result) else events).append(item)
    assert len(results) == 2 and len(events) == 40
    for r in results:
        mine = [e for e in events if e.id == r.id]
        assert [e.token for e in mine] == r.token_ids.tolist()
        assert "".join(e.text for e in mine) == r.text
        assert [e.finished for e in mine] == [False] * 19 + [True]


def test_closing_a_stream_early_cancels_the_rest(llm):
    stream = llm.stream("alpha", max_new_tokens=200, ignore_eos=True)
    next(stream)
    stream.close()
    [r] = llm.generate("alpha", max_new_tokens=5, ignore_eos=True)  # the engine is free again
    assert r.stats["generated_tokens"] == 5


def test_teacher_forced_greedy_tokens_are_each_the_argmax(llm):
    [greedy] = llm.generate("Hello", kv=BUDGETED, max_new_tokens=60, ignore_eos=True)
    scored = llm.score("Hello", greedy.token_ids, kv=BUDGETED, stream_id=greedy.id)
    assert scored.forced_logprobs.dtype == np.float32 and scored.forced_logprobs.shape == (60,)
    assert np.all(scored.forced_logprobs <= 0)
    assert scored.forced_is_argmax.tolist() == [1] * 60
    assert scored.stats["eviction_rounds"] == greedy.stats["eviction_rounds"]


def test_ctrl_c_cancels_generate_and_leaves_the_llm_usable(llm):
    # SIGINT from another thread while generate runs: the engine steps without the GIL, so the signal
    # is handled between two steps, the batch is cancelled and KeyboardInterrupt reaches the caller.
    timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))
    start = time.monotonic()
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        llm.generate(["long"] * 8, max_new_tokens=1900, ignore_eos=True)
    timer.join()
    assert time.monotonic() - start < 3.0
    [r] = llm.generate("long", max_new_tokens=4, ignore_eos=True)
    assert r.id >= 8 and r.stats["generated_tokens"] == 4


def test_sampling_is_per_request_and_seeded(llm):
    hot = [kvdice.SamplingParams(temperature=1.0, seed=s) for s in (1, 1, 2)]
    a, b, c = llm.generate(["x", "x", "x"], sampling=hot, max_new_tokens=30, ignore_eos=True, stream_ids=[5, 5, 5])
    assert a.token_ids.tolist() == b.token_ids.tolist() != c.token_ids.tolist()


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda llm: llm.generate("x", kv=kvdice.KVConfig("no_such_policy", 32, 16)), "unknown eviction policy"),
        (lambda llm: llm.generate("x", kv=kvdice.KVConfig("random_pp")), "needs a budget"),
        (lambda llm: llm.generate("x", kv=kvdice.KVConfig("random_pp", 40, 16)), "multiple"),
        (lambda llm: llm.generate("x", kv=kvdice.KVConfig("random_pp", 32, 16, {"bogus": 1})), "bogus"),
        (lambda llm: llm.generate("x", sampling=kvdice.SamplingParams(top_p=2.0)), "--top-p"),
        (lambda llm: llm.generate([[99999]]), "outside the vocabulary"),
        (lambda llm: llm.generate([]), "no prompt"),
        (lambda llm: llm.generate(["a", "b"], kv=[BUDGETED]), "1 given for 2 prompts"),
        (lambda llm: llm.generate("x", kv=kvdice.KVConfig("full"), retention_log=True), "never evicts"),
        (lambda llm: llm.score("x", []), "no tokens"),
        (lambda llm: llm.generate(["a", "b"], stream_ids=[1]), "1 given for 2 prompts"),
        (lambda llm: llm.decode([-1]), "outside the vocabulary"),
    ],
)
def test_bad_input_raises_the_engines_message(llm, call, message):
    with pytest.raises(kvdice.Error, match=message):
        call(llm)
    [r] = llm.generate("x", max_new_tokens=2)  # nothing was left half-submitted
    assert r.finish in ("stop", "length")


def test_bad_model_and_backend(tmp_path):
    with pytest.raises(kvdice.Error, match="no_such_dir"):
        kvdice.LLM(str(tmp_path / "no_such_dir"), backend="cpu")
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(kvdice.Error, match="config.json"):
        kvdice.LLM(str(tmp_path), backend="cpu")
    with pytest.raises(kvdice.Error, match="backend"):
        kvdice.LLM(QWEN3, backend="tpu")
    assert issubclass(kvdice.Error, ValueError)


def test_a_stop_id_ends_the_sequence_and_prints_nothing(llm):
    items = list(llm.stream("The capital of France is", max_new_tokens=20))
    events = [e for e in items if not isinstance(e, kvdice.Result)]
    [r] = [e for e in items if isinstance(e, kvdice.Result)]
    assert r.finish == "stop" and events[-1].token in llm.info["eos_ids"]
    assert "".join(e.text for e in events) == r.text and "<|endoftext|>" not in r.text


def test_a_continuation_carries_no_bos():
    llama = kvdice.LLM(str(FIXTURES / "llama"), backend="cpu", threads=1)
    prompt, continuation = llama.encode("Hello"), llama.encode(" world", continuation=True)
    bos = prompt[0]
    assert bos not in continuation and llama.encode(" world")[0] == bos
    scored = llama.score("Hello", " world")
    assert scored.forced_logprobs.shape == (len(continuation),) and scored.prompt_ids[0] == bos


def test_one_prompt_as_a_token_array(llm):
    ids = np.array(llm.encode("Hello"), dtype=np.int64)
    [r] = llm.generate(ids, max_new_tokens=3, ignore_eos=True)
    assert r.prompt_ids.tolist() == ids.tolist()


def test_decode_replaces_a_cut_character(llm):
    ids = llm.encode("🙂", special_tokens=False)  # four UTF-8 bytes, more than one token here
    assert len(ids) > 1 and llm.decode(ids) == "🙂"
    assert llm.decode(ids[:1]) == "\ufffd"
