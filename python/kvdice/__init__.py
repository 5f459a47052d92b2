"""kvdice: LLM inference under a bounded KV-cache budget, from Python.

    import kvdice
    llm = kvdice.LLM("tests/fixtures/qwen3", backend="cpu")
    kv = kvdice.KVConfig("random_pp", budget=32, window=16)
    for r in llm.generate(["Hello", "Bonjour"], kv=kv, max_new_tokens=40):
        print(r.id, r.finish, r.stats["eviction_rounds"], r.text)

Every engine error (bad model, policy, budget, sampling value) is raised as :class:`kvdice.Error`, a
``ValueError`` whose message is the one the ``kvdice`` command line prints.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Iterator, Mapping, Optional, Sequence, Union

import numpy as np

from . import _kvdice
from . import eval, stats  # noqa: A004 (kvdice.eval is the evaluation module)
from ._kvdice import Error
from ._paths import kvdice_home

__all__ = [
    "Error",
    "KVConfig",
    "SamplingParams",
    "Result",
    "Retention",
    "TokenEvent",
    "LLM",
    "policy_keep",
    "policy_names",
    "describe_policy",
    "eval",
    "stats",
]

TokenEvent = _kvdice.TokenEvent


@dataclass(frozen=True)
class KVConfig:
    """A request's KV-cache policy and budget.

    policy: a policy name (``kvdice.policy_names()``), "full" to keep everything.
    budget: T, resident slots per (layer, KV head) right after a round (0 only with "full").
    window: r, the newest slots that are never candidates; rounds fire every r decoded tokens.
    options: the policy's options, as ``name:key=value,...`` on the command line (docs/policies.md).
    long_prompt: "warn" (the reference's behaviour) or "error" when the prompt does not fit T - r.
    """

    policy: str = "full"
    budget: int = 0
    window: int = 64
    options: Mapping[str, object] = field(default_factory=dict)
    long_prompt: str = "warn"

    @property
    def spec(self) -> str:
        """The policy as the engine reads it: ``name`` or ``name:key=value,...``."""
        if not self.options:
            return self.policy
        return self.policy + ":" + ",".join(f"{k}={v}" for k, v in self.options.items())


@dataclass(frozen=True)
class SamplingParams:
    """Sampling: temperature 0 is greedy; then top-k, then top-p (the HF order). ``seed`` keys the
    sequence's own sampling stream, so its tokens do not depend on the rest of the batch."""

    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int = 0


@dataclass
class Retention:
    """What each eviction round kept: ``kept_positions[round, layer, kv_head, :]`` holds the T
    absolute positions kept, ascending; ``round`` and ``at_token`` say when each round fired."""

    kept_positions: np.ndarray  # int32 [rounds, layers, kv_heads, T]
    round: np.ndarray  # uint32 [rounds]
    at_token: np.ndarray  # int64 [rounds]


@dataclass
class Result:
    """One finished sequence. ``finish`` is "stop", "length" or "cancelled"; ``stats`` holds the
    numbers ``kvdice generate --json`` prints (tokens, seconds, eviction rounds, resident and peak
    slots and bytes against full attention)."""

    id: int
    index: int  # position in the prompts given to generate()
    text: str
    finish: str
    prompt_ids: np.ndarray
    token_ids: np.ndarray
    stats: dict
    kv: KVConfig
    retention: Optional[Retention] = None
    forced_logprobs: Optional[np.ndarray] = None  # teacher forcing (LLM.score) only
    forced_is_argmax: Optional[np.ndarray] = None

    def record(self) -> dict:
        """A flat dict (pandas.DataFrame(records) friendly): ids, text, finish, policy and stats."""
        flat = {
            "id": self.id,
            "index": self.index,
            "text": self.text,
            "finish": self.finish,
            "policy": self.kv.spec,
            "budget": self.kv.budget,
            "window": self.kv.window,
        }
        flat.update(self.stats)
        return flat


PerRequest = Union[KVConfig, Sequence[KVConfig], None]


def _per_request(value, n: int, name: str, default):
    if value is None:
        return [default] * n
    if isinstance(value, (list, tuple)):
        if len(value) != n:
            raise Error(f"{name}: {len(value)} given for {n} prompts (give one, or one per prompt)")
        return list(value)
    return [value] * n


class LLM:
    """A model loaded once on a backend, generating batches of requests.

    model: an HF checkpoint directory, a .gguf file or a known model name (pulled into $KVDICE_HOME).
    backend: "cpu", "cuda" or "auto" (CUDA when a GPU is visible). threads: CPU threads (0 = all).
    max_batch: sequences decoding at once; max_context: longest KV reservation of one sequence in
    slots (0 = the model's maximum position); kv_pool_bytes: KV pool size (0 = sized by the backend);
    seed: keys the eviction streams.
    """

    def __init__(
        self,
        model: Union[str, os.PathLike],
        backend: str = "auto",
        *,
        threads: int = 0,
        device: int = 0,
        max_batch: int = 64,
        max_context: int = 0,
        kv_pool_bytes: int = 0,
        seed: int = 0,
    ) -> None:
        if backend not in ("cpu", "cuda", "auto"):
            raise Error(f"backend must be 'cpu', 'cuda' or 'auto', got {backend!r}")
        self._engine = _kvdice.Engine(
            os.fspath(model), kvdice_home(), backend, threads, device, max_batch, max_context, kv_pool_bytes, seed
        )
        self.info: dict = self._engine.describe()

    def encode(
        self,
        text: str,
        *,
        chat: bool = False,
        system: str = "",
        thinking: bool = True,
        chat_template: str = "",
        special_tokens: bool = True,
        continuation: bool = False,
    ) -> list:
        """Token ids of ``text``: a raw prompt (BOS in front where the model wants one; special-token
        text parsed unless special_tokens=False), with chat=True one user message in the model's chat
        template, or with continuation=True text that follows a prompt (no BOS)."""
        return self._engine.encode(text, chat, system, thinking, chat_template, special_tokens, continuation)

    def decode(self, ids: Sequence[int]) -> str:
        """The text of token ids (bytes that are not valid UTF-8, such as a cut character, become U+FFFD)."""
        return self._engine.decode([int(i) for i in ids])

    def _requests(self, prompts, kv, sampling, max_new_tokens, ignore_eos, retention_log, chat, system, thinking,
                  stream_ids=None):
        if isinstance(prompts, str) or (len(prompts) and isinstance(prompts[0], (int, np.integer))):
            prompts = [prompts]  # one prompt: text, or token ids (a list or a 1-D array)
        prompts = list(prompts)
        if not prompts:
            raise Error("no prompt: generate needs at least one")
        kvs = _per_request(kv, len(prompts), "kv", KVConfig())
        samplings = _per_request(sampling, len(prompts), "sampling", SamplingParams())
        if stream_ids is not None and len(stream_ids) != len(prompts):
            raise Error(f"stream_ids: {len(stream_ids)} given for {len(prompts)} prompts (give one per prompt)")
        requests = []
        for i, prompt in enumerate(prompts):
            r = _kvdice.Request()
            if isinstance(prompt, str):
                r.prompt = self.encode(prompt, chat=chat, system=system, thinking=thinking)
            else:
                r.prompt = [int(t) for t in prompt]
            r.max_new_tokens = max_new_tokens
            k, s = kvs[i], samplings[i]
            r.policy, r.budget, r.window, r.long_prompt = k.spec, k.budget, k.window, k.long_prompt
            r.temperature, r.top_p, r.top_k, r.seed = s.temperature, s.top_p, s.top_k, s.seed
            r.ignore_eos = ignore_eos
            r.retention_log = retention_log
            if stream_ids is not None:
                r.stream_id = int(stream_ids[i])
            requests.append(r)
        return requests, kvs

    def _run(self, requests, kvs) -> Iterator[Union[TokenEvent, Result]]:
        ids = self._engine.submit(requests)
        index = {rid: i for i, rid in enumerate(ids)}
        done = False
        try:
            while not self._engine.idle():
                # One step without the GIL; a Ctrl-C arrives here, between steps.
                yield from self._engine.step()
                for raw in self._engine.take_finished():
                    yield self._result(raw, index, kvs)
            done = True
        finally:
            if not done:  # interrupted, or the caller stopped iterating: free the engine's sequences
                self._engine.cancel_all()

    @staticmethod
    def _result(raw: dict, index: dict, kvs) -> Result:
        i = index[raw["id"]]
        retention = Retention(**raw["retention"]) if "retention" in raw else None
        return Result(
            id=raw["id"],
            index=i,
            text=raw["text"],
            finish=raw["finish"],
            prompt_ids=raw["prompt_ids"],
            token_ids=raw["token_ids"],
            stats=raw["stats"],
            kv=kvs[i],
            retention=retention,
            forced_logprobs=raw.get("forced_logprobs"),
            forced_is_argmax=raw.get("forced_is_argmax"),
        )

    def generate(
        self,
        prompts: Union[str, Sequence[str], Sequence[Sequence[int]]],
        kv: PerRequest = None,
        sampling: Union[SamplingParams, Sequence[SamplingParams], None] = None,
        *,
        max_new_tokens: int = 256,
        ignore_eos: bool = False,
        retention_log: bool = False,
        chat: bool = False,
        system: str = "",
        thinking: bool = True,
        stream_ids: Optional[Sequence[int]] = None,
    ) -> list:
        """Generates for every prompt as one batch and returns a Result per prompt, in prompt order.

        prompts: text (raw, or with chat=True wrapped in the chat template) or token-id lists.
        kv / sampling: one for all prompts or one per prompt (per-request policy and budget).
        retention_log: keep each round's kept positions (Result.retention) as NumPy arrays.
        stream_ids: one per prompt, keys its eviction and sampling draws (default: the engine's id for
        it, Result.id); equal ids and seeds reproduce a sequence exactly in another batch or call.
        The engine runs without the GIL; Ctrl-C cancels the batch and raises KeyboardInterrupt.
        """
        requests, kvs = self._requests(prompts, kv, sampling, max_new_tokens, ignore_eos, retention_log,
                                       chat, system, thinking, stream_ids)
        results = [item for item in self._run(requests, kvs) if isinstance(item, Result)]
        return sorted(results, key=lambda r: r.index)

    def stream(
        self,
        prompts: Union[str, Sequence[str], Sequence[Sequence[int]]],
        kv: PerRequest = None,
        sampling: Union[SamplingParams, Sequence[SamplingParams], None] = None,
        *,
        max_new_tokens: int = 256,
        ignore_eos: bool = False,
        retention_log: bool = False,
        chat: bool = False,
        system: str = "",
        thinking: bool = True,
        stream_ids: Optional[Sequence[int]] = None,
    ) -> Iterator[Union[TokenEvent, Result]]:
        """Like generate(), as an iterator: a TokenEvent (id, token, text, finished) per sampled token,
        and each sequence's Result as it finishes. Closing the iterator early cancels the rest."""
        requests, kvs = self._requests(prompts, kv, sampling, max_new_tokens, ignore_eos, retention_log,
                                       chat, system, thinking, stream_ids)
        return self._run(requests, kvs)

    def score(
        self,
        prompt: Union[str, Sequence[int]],
        continuation: Union[str, Sequence[int]],
        kv: Optional[KVConfig] = None,
        *,
        chat: bool = False,
        stream_id: Optional[int] = None,
    ) -> Result:
        """Teacher forcing: feeds ``continuation`` after ``prompt`` under ``kv`` and returns a Result
        whose forced_logprobs (float32) and forced_is_argmax (uint8) hold, per continuation token,
        log p(token) and whether it was the argmax, with evictions happening as they would.
        stream_id: the generated sequence's Result.id to replay its evictions exactly."""
        requests, kvs = self._requests([prompt], kv, None, 1, True, False, chat, "", True,
                                       None if stream_id is None else [stream_id])
        if isinstance(continuation, str):
            forced = self.encode(continuation, continuation=True)
        else:
            forced = [int(t) for t in continuation]
        if not forced:
            raise Error("score: the continuation has no tokens")
        requests[0].forced_tokens = forced
        requests[0].max_new_tokens = len(forced)
        return self._collect(requests, kvs)[0]

    def _collect(self, requests, kvs) -> list:
        return sorted((i for i in self._run(requests, kvs) if isinstance(i, Result)), key=lambda r: r.index)


def policy_keep(
    policy: Union[str, KVConfig],
    positions,
    keep: int,
    *,
    n_protected: int = 0,
    keys=None,
    window_queries=None,
    value_range=None,
    attention_mass=None,
    round_score=None,
    seed: int = 0,
    sequence_id: int = 0,
    round: int = 0,
    budget: int = 0,
    appended: Optional[int] = None,
    layer: int = 0,
    kv_head: int = 0,
) -> np.ndarray:
    """A policy's keep rule for one (layer, KV head) of one round, outside the engine.

    positions: int32 [n] absolute positions of the candidate slots (every resident slot but the
    newest r). keep: how many to keep (T - r). n_protected: slots [0, n_protected) hold the prompt.
    Scoring policies also read keys [n, head_dim] with window_queries [group, n_queries, head_dim]
    (post-RoPE, newest first), value_range [n] or attention_mass [n]. seed, sequence_id, round,
    layer and kv_head key the random policies' draws exactly as in the engine. Returns bool [n].
    """
    spec = policy.spec if isinstance(policy, KVConfig) else policy

    def f32(a):
        return None if a is None else np.ascontiguousarray(a, dtype=np.float32)

    return _kvdice.policy_keep(
        spec,
        np.ascontiguousarray(positions, dtype=np.int32),
        keep,
        n_protected,
        f32(keys),
        f32(window_queries),
        f32(value_range),
        f32(attention_mass),
        None if round_score is None else np.ascontiguousarray(round_score, dtype=np.float64),
        seed,
        sequence_id,
        round,
        budget,
        appended,
        layer,
        kv_head,
    )


def policy_names() -> list:
    """The names of every registered policy."""
    return _kvdice.policy_names()


def describe_policy(spec: str) -> str:
    """``name:key=value,...`` with every option in effect (the spec to paste back for the same run)."""
    return _kvdice.describe_policy(spec)
