"""Tiny random-init transformers models built from a config (no downloads),
shared by the torchrun workers and the tests that check their checkpoints.

The sizes make every FSDP split uneven on 3 ranks (vocab 301, hidden 64,
k/v 32 rows, MLP 176) while a whole model stays under 140k parameters."""

import torch

CONFIGS = {
    "llama": dict(vocab_size=301, hidden_size=64, intermediate_size=176, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                  tie_word_embeddings=False),
    # tied like the small Qwen2/2.5 releases: lm_head.weight is embed_tokens.weight
    "qwen2": dict(vocab_size=301, hidden_size=64, intermediate_size=176, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                  tie_word_embeddings=True),
}


def config(arch):
    import transformers

    cls = {"llama": transformers.LlamaConfig, "qwen2": transformers.Qwen2Config}[arch]
    return cls(**CONFIGS[arch], attn_implementation="eager")


def build(arch):
    """A random-init fp32 model (the caller seeds torch)."""
    import transformers

    return transformers.AutoModelForCausalLM.from_config(config(arch), dtype=torch.float32)


def batch(vocab, seed, rows=2, cols=12):
    """A fixed batch of token ids."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (rows, cols), generator=g)
