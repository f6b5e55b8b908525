"""vLLM's OpenAI-compatible server as a source of StepEvents, and the embedded pair's servers.

A run is one streamed `/v1/completions` request: the prompt goes as token ids (templated by the
project's tokenizer, so the server sees exactly the prompt our engine sees), `return_token_ids`
makes every chunk carry the ids of its new tokens, and `stream_options.include_usage` adds a last
chunk with the token count and, on a server started with `--per-request-spec-decode-metrics
detailed`, `metrics.speculative_decoding.per_step_accepted` / `per_step_drafted`: how many drafts
each verify step proposed and kept, in order. Those counts arrive only with that last chunk, so the
text streams as it comes (`PendingText`) and the steps are assigned when the stream ends
(`split_steps`): the first token is its own step (the prompt pass), then each verify step emits its
accepted drafts plus the target's own token, the last step cut where the run ended.

What vLLM does not send stays None: the rejected drafts' ids and text (only their count, as
`unseen_rejected`), p_target and p_draft, logit margins, and the draft and verify seconds apart.
elapsed_s is the client's clock when a step's last token arrived, from the moment the request was
sent (prompt included).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Iterator

from specdec.core.events import FINISH_EOS, FINISH_LENGTH, StepEvent
from specdec.core.text import TextTracker
from specdec.engines.base import VLLM, Capabilities, EngineError, StepAssembler
from specdec.engines.server import Progress, ServerProcess, free_port
from specdec.engines.stream import get_json, post_stream
from specdec.models import machine

K = 5  # draft tokens per step the speculative server is started with (num_speculative_tokens)
CONTEXT = 2048  # --max-model-len: prompts and outputs here are a few hundred tokens
KV_CACHE_GB = 1  # VLLM_CPU_KVCACHE_SPACE (whole GB): 2048 positions of both models need under 0.1 GB
START_TIMEOUT_S = 600.0  # 2 to 3.5 minutes on a quiet AVX-512 machine; more on a busy AVX2 one
PLAIN, SPECULATIVE = "plain", "speculative"
SPEC_FLAGS = "--speculative-config '{\"method\": \"draft_model\", \"model\": DRAFT_DIR, \"num_speculative_tokens\": 5}' --per-request-spec-decode-metrics detailed"


@dataclass(frozen=True)
class PendingText:
    """Tokens that arrived before their steps are known (vLLM reports steps only at the end):
    enough to show the text as it streams, uncoloured."""

    ids: tuple[int, ...]  # the new tokens of this chunk
    text: tuple[str, ...]  # display text of each (same pieces the step events will carry)
    total_tokens: int  # tokens received so far, these included
    elapsed_s: float  # client's clock at arrival, from sending the request


def split_steps(n_tokens: int, per_step_accepted: list[int], per_step_drafted: list[int]) -> list[tuple[int, int, int]]:
    """(tokens emitted, drafted, accepted) of each target pass of a vLLM run of `n_tokens` tokens.

    The first token comes from the prompt pass (nothing drafted); each verify step then emits its
    accepted drafts and one token of the target's own: accepted + 1. The run ends inside the last
    step when it reaches max_tokens or an end-of-text token; vLLM does not take the cut tokens off
    that step's counts, so the last step keeps its counts and emits only what fits.
    Raises ValueError when the counts do not cover exactly `n_tokens` tokens."""
    if len(per_step_accepted) != len(per_step_drafted):
        raise ValueError(f"{len(per_step_accepted)} accepted counts for {len(per_step_drafted)} drafted counts")
    if n_tokens < 1:
        raise ValueError(f"a run emits at least one token, got {n_tokens}")
    steps = [(1, 0, 0)]  # the prompt pass
    total = 1
    for i, (accepted, drafted) in enumerate(zip(per_step_accepted, per_step_drafted)):
        if not 0 <= accepted <= drafted:
            raise ValueError(f"verify step {i}: {accepted} accepted of {drafted} drafted")
        if total >= n_tokens:
            raise ValueError(f"{len(per_step_accepted)} verify steps for {n_tokens} tokens: the run ended at step {i}")
        size = min(accepted + 1, n_tokens - total)
        steps.append((size, drafted, accepted))
        total += size
    if total != n_tokens:
        raise ValueError(f"the steps cover {total} of {n_tokens} tokens")
    return steps


def check_server(base_url: str, timeout: float = 5.0) -> str:
    """The model name a running vLLM server serves; EngineError (one line) when it cannot be reached
    or is not a vLLM server (GET /version names vLLM's version; /v1/models its model)."""
    version = get_json(VLLM, base_url, "/version", timeout)
    if "version" not in version:
        raise EngineError(f"{VLLM} at {base_url} answered something else on /version: not a vLLM server")
    models = get_json(VLLM, base_url, "/v1/models", timeout).get("data")
    if not isinstance(models, list) or not models or "id" not in models[0]:
        raise EngineError(f"{VLLM} at {base_url} answered something else on /v1/models: no model listed")
    return models[0]["id"]


class VllmSource:
    """Steps of one vLLM server, from its stream (see the module's docstring).

    `speculative`: the server must report its steps (started with --speculative-config and
    --per-request-spec-decode-metrics detailed); one that does not fails with one line saying so.
    Plain (False): the server must not speculate; one that does is no plain baseline and fails too."""

    engine = VLLM
    # Greedy runs at the K the server was started with; counts of drafts, no p or q, no run held between calls.
    capabilities = Capabilities(in_process=False, follows_settings=False, steps_through=False, sweeps_k=False,
                                reports_p_q=False, lossy_lane=False, own_cost_table=False, starts_embedded=False, side_by_side=False)

    def __init__(self, base_url: str, tokenizer, *, speculative: bool, timeout: float = 300.0, model: str | None = None):
        self.base_url = base_url.rstrip("/")
        self.tokenizer = tokenizer
        self.speculative = speculative
        self.timeout = timeout  # seconds to wait for each chunk (a CPU server's prompt pass can take a while)
        self.model = model  # the served model's name (check_server); asked once when not given
        self.final: dict | None = None  # the last chunk of the latest run (usage and metrics)

    def request(self, prompt_ids: list[int], max_new_tokens: int) -> dict:
        return {
            "model": self.model, "prompt": list(prompt_ids), "max_tokens": max_new_tokens, "stream": True,
            "stream_options": {"include_usage": True},  # the last chunk: token count and the step counts
            "return_token_ids": True,  # each chunk's token ids, so the text is cut as our engine cuts it
            "temperature": 0.0,  # greedy, like the page's exactness check
        }

    def iter_events(self, prompt_ids: list[int], max_new_tokens: int) -> Iterator[StepEvent]:
        """The run's StepEvents, all when the stream ends (StepSource)."""
        for item in self.iter_updates(prompt_ids, max_new_tokens):
            if isinstance(item, StepEvent):
                yield item

    def iter_updates(self, prompt_ids: list[int], max_new_tokens: int) -> Iterator[PendingText | StepEvent]:
        """PendingText as the tokens arrive, then every StepEvent of the run once its counts arrive."""
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be at least 1, got {max_new_tokens}")
        where = f"{VLLM} at {self.base_url}"
        if self.model is None:
            self.model = check_server(self.base_url)
        self.final = None
        shown = TextTracker(self.tokenizer, prompt_ids)
        ids: list[int] = []
        arrived: list[float] = []  # client's clock when each token arrived
        finish_reason = None
        for elapsed, chunk in post_stream(self.engine, self.base_url, "/v1/completions", self.request(prompt_ids, max_new_tokens), self.timeout):
            choices = chunk.get("choices")
            if not isinstance(choices, list):
                raise EngineError(f"{where} answered something else: a stream chunk without choices")
            if not choices:  # the usage chunk, last
                self.final = chunk
                continue
            new = choices[0].get("token_ids")
            if new is None:
                raise EngineError(f"{where} sends no token ids (return_token_ids): this vLLM is too old for step colours")
            finish_reason = choices[0].get("finish_reason") or finish_reason
            if new:
                ids += new
                arrived += [elapsed] * len(new)
                yield PendingText(tuple(new), tuple(shown.commit(new)), len(ids), elapsed)
        yield from self._steps(where, prompt_ids, ids, arrived, finish_reason)

    def _steps(self, where: str, prompt_ids, ids: list[int], arrived: list[float], finish_reason) -> Iterator[StepEvent]:
        if self.final is None or not isinstance(self.final.get("usage"), dict):
            raise EngineError(f"{where} ended its stream without the usage chunk (stream_options.include_usage)")
        counted = self.final["usage"].get("completion_tokens")
        if counted != len(ids):
            raise EngineError(f"{where} sent {len(ids)} token ids but counts {counted} tokens")
        if not ids:
            return
        spec = (self.final.get("metrics") or {}).get("speculative_decoding")
        if self.speculative and spec is None:
            raise EngineError(f"{where} has speculation off: its answer carries no metrics.speculative_decoding "
                              f"(start it with {SPEC_FLAGS})")
        if not self.speculative and spec is not None:
            raise EngineError(f"{where} speculates, so it is no plain baseline: start the plain lane's server without --speculative-config")
        if spec is None:
            accepted, drafted = [0] * (len(ids) - 1), [0] * (len(ids) - 1)  # one token per target pass
        elif spec.get("num_spec_steps") and spec.get("per_step_accepted") is None:
            raise EngineError(f"{where} reports only totals of its steps: start it with --per-request-spec-decode-metrics detailed")
        else:  # no per-step lists when no verify step ran (a one-token run)
            accepted, drafted = spec.get("per_step_accepted") or [], spec.get("per_step_drafted") or []
        try:
            sizes = split_steps(len(ids), accepted, drafted)
        except ValueError as err:
            raise EngineError(f"{where}: its step counts do not fit its {len(ids)} tokens ({err})") from None
        finish = FINISH_LENGTH if finish_reason == "length" else FINISH_EOS if finish_reason == "stop" else None
        steps = StepAssembler(self.engine, self.tokenizer, prompt_ids)
        start = 0
        for i, (size, n_drafted, n_accepted) in enumerate(sizes):
            end = start + size
            yield steps.event(ids[start:end], n_drafted, n_accepted, arrived[end - 1], finish if i == len(sizes) - 1 else None)
            start = end


# --- the embedded pair's servers ------------------------------------------------------------------


def server_argv(python, target_dir, draft_dir=None, *, port: int, k: int = K, dtype: str = "auto", context: int = CONTEXT,
                eager: bool = True) -> list[str]:
    """vLLM's command line: plain with the target alone; speculative with the draft model, reporting
    each request's steps. The module entry point: the environment's `vllm` command fails on the
    package's name (vllm-cpu). `eager`: skip torch.compile, which on 2 busy cores took over five
    minutes for the pair (a server that starts in a test's time matters more here than its speed)."""
    argv = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(target_dir),
            "--dtype", dtype, "--max-model-len", str(context), "--host", "127.0.0.1", "--port", str(port)]
    if eager:
        argv.append("--enforce-eager")
    if draft_dir is not None:
        config = {"method": "draft_model", "model": str(draft_dir), "num_speculative_tokens": k}
        argv += ["--speculative-config", json.dumps(config), "--per-request-spec-decode-metrics", "detailed"]
    return argv


def tree_rss_bytes(pid: int) -> int:
    """Resident memory of a process and all its descendants (vLLM's API server starts an engine
    process, which starts a worker: the models live in the worker). Linux /proc; 0 elsewhere."""
    from pathlib import Path

    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            fields = dict(line.split(":", 1) for line in status.read_text().splitlines() if ":" in line)
        except OSError:
            continue
        child = int(fields["Pid"])
        children.setdefault(int(fields["PPid"]), []).append(child)
        rss[child] = int(fields.get("VmRSS", "0 kB").split()[0]) * 1024
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        total += rss.get(p, 0)
        todo += children.get(p, [])
    return total


def server_env(threads: int | None = None) -> dict:
    """Environment of a CPU server: a small KV cache, vLLM's compile cache beside its environment,
    our thread count without pinning (the machine is shared), no usage report over the network."""
    from specdec.engines.vllm_env import vllm_cache_dir

    threads = threads or machine.cores() or 1
    return {
        "VLLM_CPU_KVCACHE_SPACE": str(KV_CACHE_GB),
        "VLLM_CACHE_ROOT": str(vllm_cache_dir()),
        # "auto" binds one thread per core and keeps one core for the scheduler: 1 thread on 2 cores.
        "VLLM_CPU_OMP_THREADS_BIND": "nobind",
        "OMP_NUM_THREADS": str(threads),
        "VLLM_NO_USAGE_STATS": "1",
        "HF_HUB_OFFLINE": "1",
    }


def default_dtype() -> str:
    """The project's automatic precision, in vLLM's words: bfloat16 where the CPU runs it natively
    (AVX-512 BF16 or AMX), float32 otherwise (on AVX2 vLLM's bf16 matmuls fall back from oneDNN to
    emulated torch kernels: "Failed to create oneDNN linear, fallback to torch linear")."""
    if machine.cpuinfo() is None:
        return "auto"  # not Linux: vLLM decides
    return "bfloat16" if set(machine.cpu_flags()) & {"avx512_bf16", "amx_bf16"} else "float32"


def start_server(lane: str, *, k: int = K, dtype: str | None = None, port: int | None = None, threads: int | None = None,
                 eager: bool = True, progress: Progress | None = None) -> ServerProcess:
    """Start vLLM on the embedded pair's converted folders (`make vllm` sets the environment up)
    and wait until it answers: minutes. `dtype`: vLLM's --dtype (default: default_dtype()).
    The caller stops it (ServerProcess.stop, or `with`)."""
    from specdec.models.bundle import prepare_bundle
    from specdec.engines.vllm_env import require_ready

    if lane not in (PLAIN, SPECULATIVE):
        raise ValueError(f"lane must be one of {PLAIN!r}, {SPECULATIVE!r}, got {lane!r}")
    python = require_ready()
    target_dir, draft_dir = prepare_bundle()
    port = port or free_port()
    argv = server_argv(python, target_dir, draft_dir if lane == SPECULATIVE else None, port=port, k=k,
                       dtype=dtype or default_dtype(), eager=eager)
    return ServerProcess(f"vllm {lane}", argv, port, health_path="/version", healthy=lambda answer: "version" in answer,
                         timeout_s=START_TIMEOUT_S, env=server_env(threads), progress=progress).start()
