"""Distil a truncated draft model towards its target, on the CPU, in minutes.

Runs inside the separate vLLM virtual environment only (it needs torch and transformers);
``serving.engine.distill`` starts it as a subprocess and nothing in the app imports it.

A greedy speculative step accepts the draft's tokens while the draft's argmax equals the
target's along the target's own continuation. So the training data is what the served
target wrote (``serving.engine.distill`` records it from a vLLM server): each prompt, its
greedy continuation and a few sampled ones (more contexts), and at every continuation
position the target's top next-token log-probabilities. The loss is the draft's
cross-entropy against that distribution, renormalised over the target's top tokens (a KL
divergence up to the target's entropy), at continuation positions only: the draft's
guesses inside the prompt are never used. Held-out prompts give the draft's top-1
agreement with the target's greedy tokens before and after.

Progress goes to stdout as one JSON object per line.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Importable only in the vLLM venv; the app's type check has neither package.
import torch  # type: ignore[import-not-found,unused-ignore]
from transformers import (  # type: ignore[import-not-found,unused-ignore]
    AutoModelForCausalLM,
    AutoTokenizer,
)


@dataclass(frozen=True)
class Example:
    """One prompt and the target's continuation, with its distribution at each position."""

    ids: list[int]
    """Prompt then continuation."""
    prompt_len: int
    top_ids: Any
    """(continuation length, K) token ids."""
    top_probs: Any
    """(continuation length, K) probabilities, renormalised over the K tokens."""


def _bf16_where_native() -> Any:
    """bf16 matrix products (as vLLM serves) on a CPU with AVX-512; plain fp32 elsewhere: an
    AVX2-only CPU emulates bf16 about 20 times slower (a step of the 6-layer draft: 61 s
    against 3.2 s in fp32), which made a 40-step training take most of an hour."""
    native = torch.backends.cpu.get_cpu_capability() == "AVX512"
    return torch.autocast("cpu", dtype=torch.bfloat16, enabled=native)


def _emit(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


def _load(path: Path, split: str) -> list[Example]:
    examples = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        record = json.loads(line)
        if record["split"] != split or not record["tokens"]:
            continue
        width = max(len(top) for top in record["top"])
        top_ids = torch.zeros((len(record["tokens"]), width), dtype=torch.long)
        top_logp = torch.full((len(record["tokens"]), width), -math.inf)
        for pos, top in enumerate(record["top"]):
            for slot, (token, logprob) in enumerate(top):
                top_ids[pos, slot] = token
                top_logp[pos, slot] = logprob
        examples.append(
            Example(
                ids=list(record["prompt_ids"]) + list(record["tokens"]),
                prompt_len=len(record["prompt_ids"]),
                top_ids=top_ids,
                top_probs=torch.softmax(top_logp, dim=-1),
            )
        )
    return examples


def _continuation_logits(draft: Any, batch: list[Example], pad_id: int) -> list[Any]:
    """The draft's logits at each example's continuation positions (position i predicts
    token i + 1), computing the costly vocabulary projection there only."""
    width = max(len(e.ids) for e in batch)
    ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    for row, example in enumerate(batch):  # right padding
        ids[row, : len(example.ids)] = torch.tensor(example.ids)
        mask[row, : len(example.ids)] = 1
    hidden = draft.model(input_ids=ids, attention_mask=mask).last_hidden_state
    picked = torch.cat(
        [hidden[row, e.prompt_len - 1 : len(e.ids) - 1] for row, e in enumerate(batch)]
    )
    logits = draft.lm_head(picked).float()
    sizes = [len(e.ids) - e.prompt_len for e in batch]
    return list(torch.split(logits, sizes))


def _loss(draft: Any, batch: list[Example], pad_id: int) -> Any:
    total = None
    count = 0
    for logits, example in zip(_continuation_logits(draft, batch, pad_id), batch, strict=True):
        log_q = torch.log_softmax(logits, dim=-1).gather(-1, example.top_ids)
        term = -(example.top_probs * log_q).sum()
        total = term if total is None else total + term
        count += logits.shape[0]
    assert total is not None
    return total / count


def _agreement(draft: Any, examples: list[Example], pad_id: int, batch_size: int) -> float:
    """Share of continuation positions where the draft's argmax is the target's token."""
    agree = total = 0
    for start in range(0, len(examples), batch_size):
        batch = examples[start : start + batch_size]
        with torch.no_grad():
            all_logits = _continuation_logits(draft, batch, pad_id)
        for logits, example in zip(all_logits, batch, strict=True):
            wanted = torch.tensor(example.ids[example.prompt_len :])
            agree += int((logits.argmax(-1) == wanted).sum())
            total += int(wanted.numel())
    return agree / max(total, 1)


def _save(model: Any, tokenizer: Any, out_dir: Path, metadata: dict[str, Any]) -> None:
    # Written next to the destination and renamed, so a killed run leaves no half model.
    tmp_dir = out_dir.with_name(out_dir.name + ".tmp")
    shutil.rmtree(tmp_dir, ignore_errors=True)
    model.to(torch.bfloat16).save_pretrained(tmp_dir, safe_serialization=True)
    tokenizer.save_pretrained(tmp_dir)
    (tmp_dir / "specledger-distill.json").write_text(
        json.dumps(metadata, indent=2) + "\n", encoding="utf-8"
    )
    shutil.rmtree(out_dir, ignore_errors=True)
    tmp_dir.rename(out_dir)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--draft", type=Path, required=True, help="draft to start from")
    parser.add_argument("--data", type=Path, required=True, help="JSONL of the target's output")
    parser.add_argument("--out", type=Path, required=True, help="folder of the result")
    parser.add_argument("--steps", type=int, default=200, help="optimizer steps at most")
    parser.add_argument("--max-seconds", type=float, default=600.0, help="training time cap")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--threads", type=int, default=None, help="torch threads")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--metadata", type=str, default="{}", help="JSON kept with the result")
    args = parser.parse_args()

    started = time.monotonic()
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    torch.set_num_threads(args.threads or os.cpu_count() or 1)

    _emit("step", message=f"loading the draft {args.draft.name}")
    tokenizer = AutoTokenizer.from_pretrained(args.draft)
    draft = AutoModelForCausalLM.from_pretrained(args.draft, dtype=torch.float32)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    train = _load(args.data, "train")
    heldout = _load(args.data, "heldout")
    if not train:
        raise SystemExit(f"no training examples in {args.data}")

    draft.eval()
    before = _agreement(draft, heldout, pad_id, args.batch_size) if heldout else None
    _emit("metric", name="heldout_top1_agreement_before", value=before)

    # The embedding is tied to the output projection, which the draft shares with the
    # target's vocabulary space: it stays as it is; the layers and the final norm learn.
    draft.get_input_embeddings().weight.requires_grad_(False)
    params = [p for p in draft.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.0)
    warmup = max(1, int(args.steps) // 20)

    def lr_factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, int(args.steps) - warmup)
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor)
    draft.train()
    order: list[int] = []
    losses: list[float] = []
    train_started = time.monotonic()
    _emit("step", message=f"distilling on {len(train)} continuations")
    for step in range(args.steps):
        if time.monotonic() - train_started > args.max_seconds:
            break
        if len(order) < args.batch_size:
            order = list(range(len(train)))
            rng.shuffle(order)
        picked, order = order[: args.batch_size], order[args.batch_size :]
        # fp32 weights and optimizer; bf16 products where the CPU has them natively.
        with _bf16_where_native():
            loss = _loss(draft, [train[i] for i in picked], pad_id)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        scheduler.step()
        losses.append(loss.detach().item())
        _emit("progress", phase="train", done=step + 1, total=args.steps, loss=losses[-1])
    train_seconds = time.monotonic() - train_started

    draft.eval()
    after = _agreement(draft, heldout, pad_id, args.batch_size) if heldout else None
    _emit("metric", name="heldout_top1_agreement_after", value=after)
    tail = losses[-10:]
    metadata = {
        **json.loads(args.metadata),
        "initial_draft": str(args.draft),
        "train_continuations": len(train),
        "heldout_continuations": len(heldout),
        "steps": len(losses),
        "batch_size": args.batch_size,
        "lr": args.lr,
        "first_loss": losses[0] if losses else None,
        "last_loss": sum(tail) / len(tail) if tail else None,
        "heldout_top1_agreement_before": before,
        "heldout_top1_agreement_after": after,
        "train_seconds": round(train_seconds, 1),
        "seconds": round(time.monotonic() - started, 1),
    }
    _emit("step", message=f"writing {args.out}")
    _save(draft, tokenizer, args.out, metadata)
    _emit("done", **metadata)


if __name__ == "__main__":
    main()
