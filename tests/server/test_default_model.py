"""One short check on the default model (Qwen2.5-Coder-0.5B-Instruct, pulled once into $KVDICE_HOME):
the openai client gets a correct greedy answer, streamed and not, under a per-request budget."""
import openai

from conftest import RunningServer


def test_default_model_answers():
    s = RunningServer("--budget", "64", "--window", "16", model="default", name="default")
    try:
        c = openai.OpenAI(base_url=s.url("/v1"), api_key="none", max_retries=0)
        kw = dict(model="default", messages=[{"role": "user", "content": "What is 17 + 25? Reply with the number only."}],
                  max_tokens=8, temperature=0, extra_body={"kv": {"policy": "random_pp", "budget": 64, "window": 16}})
        r = c.chat.completions.create(**kw)
        assert "42" in r.choices[0].message.content
        streamed = "".join(ch.choices[0].delta.content or "" for ch in c.chat.completions.create(stream=True, **kw))
        assert streamed == r.choices[0].message.content
    finally:
        assert s.stop() == 0
