"""`kvdice serve --model M` with no kv flags: the documented default budget, the pool on the start-up
line, and /metrics reporting the same capacity."""
import re

from conftest import MODEL
import openai


def test_no_kv_flags_serves_under_the_default_budget(start_server):
    s = start_server()
    line = s.start_line
    assert "default kv random_pp T=2048 r=64" in line, line
    m = re.search(r"KV pool (\d+) slots \(([\d.]+) GiB, [^)]*\), max batch (\d+): (\d+) sequences of T \+ r = 2112 "
                  r"fit, (\d+) of the full context (\d+)", line)
    assert m, line
    slots, batch, fit, fit_full, context = (int(m.group(i)) for i in (1, 3, 4, 5, 6))
    assert slots == 65536 and batch == 64  # the CPU defaults
    assert fit == 65536 // 2112 and fit_full == 65536 // context
    assert s.metric('kvdice_kv_slots{state="capacity"}') == slots
    c = openai.OpenAI(base_url=s.url("/v1"), api_key="none")
    r = c.completions.create(model=MODEL, prompt="hello", max_tokens=4)
    assert r.usage.model_extra["kv"]["reserved_slots"] == 2048 + 64


def test_kv_slots_is_the_exact_capacity(start_server):
    s = start_server("--kv-slots", "5000")
    assert "KV pool 5000 slots" in s.start_line
    assert s.metric('kvdice_kv_slots{state="capacity"}') == 5000
