"""Detectors that need no GPU: host reads in a step, the dtypes matmuls run in, live tensors.

CUDA's sync debug mode only exists on CUDA. These see the same faults on any device, from the
operators torch dispatches and the tensors Python holds:

- :func:`count_host_reads` counts the operations that force a read of a tensor's value by the
  host (``aten._local_scalar_dense`` behind ``.item()``, ``bool(t)``, ``float(t)``; operators
  whose output size depends on values, such as ``nonzero``; ``.tolist()``, ``.numpy()`` and
  ``.cpu()``). On a GPU each one stalls the queue; a training step must have none.
- :func:`matmul_dtypes` records the dtype every matrix multiply of a forward pass computes in,
  so a mixed precision that silently runs in fp32 (or fp32 in a lower dtype) is seen.
- :func:`live_tensors` counts the tensors Python holds, and those still attached to an
  autograd graph: between steps a training loop holds none of the latter.
- :func:`saved_tensor_bytes` measures what a forward keeps for backward (activation memory).
"""

from __future__ import annotations

import gc
import itertools
import os
import sys
import weakref
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

aten = torch.ops.aten
# Operators whose result the host must read (a value, or a size that depends on values).
HOST_READ_OPS = {
    aten._local_scalar_dense,
    aten.nonzero,
    aten.masked_select,
    aten.unique_dim,
    aten._unique2,
    aten.equal,
}
# Tensor methods that hand the host a tensor's data (a copy to host memory on a GPU).
HOST_READ_METHODS = {torch.Tensor.tolist, torch.Tensor.numpy, torch.Tensor.cpu}
MATMUL_OPS = {
    aten.mm,
    aten.addmm,
    aten.bmm,
    aten.baddbmm,
    aten.convolution,
    aten._scaled_dot_product_flash_attention_for_cpu,
    aten._scaled_dot_product_flash_attention,
    aten._scaled_dot_product_efficient_attention,
    aten._scaled_dot_product_cudnn_attention,
}
_TORCH_DIR = os.path.dirname(torch.__file__)


def caller_location() -> str:
    """``file:line`` of the innermost frame outside torch and this module."""
    frame = sys._getframe(1)
    while frame is not None:
        name = frame.f_code.co_filename
        if not name.startswith(_TORCH_DIR) and name != __file__ and "<frozen" not in name:
            with suppress(ValueError):
                name = os.path.relpath(name)
            return f"{name}:{frame.f_lineno}"
        frame = frame.f_back
    return "?"


@dataclass
class HostReads:
    """Host reads seen while a probe was active, by source line."""

    by_location: Counter[str] = field(default_factory=Counter)
    by_operation: Counter[str] = field(default_factory=Counter)

    @property
    def count(self) -> int:
        return sum(self.by_location.values())

    def add(self, operation: str) -> None:
        self.by_location[caller_location()] += 1
        self.by_operation[operation] += 1

    def locations(self) -> list[dict[str, Any]]:
        """``[{location, count, message}]``, most frequent first (the benchmark's format)."""
        return [
            {"location": loc, "count": n, "message": "host read of a tensor value"}
            for loc, n in self.by_location.most_common()
        ]


class _DispatchReads(TorchDispatchMode):
    def __init__(self, reads: HostReads) -> None:
        super().__init__()
        self.reads = reads

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if func.overloadpacket in HOST_READ_OPS:
            self.reads.add(str(func.overloadpacket))
        return func(*args, **(kwargs or {}))


class _MethodReads(TorchFunctionMode):
    def __init__(self, reads: HostReads) -> None:
        super().__init__()
        self.reads = reads

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if func in HOST_READ_METHODS:
            self.reads.add(f"Tensor.{func.__name__}")
        return func(*args, **(kwargs or {}))


@contextmanager
def host_reads() -> Iterator[HostReads]:
    """Count host reads of tensor values inside the ``with`` block, on any device."""
    reads = HostReads()
    with _MethodReads(reads), _DispatchReads(reads):
        yield reads


def count_host_reads(step: Callable[[], Any], steps: int) -> dict[str, Any]:
    """Run ``step`` ``steps`` times and report its host reads (the benchmark's sync format)."""
    with host_reads() as reads:
        for _ in range(steps):
            step()
    return {
        "measured": True,
        "method": "dispatch",
        "count": reads.count,
        "steps": steps,
        "locations": reads.locations(),
    }


class _MatmulDtypes(TorchDispatchMode):
    def __init__(self, seen: Counter[str]) -> None:
        super().__init__()
        self.seen = seen

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if func.overloadpacket in MATMUL_OPS:
            first = next((a for a in args if isinstance(a, torch.Tensor)), None)
            if first is not None:
                self.seen[str(first.dtype).removeprefix("torch.")] += 1
        return func(*args, **(kwargs or {}))


def matmul_dtypes(run: Callable[[], Any]) -> dict[str, int]:
    """The dtypes the matrix multiplies of ``run()`` (a forward, or a whole training step)
    computed in, with their counts."""
    seen: Counter[str] = Counter()
    with _MatmulDtypes(seen):
        run()
    return dict(seen)


def expected_matmul_dtype(
    autocast_dtype: torch.dtype | None, param_dtype: torch.dtype | None
) -> str:
    """The dtype a precision's matrix multiplies must compute in."""
    return str(autocast_dtype or param_dtype or torch.float32).removeprefix("torch.")


# The tensors that existed when scanning_new_objects froze the rest: still counted, by weak
# reference (one made before a run can grow in place during it: resize_, set_)
_FROZEN_TENSORS: list[weakref.ref[torch.Tensor]] = []


def _tensors(objects: Iterable[object]) -> Iterator[torch.Tensor]:
    """The real tensors among ``objects``: type() alone is read (no attribute lookups on an
    object), and a fake tensor, which has no storage, is left out."""
    for obj in objects:
        if issubclass(type(obj), torch.Tensor) and not issubclass(type(obj), FakeTensor):
            yield obj  # type: ignore[misc]


@contextmanager
def scanning_new_objects() -> Iterator[None]:
    """Inside, :func:`live_tensors` walks only the objects made since entering, and the
    tensors there were then: the other objects from before (every imported module's, a test
    session's) are frozen out of the garbage collector's view (:func:`gc.freeze`), so a scan
    walks what the run made, not the whole process. A process that froze objects itself keeps
    them as it had them."""
    if gc.get_freeze_count():
        yield
        return
    gc.collect()  # what is garbage already is freed, not frozen
    _FROZEN_TENSORS[:] = [weakref.ref(t) for t in _tensors(gc.get_objects())]
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
        _FROZEN_TENSORS.clear()


def live_tensors() -> dict[str, float]:
    """Tensors Python holds now: how many, their storage (each counted once), and how many
    are still attached to an autograd graph (each of those keeps the graph's saved tensors)."""
    gc.collect()
    frozen = (t for t in (ref() for ref in _FROZEN_TENSORS) if t is not None)
    storages: dict[int, int] = {}
    count = graph = 0
    for tensor in itertools.chain(_tensors(gc.get_objects()), frozen):
        count += 1
        graph += tensor.grad_fn is not None
        try:
            storage = tensor.untyped_storage()
            storages[storage.data_ptr()] = storage.nbytes()
        except (RuntimeError, NotImplementedError):  # sparse or meta tensors: no plain storage
            continue
    return {"count": count, "graph_attached": graph, "bytes": float(sum(storages.values()))}


def saved_tensor_bytes(run: Callable[[], Any]) -> int:
    """Bytes of the tensors autograd saves for backward while ``run()`` (a training forward)
    builds its graph, as a saved-tensor hook sees them: what activation memory a model keeps
    (gradient checkpointing keeps a block's input, not its inside)."""
    total = 0

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        nonlocal total
        total += tensor.numel() * tensor.element_size()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        run()
    return total
