"""Tiny random-init transformers causal LMs and ferry batches for them,
shared by test_packing.py and its torchrun worker (no downloads).

Token ids of the real shards (Qwen2.5 / Llama-3.1 vocabularies) are folded
into a small vocabulary so the logits stay small; the batch layout
(positions, document boundaries, labels mask) is untouched."""

import torch

import ferry

VOCAB = 512
SIZES = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=512)


def build(arch, impl, seed=0):
    """fp32 LlamaForCausalLM ("llama") or Qwen2ForCausalLM ("qwen2") with
    attention implementation ``impl``, seeded."""
    import transformers

    cfg_cls, cls = {"llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
                    "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM)}[arch]
    torch.manual_seed(seed)
    cfg = cfg_cls(**SIZES)
    return cls._from_config(cfg, attn_implementation=impl)


def fold(batch):
    """A to_device'd ferry batch with ids and labels folded into VOCAB."""
    out = dict(batch)
    out["input_ids"] = batch["input_ids"] % VOCAB
    lab = batch["labels"]
    out["labels"] = torch.where(lab < 0, lab, lab % VOCAB)
    return out


def device_batch(batch):
    return fold(ferry.to_device(batch, "cpu"))
