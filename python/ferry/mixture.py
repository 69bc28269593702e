"""Loss by source for mixtures (``dataprep --recipe``, docs/mixtures.md).

A mixture's batches carry each token's source when the loader is made with
``sources=True`` (``batch["source_ids"]``, -1 on padding).
:func:`loss_by_source` computes the causal-LM loss from the logits once, as
transformers' ``ForCausalLMLoss`` does, and splits it by source::

    source_ids = batch.pop("source_ids")
    out = model(**{k: v for k, v in batch.items() if k != "labels"})
    sl = ferry.loss_by_source(out.logits, batch["labels"], source_ids, len(loader.source_names),
                              num_items_in_batch=batch.get("num_items_in_batch"))
    sl.loss.backward()                     # the loss model(**batch).loss would give
    sums += sl.sums; tokens += sl.tokens   # per source, for the log

``sl.parts`` sums to ``sl.loss``: each source's share of this step's token
mean. For the log, the per-source mean over the whole job is
``all_reduce(sums) / all_reduce(tokens)``: one reduction of 2 x sources
numbers, folded into the reduction the metrics already do, when the log is
written (not per step). No collective runs here.
"""

from typing import NamedTuple

import torch
import torch.nn.functional as F

IGNORE_INDEX = -100


class SourceLoss(NamedTuple):
    """What :func:`loss_by_source` returns (S = number of sources)."""

    loss: torch.Tensor    # scalar: the step's loss, with grad (what model(**batch).loss gives)
    parts: torch.Tensor   # (S,): each source's share of loss, with grad; parts.sum() == loss
    sums: torch.Tensor    # (S,) float32, detached: summed token cross-entropy per source
    tokens: torch.Tensor  # (S,) int64: loss tokens per source


def loss_by_source(logits, labels, source_ids, num_sources, num_items_in_batch=None, ignore_index=IGNORE_INDEX):
    """The causal-LM loss of ``logits`` (B x L x V) against ``labels``
    (B x L), split by ``source_ids`` (B x L, the loader's; ids in
    0..num_sources-1, anything else is not counted for a source).

    As transformers' ``ForCausalLMLoss``: logits in float32, position t
    predicts label t+1, ``ignore_index`` labels carry no loss; the loss is
    the sum over the loss tokens divided by ``num_items_in_batch`` when it
    is given (the loader's: the step's loss tokens over all ranks, per rank
    and micro-batch), else their mean. A loss token's source is the source
    of the token it predicts (label position t+1).
    """
    if logits.dim() != 3 or labels.shape != logits.shape[:2] or source_ids.shape != labels.shape:
        raise ValueError(f"logits {tuple(logits.shape)}, labels {tuple(labels.shape)}, source_ids "
                         f"{tuple(source_ids.shape)}: want B x L x V, B x L and B x L")
    num_sources = int(num_sources)
    if num_sources < 1:
        raise ValueError(f"num_sources = {num_sources}, want >= 1")
    labels = labels.to(logits.device)
    source_ids = source_ids.to(logits.device)
    shift_labels = F.pad(labels, (0, 1), value=ignore_index)[..., 1:].reshape(-1).long()
    shift_src = F.pad(source_ids, (0, 1), value=-1)[..., 1:].reshape(-1).long()
    flat = logits.float().reshape(-1, logits.shape[-1])
    per_token = F.cross_entropy(flat, shift_labels, ignore_index=ignore_index, reduction="none")
    keep = shift_labels != ignore_index
    if num_items_in_batch is not None:
        denom = num_items_in_batch.to(per_token.device) if torch.is_tensor(num_items_in_batch) else num_items_in_batch
    else:
        denom = keep.sum()
    loss = per_token.sum() / denom
    bins = torch.where(keep & (shift_src >= 0) & (shift_src < num_sources), shift_src, num_sources)
    sums = torch.zeros(num_sources + 1, dtype=per_token.dtype, device=per_token.device).index_add(0, bins, per_token)
    tokens = torch.bincount(bins, minlength=num_sources + 1)
    return SourceLoss(loss=loss, parts=sums[:num_sources] / denom, sums=sums[:num_sources].detach(),
                      tokens=tokens[:num_sources])


def source_means(sums, tokens, names):
    """{name: mean loss} of the sources with tokens (after the caller's
    reduction of ``sums`` and ``tokens`` over ranks and steps)."""
    sums, tokens = torch.as_tensor(sums).double().cpu(), torch.as_tensor(tokens).cpu()
    return {n: float(sums[i] / tokens[i]) for i, n in enumerate(names) if tokens[i] > 0}
