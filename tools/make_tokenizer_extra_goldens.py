#!/usr/bin/env python3
"""Writes tests/fixtures/golden/tokenizer_extra.json: edge cases the shared goldens do not cover (Unicode whitespace where
PCRE2 and Oniguruma differ, case folding, NFC, long runs; chat renders with odd whitespace and
reasoning), encoded with the real `tokenizers` library and rendered with transformers' own Jinja
environment, from the fixture tokenizers in tests/fixtures/{qwen3,llama,phi3,qwen2}.
Run from the repository root: python3 tools/make_tokenizer_extra_goldens.py"""
import json
import pathlib

import tokenizers
import transformers
from transformers.utils.chat_template_utils import _compile_jinja_template

ROOT = pathlib.Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"

TEXTS = [
    "a\u0085b \u0085\u0085 c\u0085",            # NEXT LINE: White_Space for Oniguruma, not for PCRE2's \s
    "x \u180e y  \u180e",                       # MONGOLIAN VOWEL SEPARATOR: the other way round
    "\u2028line\u2029para\u3000\u3000ideo \u00a0nb\u1680og\u2007fig\u202fnn\u205fmm",
    "\x1c\x1d\x1e\x1f separators \x0b\x0c",
    "'S 'LL 'ſ '\u212a 'Re 'vE 'D 'M 'T",        # case-insensitive contractions, long s, Kelvin sign
    "1234567 12 123456789012 \u0663\u0664\u0665\u0666 \u2460\u2461 \u00bd \u2167",
    "A\u030a \u212b \u00c5 e\u0301\u0323 \u1e9b\u0323 \ufb01",  # NFC compositions and non-compositions
    " " * 300 + "x" + "!" * 300 + "\n" * 300 + "y\r\n" * 50 + "\t" * 100,
    "   \n   \n\n \t x  \n",
    "<think></think><think>x</think>",
    "<|im_start|>x<|im_start|> <|im_end|>\n<|endoftext|><|endoftext|>",
]

CHATS = [
    ("trim_and_unicode_space", [{"role": "system", "content": "\u3000 Be brief.\n\x1c"},
                                {"role": "user", "content": "\t hi \u0085"}], {"add_generation_prompt": True}),
    ("system_in_the_middle", [{"role": "user", "content": "a"}, {"role": "system", "content": "b"},
                              {"role": "user", "content": "c"}], {"add_generation_prompt": True}),
    ("reasoning_turns", [{"role": "user", "content": "q1"},
                         {"role": "assistant", "content": "<think>\nr1\n</think>\n\na1"},
                         {"role": "user", "content": "q2"},
                         {"role": "assistant", "content": "\n<think>r2a</think>mid</think>\n\nfinal"}],
     {"add_generation_prompt": False}),
    ("trailing_assistant_without_reasoning", [{"role": "user", "content": "q"},
                                              {"role": "assistant", "content": "\n\nanswer"}],
     {"add_generation_prompt": False, "enable_thinking": False}),
]


def main():
    out = {"generator": "tools/make_tokenizer_extra_goldens.py",
           "versions": {"tokenizers": tokenizers.__version__, "transformers": transformers.__version__},
           "encode": {}, "chat": {}}
    for family in ["qwen3", "llama", "phi3"]:
        tok = tokenizers.Tokenizer.from_file(str(FIXTURES / family / "tokenizer.json"))
        out["encode"][family] = [{"text": t, "ids": tok.encode(t, add_special_tokens=False).ids} for t in TEXTS]
    # GPT-2's ByteLevel(use_regex=True) pre-tokenizer over the qwen3 fixture vocab, no normaliser.
    tok = tokenizers.Tokenizer.from_file(str(FIXTURES / "qwen3" / "tokenizer.json"))
    tok.normalizer = None
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    gpt2_texts = TEXTS + ["year 2024, it's 3.14159 and 1234567890", "I'M HERE  \n\n  x 你好 😀"]
    out["encode_gpt2_on_qwen3_vocab"] = [{"text": t, "ids": tok.encode(t, add_special_tokens=False).ids}
                                         for t in gpt2_texts]
    for family in ["qwen3", "qwen2", "llama", "phi3"]:
        config = json.loads((FIXTURES / family / "tokenizer_config.json").read_text())
        template = _compile_jinja_template(config["chat_template"])
        cases = []
        for name, messages, kwargs in CHATS:
            rendered = template.render(messages=messages, bos_token=config.get("bos_token") or "", **kwargs)
            cases.append({"name": name, "messages": messages, "kwargs": kwargs, "rendered": rendered})
        out["chat"][family] = cases
    path = FIXTURES / "golden" / "tokenizer_extra.json"
    path.write_text(json.dumps(out, ensure_ascii=False, indent=1) + "\n")


if __name__ == "__main__":
    main()
