"""The head as a drafter (specdec/core/proposers/head.py): greedy output equals plain decoding on
both runners, the head reads the target's real features of the kept positions, and sampling with
its q passes the engine's chi-square test.

The head is tiny-random's own: fitted in the test (a few hundred Adam steps on the target's greedy
output of the prompt, so its drafts are often accepted and both halves of the rule run), stored as
`head train` stores one (int8 rows, keyed by the target) where find_head looks first.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F

from tests.support.runs import run_checked, tokens
from specdec.core.config import GenerationConfig
from specdec.core.events import EOS_ACCEPTED
from specdec.kernels import head_offer
from specdec.kernels.head_store import save_head
from specdec.measure.passcost import DraftCost
from specdec.train.recipe import Recipe
from specdec.train.trainer import new_head
from specdec.train.unroll import unroll

PROMPT = "def add(a, b):\n    return a + b\n\ndef add(a, b):"
NEW = 48


@pytest.fixture(scope="module")
def plain(tiny_pair):
    return tokens(run_checked(tiny_pair, PROMPT, GenerationConfig(drafter="none", max_new_tokens=NEW)))


def fitted_head(pair, seq: list[int], steps: int = 300):
    """A head for tiny-random fitted to predict each next token of `seq` from the target's features (depth 2)."""
    torch.manual_seed(0)
    head = new_head(pair.target, Recipe(intermediate=64, init="last-layer"), seed=0)  # a start the fit leaves imperfect: some drafts are turned down
    ids = torch.tensor(seq)
    with torch.no_grad():
        feats = pair.target.model(input_ids=ids[None]).last_hidden_state.detach()  # (1, T, H)
        embeds = pair.target.get_input_embeddings()(ids[None]).detach()  # (1, T, H)
    lm_head = pair.target.get_output_embeddings()
    optimizer = torch.optim.Adam(head.parameters(), lr=3e-3)
    for _ in range(steps):
        loss = 0.0
        for s, out in enumerate(unroll(head, feats, embeds, depth=2), start=1):  # step s from t predicts token t+s+1
            logits = lm_head(out[0, : len(seq) - 1 - s])
            loss = loss + F.cross_entropy(logits, ids[s + 1 :])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return head.eval()


@pytest.fixture(scope="module")
def head_file(tiny_pair, plain, tmp_path_factory):
    """tiny-random's head, written where find_head looks first (this machine's trained head)."""
    prompt_ids = tiny_pair.tokenizer(PROMPT)["input_ids"]
    path = tmp_path_factory.mktemp("heads") / "tiny-random.safetensors"
    save_head(path, fitted_head(tiny_pair, prompt_ids + plain), head_offer.target_key(tiny_pair), {"intermediate": 64}, {})
    return path


@pytest.fixture(autouse=True)
def offered(head_file, monkeypatch):
    monkeypatch.setattr(head_offer, "trained_path", lambda name: head_file)


def head_config(**kw) -> GenerationConfig:
    return GenerationConfig(**{"drafter": "head", "max_new_tokens": NEW, **kw})


@pytest.mark.parametrize("runner", ["eager", "static"])
@pytest.mark.parametrize("k", [1, 3, 6])
def test_greedy_head_speculation_equals_plain(tiny_pair, plain, runner, k):
    events = run_checked(tiny_pair, PROMPT, head_config(k=k, runner=runner))
    assert tokens(events) == plain
    drafted = sum(len(e.drafted) for e in events)
    accepted = sum(e.accepted for e in events)
    assert all(e.drafter == "head" for e in events if e.drafted)
    assert 0 < accepted < drafted or k == 1 and accepted > 0  # the head drafts, and the target keeps some


@pytest.mark.parametrize("runner", ["eager", "static"])
def test_max_new_tokens_cut_inside_a_step(tiny_pair, plain, runner):
    for new in (2, 5, 11):
        events = run_checked(tiny_pair, PROMPT, head_config(k=6, runner=runner, max_new_tokens=new))
        assert tokens(events) == plain[:new]
        assert events[-1].finish == "length"


@pytest.mark.parametrize("runner", ["eager", "static"])
def test_eos_inside_accepted_drafts(tiny_pair, plain, runner):
    # A token the head drafted and the target accepted before the end of the head's draft, first
    # seen in the output there: declared end-of-sequence, the run must stop inside that draft.
    events = run_checked(tiny_pair, PROMPT, head_config(k=6, runner=runner))
    candidates = [e.drafted[i] for e in events for i in range(e.accepted - 1)
                  if plain.index(e.drafted[i]) == e.total_tokens - len(e.emitted) + i]
    assert candidates, "no accepted draft token to turn into EOS"
    pair = replace(tiny_pair, eos_ids=frozenset({candidates[0]}))
    cut = plain.index(candidates[0]) + 1
    spec = run_checked(pair, PROMPT, head_config(k=6, runner=runner))
    assert tokens(spec) == plain[:cut]
    assert spec[-1].finish == "eos" and spec[-1].kind == EOS_ACCEPTED
    assert tokens(run_checked(pair, PROMPT, head_config(drafter="none"))) == plain[:cut]  # plain stops there too


class ScriptedK:
    """A K policy that drafts K = 3 on the steps of `drafting` and nothing on the others."""

    def __init__(self, drafting):
        self.drafting = drafting
        self.step = 0

    def choose(self, drafter="model", unseen=1):
        from specdec.core.k_policy import Choice

        return Choice(3 if self.step in self.drafting else 0)

    def choose_among(self, options):
        return len(options) - 1, self.choose()

    def update(self, choice, drafted, accepted, drafter="model"):
        self.step += 1


@pytest.mark.parametrize("runner", ["eager", "static"])
@pytest.mark.parametrize("drafter,paused", [("head", False), ("auto_head", False), ("head", True)])
def test_the_head_reads_the_targets_features_of_the_kept_positions(tiny_pair, monkeypatch, runner, drafter, paused):
    """Every real pair handed to the head (at start, then what each step kept, prompt lookup's steps
    too) is (f_t, token t+1) with f_t the target's final hidden state at t recomputed from scratch
    over the whole sequence. The pairs of steps the head did not draft are handed over in one pass
    when it next drafts (`paused`: steps 0-3, 6 and 9-11 draft nothing), never on those steps."""
    from specdec.core import decoding
    from specdec.core.head import HeadRun
    from specdec.core.proposers.head import HeadProposer

    handed = []  # (first position, features (m, H), token ids (m,)) of every extend with real features
    extend, propose = HeadRun.extend, HeadProposer.propose
    drafted_at = []  # the sequence's length at each step the head was asked to draft

    def recording(self, features, next_ids):
        handed.append((self.length, features.clone(), next_ids.clone()))
        return extend(self, features, next_ids)

    def proposing(self, run, seq, k):
        drafted_at.append(len(seq))
        return propose(self, run, seq, k)

    monkeypatch.setattr(HeadRun, "extend", recording)
    monkeypatch.setattr(HeadRun, "step", lambda self, feature, token: extend(self, feature, token))  # the head's own: not recorded
    monkeypatch.setattr(HeadProposer, "propose", proposing)
    drafting = {4, 5, 7, 8, *range(12, 24)}
    if paused:
        monkeypatch.setattr(decoding, "make_policy", lambda *a, **kw: ScriptedK(drafting))
    events = run_checked(tiny_pair, PROMPT, head_config(k=3, runner=runner, max_new_tokens=24, drafter=drafter))
    prompt = tiny_pair.tokenizer(PROMPT)["input_ids"]
    seq = prompt + tokens(events)
    with torch.no_grad():
        truth = tiny_pair.target.model(input_ids=torch.tensor(seq)[None]).last_hidden_state[0]  # (T, H)
    caught_up = [n for n in drafted_at if n > len(prompt)]  # a draft right after the prompt has nothing to catch up
    assert len(handed) == 1 + len(caught_up)  # the prompt, then once before each later draft
    covered = []
    for start, features, ids in handed:
        m = ids.shape[0]
        assert ids.tolist() == seq[start + 1 : start + 1 + m]
        torch.testing.assert_close(features, truth[start : start + m], atol=1e-4, rtol=1e-4)
        covered.extend(range(start, start + m))
    assert covered == list(range(drafted_at[-1] - 1))  # every position before the last draft, once, in order
    if paused:
        assert [e.step for e in events if e.k] == sorted(drafting)[: len(drafted_at)]
        first_catch_up = handed[1]  # steps 0-3's pairs, in one pass
        assert first_catch_up[0] == len(prompt) - 1 and first_catch_up[1].shape[0] == drafted_at[0] - len(prompt)
        assert first_catch_up[1].shape[0] == 4  # four plain steps kept a token each
        assert tokens(events) == tokens(run_checked(tiny_pair, PROMPT, GenerationConfig(drafter="none", max_new_tokens=24)))


@pytest.mark.parametrize("runner", ["eager", "static"])
@pytest.mark.parametrize("k", [1, 3, 6])
def test_auto_head_drafts_with_lookup_where_it_matches_and_the_head_elsewhere(tiny_pair, plain, runner, k):
    """best_head's drafter: prompt lookup on a match of 2 tokens or more (the prompt repeats a line),
    the head at every other step; the output is plain decoding's."""
    from specdec.core.proposers.lookup import LookupProposer

    events = run_checked(tiny_pair, PROMPT, head_config(drafter="auto_head", k=k, runner=runner))
    assert tokens(events) == plain
    lookup, seq = LookupProposer(GenerationConfig().lookup_ngram, 2), tiny_pair.tokenizer(PROMPT)["input_ids"]
    for e in events:
        if e.drafted:
            assert e.drafter == ("lookup" if lookup.has_draft(seq) else "head"), (e.step, e.drafter)
        seq = seq + list(e.emitted)
    assert {e.drafter for e in events if e.drafted} == {"lookup", "head"}


# --- unsure drafts are left out ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def unsure_head_file(tiny_pair, tmp_path_factory):
    """A head whose every q is uniform over tiny-random's vocabulary (its last norm is zero, so every
    logit is): its top probability, 1 / V, is under the floor at every draft."""
    head = new_head(tiny_pair.target, Recipe(intermediate=64), seed=0)
    with torch.no_grad():
        head.norm.weight.zero_()
    path = tmp_path_factory.mktemp("heads") / "unsure.safetensors"
    save_head(path, head.eval(), head_offer.target_key(tiny_pair), {"intermediate": 64}, {})
    return path


@pytest.mark.parametrize("runner", ["eager", "static"])
def test_a_head_that_is_always_unsure_drafts_nothing_and_the_output_is_plain(tiny_pair, plain, unsure_head_file,
                                                                             monkeypatch, runner):
    from specdec.core.proposers.head import UNSURE_BELOW

    assert 1 / tiny_pair.vocab_size < UNSURE_BELOW
    monkeypatch.setattr(head_offer, "trained_path", lambda name: unsure_head_file)
    events = run_checked(tiny_pair, PROMPT, head_config(k=3, runner=runner))
    assert tokens(events) == plain
    asked = [e for e in events if e.k > 0]  # all but the last (no room for a draft there)
    assert not any(e.drafted for e in events) and len(asked) == len(events) - 1 and asked[0].k == 3
    assert all(e.withdrawn_why.startswith("the head was unsure of its first draft (top probability 0.00, under 0.10)")
               for e in asked)


def test_the_cost_policy_counts_a_withdrawn_draft_as_turned_down_and_stops_drafting(tiny_pair, unsure_head_file,
                                                                                     monkeypatch, tmp_path):
    """Where the head is always unsure, the estimate falls as if every draft were rejected, and the
    policy soon chooses plain steps (K = 0, no head step paid) apart from its rare probes."""
    from specdec.measure.passcost import PassCosts

    monkeypatch.setattr(head_offer, "trained_path", lambda name: unsure_head_file)
    table = PassCosts((1, 2, 4, 8), (1.0, 1.05, 1.1, 1.3), draft_s=0.5, context=200, repeats=1, head_s=0.05)
    events = run_checked(tiny_pair, PROMPT, head_config(k_policy="cost", max_new_tokens=40), costs=table)
    asked = [e.k for e in events]
    assert asked[0] > 0 and asked.count(0) >= 30  # it drafts at first (the prior), then pauses
    assert sum(1 for k in asked[: asked.index(0)] if k > 0) <= 8  # within a few steps
    assert all(e.paused for e in events if e.k == 0)


def test_sampling_proposes_every_draft_however_unsure(tiny_pair, unsure_head_file, monkeypatch):
    """The floor is greedy's (measured on greedy runs); a sampled run proposes what it drew."""
    monkeypatch.setattr(head_offer, "trained_path", lambda name: unsure_head_file)
    events = run_checked(tiny_pair, PROMPT, head_config(k=3, temperature=0.8, max_new_tokens=12))
    assert sum(len(e.drafted) for e in events) > 0 and not any(e.withdrawn_why for e in events)


def test_the_step_panel_says_why_an_unsure_draft_was_left_out():
    from app.step_panel import render_panel
    from specdec.core.detail import explain
    from specdec.core.events import StepEvent
    from specdec.core.proposers.head import unsure_reason

    why = unsure_reason(0, 0.04, 0.1)
    event = StepEvent(step=3, drafted=(), accepted=0, emitted=(7,), kind="plain", p_target=(), p_draft=(), draft_s=0.001,
                      verify_s=0.01, total_tokens=4, elapsed_s=0.1, emitted_text=("x",), drafted_text=(), margins=(1.0,),
                      k=2, withdrawn_why=why)
    html = render_panel(explain(event))
    assert "nothing was drafted: the head was unsure of its first draft (top probability 0.04, under 0.10)" in html


# --- sampling: the engine's chi-square test (tests/test_engine_sampling.py) with the head drafting ---

SHARPNESS = 0.6  # the head's logits are this times the target's (before the temperature)


@pytest.fixture(scope="module")
def bigram_head(tmp_path_factory):
    """The bigram pair of test_engine_sampling and a head for it whose q is the target's row of the
    token it reads made flatter (drafts are accepted and rejected; a head proposing its argmax
    with that q is far from what it reports)."""
    from tests.support.bigram import VOCAB, BigramLM, parity_table, word_tokenizer

    from specdec.core.head import HeadShape, HeadWeights
    from specdec.models.pair import ModelPair

    gen = torch.Generator().manual_seed(0)
    target = parity_table(1.5 * torch.randn(2, VOCAB, generator=gen))
    pair = ModelPair("bigram", BigramLM(target), None, word_tokenizer(VOCAB), torch.device("cpu"), torch.float32,
                     chat=False, eos_ids=frozenset({-1}))
    torch.manual_seed(1)
    head = HeadWeights(HeadShape.of_target(pair.target.config, 16))
    with torch.no_grad():  # f' = SHARPNESS * one-hot(token t+1) plus a little noise: q is p's row made flatter
        head.fc.weight.copy_(torch.cat([0.05 * torch.randn(VOCAB, VOCAB), torch.eye(VOCAB)], dim=1))
        head.fc.bias.zero_()
        for name in ("o_proj", "down_proj"):
            getattr(head, name).weight.mul_(1e-3)  # attention and MLP add next to nothing
        head.norm.weight.fill_(SHARPNESS / VOCAB**0.5)  # the normalised one-hot has length sqrt(V)
    path = tmp_path_factory.mktemp("heads") / "bigram.safetensors"
    save_head(path, head, head_offer.target_key(pair), {"intermediate": 16}, {})
    return pair, target, path


def head_p_value(bigram_head, monkeypatch, runner: str) -> float:
    from tests.support.bigram import CONFIG, transition_p_value

    pair, target, path = bigram_head
    monkeypatch.setattr(head_offer, "trained_path", lambda name: path)
    return transition_p_value(pair, target, replace(CONFIG, drafter="head", runner=runner))


@pytest.mark.parametrize("runner", ["eager", "static"])
def test_head_sampling_follows_the_target(bigram_head, monkeypatch, runner):
    from tests.support.bigram import CONFIG, SIGNIFICANCE

    pair, _, path = bigram_head
    monkeypatch.setattr(head_offer, "trained_path", lambda name: path)
    events = run_checked(pair, "t0 t1", replace(CONFIG, drafter="head", runner=runner, max_new_tokens=64))
    accepted = sum(e.accepted for e in events) / sum(len(e.drafted) for e in events)
    assert 0.1 < accepted < 0.95 and all(0 < q <= 1 for e in events for q in e.p_draft)  # q: the head's, not 1.0
    assert head_p_value(bigram_head, monkeypatch, runner) > SIGNIFICANCE


@pytest.mark.parametrize("runner", ["eager", "static"])
def test_a_head_that_proposes_its_argmax_with_its_q_fails_the_test(bigram_head, monkeypatch, runner):
    from tests.support.bigram import SIGNIFICANCE

    from specdec.core.proposers import head as head_proposer

    monkeypatch.setattr(head_proposer, "race_sample", lambda q, g: q.argmax(dim=-1))
    assert head_p_value(bigram_head, monkeypatch, runner) < SIGNIFICANCE


def test_a_head_for_another_target_is_refused_by_name(tiny_pair, bigram_head, monkeypatch, tmp_path):
    from specdec.engines.assemble import build_decoding

    _, _, bigram_file = bigram_head
    monkeypatch.setattr(head_offer, "trained_path", lambda name: bigram_file)
    monkeypatch.setattr(head_offer, "SHIPPED", {})
    with pytest.raises(ValueError, match=r"drafter 'head' is not offered for pair 'tiny-random': head file .*bigram\.safetensors "
                                         r"was trained for target 'bigram'"):
        build_decoding(tiny_pair, [1, 2, 3], head_config())
    monkeypatch.setattr(head_offer, "trained_path", lambda name: tmp_path / "none.safetensors")
    with pytest.raises(ValueError, match="no head trained for this pair"):
        build_decoding(tiny_pair, [1, 2, 3], head_config())
    # an API client that switches pairs but keeps the page's auto drafter is told which drafter, and what to choose instead
    with pytest.raises(ValueError, match=r"^drafter 'auto_both' drafts with the trained head, which is not offered for pair "
                                         r"'tiny-random': no head trained for this pair .*; choose model, lookup or auto$"):
        build_decoding(tiny_pair, [1, 2, 3], head_config(drafter="auto_both"))


def test_the_cost_policy_prices_the_head_by_its_own_step(tiny_pair, monkeypatch, tmp_path):
    from specdec.core.k_policy import CostK
    from specdec.engines.assemble import head_source, run_parts
    from specdec.measure import cost_table
    from specdec.measure.passcost import PassCosts

    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path))
    monkeypatch.setattr(cost_table, "_head_steps", {})
    table = PassCosts((1, 2, 4, 8), (1.0, 1.1, 1.2, 1.5), draft_s=0.5, context=200, repeats=1)  # a draft model's pass: 0.5 s
    parts = run_parts(tiny_pair, head_config(k_policy="cost"), costs=table)
    assert parts.costs.draft_s == 0.5 and parts.costs.target_s == table.target_s  # the caller's table, as given
    assert 0 < parts.costs.head_s < 0.5  # ... with the head's own step, timed on this machine
    policy = CostK(parts.costs, 7)
    assert policy.draft_s("head") == parts.costs.head_s and policy.draft_s("model") == 0.5
    digest = head_source(tiny_pair, "dense").digest
    kept = DraftCost(parts.costs.head_first_s, parts.costs.head_s)
    assert list(cost_table._head_steps.values()) == [kept] and [d for _, d in cost_table._head_steps] == [digest]


def test_prepare_measures_the_table_with_the_head_step_and_run_parts_only_looks_it_up(tiny_pair, monkeypatch, tmp_path):
    from specdec.engines.assemble import prepare, run_parts
    from specdec.measure import cost_table

    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path))
    monkeypatch.setattr(cost_table, "_tables", {})
    monkeypatch.setattr(cost_table, "_head_steps", {})
    config = head_config(k_policy="cost")
    prepared = prepare(tiny_pair, config)
    assert prepared.costs.head_s > 0 and prepared.head.digest
    (path,) = (tmp_path / "costs").rglob("*.json")
    kept = {prepared.head.digest: DraftCost(prepared.costs.head_first_s, prepared.costs.head_s)}
    assert cost_table.read_head_steps(path) == kept and prepared.costs.head_first_s > 0  # kept with the table

    def no_measuring(*args, **kwargs):
        raise AssertionError("measured again after prepare")

    monkeypatch.setattr(cost_table, "measure_models", no_measuring)
    monkeypatch.setattr(cost_table, "time_head_step", no_measuring)
    parts = run_parts(tiny_pair, config)
    assert parts.costs == prepared.costs and parts.head is prepared.head


def test_the_bench_runs_the_head_modes(tiny_pair, monkeypatch, tmp_path):
    from specdec.bench.report import table
    from specdec.bench.runner import bench

    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path))  # best_head's cost table is measured there
    prompts = [{"id": "add", "prompt": PROMPT, "chat": False}]
    report = bench(tiny_pair, prompts, modes=["plain", "head", "best_head", "best_both"], k=3, max_new_tokens=16,
                   warmup_tokens=2, log=lambda line: None)
    summary = report["summary"]
    assert summary["all_identical_to_plain"] == {"head": True, "best_head": True, "best_both": True}
    by_position = summary["acceptance_by_position"]["head"]["rates"]
    assert 1 <= len(by_position) <= 3 and all(r is None or 0 <= r <= 1 for r in by_position)
    assert "head" in summary["cost_ratio_c"] and summary["fastest_exact"] is not None
    assert "acceptance by draft position" in table(report)


# --- the page ---------------------------------------------------------------------------------------

def test_the_page_offers_the_head_only_with_a_verified_file(monkeypatch):
    from app import advanced

    monkeypatch.setattr(head_offer, "head_note", lambda name: "")
    choices, info = advanced.drafter_choices("some-pair")
    assert ("head: a layer trained on the target's own hidden states", "head") in choices
    monkeypatch.setattr(head_offer, "head_note", lambda name: "head file x is truncated or damaged (10 bytes)")
    choices, info = advanced.drafter_choices("some-pair")
    assert "head" not in [value for _, value in choices]
    assert info == "The trained head is not offered: head file x is truncated or damaged (10 bytes)"


def test_head_note_says_why_before_the_pair_is_loaded(monkeypatch, tmp_path, head_file):
    monkeypatch.setattr(head_offer, "trained_path", lambda name: tmp_path / "none.safetensors")
    assert head_offer.head_note("tiny-random") == "no head trained for tiny-random (train one: python -m specdec head train)"
    monkeypatch.setattr(head_offer, "trained_path", lambda name: head_file)
    assert "only on the embedded bundle's weights" in head_offer.head_note("tiny-random")


def test_the_status_line_names_the_head(tiny_pair):
    from app.live import new_view

    view = new_view(tiny_pair, head_config(), show_rejected=True, prompt=PROMPT)
    assert view.status.endswith(", the trained head")  # the line names it; the file is behind its disclosure
    assert "Drafter: the trained head (tiny-random.safetensors, dense products)." in view.status_details


def test_the_step_panel_records_the_heads_q(tiny_pair):
    from app.step_panel import render_panel
    from specdec.core.detail import explain
    from specdec.engines.ours import OurSource

    decoding = OurSource(tiny_pair, head_config(k=3, temperature=0.8, max_new_tokens=12)).run(PROMPT, detailed=True)
    events = list(decoding)
    first = next(i for i, e in enumerate(events) if e.drafted)
    detail = decoding.details[first]
    assert detail.positions[0].draft_top is not None  # q's top tokens, as for the draft model
    html = render_panel(explain(events[first], detail))
    assert "the trained head proposed" in html


@pytest.mark.parametrize("kernel", ["int8", "w8a8", "w4a8"])
def test_greedy_head_speculation_equals_plain_on_other_target_kernels(tiny_pair, kernel):
    """The head beside a target kernel that computes in another dtype (int8: bf16 features on an fp32
    pair) or with its products on the kernel library (w8a8, w4a8: the head's on w8a8)."""
    if kernel in ("w8a8", "w4a8"):
        from specdec.kernels import w8a8_build

        if not w8a8_build.available(torch.device("cpu"))[0]:
            pytest.skip(w8a8_build.unavailable_reason(torch.device("cpu")))
    plain = tokens(run_checked(tiny_pair, PROMPT, GenerationConfig(drafter="none", target_kernel=kernel, max_new_tokens=24)))
    for runner in ("eager", "static"):
        events = run_checked(tiny_pair, PROMPT, head_config(k=3, target_kernel=kernel, runner=runner, max_new_tokens=24))
        assert tokens(events) == plain and sum(e.accepted for e in events) > 0


def test_the_shipped_head_is_whole_small_and_keyed_to_the_embedded_target():
    from specdec.kernels.head_store import read_head
    from specdec.models.bundle import BUNDLE_NAME, bundle_models

    path = head_offer.SHIPPED["qwen2.5-coder-1.5b/0.5b"]
    stored = read_head(path)  # its tensors' digest verified
    target = bundle_models(BUNDLE_NAME)[0]
    assert stored.record["target"]["name"] == target.key and stored.record["target"]["weights_sha256"] == target.sha256
    assert path.stat().st_size <= 32e6


@pytest.mark.parametrize("runner", ["eager", "static"])
def test_auto_both_turns_to_the_draft_model_where_the_head_does_not_pay(tiny_pair, plain, unsure_head_file, monkeypatch,
                                                                        runner):
    """auto_both: prompt lookup on a match, else whichever of the head and the draft model the cost K
    policy prices faster this step. Both start from the same acceptance, and the head is the cheaper
    (c = 0.05 against the draft model's 0.2), so the head is asked first; this head is always unsure,
    so its estimate falls, and the draft model drafts the rest of the run. The output is plain
    decoding's."""
    from specdec.core import k_policy
    from specdec.measure.passcost import PassCosts

    monkeypatch.setattr(head_offer, "trained_path", lambda name: unsure_head_file)
    monkeypatch.setattr(k_policy, "recorded_priors", lambda: {"model": 0.5, "head": 0.5, "lookup": 0.5})
    sizes = (1, 2, 3, 4, 6, 8, 12, 16)
    costs = PassCosts(sizes, tuple(0.2 + 0.005 * n for n in sizes), 0.04, 200, 3, head_s=0.01)
    config = head_config(drafter="auto_both", k_policy="cost", k_max=6, runner=runner)
    events = run_checked(tiny_pair, PROMPT, config, costs=costs)
    assert tokens(events) == plain
    head_asked = [e.step for e in events if e.withdrawn_why]  # the head's steps: every draft of it withdrawn
    model = [e.step for e in events if e.drafter == "model"]
    assert head_asked and model and max(head_asked) < min(model) and len(head_asked) <= 3
    assert sum(e.accepted for e in events if e.drafter == "model") > 0


def test_bench_predictions_account_for_an_auto_both_run(tiny_pair, monkeypatch, tmp_path, capsys):
    """`bench --predictions --drafter auto_both --k-policy cost`: the head's and the draft model's steps
    each priced at their own costs, and the output plain decoding's; the drafter is refused without
    --predictions (the modes name theirs: best_both)."""
    import json

    from specdec.__main__ import main

    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path))  # the run's cost table is measured there
    prompts = tmp_path / "prompts.json"
    prompts.write_text(json.dumps([{"id": "add", "prompt": PROMPT, "chat": False}]))
    argv = ["bench", "--pair", "tiny-random", "--dtype", "fp32", "--prompts", str(prompts), "--predictions",
            "--drafter", "auto_both", "--k-policy", "cost", "--k", "4", "--max-new-tokens", "16", "--no-lock", "--json"]
    status = main(argv)
    out = json.loads(capsys.readouterr().out)
    assert status == (0 if out["within_tolerance"] else 1)
    assert all(p["same_as_plain"] and p["priced_c"] is not None for p in out["prompts"])
    assert main(["bench", "--pair", "tiny-random", "--drafter", "auto_both", "--no-lock"]) == 2
    assert "--drafter auto_both is for --predictions" in capsys.readouterr().err
