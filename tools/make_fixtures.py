#!/usr/bin/env python3
"""Builds kvdice's test fixtures: tiny random-weight checkpoints made with the real transformers
model classes (fp32), byte-level BPE tokenizers shaped like the real families' tokenizer.json, and
the golden outputs (logits, token ids, rendered chat templates) the C++ tests compare against.

Run from the repository root on CPU:  python3 tools/make_fixtures.py
Everything is seeded; a rerun with the same library versions rewrites identical bytes.
See tools/README.md for the file formats.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
from pathlib import Path

os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")  # goldens are CPU fp32 references
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
import safetensors  # noqa: E402
import tokenizers  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers  # noqa: E402
from tokenizers import pre_tokenizers, processors, trainers  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerFast  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
SEED = 20240611

# ---------------------------------------------------------------------------------------------
# Pre-tokenizer patterns, exactly as the families' tokenizer.json files carry them.
# Qwen2/Qwen2.5/Qwen3: single digits.
QWEN2_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# Llama-3: runs of up to three digits. Phi-4 (14B) carries the same cl100k (GPT-4) pattern.
LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
CL100K_PATTERN = LLAMA3_PATTERN

# ---------------------------------------------------------------------------------------------
# Chat templates: the Jinja sources the real checkpoints ship in tokenizer_config.json.

# Qwen/Qwen3-8B (and the rest of the Qwen3 family), with enable_thinking handling.
QWEN3_CHAT_TEMPLATE = r"""{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0].role == 'system' %}
        {{- messages[0].content + '\n\n' }}
    {%- endif %}
    {{- "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0].role == 'system' %}
        {{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" and message.content is string and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- if message.content is string %}
        {%- set content = message.content %}
    {%- else %}
        {%- set content = '' %}
    {%- endif %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\n' + content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {%- set reasoning_content = '' %}
        {%- if message.reasoning_content is string %}
            {%- set reasoning_content = message.reasoning_content %}
        {%- else %}
            {%- if '</think>' in content %}
                {%- set reasoning_content = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') %}
                {%- set content = content.split('</think>')[-1].lstrip('\n') %}
            {%- endif %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query_index %}
            {%- if loop.last or (not loop.last and reasoning_content) %}
                {{- '<|im_start|>' + message.role + '\n<think>\n' + reasoning_content.strip('\n') + '\n</think>\n\n' + content.lstrip('\n') }}
            {%- else %}
                {{- '<|im_start|>' + message.role + '\n' + content }}
            {%- endif %}
        {%- else %}
            {{- '<|im_start|>' + message.role + '\n' + content }}
        {%- endif %}
        {%- if message.tool_calls %}
            {%- for tool_call in message.tool_calls %}
                {%- if (loop.first and content) or (not loop.first) %}
                    {{- '\n' }}
                {%- endif %}
                {%- if tool_call.function %}
                    {%- set tool_call = tool_call.function %}
                {%- endif %}
                {{- '<tool_call>\n{"name": "' }}
                {{- tool_call.name }}
                {{- '", "arguments": ' }}
                {%- if tool_call.arguments is string %}
                    {{- tool_call.arguments }}
                {%- else %}
                    {{- tool_call.arguments | tojson }}
                {%- endif %}
                {{- '}\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\n\n</think>\n\n' }}
    {%- endif %}
{%- endif %}"""

# Qwen/Qwen2.5-*-Instruct: ChatML with a default system prompt when none is given.
QWEN25_CHAT_TEMPLATE = r"""{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
    {%- else %}
        {{- '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\n<tool_call>\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- message.content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
"""

# meta-llama/Meta-Llama-3-8B-Instruct (one line in the original).
LLAMA3_CHAT_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'"
    "+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
    "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)

# microsoft/phi-4 (current revision, with add_generation_prompt).
PHI4_CHAT_TEMPLATE = (
    "{% for message in messages %}{% if (message['role'] == 'system') %}"
    "{{'<|im_start|>system<|im_sep|>' + message['content'] + '<|im_end|>'}}"
    "{% elif (message['role'] == 'user') %}{{'<|im_start|>user<|im_sep|>' + message['content'] + '<|im_end|>'}}"
    "{% elif (message['role'] == 'assistant') %}"
    "{{'<|im_start|>assistant<|im_sep|>' + message['content'] + '<|im_end|>'}}"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant<|im_sep|>' }}{% endif %}"
)

# ---------------------------------------------------------------------------------------------
# Added tokens, in the real files' order (ids follow the trained vocabulary).
# (content, special, lstrip/rstrip)
QWEN_ADDED = [
    ("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True),
    ("<|object_ref_start|>", True), ("<|object_ref_end|>", True), ("<|box_start|>", True),
    ("<|box_end|>", True), ("<|quad_start|>", True), ("<|quad_end|>", True),
    ("<|vision_start|>", True), ("<|vision_end|>", True), ("<|vision_pad|>", True),
    ("<|image_pad|>", True), ("<|video_pad|>", True),
    # Qwen marks these as added but not special (they survive skip_special_tokens).
    ("<tool_call>", False), ("</tool_call>", False), ("<|fim_prefix|>", False),
    ("<|fim_middle|>", False), ("<|fim_suffix|>", False), ("<|fim_pad|>", False),
    ("<|repo_name|>", False), ("<|file_sep|>", False), ("<tool_response>", False),
    ("</tool_response>", False), ("<think>", False), ("</think>", False),
]
LLAMA3_ADDED = [
    ("<|begin_of_text|>", True), ("<|end_of_text|>", True),
    ("<|reserved_special_token_0|>", True), ("<|reserved_special_token_1|>", True),
    ("<|reserved_special_token_2|>", True), ("<|reserved_special_token_3|>", True),
    ("<|start_header_id|>", True), ("<|end_header_id|>", True),
    ("<|reserved_special_token_4|>", True), ("<|eot_id|>", True),
    ("<|reserved_special_token_5|>", True), ("<|reserved_special_token_6|>", True),
]
# Phi-4's added tokens all carry lstrip=rstrip=true in the real tokenizer.json.
PHI4_ADDED = [
    ("<|endoftext|>", True), ("<|fim_prefix|>", True), ("<|fim_middle|>", True),
    ("<|fim_suffix|>", True), ("<|dummy_0|>", True), ("<|dummy_1|>", True),
    ("<|dummy_2|>", True), ("<|im_start|>", True), ("<|im_end|>", True), ("<|im_sep|>", True),
    ("<|endofprompt|>", True),
]

# ---------------------------------------------------------------------------------------------
# Training corpus: enough variety that merges exist for prose, code, digits and non-Latin text.
CORPUS = [
    "The quick brown fox jumps over the lazy dog. The dog does not care; it is asleep in the sun.",
    "Once upon a time there was a little model that wanted to think before it answered.",
    "It reasoned step by step, wrote down what it knew, and then checked every number twice.",
    "When the memory was full, it forgot some of the older thoughts at random, and still it "
    "found the answer more often than not.",
    "We evaluate the method on long reasoning traces with a bounded cache budget.",
    "The budget is measured in tokens per sequence; the newest tokens are always kept.",
    "In the beginning the prompt is protected, so the question itself is never evicted.",
    "She said: \"I'm sure it's fine, but we'll see.\" He replied, \"You're right, I don't know.\"",
    "They've been there before. Isn't that what we'd expect? I'd say so. It's what they're for.",
    "DON'T PANIC. I'M HERE. WE'LL BE FINE. THEY'RE LATE, AREN'T THEY?",
    "Let's compute: 12 + 7 = 19, 144 / 12 = 12, 3.14159 * 2 = 6.28318, and 2^10 = 1024.",
    "The year 2024 had 366 days; 1000000 is one million; 42 is the answer; 007 is a spy.",
    "Phone: 555-0123, order #98765, total $1,234.56, ratio 3:2, version 1.2.3, 50% off.",
    "Solve 3x + 5 = 20. Subtract 5 from both sides: 3x = 15. Divide by 3: x = 5.",
    "What is 12+7? The sum is 19. What is 9*9? The product is 81.",
    "def add(a, b):\n    return a + b\n\n\nclass Counter:\n    def __init__(self):\n        self.n = 0\n",
    "    def step(self, k=1):\n        self.n += k\n        return self.n\n\nif __name__ == '__main__':\n"
    "    print(add(2, 3))\n",
    "for i in range(10):\n\tif i % 2 == 0:\n\t\tprint(i)\n\telse:\n\t\tcontinue\n",
    "#include <vector>\n\nint main() {\n    std::vector<int> v{1, 2, 3};\n    for (int x : v) {\n"
    "        sum += x;\n    }\n    return 0;\n}\n",
    "const std::string& name() const { return name_; }  // returns the name\n",
    "{\"role\": \"user\", \"content\": \"Hello, world!\"}, {\"role\": \"assistant\", \"content\": \"Hi!\"}",
    "x = [1, 2, 3]; y = {'a': 1, 'b': 2}; z = (x, y); print(f\"{x} {y} {z}\")",
    "SELECT name, count(*) FROM users WHERE age > 30 GROUP BY name ORDER BY count DESC;",
    "你好，世界！今天天气很好。我们一起去公园散步吧。人工智能正在改变世界。",
    "模型在思考之前先阅读问题，然后一步一步地推理。答案是十九。",
    "こんにちは、世界。今日はいい天気ですね。東京は日本の首都です。",
    "안녕하세요, 세계! 오늘 날씨가 좋네요. 감사합니다.",
    "Привет, мир! Как дела? Всё хорошо, спасибо.",
    "Γειά σου κόσμε! Καλημέρα. Ευχαριστώ πολύ.",
    "مرحبا بالعالم! كيف حالك؟ شكرا جزيلا.",
    "Café, naïve, résumé, façade, jalapeño, über, Ærøskøbing, smörgåsbord.",
    "Emoji time: 😀 😂 👍 👍🏽 ❤️ 🎉 🚀 👩‍💻 👨‍👩‍👧‍👦 🏳️‍🌈 🇯🇵 — all done!",
    "Math symbols: ∑ ∫ √ ∞ ≈ ≠ ≤ ≥ ± × ÷ → ⇒ ∀ ∃ ∈ ∅ π θ λ μ σ Ω.",
    "Tabs\tand\tspaces   mixed    here.\n\nNew paragraph after two newlines.\r\nWindows line.\r\n",
    "   leading spaces and trailing spaces   \n\n\n   indented line\n        deeper indent\n",
    "<think>\nThe user asks for the sum. 12 + 7 = 19.\n</think>\n\nThe sum is 19.",
    "The answer is \\boxed{19}. Therefore the final answer is 19.",
    "Hello! How can I help you today? Count to three: one, two, three.",
    "You are a careful math tutor. Be brief. Think step by step and explain your reasoning.",
    "The system message tells the assistant who it is; the user asks, the assistant answers.",
    "A system, a user and an assistant: the user writes first, then the assistant replies briefly.",
    "Be brief. Be kind. Be correct. The assistant is brief when the system asks it to be brief.",
]
# Repeating ordinary prose raises pair counts so common English merges win over rare ones.
CORPUS_REPEATS = 3

# Strings every tokenizer implementation gets wrong at least once.
TRICKY_STRINGS = [
    "",
    " ",
    "Hello world",
    " Hello world",
    "Hello  world   ",
    "hello\n\nworld\n",
    "\n\n\n",
    "\t\tindented\twith\ttabs",
    "line one\r\nline two\r\n",
    "trailing spaces     ",
    "                                        many spaces",
    "I'm sure it's fine; we'll see, they've gone, you're right, I'd go.",
    "DON'T SHOUT, I'M HERE, WE'LL GO",
    "don't won't can't o'clock rock'n'roll",
    "12345678901234567890",
    "3.14159265358979 and 1,000,000 and 007 and 2^64-1 = 18446744073709551615",
    "x1y22z333w4444",
    "你好，世界！今天天气很好。",
    "こんにちは世界、カタカナとひらがな。",
    "한국어 텍스트와 English mixed 텍스트",
    "Привет мир and Γειά σου and مرحبا",
    "emoji: 😀😂👍",
    "skin tones: 👍🏻 👍🏽 👍🏿",
    "ZWJ family: 👨‍👩‍👧‍👦 and technologist 👩‍💻 and flag 🏳️‍🌈 🇯🇵",
    "café",            # precomposed é (NFC)
    "cafe\u0301",      # e + combining acute (NFD): NFC normalisation makes it "café"
    "A\u030a vs \u00c5 vs \u212b",  # A+ring, Å, Angstrom sign: all NFC to U+00C5
    "e\u0301\u0302\u0323 stacked marks",
    "def f(x):\n    if x:\n        return x * 2\n    return None\n",
    "int main() {\n\treturn 0;\n}\n",
    "a<|im_end|>b",
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
    "text <|endoftext|> more  <|im_end|>  spaced",
    "<think>\nreasoning\n</think>\n\nanswer",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>",
    "<|im_start|>user<|im_sep|>hi<|im_end|>",
    "<|im_end|<|im_end|>|>",
    "<|not_a_token|> and <| im_end |>",
    "\ufffd replacement char and \u0000 nul and \u001b[31m escape",
    "\u200b zero width space and \u00a0 nbsp and \u3000 ideographic space",
    "mixed: abc123你好😀\tdone",
    "The quick brown fox jumps over the lazy dog.",
]

# ---------------------------------------------------------------------------------------------


def versions() -> dict:
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "tokenizers": tokenizers.__version__,
        "safetensors": safetensors.__version__,
        "numpy": np.__version__,
    }


def write_json(path: Path, obj) -> None:
    path.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def train_tokenizer(
    *,
    pattern: str,
    nfc: bool,
    trim_offsets: bool,
    vocab_size: int,
    added: list[tuple[str, bool]],
    strip_added: bool,
    ignore_merges: bool,
    bos: str | None,
) -> Tokenizer:
    """A byte-level BPE with the real families' pipeline layout (see tokenizer.json of each)."""
    tok = Tokenizer(models.BPE(unk_token=None, byte_fallback=False, fuse_unk=False))
    tok.normalizer = normalizers.NFC() if nfc else None
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=trim_offsets, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=[],
    )
    tok.train_from_iterator(CORPUS * CORPUS_REPEATS, trainer=trainer)

    # Rebuild through JSON so the model section carries the real files' flags.
    spec = json.loads(tok.to_str())
    spec["model"]["ignore_merges"] = ignore_merges
    spec["model"]["dropout"] = None
    spec["model"]["continuing_subword_prefix"] = None
    spec["model"]["end_of_word_suffix"] = None
    tok = Tokenizer.from_str(json.dumps(spec))

    tok.add_tokens([
        AddedToken(content, special=special, normalized=False, lstrip=strip_added, rstrip=strip_added,
                   single_word=False)
        for content, special in added
    ])
    if bos is None:
        tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False,
                                                  use_regex=False)
    else:
        # Llama-3 prepends <|begin_of_text|> when special tokens are added.
        tok.post_processor = processors.Sequence([
            processors.ByteLevel(add_prefix_space=True, trim_offsets=False, use_regex=True),
            processors.TemplateProcessing(
                single=f"{bos}:0 $A:0",
                pair=f"{bos}:0 $A:0 {bos}:1 $B:1",
                special_tokens=[(bos, tok.token_to_id(bos))],
            ),
        ])
    return tok


FAMILY_TOKENIZERS = {
    # name: construction parameters and tokenizer_config.json fields of the real family
    "qwen3": dict(
        train=dict(pattern=QWEN2_PATTERN, nfc=True, trim_offsets=False, vocab_size=720,
                   added=QWEN_ADDED, strip_added=False, ignore_merges=False, bos=None),
        config=dict(tokenizer_class="Qwen2Tokenizer", bos_token=None, eos_token="<|im_end|>",
                    pad_token="<|endoftext|>", unk_token=None, add_bos_token=False,
                    add_prefix_space=False, errors="replace", split_special_tokens=False,
                    clean_up_tokenization_spaces=False, model_max_length=131072),
    ),
    "llama": dict(
        train=dict(pattern=LLAMA3_PATTERN, nfc=False, trim_offsets=True, vocab_size=720,
                   added=LLAMA3_ADDED, strip_added=False, ignore_merges=True,
                   bos="<|begin_of_text|>"),
        config=dict(tokenizer_class="PreTrainedTokenizerFast", bos_token="<|begin_of_text|>",
                    eos_token="<|eot_id|>", clean_up_tokenization_spaces=True,
                    model_input_names=["input_ids", "attention_mask"], model_max_length=8192),
    ),
    "phi3": dict(
        train=dict(pattern=CL100K_PATTERN, nfc=False, trim_offsets=True, vocab_size=720,
                   added=PHI4_ADDED, strip_added=True, ignore_merges=False, bos=None),
        config=dict(tokenizer_class="GPT2Tokenizer", bos_token="<|endoftext|>",
                    eos_token="<|im_end|>", pad_token="<|endoftext|>", unk_token="<|endoftext|>",
                    add_prefix_space=False, errors="replace", clean_up_tokenization_spaces=False,
                    model_max_length=16384),
    ),
}

CHAT_TEMPLATES = {
    "qwen3": QWEN3_CHAT_TEMPLATE,
    "qwen2": QWEN25_CHAT_TEMPLATE,
    "llama": LLAMA3_CHAT_TEMPLATE,
    "phi3": PHI4_CHAT_TEMPLATE,
}

# Which tokenizer each model directory uses (Qwen2 and Qwen3 share one vocabulary).
MODEL_TOKENIZER = {"qwen3": "qwen3", "qwen2": "qwen3", "llama": "llama", "phi3": "phi3"}


def save_tokenizer_dir(tok: Tokenizer, family: str, out_dir: Path) -> None:
    """tokenizer.json + tokenizer_config.json as transformers writes them, with the family's
    own class names and chat template in tokenizer_config.json (where the hub files keep it)."""
    tok_family = MODEL_TOKENIZER[family]
    cfg = dict(FAMILY_TOKENIZERS[tok_family]["config"])
    special_kwargs = {k: cfg[k] for k in ("bos_token", "eos_token", "pad_token", "unk_token")
                      if cfg.get(k) is not None}
    fast = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(tok.to_str()),
                                   **special_kwargs)
    fast.save_pretrained(str(out_dir))
    # The tokenizer.json is ours, byte for byte; transformers only contributes the config layout.
    (out_dir / "tokenizer.json").write_text(tokenizer_json(tok, tok_family), encoding="utf-8")
    for extra in ("chat_template.jinja", "special_tokens_map.json", "added_tokens.json"):
        (out_dir / extra).unlink(missing_ok=True)

    tc_path = out_dir / "tokenizer_config.json"
    written = json.loads(tc_path.read_text(encoding="utf-8"))
    merged = {
        "added_tokens_decoder": written.get("added_tokens_decoder") or added_tokens_decoder(tok),
    }
    merged.update(cfg)
    merged["chat_template"] = CHAT_TEMPLATES[family]
    write_json(tc_path, dict(sorted(merged.items())))


def tokenizer_json(tok: Tokenizer, tok_family: str) -> str:
    """Serialised like the hub files: Qwen and Phi-4 keep the older "a b" merge strings and
    Qwen's decoder flags are all false; the Llama file uses the newer [a, b] merge pairs, so
    readers meet both layouts."""
    spec = json.loads(tok.to_str())
    if tok_family in ("qwen3", "phi3"):
        spec["model"]["merges"] = [" ".join(pair) for pair in spec["model"]["merges"]]
    if tok_family == "qwen3":
        spec["decoder"] = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                           "use_regex": False}
    return json.dumps(spec, indent=2, ensure_ascii=False) + "\n"


def added_tokens_decoder(tok: Tokenizer) -> dict:
    out = {}
    for token_id, added in sorted(tok.get_added_tokens_decoder().items()):
        out[str(token_id)] = {
            "content": added.content, "lstrip": added.lstrip, "normalized": added.normalized,
            "rstrip": added.rstrip, "single_word": added.single_word, "special": added.special,
        }
    return out


# ---------------------------------------------------------------------------------------------
# Models


def model_specs(tok_sizes: dict[str, int], tok_ids: dict[str, dict[str, int]]) -> dict:
    """Tiny shapes that keep each family's quirks: Qwen3 head_dim != hidden/heads and q/k norms,
    Qwen2 qkv biases, Llama llama3 RoPE scaling (original context 64 so the test positions sit in
    all three frequency bands), Phi3 fused projections."""
    q = tok_ids["qwen3"]
    ll = tok_ids["llama"]
    ph = tok_ids["phi3"]
    return {
        "qwen3": dict(
            cls="Qwen3ForCausalLM", config_cls="Qwen3Config",
            config=dict(vocab_size=tok_sizes["qwen3"], hidden_size=64, intermediate_size=96,
                        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                        head_dim=32, max_position_embeddings=2048, rms_norm_eps=1e-6,
                        tie_word_embeddings=True, attention_bias=False, use_sliding_window=False,
                        sliding_window=None, max_window_layers=2,
                        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
                        bos_token_id=q["<|endoftext|>"], eos_token_id=q["<|im_end|>"],
                        pad_token_id=None),
            generation=dict(bos_token_id=q["<|endoftext|>"], do_sample=True,
                            eos_token_id=[q["<|im_end|>"], q["<|endoftext|>"]],
                            pad_token_id=q["<|endoftext|>"], temperature=0.6, top_k=20,
                            top_p=0.95),
            hub_dialect=False, shards=1,
        ),
        "qwen2": dict(
            cls="Qwen2ForCausalLM", config_cls="Qwen2Config",
            config=dict(vocab_size=tok_sizes["qwen3"], hidden_size=64, intermediate_size=96,
                        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                        max_position_embeddings=2048, rms_norm_eps=1e-6,
                        tie_word_embeddings=False, use_sliding_window=False, sliding_window=None,
                        max_window_layers=2,
                        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
                        bos_token_id=q["<|endoftext|>"], eos_token_id=q["<|im_end|>"]),
            generation=dict(bos_token_id=q["<|endoftext|>"], do_sample=True,
                            eos_token_id=q["<|im_end|>"], pad_token_id=q["<|endoftext|>"],
                            repetition_penalty=1.05, temperature=0.7, top_k=20, top_p=0.8),
            hub_dialect=True, shards=2,
        ),
        "llama": dict(
            cls="LlamaForCausalLM", config_cls="LlamaConfig",
            config=dict(vocab_size=tok_sizes["llama"], hidden_size=64, intermediate_size=96,
                        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                        max_position_embeddings=512, rms_norm_eps=1e-5, tie_word_embeddings=False,
                        attention_bias=False, mlp_bias=False,
                        rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0,
                                         "factor": 8.0, "low_freq_factor": 1.0,
                                         "high_freq_factor": 4.0,
                                         "original_max_position_embeddings": 64},
                        bos_token_id=ll["<|begin_of_text|>"], eos_token_id=ll["<|eot_id|>"]),
            generation=dict(bos_token_id=ll["<|begin_of_text|>"], do_sample=True,
                            eos_token_id=ll["<|eot_id|>"], temperature=0.6, top_p=0.9),
            hub_dialect=True, shards=1,
        ),
        "phi3": dict(
            cls="Phi3ForCausalLM", config_cls="Phi3Config",
            config=dict(vocab_size=tok_sizes["phi3"], hidden_size=64, intermediate_size=96,
                        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                        max_position_embeddings=1024, original_max_position_embeddings=1024,
                        rms_norm_eps=1e-5, tie_word_embeddings=False, sliding_window=None,
                        rope_parameters={"rope_type": "default", "rope_theta": 250000.0},
                        bos_token_id=ph["<|endoftext|>"], eos_token_id=ph["<|im_end|>"],
                        pad_token_id=ph["<|endoftext|>"]),
            generation=dict(bos_token_id=ph["<|endoftext|>"], eos_token_id=ph["<|im_end|>"],
                            pad_token_id=ph["<|endoftext|>"]),
            hub_dialect=False, shards=1,
        ),
    }


def randomize(model: torch.nn.Module, seed: int) -> None:
    """Wider-than-default weights so logits are far from flat, and norm weights away from 1 so a
    forgotten norm multiply shows up in the goldens."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if "norm" in name:
                p.copy_(torch.empty_like(p).uniform_(0.5, 1.5, generator=gen))
            elif name.endswith(".bias"):
                p.copy_(torch.empty_like(p).normal_(0.0, 0.1, generator=gen))
            else:
                p.copy_(torch.empty_like(p).normal_(0.0, 0.15, generator=gen))


def to_hub_dialect(cfg: dict) -> dict:
    """The config.json layout of checkpoints saved before transformers 5: rope_theta and
    rope_scaling at top level, torch_dtype instead of dtype, no layer_types."""
    out = dict(cfg)
    rope = dict(out.pop("rope_parameters"))
    out["rope_theta"] = rope.pop("rope_theta")
    rope_type = rope.pop("rope_type", "default")
    if rope_type == "default":
        out["rope_scaling"] = None
    else:
        out["rope_scaling"] = {"rope_type": rope_type, **rope}
    out["torch_dtype"] = out.pop("dtype", "float32")
    # Older configs leave head_dim implicit (hidden_size / num_attention_heads).
    if out.get("head_dim") == out["hidden_size"] // out["num_attention_heads"]:
        out.pop("head_dim")
    out.pop("layer_types", None)
    out["transformers_version"] = "4.51.3"
    return dict(sorted(out.items()))


def build_model(family: str, spec: dict, out_dir: Path, seed: int) -> None:
    config_cls = getattr(transformers, spec["config_cls"])
    model_cls = getattr(transformers, spec["cls"])
    config = config_cls(**spec["config"])
    torch.manual_seed(seed)
    model = model_cls(config).to(torch.float32).eval()
    randomize(model, seed)

    if spec["shards"] == 1:
        model.save_pretrained(str(out_dir))
    else:
        total = sum(t.numel() * t.element_size() for t in model.state_dict().values())
        model.save_pretrained(str(out_dir), max_shard_size=int(total * 0.6))
        shards = sorted(out_dir.glob("model-*-of-*.safetensors"))
        if len(shards) != spec["shards"] or not (out_dir / "model.safetensors.index.json").exists():
            sys.exit(f"{family}: expected {spec['shards']} shards, got {[s.name for s in shards]}")
    (out_dir / "generation_config.json").unlink(missing_ok=True)
    write_json(out_dir / "generation_config.json",
               dict(sorted({**spec["generation"],
                            "transformers_version": transformers.__version__}.items())))

    if spec["hub_dialect"]:
        reference = logits_of(out_dir)
        cfg = json.loads((out_dir / "config.json").read_text(encoding="utf-8"))
        write_json(out_dir / "config.json", to_hub_dialect(cfg))
        rewritten = logits_of(out_dir)
        if not torch.equal(reference, rewritten):
            sys.exit(f"{family}: hub-dialect config.json changes the logits")


def load_model(model_dir: Path) -> torch.nn.Module:
    return AutoModelForCausalLM.from_pretrained(
        str(model_dir), dtype=torch.float32, attn_implementation="eager").eval()


def logits_of(model_dir: Path) -> torch.Tensor:
    model = load_model(model_dir)
    ids = torch.arange(3, 40, dtype=torch.long)[None] % model.config.vocab_size
    with torch.no_grad():
        return model(input_ids=ids).logits


# ---------------------------------------------------------------------------------------------
# Goldens

GOLDEN_CHATS = {
    # family: (messages, template kwargs, teacher-forced continuation text)
    "qwen3": ([{"role": "user", "content": "What is 12+7?"}], {},
              "<think>\nThe sum is 19.\n</think>"),
    "qwen2": ([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}], {},
              "Hello! How can I help?"),
    "llama": ([{"role": "user", "content": "What is 12+7?"}], {}, "The sum is 19."),
    "phi3": ([{"role": "user", "content": "What is 12+7?"}], {}, "The sum is 19."),
}
DECODE_STEPS = 6


def make_logits_golden(family: str, model_dir: Path, golden_dir: Path) -> dict:
    hf_tok = AutoTokenizer.from_pretrained(str(model_dir))
    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    messages, kwargs, continuation = GOLDEN_CHATS[family]
    text = hf_tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True,
                                      **kwargs)
    prompt_ids = tok.encode(text, add_special_tokens=False).ids
    decode_ids = tok.encode(continuation, add_special_tokens=False).ids[:DECODE_STEPS]
    if not 12 <= len(prompt_ids) <= 20 or len(decode_ids) != DECODE_STEPS:
        sys.exit(f"{family}: prompt has {len(prompt_ids)} ids, decode {len(decode_ids)}")

    model = load_model(model_dir)
    with torch.no_grad():
        out = model(input_ids=torch.tensor([prompt_ids]), use_cache=True)
        rows = [out.logits[0]]
        past = out.cache
        for token in decode_ids:
            out = model(input_ids=torch.tensor([[token]]), cache=past, use_cache=True)
            past = out.cache
            rows.append(out.logits[0, -1:])
        logits = torch.cat(rows, dim=0)
        # One forward over everything must agree with the cached decode (sanity of the golden).
        full = model(input_ids=torch.tensor([prompt_ids + decode_ids])).logits[0]
    diff = (full - logits).abs().max().item()
    if diff > 1e-4:
        sys.exit(f"{family}: cached decode differs from full forward by {diff}")

    array = logits.numpy().astype("<f4")
    spread = float(array.std())
    if spread < 0.5:
        sys.exit(f"{family}: logits too flat (std {spread})")
    name = f"{family}_logits.f32"
    array.tofile(golden_dir / name)
    meta = {
        "family": family,
        "model_dir": family,
        "chat": {"messages": messages, "add_generation_prompt": True, **kwargs},
        "prompt_text": text,
        "prompt_ids": prompt_ids,
        "decode_text": continuation,
        "decode_ids": decode_ids,
        "rows": int(array.shape[0]),
        "vocab": int(array.shape[1]),
        "logits_file": name,
        "logits_dtype": "float32 little-endian, row-major [rows, vocab]",
        "row_order": "row i < len(prompt_ids): logits after prompt position i (one forward over "
                     "the prompt); row len(prompt_ids)+k: logits after feeding decode_ids[k] at "
                     "position len(prompt_ids)+k with the KV cache",
        "argmax": [int(i) for i in array.argmax(axis=1)],
        # Smallest gap between the best and second-best logit of any row: how much numerical
        # error an argmax comparison can absorb.
        "min_top2_margin": float(np.min(np.diff(np.sort(array, axis=1)[:, -2:], axis=1))),
        "max_abs_diff_full_vs_cached": diff,
        "attn_implementation": "eager",
        "versions": versions(),
    }
    write_json(golden_dir / f"{family}.json", meta)
    return meta


def make_tokenizer_golden(tok_family: str, model_dir: Path, golden_dir: Path) -> None:
    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    hf_tok = AutoTokenizer.from_pretrained(str(model_dir))
    cases = []
    for text in TRICKY_STRINGS:
        enc = tok.encode(text, add_special_tokens=False)
        hf_ids = hf_tok.encode(text, add_special_tokens=False)
        if hf_ids != enc.ids:
            sys.exit(f"{tok_family}: transformers and tokenizers disagree on {text!r}")
        cases.append({
            "text": text,
            "ids": enc.ids,
            "tokens": enc.tokens,
            "decoded": tok.decode(enc.ids, skip_special_tokens=False),
        })
    with_bos = tok.encode("Hello world", add_special_tokens=True).ids
    write_json(golden_dir / f"tokenizer_{tok_family}.json", {
        "tokenizer": f"{model_dir.name}/tokenizer.json",
        "vocab_size": tok.get_vocab_size(with_added_tokens=True),
        "encode_options": {"add_special_tokens": False},
        "decode_options": {"skip_special_tokens": False},
        "add_special_tokens_example": {"text": "Hello world", "ids": with_bos},
        "versions": versions(),
        "cases": cases,
    })


CHAT_CASES = [
    ("single_user", [{"role": "user", "content": "What is 12+7?"}], {}),
    ("system_user", [{"role": "system", "content": "You are a careful math tutor."},
                     {"role": "user", "content": "Solve 3x + 5 = 20."}], {}),
    ("user_assistant_user", [
        {"role": "user", "content": "Hi!"},
        {"role": "assistant", "content": "Hello! How can I help?"},
        {"role": "user", "content": "Count to three."}], {}),
    ("whitespace_content", [{"role": "user", "content": "  padded question \n\n"}], {}),
    ("unicode_content", [{"role": "user", "content": "你好 👋🏽 café"}], {}),
    ("no_generation_prompt", [{"role": "user", "content": "Hi!"},
                              {"role": "assistant", "content": "Hello!"}],
     {"add_generation_prompt": False}),
]
QWEN3_EXTRA_CASES = [
    ("single_user_thinking_off", [{"role": "user", "content": "What is 12+7?"}],
     {"enable_thinking": False}),
    ("single_user_thinking_on", [{"role": "user", "content": "What is 12+7?"}],
     {"enable_thinking": True}),
    ("multi_turn_thinking_off", [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi!"},
        {"role": "assistant", "content": "Hello! How can I help?"},
        {"role": "user", "content": "Count to three."}], {"enable_thinking": False}),
    ("assistant_reasoning_is_stripped", [
        {"role": "user", "content": "What is 12+7?"},
        {"role": "assistant", "content": "<think>\n12 + 7 = 19.\n</think>\n\nThe sum is 19."},
        {"role": "user", "content": "And 12+8?"}], {}),
]


def make_chat_golden(family: str, model_dir: Path, golden_dir: Path) -> None:
    hf_tok = AutoTokenizer.from_pretrained(str(model_dir))
    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    cases = []
    for name, messages, extra in CHAT_CASES + (QWEN3_EXTRA_CASES if family == "qwen3" else []):
        kwargs = {"add_generation_prompt": True, **extra}
        rendered = hf_tok.apply_chat_template(messages, tokenize=False, **kwargs)
        cases.append({
            "name": name,
            "messages": messages,
            "kwargs": kwargs,
            "rendered": rendered,
            "ids": tok.encode(rendered, add_special_tokens=False).ids,
        })
    write_json(golden_dir / f"chat_{family}.json", {
        "template_from": f"{model_dir.name}/tokenizer_config.json",
        "render": "transformers apply_chat_template(messages, tokenize=False, **kwargs)",
        "ids_from": "tokenizers encode(rendered, add_special_tokens=False)",
        "versions": versions(),
        "cases": cases,
    })


# ---------------------------------------------------------------------------------------------


def check_loads(model_dir: Path, family: str, expected_cls: str) -> None:
    """Everything a loader reads must round-trip through transformers' own readers."""
    model = load_model(model_dir)
    if type(model).__name__ != expected_cls:
        sys.exit(f"{family}: loaded as {type(model).__name__}")
    if model.config.vocab_size != len(AutoTokenizer.from_pretrained(str(model_dir))):
        sys.exit(f"{family}: model vocab differs from tokenizer size")
    transformers.GenerationConfig.from_pretrained(str(model_dir))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "tests" / "fixtures",
                        help="fixtures folder (default: tests/fixtures)")
    args = parser.parse_args()

    torch.set_num_threads(1)  # one thread: bit-identical reruns, and the build machine is shared
    torch.use_deterministic_algorithms(True)
    transformers.logging.set_verbosity_error()
    out: Path = args.out
    golden_dir = out / "golden"
    families = ["qwen3", "qwen2", "llama", "phi3"]
    for d in [golden_dir] + [out / f for f in families]:
        if d.exists():
            shutil.rmtree(d)
        d.mkdir(parents=True)

    toks = {name: train_tokenizer(**spec["train"]) for name, spec in FAMILY_TOKENIZERS.items()}
    sizes = {name: t.get_vocab_size(with_added_tokens=True) for name, t in toks.items()}
    ids = {name: {c: t.token_to_id(c) for c, _ in FAMILY_TOKENIZERS[name]["train"]["added"]}
           for name, t in toks.items()}
    specs = model_specs(sizes, ids)

    for index, family in enumerate(families):
        model_dir = out / family
        build_model(family, specs[family], model_dir, SEED + index)
        save_tokenizer_dir(toks[MODEL_TOKENIZER[family]], family, model_dir)
        check_loads(model_dir, family, specs[family]["cls"])
        meta = make_logits_golden(family, model_dir, golden_dir)
        make_chat_golden(family, model_dir, golden_dir)
        print(f"{family}: vocab {sizes[MODEL_TOKENIZER[family]]}, prompt {len(meta['prompt_ids'])} "
              f"ids, {meta['rows']} logit rows")
    for tok_family in ("qwen3", "llama", "phi3"):
        make_tokenizer_golden(tok_family, out / tok_family, golden_dir)

    for path in out.rglob("*.safetensors"):
        path.chmod(0o644)  # transformers writes shards 0600
    total = sum(p.stat().st_size for p in out.rglob("*") if p.is_file()
                and not p.relative_to(out).parts[0].startswith("gguf"))
    print(f"fixtures: {total / 1e6:.2f} MB (excluding gguf*)")


if __name__ == "__main__":
    main()
