"""Real engines for tests and the demo: tiny models the project generates itself.

- :mod:`tiny_gguf` writes a few-hundred-KB random-weight llama GGUF for llama.cpp servers.
- ``tiny_hf_llama.py`` writes a tiny random HF Llama directory for vLLM; it runs inside the
  vLLM virtualenv (it needs torch/transformers/tokenizers) and uses nothing from this package.
"""
