"""Write a tiny random-weight llama GGUF model that llama.cpp loads in about a second.

Recipe: llama architecture, a 259-token byte vocabulary (``<unk>``, ``<s>``, ``</s>`` then the
256 byte tokens ``<0x00>``..``<0xFF>`` with token type 6 = BYTE), embedding 64, 2 blocks, FFN 128,
4 heads, f32 weights drawn (seeded numpy) at scale 0.02. About 469 KB.

Its completions are gibberish (never ``READY``), which is a realistic control failure; grammar or
JSON-schema constrained sampling still yields valid JSON.

    python -m ledger.collectors.engines.tiny_gguf OUT.gguf [--seed N]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

N_VOCAB = 259
N_EMBD = 64
N_BLOCKS = 2
N_FF = 128
N_HEAD = 4
N_HEAD_KV = 4
N_CTX = 512
WEIGHT_SCALE = 0.02
MODEL_NAME = "evidence-ledger-tiny-llama"

# ChatML-style template; kept simple so llama-cpp-python's Jinja2 formatter and llama-server both
# accept it. The model only knows byte tokens, so everything tokenizes via byte fallback.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

# token types (llama.cpp): 1 normal, 2 unknown, 3 control, 6 byte
_TT_UNKNOWN, _TT_CONTROL, _TT_BYTE = 2, 3, 6


def _vocab() -> tuple[list[bytes], list[float], list[int]]:
    tokens = [b"<unk>", b"<s>", b"</s>"]
    types = [_TT_UNKNOWN, _TT_CONTROL, _TT_CONTROL]
    for b in range(256):
        tokens.append(f"<0x{b:02X}>".encode())
        types.append(_TT_BYTE)
    scores = [0.0] * len(tokens)
    assert len(tokens) == N_VOCAB
    return tokens, scores, types


def write_tiny_gguf(path: Path, seed: int = 0) -> Path:
    """Write the tiny model to ``path`` (parents created) and return the path."""
    import gguf  # optional dependency: only needed to generate the model
    import numpy as np

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)

    def w(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * WEIGHT_SCALE).astype(np.float32)

    def ones(n: int) -> np.ndarray:
        return np.ones((n,), dtype=np.float32)

    tmp = path.with_name(path.name + ".tmp")
    writer = gguf.GGUFWriter(str(tmp), arch="llama")
    writer.add_name(MODEL_NAME)
    writer.add_context_length(N_CTX)
    writer.add_embedding_length(N_EMBD)
    writer.add_block_count(N_BLOCKS)
    writer.add_feed_forward_length(N_FF)
    writer.add_head_count(N_HEAD)
    writer.add_head_count_kv(N_HEAD_KV)
    writer.add_rope_dimension_count(N_EMBD // N_HEAD)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(N_VOCAB)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)

    tokens, scores, types = _vocab()
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_unk_token_id(0)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
    writer.add_chat_template(CHAT_TEMPLATE)

    # numpy shapes are (rows, cols); GGUF stores them reversed (ne0 = cols).
    writer.add_tensor("token_embd.weight", w(N_VOCAB, N_EMBD))
    for i in range(N_BLOCKS):
        p = f"blk.{i}."
        writer.add_tensor(p + "attn_norm.weight", ones(N_EMBD))
        writer.add_tensor(p + "attn_q.weight", w(N_EMBD, N_EMBD))
        writer.add_tensor(p + "attn_k.weight", w(N_EMBD * N_HEAD_KV // N_HEAD, N_EMBD))
        writer.add_tensor(p + "attn_v.weight", w(N_EMBD * N_HEAD_KV // N_HEAD, N_EMBD))
        writer.add_tensor(p + "attn_output.weight", w(N_EMBD, N_EMBD))
        writer.add_tensor(p + "ffn_norm.weight", ones(N_EMBD))
        writer.add_tensor(p + "ffn_gate.weight", w(N_FF, N_EMBD))
        writer.add_tensor(p + "ffn_up.weight", w(N_FF, N_EMBD))
        writer.add_tensor(p + "ffn_down.weight", w(N_EMBD, N_FF))
    writer.add_tensor("output_norm.weight", ones(N_EMBD))
    writer.add_tensor("output.weight", w(N_VOCAB, N_EMBD))

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    tmp.replace(path)
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m ledger.collectors.engines.tiny_gguf", description=__doc__.splitlines()[0]
    )
    ap.add_argument("out", type=Path, help="output .gguf path")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    out = write_tiny_gguf(args.out, seed=args.seed)
    print(f"{out} {out.stat().st_size} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
