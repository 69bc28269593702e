"""Packed rows whose documents never see each other, and the global token-mean loss.

Isolation. A pack-mode batch from :class:`ferry.MappedLoader` or
:class:`ferry.ServeLoader` is a dict for ``model(**ferry.to_device(batch,
device))`` that keeps the documents of a packed row apart on every attention
implementation transformers offers, whatever the batch size::

    input_ids, labels, position_ids   (B, L) int32 views of the mapped shard
    cu_seq_lens_q, cu_seq_lens_k      (D+1,) int32: document starts (position
                                      0, and every row start) in the row-major
                                      flattened B*L tokens, then B*L
    max_length_q, max_length_k        int: the longest document (tokens)
    use_cache                         False
    num_items_in_batch                0-d float32 (see below)

and never an ``attention_mask``. How each implementation isolates:

* ``eager``, ``sdpa``, ``flex_attention``: transformers (>= 4.53, with
  torch >= 2.6) builds a per-document causal mask from ``position_ids``
  (each document starts at 0; a new document wherever a position is not
  the previous one + 1), row by row, when no ``attention_mask`` and no
  cache is passed. ``use_cache=False`` makes sure no cache is made: with a
  cache (``config.use_cache`` is True by default) transformers skips the
  detection and documents attend to each other.
* ``flash_attention_2``/``_3`` (and hub flash kernels): transformers calls
  the varlen kernel with ``cu_seq_lens_q/k`` and ``max_length_q/k``; the
  (B, L) tokens are flattened to B*L, so the batch size does not matter and
  the kernel never sees a boundary-crossing pair. (From ``position_ids``
  alone, transformers infers boundaries only when the batch size is 1.)

Padding at the end of a row continues the last document's positions (the
shard format), so it belongs to that document: it attends only to it, and
no real token attends to it (causality).

:func:`check_packing` is the documented check: it raises
:class:`ferry.PackingError` for a model on which this layout cannot isolate
(transformers < 4.53, torch < 2.6 with transformers 4.x on
eager/sdpa/flex, an attention implementation ferry does not know, a model
that does not build its masks with transformers' ``masking_utils``, a model
with recurrent, state-space or linear-attention layers, or a model that is
not a transformers model).

Loss. HF's causal-LM loss divides the summed token losses by
``num_items_in_batch`` when it is passed (else it takes the micro-batch
mean). Each ferry batch carries ``num_items_in_batch = N / (world_size *
grad_accum)``, N being the loss tokens of the whole optimizer step: the
``grad_accum`` micro-batches of every rank. Then the usual loop::

    (model(**batch).loss / grad_accum).backward()     # DDP/FSDP average gradients over ranks

gives exactly the gradient of the mean over all N loss tokens of the step,
and ``out.loss`` stays on the scale of a per-micro-batch mean for logging.
The global order is deterministic, so each rank counts N itself from the
shards (no collective). :func:`causal_lm_loss` is HF's loss for models that
are not transformers models; :func:`loss_tokens` counts a batch's loss
tokens.
"""

import sys

import numpy as np
import torch

from .errors import PackingError

IGNORE_INDEX = -100

# Attention implementations whose masks transformers builds per document
# from position_ids (masking_utils), and the versions from which it does.
MASKED = ("eager", "sdpa", "flex_attention")
FLASH = ("flash_attention_2", "flash_attention_3")
MIN_TRANSFORMERS = (4, 53)
MIN_TORCH_MASKED_4X = (2, 6)
# layer_types entries that are attention (anything else: a recurrent,
# state-space, convolution or linear-attention mixer).
ATTENTION_LAYER_TYPES = frozenset({"full_attention", "sliding_attention", "chunked_attention"})
# Config fields and module class names of models with non-attention mixers.
_SSM_CONFIG_FIELDS = ("mamba_d_state", "mamba_d_conv", "mamba_expand", "ssm_state_size", "linear_num_value_heads",
                      "linear_conv_kernel_dim", "hybrid_override_pattern", "layers_block_type", "attn_layer_indices",
                      "conv_L_cache", "block_types")
_SSM_MODULE_NAMES = ("Mamba", "GatedDeltaNet", "LinearAttention", "ShortConv", "RecurrentBlock", "Rwkv", "SSM",
                     "Lightning", "DeltaNet")


def pack_kwargs(position_ids):
    """``cu_seq_lens_q/k`` and ``max_length_q/k`` for a (B, L) pack-mode
    ``position_ids`` array (numpy or CPU tensor): a document starts at
    every position 0 (the shard format restarts positions at each document
    and lets padding continue the last one) and at every row start, in the
    row-major flattened B*L tokens."""
    pos = position_ids.numpy() if isinstance(position_ids, torch.Tensor) else np.asarray(position_ids)
    B, L = pos.shape
    first = pos == 0
    first[:, 0] = True
    starts = np.flatnonzero(first)
    cu = np.empty(len(starts) + 1, dtype=np.int32)
    cu[:-1] = starts
    cu[-1] = B * L
    longest = int(np.diff(cu).max())
    t = torch.from_numpy(cu)
    return {"cu_seq_lens_q": t, "cu_seq_lens_k": t, "max_length_q": longest, "max_length_k": longest}


def loss_tokens(labels):
    """Number of tokens that carry loss in a causal-LM batch: ``labels[...,
    1:] != -100`` (HF's loss shifts by one, so a row's first label never
    counts). ``labels``: numpy array or tensor, (B, L) or (L,)."""
    if isinstance(labels, torch.Tensor):
        return int((labels[..., 1:] != IGNORE_INDEX).sum())
    return int(np.count_nonzero(np.asarray(labels)[..., 1:] != IGNORE_INDEX))


def causal_lm_loss(logits, labels, num_items_in_batch=None):
    """HF's causal-LM loss (``ForCausalLMLoss``) for a model that is not a
    transformers model: cross entropy of ``logits[:, :-1]`` against
    ``labels[:, 1:]`` (−100 ignored), in fp32, summed and divided by
    ``num_items_in_batch`` when given (a ferry batch's value gives the
    global token mean, see the module doc), else the micro-batch mean."""
    V = logits.shape[-1]
    logits = logits[..., :-1, :].float().reshape(-1, V)
    target = labels[..., 1:].reshape(-1).to(logits.device)
    if num_items_in_batch is None:
        return torch.nn.functional.cross_entropy(logits, target, ignore_index=IGNORE_INDEX)
    loss = torch.nn.functional.cross_entropy(logits, target, ignore_index=IGNORE_INDEX, reduction="sum")
    if isinstance(num_items_in_batch, torch.Tensor):
        num_items_in_batch = num_items_in_batch.to(loss.device)
    return loss / num_items_in_batch


# -- the check -----------------------------------------------------------------------
def _parse_version(v):
    out = []
    for part in str(v).split("+")[0].split(".")[:3]:
        digits = ""
        for ch in part:
            if not ch.isdigit():
                break
            digits += ch
        out.append(int(digits or 0))
    return tuple(out + [0] * (3 - len(out)))


def _installed_versions():
    """(transformers version tuple or None, torch version tuple)."""
    tf = sys.modules.get("transformers")
    if tf is None:
        try:
            import transformers as tf
        except ImportError:
            tf = None
    return (_parse_version(tf.__version__) if tf is not None else None), _parse_version(torch.__version__)


def _unwrap(model):
    """The module inside DDP, FSDP1, torch.compile and PEFT wrappers."""
    seen = set()
    m = model
    while id(m) not in seen:
        seen.add(id(m))
        get_base = getattr(m, "get_base_model", None)
        if callable(get_base) and type(m).__name__.startswith("Peft"):
            m = get_base()
            continue
        for attr in ("_orig_mod", "_fsdp_wrapped_module", "module"):
            inner = getattr(m, attr, None)
            if isinstance(inner, torch.nn.Module) and inner is not m:
                m = inner
                break
    return m


def _forward_module(cls):
    """The module of the class whose ``forward`` a model runs (skipping
    torch's wrapper classes, e.g. FSDP2's ``FSDP<Model>``)."""
    for c in cls.__mro__:
        if "forward" in c.__dict__ and not c.__module__.startswith("torch."):
            return sys.modules.get(c.__module__)
    return None


def _fmt(v):
    return ".".join(str(x) for x in v)


def check_packing(model):
    """Check that ``model`` keeps the documents of ferry's packed rows apart.

    Returns a one-line description of how it does (for a log); raises
    :class:`ferry.PackingError`, with what to do, where the layout
    described in :mod:`ferry.packing` cannot isolate: a model that is not a
    transformers ``PreTrainedModel`` (ferry cannot tell), transformers older
    than 4.53, eager/sdpa/flex_attention on transformers 4.x with torch
    older than 2.6, an attention implementation other than eager, sdpa,
    flex_attention or a flash-attention kernel, a model whose code does not
    build its masks with ``transformers.masking_utils``, or a model with
    recurrent, state-space or linear-attention layers. Wrappers (DDP, FSDP,
    ``torch.compile``, PEFT) are looked through. Call it once, after the
    model is built, when the data set is in pack mode."""
    m = _unwrap(model)
    name = type(m).__name__
    tf_version, torch_version = _installed_versions()
    try:
        from transformers import PreTrainedModel
    except ImportError:
        PreTrainedModel = None
    config = getattr(m, "config", None)
    if PreTrainedModel is None or not isinstance(m, PreTrainedModel) or config is None:
        raise PackingError(
            f"{name} is not a Hugging Face transformers model: ferry cannot tell whether it keeps the documents "
            "of a packed row apart. Its attention must start every document at position_ids 0 and attend only "
            "within the segments of cu_seq_lens_q (see ferry.packing); if it does, do not call check_packing; "
            "otherwise run dataprep with --mode pad"
        )
    impl = getattr(config, "_attn_implementation", None) or "eager"
    where = f"{name} (attn_implementation={impl!r}, transformers {_fmt(tf_version)}, torch {_fmt(torch_version)})"
    if tf_version < MIN_TRANSFORMERS + (0,):
        raise PackingError(
            f"{where}: transformers before {_fmt(MIN_TRANSFORMERS)} builds no per-document attention mask for "
            f"packed rows, so documents would attend to each other: upgrade transformers to >= "
            f"{_fmt(MIN_TRANSFORMERS)} or run dataprep with --mode pad"
        )
    flash = impl in FLASH or ("flash" in impl and "paged" not in impl)
    if impl not in MASKED and not flash:
        raise PackingError(
            f"{where}: ferry does not know how attention implementation {impl!r} handles packed rows; load the "
            f"model with attn_implementation= one of {', '.join(MASKED + FLASH)}, or run dataprep with --mode pad"
        )
    if impl in MASKED and tf_version < (5, 0, 0) and torch_version < MIN_TORCH_MASKED_4X + (0,):
        raise PackingError(
            f"{where}: with torch before {_fmt(MIN_TORCH_MASKED_4X)}, transformers 4.x ignores the per-document "
            f"mask on {impl}, so documents would attend to each other: upgrade torch to >= "
            f"{_fmt(MIN_TORCH_MASKED_4X)}, use attn_implementation='flash_attention_2' on a GPU, or run dataprep "
            "with --mode pad"
        )
    base = getattr(m, "base_model", None)
    base = base if isinstance(base, torch.nn.Module) else m
    mod = _forward_module(type(base))
    if mod is None or not any(hasattr(mod, f) for f in ("create_causal_mask", "create_sliding_window_causal_mask",
                                                        "create_chunked_causal_mask")):
        raise PackingError(
            f"{where}: {getattr(mod, '__name__', type(base).__module__)} does not build its attention masks with "
            "transformers.masking_utils, "
            "so ferry cannot rely on its packed-sequence handling: use a model class that does (transformers' "
            "own Llama, Qwen2, Mistral, ... do) or run dataprep with --mode pad"
        )
    odd = sorted({str(t) for t in (getattr(config, "layer_types", None) or [])} - ATTENTION_LAYER_TYPES)
    fields = [f for f in _SSM_CONFIG_FIELDS if getattr(config, f, None) is not None]
    mods = sorted({type(s).__name__ for s in m.modules() if any(k in type(s).__name__ for k in _SSM_MODULE_NAMES)})
    if odd or fields or mods:
        what = ", ".join(filter(None, [odd and f"layer_types {odd}", fields and f"config fields {fields}",
                                       mods and f"modules {mods[:3]}"]))
        raise PackingError(
            f"{where}: the model has recurrent, state-space or linear-attention layers ({what}); ferry's packed "
            "rows keep documents apart only in attention layers, so state would flow from one document into the "
            "next: run dataprep with --mode pad for this model"
        )
    if flash:
        how = "the varlen flash kernel on cu_seq_lens_q/k"
    else:
        how = "a per-document causal mask that transformers builds from position_ids"
    return f"{where}: packed documents are isolated by {how}"
