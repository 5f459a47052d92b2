"""The official openai client against kvdice serve on the tiny Qwen3 fixture."""
import concurrent.futures as cf
import json
import time

import http.client
import openai
import pytest

from conftest import MODEL


def client(server, **kw):
    return openai.OpenAI(base_url=server.url("/v1"), api_key=kw.pop("api_key", "none"), max_retries=0, **kw)


def chat(c, content="Tell me a story.", **kw):
    return c.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": content}], **kw)


def test_models_and_health(server):
    c = client(server)
    assert [m.id for m in c.models.list().data] == [MODEL]
    assert server.get("/health") == (200, '{"status":"ok"}')


def test_chat_non_streaming(server):
    r = chat(client(server), max_tokens=12, seed=3)
    assert r.object == "chat.completion" and r.model == MODEL
    choice = r.choices[0]
    assert choice.message.role == "assistant" and isinstance(choice.message.content, str)
    assert choice.finish_reason in ("stop", "length")
    assert r.usage.prompt_tokens > 0 and 1 <= r.usage.completion_tokens <= 12
    kv = r.usage.model_extra["kv"]
    assert kv["policy"] == "random_pp" and kv["budget"] == 32 and kv["window"] == 8
    assert kv["peak_slots"] == r.usage.prompt_tokens + r.usage.completion_tokens - 1


def test_completion_non_streaming(server):
    r = client(server).completions.create(model=MODEL, prompt="Once upon a time", max_tokens=8, seed=1)
    assert r.object == "text_completion" and isinstance(r.choices[0].text, str)
    assert r.usage.completion_tokens <= 8


def test_stream_matches_non_stream(server):
    c = client(server)
    kw = dict(max_tokens=40, seed=11, temperature=0.8)
    whole = chat(c, **kw)
    chunks = list(chat(c, stream=True, stream_options={"include_usage": True}, **kw))
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text == whole.choices[0].message.content
    finals = [ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason]
    assert finals == [whole.choices[0].finish_reason]
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    assert chunks[-1].choices == []


def test_completion_stream(server):
    chunks = list(client(server).completions.create(model=MODEL, prompt="abc", max_tokens=10, seed=2, stream=True))
    assert chunks and chunks[-1].choices[0].finish_reason in ("stop", "length")


def test_seed_reproduces_and_n_choices(server):
    c = client(server)
    a = chat(c, max_tokens=30, seed=7, temperature=1.0, n=3)
    b = chat(c, max_tokens=30, seed=7, temperature=1.0, n=3)
    other = chat(c, max_tokens=30, seed=8, temperature=1.0, n=3)
    texts = [ch.message.content for ch in a.choices]
    assert [ch.index for ch in a.choices] == [0, 1, 2]
    assert texts == [ch.message.content for ch in b.choices]
    assert len(set(texts)) > 1, "choices of one request must be independent draws"
    assert texts != [ch.message.content for ch in other.choices]


def test_per_request_policies_in_one_batch(server):
    c = client(server)
    settings = [
        {"policy": "full"},
        {"policy": "random_pp", "budget": 16, "window": 8},
        {"policy": "recency", "budget": 24, "window": 8},
        {"policy": "random_pp", "budget": 16, "window": 8},
    ]

    def run(kv):
        return chat(c, max_tokens=60, seed=5, temperature=0.7, extra_body={"kv": kv, "ignore_eos": True})

    with cf.ThreadPoolExecutor(len(settings)) as pool:
        results = list(pool.map(run, settings))
    for kv, r in zip(settings, results):
        usage = r.usage.model_extra["kv"]
        assert usage["policy"] == kv["policy"]
        assert r.usage.completion_tokens == 60
        if kv["policy"] == "full":
            assert usage["eviction_rounds"] == 0
            assert usage["peak_slots"] == r.usage.prompt_tokens + 59
        else:
            assert usage["eviction_rounds"] > 0
            assert usage["peak_slots"] <= kv["budget"] + kv["window"]
    # Same seed and settings: the same text whatever ran beside it.
    assert results[1].choices[0].message.content == results[3].choices[0].message.content
    alone = run(settings[1])
    assert alone.choices[0].message.content == results[1].choices[0].message.content


def test_scoring_policies_served_with_their_signals(start_server):
    # The default policy's signals are recorded (the query ring for snapkv_pp), and --signals-for adds
    # others (the attention mass for h2o_pp); a policy whose signal is not recorded gets 400 at once.
    s = start_server("--policy", "snapkv_pp", "--budget", "32", "--window", "8")
    assert s.start_line.rstrip().endswith("signals recorded: window queries"), s.start_line
    c = client(s, timeout=30)
    r = c.completions.create(model=MODEL, prompt="hello", max_tokens=60, extra_body={"ignore_eos": True})
    usage = r.usage.model_extra["kv"]
    assert usage["policy"] == "snapkv_pp" and usage["eviction_rounds"] > 0 and usage["peak_slots"] <= 40
    r = c.completions.create(model=MODEL, prompt="hello", max_tokens=60,
                             extra_body={"ignore_eos": True, "kv": {"policy": "rkv_official"}})
    assert r.usage.model_extra["kv"]["eviction_rounds"] > 0
    with pytest.raises(openai.BadRequestError) as e:
        c.completions.create(model=MODEL, prompt="hello", max_tokens=60, extra_body={"kv": {"policy": "h2o_pp"}})
    assert "attention mass" in e.value.message and "--signals-for" in e.value.message
    assert e.value.param == "kv.policy"

    s = start_server("--budget", "32", "--window", "8", "--signals-for", "h2o_pp", "random_vrange_pp:share=0.5")
    assert s.start_line.rstrip().endswith("signals recorded: value ranges, attention mass"), s.start_line
    c = client(s, timeout=30)
    settings = [{"policy": "h2o_pp"}, {"policy": "random_vrange_pp"}, {"policy": "random_pp"}]

    def run(kv):
        return c.completions.create(model=MODEL, prompt="hello", max_tokens=60, seed=3,
                                    extra_body={"ignore_eos": True, "kv": kv})

    with cf.ThreadPoolExecutor(len(settings)) as pool:
        results = list(pool.map(run, settings))
    for kv, r in zip(settings, results):
        usage = r.usage.model_extra["kv"]
        assert usage["policy"].split(":")[0] == kv["policy"] and usage["eviction_rounds"] > 0
    with pytest.raises(openai.BadRequestError) as e:  # window queries: asked for by no flag
        run({"policy": "vase"})
    assert "window queries" in e.value.message


# The tiny fixture's KV heads for the policies whose default heads (2+3+5) it lacks; triattention needs a
# calibration file and is served in test_limits.py.
POLICY_SPECS = {"carrier_mix": "carrier_mix:heads=0", "anti_mix": "anti_mix:heads=1",
                "carrier_softmix": "carrier_softmix:heads=0", "anti_softmix": "anti_softmix:heads=1,q=0.3"}


def test_every_policy_through_the_server(start_server):
    # The names come from the server's own answer to an unknown one, so a policy added to the registry is
    # served here without editing the test.
    probe = start_server("--budget", "32", "--window", "8")
    _, _, text = probe.post("/v1/completions", {"model": MODEL, "prompt": "hi", "max_tokens": 1,
                                                 "kv": {"policy": "no-such-policy"}})
    known = json.loads(text)["error"]["message"].split("known: ")[1].split(", ")
    specs = [POLICY_SPECS.get(name, name) for name in known if name != "triattention"]
    assert len(specs) >= 24 and "rkv_official" in specs
    s = start_server("--budget", "32", "--window", "8", "--signals-for", *specs)
    c = client(s, timeout=60)

    def run(job):
        spec, seed = job
        return c.completions.create(model=MODEL, prompt="The lighthouse keeper counted the ships", max_tokens=50,
                                    seed=seed, temperature=0.7,
                                    extra_body={"ignore_eos": True, "kv": {"policy": spec}})

    jobs = [(spec, 100 + i) for i, spec in enumerate(specs) for _ in range(2)]  # twins
    with cf.ThreadPoolExecutor(len(jobs)) as pool:
        results = list(pool.map(run, jobs))
    for i, spec in enumerate(specs):
        twin, other = results[2 * i], results[2 * i + 1]
        kv = twin.usage.model_extra["kv"]
        assert kv["policy"].split(":")[0] == spec.split(":")[0] and twin.usage.completion_tokens == 50, spec
        assert (kv["eviction_rounds"] == 0) == (spec == "full"), spec
        assert spec == "full" or kv["peak_slots"] <= 40, spec
        # The CPU sums in a fixed order whatever the batch: twins, and alone, decode the same text
        # (docs/server.md).
        assert twin.choices[0].text == other.choices[0].text, spec
        assert run((spec, 100 + i)).choices[0].text == twin.choices[0].text, spec


def test_stop_strings(server):
    c = client(server)
    base = c.completions.create(model=MODEL, prompt="xyz", max_tokens=30, seed=4, extra_body={"ignore_eos": True})
    text = base.choices[0].text
    # A stop string of plain characters (the random-weight model also emits invalid UTF-8, shown as U+FFFD).
    start = next(i for i in range(5, len(text) - 3) if text[i:i + 3].isprintable() and "\ufffd" not in text[i:i + 3])
    stop = text[start:start + 3]
    assert len(stop) == 3
    r = c.completions.create(model=MODEL, prompt="xyz", max_tokens=30, seed=4, stop=[stop],
                             extra_body={"ignore_eos": True})
    assert r.choices[0].finish_reason == "stop"
    assert r.choices[0].text == text[: text.index(stop)]
    streamed = "".join(ch.choices[0].text for ch in c.completions.create(
        model=MODEL, prompt="xyz", max_tokens=30, seed=4, stop=[stop], stream=True, extra_body={"ignore_eos": True}))
    assert streamed == r.choices[0].text


def test_special_tokens_choice(server):
    c = client(server)
    parsed = c.completions.create(model=MODEL, prompt="<|im_start|>user", max_tokens=1)
    as_text = c.completions.create(model=MODEL, prompt="<|im_start|>user", max_tokens=1,
                                   extra_body={"special_tokens": "text"})
    assert parsed.usage.prompt_tokens < as_text.usage.prompt_tokens


@pytest.mark.parametrize(
    "extra, param",
    [
        ({"kv": {"policy": "nope"}}, "kv.policy"),
        ({"kv": {"policy": "random_pp", "budget": 20, "window": 8}}, "kv.budget"),
        ({"kv": {"policy": "random_pp", "budget": 0}}, "kv.budget"),
        ({"kv": {"colour": 1}}, "kv.colour"),
        ({"bogus_field": 1}, "bogus_field"),
        ({"logprobs": True}, "logprobs"),
        ({"n": 1000}, "n"),
        ({"max_tokens": 10**9}, "max_tokens"),
        ({"temperature": "hot"}, "temperature"),
    ],
)
def test_bad_requests_name_the_field(server, extra, param):
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, **extra}
    status, _, text = server.post("/v1/chat/completions", body)
    assert status == 400, text
    assert json.loads(text)["error"]["param"] == param


def test_errors(server):
    c = client(server)
    with pytest.raises(openai.NotFoundError):
        c.chat.completions.create(model="gpt-4", messages=[{"role": "user", "content": "hi"}])
    status, _, text = server.post("/v1/chat/completions", b"{not json")
    assert status == 400 and json.loads(text)["error"]["code"] == "invalid_json"
    status, _, text = server.post("/v1/completions", [1, 2])
    assert status == 400


def test_reservation_that_never_fits(start_server):
    s = start_server("--policy", "full", "--kv-slots", "64")
    with pytest.raises(openai.BadRequestError) as e:
        client(s).completions.create(model=MODEL, prompt="hello", max_tokens=100)
    assert e.value.code == "kv_reservation_too_large"
    assert "103" in e.value.message and "64" in e.value.message  # 3 prompt + 100 > 64
    # The same request under a budget fits: max(3, 32) + 8 = 40 slots.
    r = client(s).completions.create(model=MODEL, prompt="hello", max_tokens=100,
                                     extra_body={"kv": {"policy": "random_pp", "budget": 32, "window": 8}})
    assert r.usage.model_extra["kv"]["reserved_slots"] == 40


def test_oversize_body(start_server):
    s = start_server("--budget", "32", "--window", "8", "--max-body-bytes", "1000")
    status, _, text = s.post("/v1/completions", {"model": MODEL, "prompt": "x" * 5000})
    assert status == 413 and "too large" in json.loads(text)["error"]["message"]


def test_api_key(start_server):
    s = start_server("--budget", "32", "--window", "8", "--api-key", "sesame")
    with pytest.raises(openai.AuthenticationError):
        client(s, api_key="wrong").models.list()
    assert client(s, api_key="sesame").models.list().data[0].id == MODEL
    assert s.get("/health")[0] == 200
    assert s.get("/metrics")[0] == 401
    assert s.get("/metrics", {"Authorization": "Bearer sesame"})[0] == 200


LONG = dict(max_tokens=2000, extra_body={"ignore_eos": True, "kv": {"policy": "random_pp", "budget": 64, "window": 8}})


def test_disconnect_mid_stream_frees_the_sequence(start_server):
    s = start_server("--budget", "32", "--window", "8")
    conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=30)
    body = {"model": MODEL, "prompt": "go", "stream": True, "max_tokens": 2000, **LONG["extra_body"]}
    conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200 and resp.readline().startswith(b"data: ")
    assert s.metric("kvdice_running_sequences") == 1
    resp.close()
    conn.close()
    # The client is gone: the sequence is freed long before 2000 tokens.
    s.wait_metric("kvdice_running_sequences", lambda v: v == 0, timeout=2.0)
    assert s.metric("kvdice_cancelled_sequences_total") >= 1
    assert s.metric("kvdice_generated_tokens_total") < 1500
    assert s.metric('kvdice_kv_slots{state="reserved"}') == 0


def test_disconnect_non_streaming_frees_the_sequence(start_server):
    s = start_server("--budget", "32", "--window", "8")
    with pytest.raises(openai.APITimeoutError):
        # Eight choices of 2000 tokens: seconds of work, so the 0.3 s client timeout fires first.
        client(s, timeout=0.3).completions.create(model=MODEL, prompt="go", n=8, **LONG)
    s.wait_metric("kvdice_running_sequences", lambda v: v == 0, timeout=2.0)
    assert s.metric("kvdice_generated_tokens_total") < 8 * 1500


def test_full_queue_gets_429(start_server):
    s = start_server("--budget", "32", "--window", "8", "--max-batch", "1", "--max-queue", "1")
    c = client(s)
    running = c.completions.create(model=MODEL, prompt="a", stream=True, **LONG)
    next(iter(running))  # admitted and decoding
    with cf.ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(lambda: c.completions.create(model=MODEL, prompt="b", max_tokens=5))
        s.wait_metric("kvdice_queue_depth", lambda v: v == 1)
        with pytest.raises(openai.RateLimitError) as e:
            c.completions.create(model=MODEL, prompt="c", max_tokens=5)
        assert int(e.value.response.headers["Retry-After"]) >= 1
        running.close()  # frees the batch slot; the queued request runs
        assert waiting.result(timeout=30).usage.completion_tokens >= 1


def test_drain_finishes_running_requests(start_server):
    s = start_server("--budget", "32", "--window", "8")
    c = client(s)
    stream = c.completions.create(model=MODEL, prompt="a", stream=True, max_tokens=1500,
                                  extra_body={"ignore_eos": True})
    chunks = [next(iter(stream))]
    s.proc.send_signal(__import__("signal").SIGTERM)
    s.wait_metric("kvdice_running_sequences", lambda v: v >= 0)  # still answering while draining
    deadline = time.time() + 10  # the signal reaches the drain asynchronously
    while s.get("/health")[0] != 503 and time.time() < deadline:
        time.sleep(0.02)
    assert s.get("/health")[0] == 503
    with pytest.raises(openai.APIStatusError) as e:
        c.completions.create(model=MODEL, prompt="late", max_tokens=2)
    assert e.value.status_code == 503
    chunks += list(stream)
    assert chunks[-1].choices[0].finish_reason == "length"
    assert s.proc.wait(timeout=30) == 0
