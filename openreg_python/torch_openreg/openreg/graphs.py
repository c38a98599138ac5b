"""Graph capture and replay on openreg: ``torch.openreg.graph``,
``graph_pool_handle``, ``make_graphed_callables``, as ``torch.cuda`` has them.

The graph itself is ``torch.accelerator.Graph``, implemented in C++
(``openreg_python/csrc/aten/graph/GraphImpl.cpp``, registered with
``REGISTER_GRAPH_IMPL``); this module is the ``torch.cuda.graphs`` layer on
top of it. See ``docs/graphs.md``.
"""

from __future__ import annotations

import gc
from typing import Any, Callable, Optional

import torch
from torch.utils._pytree import tree_flatten, tree_unflatten

from .. import _C

_MODES = ("default", "global", "thread_local", "relaxed")


def is_current_stream_capturing() -> bool:
    """True if the current stream of the current device is capturing a graph
    (``torch.cuda.is_current_stream_capturing``)."""
    return _C._is_current_stream_capturing(-1)


def graph_pool_handle() -> tuple[int, int]:
    """An opaque id of a fresh memory pool, for graphs to share
    (``torch.cuda.graph_pool_handle``): pass it as ``pool=`` to each of them."""
    return _C._graph_pool_handle()


class OpenRegGraph(torch.accelerator.Graph):
    """A graph on openreg (``torch.cuda.CUDAGraph``): ``torch.accelerator.Graph``
    with CUDA's ``capture_begin(pool, capture_error_mode)`` signature."""

    def capture_begin(self, pool: Optional[tuple[int, int]] = None,
                      capture_error_mode: str = "global") -> None:
        """Begin capturing the current stream's work (``CUDAGraph.capture_begin``)."""
        if capture_error_mode not in _MODES:
            raise ValueError(f"capture_error_mode must be one of {_MODES}, got {capture_error_mode!r}")
        torch._C._acceleratorGraph.capture_begin(
            self, pool=pool, capture_error_mode=capture_error_mode)


class graph:
    """Context manager that captures the work of its body into ``openreg_graph``
    (``torch.cuda.graph``).

    On entry it synchronizes the device, collects garbage, empties the
    allocator's cache and makes ``stream`` current (by default a side stream
    shared by all captures: the default stream cannot be captured), then
    begins the capture with ``pool`` and ``capture_error_mode``.
    """

    default_capture_stream: Optional[torch.Stream] = None

    def __init__(self, openreg_graph: torch.accelerator.Graph,
                 pool: Optional[tuple[int, int]] = None,
                 stream: Optional[torch.Stream] = None,
                 capture_error_mode: str = "global") -> None:
        if not isinstance(openreg_graph, torch.accelerator.Graph):
            raise TypeError("torch.openreg.graph: expected a torch.openreg.OpenRegGraph "
                            f"(or torch.accelerator.Graph), got {type(openreg_graph).__name__}")
        if capture_error_mode not in _MODES:
            raise ValueError(f"capture_error_mode must be one of {_MODES}, got {capture_error_mode!r}")
        if stream is None:
            if graph.default_capture_stream is None:
                graph.default_capture_stream = torch.openreg.Stream()
            stream = graph.default_capture_stream
        self.openreg_graph = openreg_graph
        self.pool = pool
        self.capture_error_mode = capture_error_mode
        self.stream_ctx = torch.openreg.stream(stream)

    def __enter__(self) -> None:
        torch.openreg.synchronize()
        gc.collect()
        torch.openreg.empty_cache()
        self.stream_ctx.__enter__()
        try:
            torch._C._acceleratorGraph.capture_begin(
                self.openreg_graph, pool=self.pool, capture_error_mode=self.capture_error_mode)
        except BaseException:
            self.stream_ctx.__exit__(None, None, None)
            raise

    def __exit__(self, *exc_info: Any) -> None:
        try:
            if exc_info[0] is None:
                self.openreg_graph.capture_end()
            else:
                # The body failed (often an operation that invalidated the
                # capture): end the capture and let the body's error be the
                # one raised, not capture_end's "invalidated" that follows it.
                try:
                    self.openreg_graph.capture_end()
                except RuntimeError:
                    pass
                self.openreg_graph.reset()
        finally:
            self.stream_ctx.__exit__(*exc_info)


def _check_callable(func: Callable, args: tuple) -> tuple:
    if isinstance(func, torch.nn.Module):
        if func._backward_hooks or func._forward_hooks or func._forward_pre_hooks:
            raise RuntimeError("make_graphed_callables: modules must not have hooks registered "
                               "when they are passed (hooks would not be captured)")
        if any(b.requires_grad for b in func.buffers()):
            raise RuntimeError("make_graphed_callables: a module's buffers must not require grad")
    flat = tree_flatten(args)[0]
    if not all(isinstance(a, torch.Tensor) for a in flat):
        raise TypeError("make_graphed_callables: sample_args may only contain tensors "
                        "(in tuples, lists or dicts)")
    if torch.is_autocast_enabled("openreg") and torch.is_autocast_cache_enabled():
        raise RuntimeError("make_graphed_callables does not support the autocast cache: use "
                           "torch.autocast(..., cache_enabled=False)")
    return tuple(flat)


def _graphed_function(fwd_graph, bwd_graph, n_user_args: int, module_params: tuple,
                      output_spec, inputs: tuple, outputs: tuple, grad_outputs: tuple,
                      grad_inputs: tuple) -> Callable:
    class Graphed(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *args):
            # Copy the caller's tensors into the captured inputs, then replay.
            for static, new in zip(inputs[:n_user_args], args[:n_user_args]):
                if static.data_ptr() != new.data_ptr():
                    static.copy_(new)
            fwd_graph.replay()
            return tuple(o.detach() for o in outputs)

        @staticmethod
        @torch.autograd.function.once_differentiable
        def backward(ctx, *grads):
            for static, new in zip(grad_outputs, grads):
                if static is not None and new is not None and static.data_ptr() != new.data_ptr():
                    static.copy_(new)
            bwd_graph.replay()
            return tuple(g.detach() if g is not None else None for g in grad_inputs)

    def functionalized(*user_args, **user_kwargs):
        if user_kwargs:
            raise TypeError("a graphed callable takes positional tensor arguments only")
        flat = tree_flatten(user_args)[0]
        return tree_unflatten(Graphed.apply(*(tuple(flat) + module_params)), output_spec)

    return functionalized


def make_graphed_callables(callables, sample_args, num_warmup_iters: int = 3,
                           allow_unused_input: bool = False,
                           pool: Optional[tuple[int, int]] = None):
    """Graphed versions of callables (functions or modules), forward and
    backward each replayed from a graph (``torch.cuda.make_graphed_callables``).

    ``sample_args`` are tensors shaped like every later call's; the callables
    are warmed up ``num_warmup_iters`` times on a side stream, then their
    forward passes are captured in order and their backward passes in reverse
    order, all in one memory pool (``pool``, or a fresh one). A module's
    ``forward`` is replaced: it replays while the module is in the training
    mode it had when graphed, and runs eagerly otherwise.
    """
    just_one = not isinstance(callables, tuple)
    if just_one:
        callables, sample_args = (callables,), (sample_args,)
    if len(callables) != len(sample_args):
        raise ValueError("make_graphed_callables: one tuple of sample_args per callable")
    flat_args = [_check_callable(c, a) for c, a in zip(callables, sample_args)]
    module_params = [tuple(c.parameters()) if isinstance(c, torch.nn.Module) else ()
                     for c in callables]
    surfaces = [flat_args[i] + module_params[i] for i in range(len(callables))]
    fwd_graphs = [OpenRegGraph() for _ in callables]
    bwd_graphs = [OpenRegGraph() for _ in callables]
    mempool = graph_pool_handle() if pool is None else pool

    def needs_grad(surface):
        return tuple(i for i in surface if i.requires_grad)

    # Warm up on a side stream (lazy initialisations, the allocator's cache).
    torch.openreg.synchronize()
    with torch.openreg.stream(torch.openreg.Stream()):
        for func, args, surface in zip(callables, sample_args, surfaces):
            for _ in range(num_warmup_iters):
                outs = tuple(o for o in tree_flatten(func(*args))[0] if o.requires_grad)
                if outs:
                    torch.autograd.grad(outs, needs_grad(surface),
                                        grad_outputs=tuple(torch.empty_like(o) for o in outs),
                                        only_inputs=True, allow_unused=allow_unused_input)
            del outs
    torch.openreg.synchronize()

    static_outputs, output_specs = [], []
    for func, args, fwd_graph in zip(callables, sample_args, fwd_graphs):
        with graph(fwd_graph, pool=mempool):
            out = func(*args)
        flat, spec = tree_flatten(out)
        static_outputs.append(tuple(flat))
        output_specs.append(spec)

    static_grad_outputs, static_grad_inputs = [None] * len(callables), [None] * len(callables)
    for i in reversed(range(len(callables))):
        grad_outs = tuple(torch.empty_like(o) if o.requires_grad else None
                          for o in static_outputs[i])
        outs = tuple(o for o in static_outputs[i] if o.requires_grad)
        grads = None
        if outs:
            with graph(bwd_graphs[i], pool=mempool):
                grads = torch.autograd.grad(outs, needs_grad(surfaces[i]),
                                            grad_outputs=tuple(g for g in grad_outs if g is not None),
                                            only_inputs=True, allow_unused=allow_unused_input)
        grad_ins, k = [], 0
        for arg in surfaces[i]:
            if arg.requires_grad and grads is not None:
                grad_ins.append(grads[k])
                k += 1
            else:
                grad_ins.append(None)
        static_grad_outputs[i], static_grad_inputs[i] = grad_outs, tuple(grad_ins)
        # The captured forward's autograd graph is no longer needed: keeping
        # it would keep the parameters' AccumulateGrad nodes of the capture
        # stream alive (and warn at every later backward on another stream).
        static_outputs[i] = tuple(o.detach() for o in static_outputs[i])

    result = []
    for i, func in enumerate(callables):
        graphed = _graphed_function(fwd_graphs[i], bwd_graphs[i], len(flat_args[i]),
                                    module_params[i], output_specs[i], surfaces[i],
                                    static_outputs[i], static_grad_outputs[i],
                                    static_grad_inputs[i])
        if isinstance(func, torch.nn.Module):
            def forward(*args, _graphed=graphed, _mode=func.training, _eager=func.forward,
                        _module=func, **kwargs):
                if _module.training == _mode:
                    return _graphed(*args, **kwargs)
                return _eager(*args, **kwargs)
            func.forward = forward
            result.append(func)
        else:
            result.append(graphed)
    return result[0] if just_one else tuple(result)


__all__ = ["OpenRegGraph", "graph", "graph_pool_handle", "is_current_stream_capturing",
           "make_graphed_callables"]
