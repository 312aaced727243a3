"""`embedding_bag` forward and backward as ops torch-mlir lowers on both targets.

Part of lowering.front.layers' table (so of both entry points'). The forward adds
gathered rows into their bags (sum, mean: a segment sum, an accumulating `index_put`,
O(indices x width)) or takes a masked max over a bag-membership matrix (max:
O(bags x indices x width)); the weight gradient adds each index's
share of its bag's gradient into its row with an accumulating `index_put` (a
scatter-add: two bags, or two places of one bag, that name the same row both add to
it; the gpu stage turns it into atomic adds). The weight gradient costs O(indices x
width) plus, where the forward left no `offset2bag`, an O(indices x bags) comparison,
and with scale_grad_by_freq O(indices + rows) for eager's divisors.
"""

from __future__ import annotations

import math

import torch

aten = torch.ops.aten


def embedding_bag(weight, indices, offsets, scale_grad_by_freq=False, mode=0, sparse=False,
                  per_sample_weights=None, include_last_offset=False, padding_idx=-1):
    """Bags of embedding rows reduced by sum, mean or max (bag of index i: the number of
    offsets <= i, minus 1): the gathered rows added into their bags (sum, mean), or a
    masked max over a [bags, indices] membership matrix. Returns eager's four results; offset2bag,
    bag_size and max_indices have the shapes of PyTorch's meta function (which depend
    on whether the tensors are on the CPU)."""
    count = indices.shape[0]
    bags = offsets.shape[0] - (1 if include_last_offset else 0)
    firsts = offsets.narrow(0, 0, bags)
    position = torch.arange(count, device=indices.device)
    bag = (firsts.unsqueeze(0) <= position.unsqueeze(1)).sum(1) - 1          # [I]
    valid = bag >= 0  # indices before the first offset are in no bag
    if include_last_offset:  # the last offset ends the last bag
        valid = valid & (position < offsets[bags])
    if padding_idx is not None and padding_idx >= 0:
        valid = valid & (indices != padding_idx)
    target = torch.where(valid, bag, 0)
    rows = weight[indices]                                                     # [I, D]
    # Segment sums: each index adds into its bag (an accumulating index_put, in index
    # order on the cpu target, atomic adds on the gpu), O(indices x width).
    sizes = aten.index_put.default(bag.new_zeros(bags), [target], valid.to(bag.dtype), True)
    max_indices = None
    if mode == 2:
        member = (bag.unsqueeze(0) == torch.arange(bags, device=indices.device).unsqueeze(1)) \
            & valid.unsqueeze(0)
        masked = torch.where(member.unsqueeze(2), rows.unsqueeze(0), -math.inf)
        values, at = masked.max(1)                                             # [B, D]
        filled = (sizes > 0).unsqueeze(1)
        output = torch.where(filled, values, 0).to(weight.dtype)
        max_indices = torch.where(filled, indices[at], -1)
    else:
        # Half and bfloat16 bags add up in float32, as eager's CPU kernel does.
        acc = torch.float32 if weight.dtype in (torch.float16, torch.bfloat16) else weight.dtype
        scale = valid.to(acc)
        if per_sample_weights is not None:
            scale = scale * per_sample_weights.to(acc)
        output = aten.index_put.default(rows.new_zeros(bags, rows.shape[1], dtype=acc),
                                        [target], rows.to(acc) * scale.unsqueeze(1), True)
        if mode == 1:
            output = output / torch.clamp(sizes, min=1).to(acc).unsqueeze(1)
        output = output.to(weight.dtype)
    width = weight.shape[1]
    index_dtype = offsets.dtype
    if offsets.device.type == "cpu":
        fast_sum = mode == 0 and weight.dtype in (torch.float32, torch.float16) and \
            (padding_idx is None or padding_idx < 0)
        offset2bag = bag.new_zeros(0) if fast_sum else bag
        bag_size = sizes
        if max_indices is None:
            max_indices = torch.zeros_like(sizes)
    else:
        offset2bag = bag
        bag_size = torch.nn.functional.pad(sizes, (0, offsets.shape[0] - bags))
        if max_indices is None:
            max_indices = bag.new_zeros(0)
    return (output, offset2bag.to(index_dtype), bag_size.to(index_dtype),
            max_indices.to(index_dtype).reshape(-1, width) if mode == 2 else
            max_indices.to(index_dtype))


def embedding_bag_per_sample_weights_backward(grad, weight, indices, offsets, offset2bag, mode,
                                              padding_idx=-1):
    """The gradient of each sample weight: its bag's gradient dotted with its row."""
    bags = grad.shape[0]
    position = torch.arange(indices.shape[0], device=grad.device)
    bag = (offsets.narrow(0, 0, bags).unsqueeze(0) <= position.unsqueeze(1)).sum(1) - 1
    out = (grad[bag] * weight[indices]).sum(1)
    keep = position >= 0
    if offsets.shape[0] > bags:
        keep = keep & (position < offsets[bags])
    if padding_idx is not None and padding_idx >= 0:
        keep = keep & (indices != padding_idx)
    return torch.where(keep, out, 0)


def _bag_of_each_index(offsets, count: int, bags: int):
    """Eager's offset2bag: the bag of index i is the number of the bags' first offsets
    <= i, minus 1 (empty bags are skipped). An index at or past an `include_last_offset`
    end gets `bags`, a bag that does not exist."""
    position = torch.arange(count, device=offsets.device)
    bag = (offsets.narrow(0, 0, bags).unsqueeze(0) <= position.unsqueeze(1)).sum(1) - 1
    if offsets.shape[0] > bags:
        bag = torch.where(position < offsets[bags], bag, bags)
    return bag


def embedding_bag_backward(grad, indices, offsets, offset2bag, bag_size, maximum_indices,
                           num_weights, scale_grad_by_freq, mode, sparse,
                           per_sample_weights=None, padding_idx=-1):
    """The weight gradient, as eager's CPU kernel: the dense one, with offset2bag
    rebuilt from the offsets where the forward left it empty (its fast sum path)."""
    if sparse:
        return NotImplemented
    bags = grad.shape[0]
    count = indices.shape[0]
    if offset2bag.numel() != count or offsets.shape[0] > bags:
        offset2bag = _bag_of_each_index(offsets, count, bags)
    return embedding_bag_dense_backward(grad, indices, offset2bag, bag_size, maximum_indices,
                                        num_weights, scale_grad_by_freq, mode,
                                        per_sample_weights, padding_idx)


def _eager_frequency(indices, num_weights: int):
    """Per index, what eager's CPU kernel divides its gradient by under scale_grad_by_freq
    (sum and mean; >= 1): not its own count, but the count of the k-th smallest index
    (with repeats, padding included), k the rank of its row among the distinct indices.
    The kernel sorts the indices, then for the k-th distinct row reads `counts[sorted[k]]`
    where the row's own count, `counts[sorted[first place of the row]]`, was likely meant
    (`F.embedding` divides by the row's own count); eager CPU is the reference.

    Without a sort (the loops stage sorts in O(n^2)): from the count of each row, three
    running sums and two accumulating index_puts, O(indices + rows). `sorted[p]`, the
    p-th smallest index, is the number of rows r with #(indices <= r) <= p."""
    count = indices.shape[0]
    flat = indices.to(torch.int64)
    # Ones computed from the data, not `ones_like`: a constant is a memref global, and
    # the cuda target's gpu stage refuses one that a serial scatter loop (these, on
    # int64) leaves read in the host function.
    ones = (flat >= 0).to(torch.int64)
    counts = aten.index_put.default(flat.new_zeros(num_weights), [flat], ones, True)  # [R]
    at_most = torch.cumsum(counts, 0)                          # [R]: indices <= r, in [0, I]
    histogram = aten.index_put.default(flat.new_zeros(count + 1), [at_most],
                                       (at_most >= 0).to(torch.int64), True)      # [I + 1]
    ordered = torch.cumsum(histogram, 0).narrow(0, 0, count)   # [I]: the indices, sorted
    rank = torch.cumsum((counts > 0).to(torch.int64), 0) - 1   # [R]: >= 0 where present
    return counts[ordered[rank[flat]]]                         # [I]


def embedding_bag_dense_backward(grad, indices, offset2bag, bag_size, maximum_indices,
                                 num_weights, scale_grad_by_freq, mode,
                                 per_sample_weights=None, padding_idx=-1):
    """Sum and mean: row indices[i] gets grad[bag of i] (times i's sample weight, or over
    its bag's size; with scale_grad_by_freq, over `_eager_frequency`), summed over every
    i that names it, except padding. Max: each element of a non-empty bag's gradient
    goes to the row its max came from (eager's max mode ignores scale_grad_by_freq)."""
    bags, width = grad.shape
    zeros = grad.new_zeros(num_weights, width)
    if mode == 2:
        # bag_size: eager skips empty bags by it (their maximum_indices are not -1 there).
        filled = (bag_size.narrow(0, 0, bags) > 0).unsqueeze(1)
        column = torch.arange(width, device=grad.device)
        at = torch.where(filled, maximum_indices.to(torch.int64), 0) * width + column
        values = torch.where(filled, grad, 0)
        flat = aten.index_put.default(zeros.reshape(-1), [at.reshape(-1)], values.reshape(-1),
                                      True)
        return flat.reshape(num_weights, width)
    bag = offset2bag.to(torch.int64)
    keep = (bag >= 0) & (bag < bags)
    if padding_idx is not None and padding_idx >= 0:
        keep = keep & (indices != padding_idx)
    bag = torch.where(keep, bag, 0)
    rows = grad[bag]                                                            # [I, D]
    if per_sample_weights is not None:
        rows = rows * per_sample_weights.to(grad.dtype).unsqueeze(1)
    if scale_grad_by_freq:
        rows = rows / _eager_frequency(indices, num_weights).to(grad.dtype).unsqueeze(1)
    if mode == 1:
        rows = rows / bag_size[bag].to(grad.dtype).unsqueeze(1)  # >= 1 where kept
    rows = torch.where(keep.unsqueeze(1), rows, 0)
    # Accumulating: indices that repeat (in a bag, or across bags) add up.
    return aten.index_put.default(zeros, [indices.to(torch.int64)], rows, True)


TABLE = {
    aten._embedding_bag.default: embedding_bag,
    aten._embedding_bag_forward_only.default: embedding_bag,
    aten._embedding_bag_backward.default: embedding_bag_backward,
    aten._embedding_bag_dense_backward.default: embedding_bag_dense_backward,
    aten._embedding_bag_per_sample_weights_backward.default:
        embedding_bag_per_sample_weights_backward,
}
