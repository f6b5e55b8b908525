"""Build assets/draft_vocab_qwen2.5.json: the Qwen2.5 token ids, most frequent first, for the
truncated-vocabulary draft variants (-v16k, -v32k; see specdec/models/vocab_subset.py).

Counted offline, once, from two sources, each normalised to a distribution and mixed half and half:
- code: every .py file of this Python's standard library (Python Software Foundation License);
- prose: the 30000 most frequent words of 12 languages from wordfreq 3.1.1 (code Apache-2.0, word
  lists CC BY-SA 4.0, Robyn Speer et al.), each word weighted by its frequency, English a quarter
  of the whole and the other 11 languages sharing a quarter.
The file holds only token ids in an order derived from those counts (CC BY-SA 4.0, as the word
lists). The same Python version and wordfreq version give the same file. Kept with the experiments:
the shipped file was built with it at commit 6b0e848 (its imports moved since), and it is run again only to rebuild that file.

Usage, from the repository root (needs `pip install wordfreq==3.1.1`, not a run-time dependency):
    HF_HUB_OFFLINE=1 python -m experiments.build_draft_vocab [--tokenizer FOLDER] [--size 32768]
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import sysconfig
from collections import Counter
from pathlib import Path

from specdec.models.vocab_subset import ASSETS, count_tokens, fingerprint, ranked_ids

LANGUAGES = ("fr", "de", "es", "it", "pt", "nl", "ru", "pl", "zh", "ja", "sv")  # beside English
WORDS_PER_LANGUAGE = 30000
NO_SPACES = ("zh", "ja")  # words follow each other without a space


def normalised(counts: Counter, share: float) -> Counter:
    total = sum(counts.values())
    return Counter({t: share * c / total for t, c in counts.items()})


def code_counts(tokenizer) -> Counter:
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in root.rglob("*.py") if "site-packages" not in p.parts)
    texts = ((p.read_text(encoding="utf-8", errors="replace"), 1.0) for p in files)
    return count_tokens(tokenizer, texts)


def prose_counts(tokenizer, language: str) -> Counter:
    from wordfreq import get_frequency_dict

    frequencies = get_frequency_dict(language)  # word -> frequency, read as stored (no tokeniser needed)
    words = sorted(frequencies.items(), key=lambda item: (-item[1], item[0]))[:WORDS_PER_LANGUAGE]
    lead = "" if language in NO_SPACES else " "
    texts = []
    for word, f in words:
        texts.append((lead + word, f))
        if lead:
            texts.append((lead + word.capitalize(), f / 10))  # names and sentence starts
    return count_tokens(tokenizer, texts)


def main() -> int:
    from transformers import AutoTokenizer

    from specdec.models import bundle

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokenizer", help="tokenizer folder (default: the embedded pair's converted draft)")
    parser.add_argument("--size", type=int, default=32768)
    parser.add_argument("--out", default=str(ASSETS / "draft_vocab_qwen2.5.json"))
    args = parser.parse_args()
    folder = args.tokenizer or str(bundle.prepare_bundle()[1])
    tokenizer = AutoTokenizer.from_pretrained(folder)
    import wordfreq

    counts = normalised(code_counts(tokenizer), 0.5)
    counts.update(normalised(prose_counts(tokenizer, "en"), 0.25))
    for language in LANGUAGES:
        counts.update(normalised(prose_counts(tokenizer, language), 0.25 / len(LANGUAGES)))
    ids = ranked_ids(counts)[: args.size]
    data = {
        "tokenizer": "Qwen2.5 (151643 tokens + specials)",
        "fingerprint": fingerprint(tokenizer),
        "sources": {
            "code": f"Python {platform.python_version()} standard library .py files (PSF License)",
            "prose": f"wordfreq {wordfreq.__version__ if hasattr(wordfreq, '__version__') else '3.1.1'}, top "
                     f"{WORDS_PER_LANGUAGE} words of en, {', '.join(LANGUAGES)} (CC BY-SA 4.0)",
            "mix": "code 0.5, English 0.25, the other languages 0.25 shared equally",
        },
        "licence": "CC BY-SA 4.0 (derived from wordfreq's word lists)",
        "counted_tokens": len(counts),
        "ids": ids,
    }
    Path(args.out).write_text(json.dumps(data, separators=(",", ":")) + "\n")
    print(f"wrote {len(ids)} ids of {len(counts)} seen to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
