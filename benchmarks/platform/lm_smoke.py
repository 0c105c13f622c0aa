"""Smoke benchmark of the embedded language model (``smollm2``) on one CPU thread.

Measures, in order:

1. the one-off GGUF -> safetensors conversion (``flowerbed pretrain smollm2``
   into a temporary folder, in a child process: wall time and its peak RSS;
   ``--skip-conversion`` leaves it out);
2. loading the converted folder (the artefact cache, built first if missing):
   importing transformers, then building the model;
3. the few-shot antonym prompt ``hot -> cold ... happy ->`` (expects `` sad``);
4. per-token perplexity of a small held-out text: a few WordNet glosses when
   Debian's ``wordnet-base`` is installed (``/usr/share/wordnet``), else a
   fixed paragraph (tokens 2..n given the first);
5. greedy decoding speed through the step API (KV cache), checked against
   greedy decoding by full forward passes, and transformers' own ``generate``;
6. ICL with a shared demonstration prefix: KV-cached prefix vs recomputed;
7. peak RSS of this process.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/platform/lm_smoke.py [--skip-conversion]

Writes ``benchmarks/results/lm/lm_smoke.json``.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import BENCH_DIR, Check, _script, load_avg, machine, print_checks, print_table

RESULTS = BENCH_DIR / "results" / "lm"
ANTONYM_PROMPT = "hot -> cold\nbig -> small\nup -> down\nfast -> slow\nhappy ->"
PARAGRAPH = (
    "The quick brown fox jumps over the lazy dog. Paris is the capital and most populous "
    "city of France. The river Seine runs through the city, and many bridges cross it. "
    "In spring the parks fill with people who come to walk, read and talk in the sun."
)
ANTONYMS = [("hot", "cold"), ("big", "small"), ("up", "down"), ("fast", "slow"),
            ("happy", "sad"), ("light", "dark"), ("open", "closed"), ("rich", "poor"),
            ("early", "late"), ("hard", "soft"), ("long", "short"), ("wet", "dry"),
            ("full", "empty"), ("thick", "thin"), ("strong", "weak"), ("loud", "quiet")]
WORDNET = Path("/usr/share/wordnet")


def peak_rss_mib(who: int = resource.RUSAGE_SELF) -> float:
    """Peak resident set size (MiB) of this process or of its largest waited-for child."""
    return round(resource.getrusage(who).ru_maxrss / 1024, 1)


def convert_in_child(folder: Path) -> dict[str, float]:
    """``flowerbed pretrain smollm2 --output folder`` in a child: wall time and peak RSS."""
    cli = Path(sys.executable).with_name("flowerbed")
    start = time.perf_counter()
    subprocess.run([str(cli), "pretrain", "smollm2", "--output", str(folder)], check=True)
    return {"seconds": round(time.perf_counter() - start, 2),
            "peak_rss_mib": peak_rss_mib(resource.RUSAGE_CHILDREN)}


def held_out_text() -> tuple[str, str]:
    """A few WordNet adjective glosses (fixed seed) or the fixed paragraph, and its name."""
    data = WORDNET / "data.adj"
    if not data.is_file():
        return PARAGRAPH, "fixed paragraph"
    glosses = [line.split(" | ", 1)[1].strip() for line in data.read_text().splitlines()
               if not line.startswith("  ") and " | " in line]
    picked = random.Random(0).sample(glosses, 8)
    return "\n".join(picked), "8 WordNet adjective glosses (seed 0)"


def timed(fn: Any) -> tuple[Any, float]:
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def main() -> None:
    """Run the measurements, print them and write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-conversion", action="store_true",
                        help="do not time a fresh GGUF conversion")
    parser.add_argument("--new-tokens", type=int, default=48, help="greedy tokens timed")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    out: dict[str, Any] = {"load_avg_start": load_avg(), "threads": 1}

    if not args.skip_conversion:
        with tempfile.TemporaryDirectory() as tmp:
            out["conversion"] = convert_in_child(Path(tmp) / "smollm2")

    from flowerbed.core import registry
    from flowerbed.core.artefacts import ensure_artefact
    from flowerbed.models import lm_smollm2
    from flowerbed.models.lm import build_lm

    pre = lm_smollm2.Smollm2PretrainParams()
    folder, out["cache_build_s"] = timed(lambda: ensure_artefact("smollm2", pre))
    _, out["import_transformers_s"] = timed(lambda: __import__("flowerbed.models.lm_transformers"))
    spec = registry.get("lm", "smollm2").params(name="smollm2", folder=str(folder))
    lm, out["reload_s"] = timed(lambda: build_lm(spec))

    ids, antonym_s = timed(lambda: lm.generate([lm.encode(ANTONYM_PROMPT)], 3))
    answer = lm.decode(ids[0])
    first = lm.decode(ids[0][:1])
    out["antonym"] = {"continuation": answer, "first_token": first, "seconds": antonym_s}

    text, source = held_out_text()
    tokens = lm.encode(text)
    score, ppl_s = timed(lambda: lm.score_ids([tokens[:1]], [tokens[1:]])[0])
    n = len(tokens) - 1
    out["perplexity"] = {"text": source, "tokens": n, "value": float(torch.exp(
        torch.tensor(-score.total / n))), "seconds": ppl_s}

    prompt = lm.encode("Write one sentence about the sea.\n")
    gen, gen_s = timed(lambda: lm.generate([prompt], args.new_tokens, stop=[]))
    model: Any = lm.module
    # min_new_tokens keeps generate from stopping early (it suppresses eos): speed only
    _, ref_s = timed(lambda: model.generate(
        torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
        max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens, do_sample=False))
    seq, check = list(prompt), 16  # the cached decode against full forward passes
    for _ in range(check):
        seq.append(int(lm.next_token_logprobs([seq])[0].argmax()))
    same = seq[len(prompt):] == gen[0][:check]
    out["decode"] = {"prompt_tokens": len(prompt), "new_tokens": len(gen[0]),
                     "step_api_tok_s": len(gen[0]) / gen_s,
                     "hf_generate_tok_s": args.new_tokens / ref_s,
                     "first_16_match_uncached_greedy": same}

    from flowerbed.models import icl

    pool = [icl.Example(a, (b,)) for a, b in ANTONYMS]
    demos, queries = pool[:8], pool[8:]
    cached, cached_s = timed(lambda: icl.evaluate(lm, demos, queries, max_new_tokens=3))
    plain, plain_s = timed(lambda: icl.evaluate(lm, demos, queries, max_new_tokens=3,
                                                cache_prefix=False))
    out["icl"] = {"demos": len(demos), "queries": len(queries),
                  "accuracy": cached.accuracy_generated, "cached_s": cached_s,
                  "uncached_s": plain_s, "speedup": plain_s / cached_s,
                  "same_answers": cached.generated == plain.generated}
    out["peak_rss_mib"] = peak_rss_mib()

    print_table("smollm2 on 1 thread", ["measure", "value"], [
        *([["conversion (s)", out["conversion"]["seconds"]],
           ["conversion peak RSS (MiB)", out["conversion"]["peak_rss_mib"]]]
          if "conversion" in out else []),
        ["import transformers (s)", out["import_transformers_s"]],
        ["reload from cache (s)", out["reload_s"]],
        ["antonym continuation", repr(answer)],
        [f"perplexity ({source}, {n} tokens)", out["perplexity"]["value"]],
        ["greedy tok/s (step API)", out["decode"]["step_api_tok_s"]],
        ["greedy tok/s (HF generate)", out["decode"]["hf_generate_tok_s"]],
        ["ICL prefix-cache speedup", out["icl"]["speedup"]],
        ["peak RSS (MiB)", out["peak_rss_mib"]],
    ])
    checks = [
        Check("antonym first token is ' sad'", float(first == " sad"), 1.0, "",
              higher_is_better=True),
        Check("reload from cache", out["reload_s"], 10.0, "s"),
        Check("cached greedy = uncached greedy (16 tokens)", float(same), 1.0, "",
              higher_is_better=True),
        Check("ICL cached = uncached answers", float(out["icl"]["same_answers"]), 1.0, "",
              higher_is_better=True),
    ]
    print_checks(checks)
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / "lm_smoke.json"
    path.write_text(json.dumps({
        "benchmark": "lm_smoke",
        "command": " ".join(["python", _script(sys.argv[0]), *sys.argv[1:]]),
        "machine": machine(),
        "checks": [{**c.__dict__, "passed": c.passed} for c in checks],
        **out,
    }, indent=2, default=str) + "\n")
    print(f"results written to {path}")


if __name__ == "__main__":
    main()
