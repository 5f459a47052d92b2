#!/usr/bin/env python3
"""Writes tests/fixtures/golden/chat_templates_extra.json: what transformers' apply_chat_template renders
with the real chat templates kvdice renders as code beyond the fixture families (DeepSeek-R1 distills,
Llama-3.1/3.2, Phi-4-reasoning, Qwen3 Thinking-2507), for plain system/user/assistant conversations.

The template sources are stored verbatim in tests/fixtures/templates/ (see SOURCES for where each came from).
Each is rendered through a real transformers tokenizer whose bos/eos tokens are the model's, so
{{ bos_token }} expands as it does for the model. Run from the repository root:
    python3 tools/make_chat_template_goldens.py"""
import json
import pathlib

import tokenizers
import transformers
from transformers import PreTrainedTokenizerFast

ROOT = pathlib.Path(__file__).resolve().parents[1]
TEMPLATES = ROOT / "tests" / "fixtures" / "templates"
OUT = ROOT / "tests" / "fixtures" / "golden" / "chat_templates_extra.json"

# name -> (template file, kvdice template it must be detected as, special tokens, where the source came from)
SOURCES = {
    "deepseek_r1_distill": (
        "deepseek_r1_distill.jinja", "deepseek_r1",
        {"bos_token": "<｜begin▁of▁sentence｜>", "eos_token": "<｜end▁of▁sentence｜>"},
        "chat_template of deepseek-ai/DeepSeek-R1-Distill-Llama-8B (and -Qwen-*) tokenizer_config.json, updated "
        "revision whose generation prompt is '<｜Assistant｜><think>\\n'"),
    "llama31_instruct": (
        "llama31_instruct.jinja", "llama31",
        {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
        "chat_template of meta-llama/Llama-3.1-8B-Instruct tokenizer_config.json"),
    "llama32_instruct": (
        "llama32_instruct.jinja", "llama31",
        {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
        "chat_template of meta-llama/Llama-3.2-3B-Instruct tokenizer_config.json (Today Date from strftime_now "
        "unless date_string is passed; every case passes the 3.1 default, the date kvdice always renders)"),
    "phi4_reasoning": (
        "phi4_reasoning.jinja", "phi4_reasoning",
        {"bos_token": "<|endoftext|>", "eos_token": "<|im_end|>"},
        "chat_template of microsoft/Phi-4-reasoning tokenizer_config.json (default reasoning system prompt when "
        "the chat does not start with a system message)"),
    "qwen3_thinking_2507": (
        "qwen3_thinking_2507.jinja", "qwen3_thinking",
        {"eos_token": "<|im_end|>"},
        "chat_template of Qwen/Qwen3-4B-Thinking-2507 (generation prompt opens '<think>\\n')"),
}

REASONING = "<think>\nAdd the units: 12 + 7 = 19.\n</think>\n\nThe sum is 19."
CASES = [
    ("single_user", [{"role": "user", "content": "What is 12+7?"}], {}),
    ("system_and_user", [{"role": "system", "content": "You are a careful solver."},
                         {"role": "user", "content": "Solve x + 1 = 3."}], {}),
    ("multi_turn_with_reasoning", [{"role": "system", "content": "Be brief."},
                                   {"role": "user", "content": "What is 12+7?"},
                                   {"role": "assistant", "content": REASONING},
                                   {"role": "user", "content": "And 12+8?"}], {}),
    ("reasoning_turn_last_no_generation_prompt", [{"role": "user", "content": "What is 12+7?"},
                                                  {"role": "assistant", "content": REASONING}],
     {"add_generation_prompt": False}),
    ("whitespace_and_nested_think", [{"role": "system", "content": "\n  Think step by step. \t"},
                                     {"role": "user", "content": "  hi there \n\n"},
                                     {"role": "assistant",
                                      "content": "\n<think>a</think>b</think>\n\n  final answer \n"},
                                     {"role": "user", "content": "\u3000again\u00a0"}], {}),
    ("system_after_first_turn", [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
                                 {"role": "system", "content": "late system"}, {"role": "user", "content": "c"}],
     {}),
    ("unicode", [{"role": "user", "content": "你好 😀 — naïve café"}], {"add_generation_prompt": True}),
]
# Per-template extras: options that template reads (or must ignore).
EXTRA = {
    "qwen3_thinking_2507": [("enable_thinking_false_is_ignored", [{"role": "user", "content": "Hi"}],
                             {"enable_thinking": False})],
}


def tokenizer_with(specials: dict) -> PreTrainedTokenizerFast:
    # Only the chat-template machinery is used; the vocabulary is irrelevant to rendering text.
    backend = tokenizers.Tokenizer(tokenizers.models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
    return PreTrainedTokenizerFast(tokenizer_object=backend, **specials)


def main():
    out = {"generator": "tools/make_chat_template_goldens.py",
           "render": "transformers apply_chat_template(messages, chat_template=source, tokenize=False, **kwargs)",
           "versions": {"transformers": transformers.__version__, "tokenizers": tokenizers.__version__},
           "templates": {}}
    for name, (file, kind, specials, origin) in SOURCES.items():
        source = (TEMPLATES / file).read_text(encoding="utf-8")
        tok = tokenizer_with(specials)
        cases = []
        for case_name, messages, extra in CASES + EXTRA.get(name, []):
            kwargs = {"add_generation_prompt": True, **extra}
            if name == "llama32_instruct":
                kwargs.setdefault("date_string", "26 Jul 2024")
            rendered = tok.apply_chat_template(messages, chat_template=source, tokenize=False, **kwargs)
            cases.append({"name": case_name, "messages": messages, "kwargs": kwargs, "rendered": rendered})
        out["templates"][name] = {"source": f"templates/{file}", "from": origin, "kind": kind, "cases": cases}
    OUT.write_text(json.dumps(out, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
