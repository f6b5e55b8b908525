"""`python -m specdec head train|eval|vocab`: the draft head trained on the target's own features, its figures, its vocabulary."""

from __future__ import annotations

from pathlib import Path

from specdec.train.recipe import Plan, Recipe

TRAIN_DEFAULTS = Recipe()


def add_head_command(sub) -> None:
    h = sub.add_parser("head", help="a draft head trained here on the target's own features (EAGLE style)")
    actions = h.add_subparsers(dest="action", required=True)
    t = actions.add_parser("train", help="collect the target's features, train the head, write its file (resumes when interrupted)")
    _common(t)
    t.add_argument("--minutes", type=float, default=60.0, help="budget for data and training together (default 60)")
    t.add_argument("--seed", type=int, default=0, help="the data's order, the prompts, the start and the batches (default 0)")
    t.add_argument("--out", help="the head file to write (default: this machine's head for the pair, in the cache)")
    t.add_argument("--answers", type=int, help="prompts the target answers for training (default: as many as the time share allows)")
    t.add_argument("--code-tokens", type=int, help="tokens of installed text read for training (default: as the time share allows)")
    t.add_argument("--steps", type=int, help="optimizer steps (default: as many as the time left allows); a resumed run may be given another total, "
                   "and its learning rate's schedule follows the new total from there")
    t.add_argument("--no-progress", action="store_true", help="no progress bars")
    for name in ("intermediate", "depth", "lr", "reg_weight", "window", "batch_positions", "alike"):
        default = getattr(TRAIN_DEFAULTS, name)
        t.add_argument(f"--{name.replace('_', '-')}", type=type(default), default=default, help=f"recipe: {name} (default {default})")
    t.add_argument("--init", choices=("last-layer", "random"), default=TRAIN_DEFAULTS.init, help=f"the head's start (default {TRAIN_DEFAULTS.init})")
    t.add_argument("--prompts", type=int, choices=(1, 2), default=TRAIN_DEFAULTS.prompts,
                   help=f"the written prompts' version: 1, templates alone (the shipped head's); 2, also tasks and sentences from the "
                        f"installed text and generated SQL schemas (default {TRAIN_DEFAULTS.prompts})")
    t.set_defaults(func=cmd_train)
    e = actions.add_parser("eval", help="a head file's top-1 agreement with the target by draft position, on the held-out data")
    _common(e)
    e.add_argument("--head", help="the head file (default: the head this pair is offered)")
    e.add_argument("--seed", type=int, default=0, help="the seed whose held-out data to use (default 0)")
    e.add_argument("--kernel", choices=("dense", "w8a8"), default="dense", help="how the head's layers run (default dense)")
    e.add_argument("--any-target", action="store_true",
                   help="judge the head on this pair's target even if it was trained for other weights (to measure whether it transfers)")
    e.set_defaults(func=cmd_eval)
    v = actions.add_parser("vocab", help="count a head's vocabulary from a working folder's training data, judge it beside the "
                                         "head's own, and write the head with it (no retraining: the head scores any rows)")
    _common(v)
    v.add_argument("--head", help="the head file (default: the head this pair is offered)")
    v.add_argument("--seed", type=int, default=0, help="the seed of the working folder (default 0)")
    v.add_argument("--out", required=True, help="the head file to write, with the counted vocabulary and its figures")
    v.set_defaults(func=cmd_vocab)


def _common(p) -> None:
    p.add_argument("--pair", default=None, help="the model pair (default: $SPECDEC_PAIR or the embedded pair)")
    p.add_argument("--device", choices=("cpu", "cuda"), help="default: cuda when available")
    p.add_argument("--work", help="working folder: data shards, checkpoint, plan (default: in the cache, per pair and seed)")
    p.add_argument("--text-root", help="read text from this folder instead of the installed packages")
    p.add_argument("--threads", type=int, help="torch threads (default: torch's own). On a machine shared with other jobs one "
                                                "thread can be faster than two: each parallel region waits for its slowest thread")


def use_threads(args) -> None:
    if args.threads is not None:
        if args.threads < 1:
            raise ValueError(f"--threads must be >= 1, got {args.threads}")
        import torch

        torch.set_num_threads(args.threads)


def work_folder(args, pair) -> Path:
    """--work, else a folder in the cache per pair, target weights and seed (features of other weights never mix)."""
    from specdec.kernels.head_offer import slug, target_key
    from specdec.models.bundle import cache_root

    if args.work:
        return Path(args.work)
    return cache_root() / "head-train" / f"{slug(pair.name)}-{target_key(pair)['weights_sha256'][:12]}-seed{args.seed}"


def recipe_of(args) -> Recipe:
    changed = {n: getattr(args, n) for n in ("intermediate", "depth", "lr", "reg_weight", "window", "batch_positions", "alike", "init", "prompts")}
    recipe = Recipe(**changed)
    if recipe.intermediate < 1 or recipe.depth < 1 or recipe.window < 8 or recipe.batch_positions < recipe.window or recipe.lr <= 0:
        raise ValueError("--intermediate and --depth must be >= 1, --window >= 8, --batch-positions >= --window, --lr > 0")
    return recipe


def cmd_train(args) -> int:
    from specdec.kernels.head_offer import trained_path
    from specdec.models.pair import load_pair
    from specdec.train.run import train

    recipe = recipe_of(args)
    if args.minutes <= 0:
        raise ValueError(f"--minutes must be positive, got {args.minutes}")
    for name in ("answers", "code_tokens", "steps"):
        if getattr(args, name) is not None and getattr(args, name) < 0:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 0")
    use_threads(args)
    pair = load_pair(args.pair, device=args.device)
    plan = Plan(seed=args.seed, minutes=args.minutes, answers=args.answers, code_tokens=args.code_tokens, steps=args.steps)
    out = Path(args.out) if args.out else trained_path(pair.name)
    root = Path(args.text_root) if args.text_root else None
    figures = train(pair, recipe, plan, work_folder(args, pair), out, bars=not args.no_progress, root=root)
    print(f"head written: {out} ({out.stat().st_size / 1e6:.1f} MB)")
    print(figures_table(figures))
    return 0


def chosen_head(args, pair):
    """--head, read and verified for this pair (or any target with --any-target), else the head it is offered."""
    from specdec.kernels.head_offer import find_head, target_key
    from specdec.kernels.head_store import read_head

    if args.head:
        return read_head(Path(args.head), None if getattr(args, "any_target", False) else target_key(pair), pair.target.config)
    offer = find_head(pair)
    if offer.stored is None:
        raise ValueError(f"no head for {pair.name}: {offer.reason}")
    return offer.stored


def cmd_eval(args) -> int:
    from specdec.kernels.head_offer import drafting_ids, head_weights
    from specdec.models.pair import load_pair
    from specdec.train.run import evaluation

    use_threads(args)
    pair = load_pair(args.pair, device=args.device)
    stored = chosen_head(args, pair)
    head = head_weights(pair, stored, args.kernel)
    recipe = Recipe.recorded(stored.record["recipe"])
    root = Path(args.text_root) if args.text_root else None
    ids = drafting_ids(pair, stored)
    judged = evaluation(pair, head, recipe, work_folder(args, pair), args.seed, root, ids)
    ids = judged.ids
    where = "counted from its training data" if stored.ids is not None else "the shipped list's most frequent"
    print(f"head {stored.path}; vocabulary: {ids.numel()} tokens, {where}")
    print(evaluation_report(judged, ids))
    return 0


def cmd_vocab(args) -> int:
    from specdec.kernels.head_offer import drafting_ids, head_weights, target_key
    from specdec.kernels.head_store import write_head
    from specdec.models.pair import load_pair
    from specdec.train.data import load_split
    from specdec.train.loop import final_figures
    from specdec.train.run import evaluation
    from specdec.train.vocabulary import training_vocabulary

    use_threads(args)
    pair = load_pair(args.pair, device=args.device)
    stored = chosen_head(args, pair)
    folder = work_folder(args, pair)
    train = load_split(folder, "train")
    if not train:
        raise ValueError(f"no training data in {folder} to count a vocabulary from (gather it: python -m specdec head train)")
    recipe = Recipe.recorded(stored.record["recipe"])
    head = head_weights(pair, stored, "dense")
    root = Path(args.text_root) if args.text_root else None
    before_ids, ids = drafting_ids(pair, stored), training_vocabulary(pair, train, recipe.vocab)
    before = evaluation(pair, head, recipe, folder, args.seed, root, before_ids)
    after = evaluation(pair, head, recipe, folder, args.seed, root, ids)
    print(f"the head's own vocabulary ({stored.path}):\n{evaluation_report(before, before.ids)}\n")
    print(f"counted from {sum(len(s) for s in train)} training positions in {folder}:\n{evaluation_report(after, ids)}")
    tensors = {**stored.tensors, "vocab_ids": ids}
    # a record without `alike` was written before batches were sorted by length: its head was trained on random batches
    recipe_record = {"alike": 0, **stored.record["recipe"], "vocab_ids": int(ids.numel()),
                     "vocab_source": f"the target's greedy tokens in {sum(len(s) for s in train)} positions of training data"}
    figures = {**stored.record["figures"], **final_figures(after.answers, after.reads)}
    out = write_head(Path(args.out), tensors, target_key(pair), stored.record["shape"], recipe_record, figures)
    print(f"head written: {out} ({out.stat().st_size / 1e6:.1f} MB)")
    return 0


def evaluation_report(judged, ids) -> str:
    """The held-out figures: from every start and as a run drafts, per kind of text, and the vocabulary's coverage."""
    from specdec.train.loop import point, walk_figures
    from specdec.train.vocabulary import coverage, written_tokens

    lines = []
    for title, verdict in (("held-out answers", judged.answers), ("held-out read text", judged.reads)):
        p = point(0, 0, verdict)
        lines.append(figures_table({"acceptance_by_position": p["acceptance"], "agreement_by_position": p["agreement"],
                                    "mean_accepted": p["mean_accepted"], "val_answer_drafts": p["tested"], "walk": p["walk"]}, title=title))
    groups = judged.by_kind()
    if groups:
        lines.append(f"as a run drafts, per kind of held-out answer (K = {judged.answers.walk_k}):")
        lines.append(f"{'kind':<12} {'answers':>7} {'steps':>6} {'@1':>6} {'@2':>6} {'@3':>6} {'kept/step':>9} {'vocab':>6}")
        for kind, which in groups.items():
            w = walk_figures(judged.answers.walked(which), judged.answers.walk_k)
            rates = (w["rates"] + [None] * 3)[:3]
            share = coverage(ids, written_tokens([judged.answer_sequences[i] for i in which]))
            lines.append(f"{kind:<12} {len(which):>7} {w['steps']:>6} " + " ".join("     -" if r is None else f"{r:6.2f}" for r in rates)
                         + f" {w['accepted_per_step'] or 0:9.2f} {share:6.1%}")
    lines.append(f"vocabulary coverage of what the target wrote: answers {coverage(ids, written_tokens(judged.answer_sequences)):.1%}, "
                 f"read text {coverage(ids, written_tokens(judged.read_sequences)):.1%}")
    return "\n".join(lines)


def figures_table(figures: dict, title: str = "held-out answers") -> str:
    acc, agree = figures["acceptance_by_position"], figures["agreement_by_position"]
    lines = [f"{title}: {figures.get('val_answer_drafts', '?')} drafts from as many positions; mean accepted "
             f"{figures['mean_accepted']:.2f} at K = {len(acc)}",
             "position   " + " ".join(f"{k:>6}" for k in range(1, len(acc) + 1)),
             "acceptance " + " ".join(f"{a:6.2f}" for a in acc),
             "top-1 agree" + " ".join(f"{a:6.2f}" for a in agree)]
    walk = figures.get("walk")
    if walk and walk.get("steps"):
        lines.append("as a run   " + " ".join("     -" if r is None else f"{r:6.2f}" for r in walk["rates"])
                     + f"   (K = {walk['k']}, {walk['steps']} steps, {walk['accepted_per_step']:.2f} drafts kept per step)")
    if "train_tokens" in figures:
        lines.append(f"data {figures['train_tokens']} tokens, {figures['tokens_seen']} seen in {figures['steps']} steps, "
                     f"{figures['minutes']} minutes; {figures['cpu']}")
    return "\n".join(lines)
