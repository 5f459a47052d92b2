"""Numeric extremes in every numeric request field: each answer is a 200 completion or a 4xx error
object that names the field, never a 5xx, a reset connection or a dead server."""
import json

import pytest

from conftest import RunningServer

# Raw JSON text of each value: integers beyond int64 and uint64, floats at and beyond the double range,
# -0 both ways, NaN and infinities as strings and as the (invalid JSON) bare words, floats where
# integers belong, and the wrong types.
VALUES = [
    "-1", "0", "1", "-0", "-0.0", "0.0", "0.5", "1.5", "2.0", "1e-320", "-1e-320", "1e308", "-1e308",
    "1e400", "-1e400", "2147483647", "2147483648", "-2147483649", "4294967296", "1000000000000",
    "9223372036854775807", "9223372036854775808", "-9223372036854775808", "-9223372036854775809",
    "18446744073709551615", "18446744073709551616", "1" + "0" * 400, '"nan"', '"inf"', '"-inf"', '"1"',
    "NaN", "Infinity", "-Infinity", "true", "null", "[]", "{}",
]

# (endpoint, field path): kv.* sits in the request's kv object, prompt[0] is a token id.
FIELDS = [("completions", f) for f in (
    "max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k", "seed", "n", "best_of",
    "logprobs", "frequency_penalty", "presence_penalty", "kv.budget", "kv.window", "prompt[0]")] + [
    ("chat/completions", f) for f in ("max_tokens", "temperature", "top_logprobs", "logprobs", "n", "seed")]


def raw_object(fields):
    return "{" + ", ".join('"%s": %s' % (k, v) for k, v in fields.items()) + "}"


def body_with(endpoint, field, raw):
    """The request's JSON text with `raw` (JSON text, maybe invalid) as the value of `field`."""
    fields = {"model": '"tiny-qwen3"', "max_tokens": "2"}
    if endpoint == "completions":
        fields["prompt"] = '"hi"'
    else:
        fields["messages"] = '[{"role": "user", "content": "hi"}]'
    if field.startswith("kv."):
        kv = {"policy": '"random_pp"', "budget": "32", "window": "8"}
        kv[field[3:]] = raw
        fields["kv"] = raw_object(kv)
    elif field == "prompt[0]":
        fields["prompt"] = "[%s]" % raw
    else:
        fields.pop("max_tokens") if field == "max_completion_tokens" else None
        fields[field] = raw
    return raw_object(fields)


@pytest.fixture(scope="module")
def extremes_server():
    s = RunningServer("--budget", "32", "--window", "8", "--max-tokens", "4", "--max-n", "2")
    yield s
    assert s.stop() == 0


@pytest.mark.parametrize("endpoint,field", FIELDS)
def test_numeric_extremes_get_200_or_a_named_4xx(extremes_server, endpoint, field):
    s = extremes_server
    for raw in VALUES:
        body = body_with(endpoint, field, raw).encode()
        status, _, text = s.post("/v1/" + endpoint, body)
        assert status == 200 or 400 <= status < 500, (field, raw, status, text)
        answer = json.loads(text)
        if status == 200:
            assert "choices" in answer and "error" not in answer, (field, raw, text)
            continue
        error = answer["error"]
        assert error["message"], (field, raw, text)
        if raw not in ("NaN", "Infinity", "-Infinity", "1e400", "-1e400", "1" + "0" * 400):
            # Valid JSON: the error names the field (a bare NaN is invalid JSON, named as such).
            name = field.split("[")[0].split(".")[-1]
            assert error["param"] and name in error["param"], (field, raw, text)
    assert s.proc.poll() is None
    _, metrics = s.get("/metrics")
    assert 'status="5' not in metrics, metrics
