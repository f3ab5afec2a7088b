"""Train Medusa heads for the target, on the CPU, in minutes, as a checkpoint vLLM loads.

Runs inside the separate vLLM virtual environment only (it needs torch and transformers);
``serving.engine.distill`` starts it as a subprocess and nothing in the app imports it.

vLLM's Medusa (``vllm/model_executor/models/medusa.py``) gives each head the target's last
hidden state h (after its final norm) at the newest token t, and head i proposes token
t + 2 + i as ``argmax(lm_head(h + SiLU(W_i h)))``. Here every head is one such residual
block, starting at W_i = 0, and all heads share the target's own output projection (its
tied embedding, ``original_lm_head: true``), which stays frozen. The data is the one draft
distillation uses (the served target's continuations with its top log-probabilities at
each position); head i learns the target's distribution i + 1 tokens further on.

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
from pathlib import Path
from typing import Any

# Importable only in the vLLM venv; the app's type check has neither package.
import torch  # type: ignore[import-not-found,unused-ignore]
from safetensors.torch import save_file  # type: ignore[import-not-found,unused-ignore]
from transformers import AutoModelForCausalLM  # type: ignore[import-not-found,unused-ignore]


def _bf16_where_native() -> Any:
    """bf16 matrix products (as vLLM serves) on a CPU with AVX-512; plain fp32 elsewhere: an
    AVX2-only CPU emulates bf16 about 20 times slower (a step of the 6-layer draft: 61 s
    against 3.2 s in fp32), which made a 40-step training take most of an hour."""
    native = torch.backends.cpu.get_cpu_capability() == "AVX512"
    return torch.autocast("cpu", dtype=torch.bfloat16, enabled=native)


def _emit(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


def _records(path: Path, split: str, greedy_only: bool) -> list[dict[str, Any]]:
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            record = json.loads(line)
            if record["split"] != split or len(record["tokens"]) < 2:
                continue
            if greedy_only and not record.get("greedy", True):
                continue
            records.append(record)
    return records


def _features(
    target: Any, records: list[dict[str, Any]], heads: int, phase: str
) -> tuple[Any, Any, Any, Any]:
    """Hidden states at continuation positions and, per head, the target's distribution
    there (top ids, renormalised probabilities) and its greedy token; -1 marks positions
    whose token i + 1 further on lies past the continuation."""
    hidden, top_ids, top_probs, greedy = [], [], [], []
    # vLLM adds a sampled token that is not among the top ones: such positions have one more.
    width = max(len(top) for record in records for top in record["top"])
    for done, record in enumerate(records, start=1):
        prompt, tokens = record["prompt_ids"], record["tokens"]
        ids = torch.full((len(tokens), width), 0, dtype=torch.long)
        logp = torch.full((len(tokens), width), -math.inf)
        for pos, top in enumerate(record["top"]):
            for slot, (token, value) in enumerate(top):
                ids[pos, slot] = token
                logp[pos, slot] = value
        with torch.no_grad(), _bf16_where_native():
            states = target.model(input_ids=torch.tensor([prompt + tokens])).last_hidden_state[0]
        # The state at prompt_len - 1 + j produced continuation token j; head i guesses
        # token j + 1 + i from it.
        n = len(tokens)
        hidden.append(states[len(prompt) - 1 : len(prompt) - 1 + n].float())
        head_ids = torch.zeros((n, heads, width), dtype=torch.long)
        head_probs = torch.zeros((n, heads, width))
        head_greedy = torch.full((n, heads), -1, dtype=torch.long)
        for i in range(heads):
            ahead = 1 + i
            if n <= ahead:
                continue
            head_ids[: n - ahead, i] = ids[ahead:]
            head_probs[: n - ahead, i] = torch.softmax(logp[ahead:], dim=-1)
            head_greedy[: n - ahead, i] = torch.tensor(tokens[ahead:])
        top_ids.append(head_ids)
        top_probs.append(head_probs)
        greedy.append(head_greedy)
        if done % 16 == 0 or done == len(records):
            _emit("progress", phase=phase, done=done, total=len(records))
    return torch.cat(hidden), torch.cat(top_ids), torch.cat(top_probs), torch.cat(greedy)


class Heads(torch.nn.Module):  # type: ignore[misc,unused-ignore]
    """Medusa's residual blocks, one linear layer each, over a frozen shared projection."""

    def __init__(self, count: int, hidden_size: int, lm_head: Any) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList(
            [torch.nn.Linear(hidden_size, hidden_size, bias=False) for _ in range(count)]
        )
        for block in self.blocks:
            torch.nn.init.zeros_(block.weight)
        self.lm_head = lm_head

    def logits(self, head: int, hidden: Any) -> Any:
        block = self.blocks[head]
        return self.lm_head(hidden + torch.nn.functional.silu(block(hidden)))


def _agreement(heads: Heads, data: tuple[Any, Any, Any, Any]) -> list[float]:
    """Per head: share of positions where its argmax is the target's greedy token."""
    hidden, _, _, greedy = data
    result = []
    with torch.no_grad():
        for i in range(len(heads.blocks)):
            valid = greedy[:, i] >= 0
            guess = heads.logits(i, hidden[valid]).argmax(-1)
            result.append(float((guess == greedy[valid, i]).float().mean()) if valid.any() else 0.0)
    return result


def _save(heads: Heads, config: Any, out_dir: Path, metadata: dict[str, Any]) -> None:
    tmp_dir = out_dir.with_name(out_dir.name + ".tmp")
    shutil.rmtree(tmp_dir, ignore_errors=True)
    tmp_dir.mkdir(parents=True)
    tensors = {"lm_heads.0.weight": heads.lm_head.weight.detach().to(torch.bfloat16).contiguous()}
    for i, block in enumerate(heads.blocks):
        tensors[f"blocks.{i}.layers.0.weight"] = block.weight.detach().to(torch.bfloat16)
    save_file(tensors, str(tmp_dir / "model.safetensors"))
    medusa_config = {
        "model_type": "medusa",
        "architectures": ["MedusaModel"],
        "hidden_size": config.hidden_size,
        "vocab_size": config.vocab_size,
        "num_heads": len(heads.blocks),
        "num_hidden_layers": 1,
        "original_lm_head": True,
        "torch_dtype": "bfloat16",
    }
    (tmp_dir / "config.json").write_text(json.dumps(medusa_config, indent=2) + "\n")
    (tmp_dir / "specledger-medusa.json").write_text(json.dumps(metadata, indent=2) + "\n")
    shutil.rmtree(out_dir, ignore_errors=True)
    tmp_dir.rename(out_dir)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--target", type=Path, required=True, help="target model folder")
    parser.add_argument("--data", type=Path, required=True, help="JSONL of the target's output")
    parser.add_argument("--out", type=Path, required=True, help="folder of the heads")
    parser.add_argument("--heads", type=int, default=3)
    parser.add_argument("--steps", type=int, default=300, help="optimizer steps at most")
    parser.add_argument("--max-seconds", type=float, default=600.0, help="training time cap")
    parser.add_argument("--positions", type=int, default=256, help="positions per step")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--all-samples", action="store_true", help="not only greedy data")
    parser.add_argument("--threads", type=int, default=None, help="torch threads")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--metadata", type=str, default="{}", help="JSON kept with the result")
    args = parser.parse_args()

    started = time.monotonic()
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    torch.set_num_threads(args.threads or os.cpu_count() or 1)
    _emit("step", message=f"loading the target {args.target.name}")
    target = AutoModelForCausalLM.from_pretrained(args.target, dtype=torch.float32).eval()
    lm_head = target.get_output_embeddings()
    lm_head.weight.requires_grad_(False)
    train_records = _records(args.data, "train", greedy_only=not args.all_samples)
    heldout_records = _records(args.data, "heldout", greedy_only=True)
    if not train_records:
        raise SystemExit(f"no training examples in {args.data}")
    _emit("step", message="target hidden states")
    train = _features(target, train_records, args.heads, "hidden")
    heldout = _features(target, heldout_records, args.heads, "hidden-heldout")

    heads = Heads(args.heads, target.config.hidden_size, lm_head)
    before = _agreement(heads, heldout)
    _emit("metric", name="heldout_top1_agreement_before", value=before)
    params = list(heads.blocks.parameters())
    optimizer = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.0)
    hidden, top_ids, top_probs, greedy = train
    positions = list(range(hidden.shape[0]))
    losses: list[float] = []
    train_started = time.monotonic()
    _emit("step", message=f"training {args.heads} heads on {len(positions)} positions")
    for step in range(args.steps):
        if time.monotonic() - train_started > args.max_seconds:
            break
        picked = torch.tensor(rng.sample(positions, min(args.positions, len(positions))))
        scale = 0.5 * (1 + math.cos(math.pi * step / args.steps))
        for group in optimizer.param_groups:
            group["lr"] = args.lr * (0.1 + 0.9 * scale)
        total = None
        with _bf16_where_native():
            for i in range(args.heads):
                rows = picked[greedy[picked, i] >= 0]
                if rows.numel() == 0:
                    continue
                log_q = torch.log_softmax(heads.logits(i, hidden[rows]).float(), dim=-1)
                term = -(top_probs[rows, i] * log_q.gather(-1, top_ids[rows, i])).sum(-1).mean()
                total = term if total is None else total + term
        assert total is not None
        optimizer.zero_grad(set_to_none=True)
        total.backward()
        optimizer.step()
        losses.append(total.detach().item() / args.heads)
        _emit("progress", phase="train", done=step + 1, total=args.steps, loss=losses[-1])
    train_seconds = time.monotonic() - train_started

    after = _agreement(heads, heldout)
    _emit("metric", name="heldout_top1_agreement_after", value=after)
    tail = losses[-10:]
    metadata = {
        **json.loads(args.metadata),
        "heads": args.heads,
        "train_positions": len(positions),
        "steps": len(losses),
        "lr": args.lr,
        "first_loss": losses[0] if losses else None,
        "last_loss": sum(tail) / len(tail) if tail else None,
        "heldout_top1_agreement_before": before,
        "heldout_top1_agreement_after": after,
        "train_seconds": round(train_seconds, 1),
        "seconds": round(time.monotonic() - started, 1),
    }
    _emit("step", message=f"writing {args.out}")
    _save(heads, target.config, args.out, metadata)
    _emit("done", **metadata)


if __name__ == "__main__":
    main()
