"""Convert a GGUF checkpoint into a bf16 safetensors model that vLLM's CPU backend can load.

Runs inside the separate vLLM virtual environment only (it needs torch and transformers);
``serving.model_prep`` starts it as a subprocess and nothing in the app imports it. Progress
goes to stdout as one JSON object per line.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path
from typing import Any

# Importable only in the vLLM venv; the app's type check has neither package.
import torch  # type: ignore[import-not-found,unused-ignore]
from transformers import (  # type: ignore[import-not-found,unused-ignore]
    AutoModelForCausalLM,
    AutoTokenizer,
)


def _emit(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


def _save(model: Any, tokenizer: Any, out_dir: Path) -> None:
    # Write next to the target and rename, so a killed run never leaves a half model that
    # a later run would take as done.
    tmp_dir = out_dir.with_name(out_dir.name + ".tmp")
    shutil.rmtree(tmp_dir, ignore_errors=True)
    model.save_pretrained(tmp_dir, safe_serialization=True)
    tokenizer.save_pretrained(tmp_dir)
    shutil.rmtree(out_dir, ignore_errors=True)
    tmp_dir.rename(out_dir)


def _truncate_layers(model: Any, num_layers: int) -> None:
    total = len(model.model.layers)
    if not 0 < num_layers < total:
        raise SystemExit(f"--draft-layers must be between 1 and {total - 1}, got {num_layers}")
    model.model.layers = model.model.layers[:num_layers]
    model.config.num_hidden_layers = num_layers
    layer_types = getattr(model.config, "layer_types", None)
    if layer_types is not None:
        model.config.layer_types = layer_types[:num_layers]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--gguf", type=Path, required=True, help="the .gguf file")
    parser.add_argument("--out", type=Path, required=True, help="target model folder")
    parser.add_argument("--draft-layers", type=int, default=None)
    parser.add_argument("--draft-out", type=Path, default=None)
    args = parser.parse_args()

    torch.set_num_threads(max(1, torch.get_num_threads()))
    gguf_dir, gguf_name = str(args.gguf.parent), args.gguf.name
    _emit("step", message=f"dequantizing {gguf_name} with transformers")
    tokenizer = AutoTokenizer.from_pretrained(gguf_dir, gguf_file=gguf_name)
    model = AutoModelForCausalLM.from_pretrained(
        gguf_dir, gguf_file=gguf_name, torch_dtype=torch.bfloat16
    )
    # The GGUF quantization config would make save_pretrained refuse (or write a config
    # vLLM then tries to load as GGUF, which its CPU backend cannot do).
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model = model.to(torch.bfloat16)

    if not (args.out / "config.json").exists():
        _emit("step", message=f"writing bf16 safetensors to {args.out}")
        _save(model, tokenizer, args.out)
    if args.draft_layers is not None and args.draft_out is not None:
        _emit("step", message=f"writing {args.draft_layers}-layer draft to {args.draft_out}")
        _truncate_layers(model, args.draft_layers)
        _save(model, tokenizer, args.draft_out)
    _emit("done")


if __name__ == "__main__":
    main()
