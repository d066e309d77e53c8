"""nutpie calls a model holding JAX ops through host callbacks, compiled in no process.

nutpie's Numba backend wraps PyTensor's Numba function of the log-density in
a ``numba.cfunc`` closure over the model, which Numba cannot cache: every
process types and lowers the whole log-density again before its first draw
(about 3 s for ``examples/stan_ode.py``, 10 s for larger models). A model
holding JAX ops gains nothing from it: its function enters object mode, and
holds the GIL, to call each op's XLA program anyway.

For such models (the log-density's graph holds a
:class:`~pytensor.compile._jax_ofg.host.op.JaxHostOp`), nutpie gets C function
pointers of the same signature made by :mod:`ctypes` instead:

* a graph that is one JAX op (a model's ``logp_dlogp`` is usually one
  island) calls the op's XLA program directly, as the Numba linker's direct
  thunk does, and copies its packed output buffer into nutpie's
  (:func:`flat_function`);
* any other graph calls PyTensor's Numba function (``vm.jit_fn``), which
  PyTensor caches on disk.

Both are pure functions of their arguments, so nutpie's chains call them from
their threads at once; the GIL is released while XLA runs. Models without JAX
ops keep nutpie's own ``cfunc``. Registers nothing itself: nutpie is made to
call :func:`compile_with_host_callbacks` by ``patches/nutpie_host_callbacks``.

Notes
-----
* The host callbacks hold the GIL for the Python part of each call (a few
  microseconds around the XLA program); chains run in parallel only as far as
  XLA does. jaxlib's LAPACK calls through SciPy's OpenBLAS from two threads at
  once ran no faster than from one; small systems (a stiff solver's Newton
  steps) make none (:mod:`~pytensor.compile._jax_ofg.small_linalg`).
* Each nutpie thread keeps the Python thread state ctypes made for it
  (:data:`MAX_KEPT_THREAD_STATES`), and is pinned to a CPU of its own
  (:mod:`~pytensor.compile._jax_ofg.cores.threads`) when the sampler that
  started it planned it (:func:`start_session`).
* ``numba.cfunc`` options passed to ``nutpie.compile_pymc_model`` keep
  nutpie's own function, compiled in every process.

Examples
--------
>>> import pymc as pm, nutpie                                # doctest: +SKIP
>>> compiled = nutpie.compile_pymc_model(model)               # doctest: +SKIP
>>> type(compiled).__name__                                   # doctest: +SKIP
'HostCallbackPyMCModel'
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import functools
import itertools
import logging
import math
import os
import threading
import weakref
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

import jax
import numpy as np

from pytensor.compile._jax_ofg import compat
from pytensor.compile._jax_ofg.cores import api as cores
from pytensor.compile._jax_ofg.host.op import graph_holds_jax_ops, one_jax_op
from pytensor.compile._jax_ofg.host.placement import host_device, runs_on_cpu
from pytensor.graph.basic import Apply, Constant
from pytensor.graph.fg import FunctionGraph


__all__ = [
    "EXPAND_SIGNATURE",
    "LOGP_SIGNATURE",
    "HostCallback",
    "aliased_buffer",
    "compile_with_host_callbacks",
    "flat_function",
    "pure_function",
]

_log = logging.getLogger(__name__)

_pointer = ctypes.c_void_p
#: nutpie's log-density: ``(n_dim, x, gradient out, logp out, user_data) -> status``.
LOGP_SIGNATURE = ctypes.CFUNCTYPE(
    ctypes.c_int64, ctypes.c_uint64, _pointer, _pointer, _pointer, _pointer
)
#: nutpie's expansion to draws: ``(n_dim, n_expanded, x, out, user_data) -> status``.
EXPAND_SIGNATURE = ctypes.CFUNCTYPE(
    ctypes.c_int64, ctypes.c_uint64, ctypes.c_uint64, _pointer, _pointer, _pointer
)

# nutpie's status codes (its Numba functions return the same).
_OK, _WRONG_SIZE, _RAISED, _NONFINITE_GRADIENT, _NONFINITE_LOGP = 0, -1, 1, 3, 4
_EXPAND_RAISED = -2


_THREADS = threading.local()
#: Threads whose Python thread state is kept (each one a few kilobytes that
#: live as long as the process): past it, a thread's calls make and delete
#: their own, and its pin and buffers are found by its native id.
MAX_KEPT_THREAD_STATES = 1024
_kept = itertools.count()
#: The samplers running now, by the address of their ``user_data`` (nutpie
#: passes it to every call): their threads' shares of the CPUs.
_SESSIONS: dict[int, cores.SamplerSession] = {}


def _enter_thread(user_data: int | None) -> None:
    """At the first call from a thread (or from its new Python state): keep its
    Python thread state, and pin it to a CPU of its own.

    Only threads Python did not start (nutpie's chains, not a Python thread
    calling the function itself) are pinned, and only for a sampler that
    planned their CPUs (:func:`start_session`):
    :meth:`~pytensor.compile._jax_ofg.cores.api.SamplerSession.pin_calling_thread`.
    """
    _THREADS.entered = True
    if not compat.is_foreign_thread():
        return
    if next(_kept) < MAX_KEPT_THREAD_STATES:
        compat.keep_python_thread_state()
    session = _SESSIONS.get(user_data or 0)
    if session is not None:
        session.pin_calling_thread()


def start_session(model: Any, threads: int) -> Any:
    """Return ``model`` to sample with ``threads`` threads: a copy whose calls tell
    the threads of this sampler from others', with their CPUs planned; the
    model itself where pinning does not apply.

    The session closes when the copy is gone (nutpie drops it with its
    sampler): its threads still alive get their affinity back.
    """
    session = cores.start_session(threads) if host_runs_on_cpu() else None
    if session is None:
        return model
    user_data = model.user_data.copy()  # an address of this sampler's own
    address = user_data.ctypes.data
    copy = dataclasses.replace(model, user_data=user_data)
    _SESSIONS[address] = session
    weakref.finalize(copy, _close_session, address)
    return copy


def _close_session(address: int) -> None:
    session = _SESSIONS.pop(address, None)
    if session is not None:
        session.close()


def host_runs_on_cpu() -> bool:
    """Whether host calls run their programs on a CPU (the flag
    ``jax_ofg__host_device``): only then are sampler threads pinned."""
    return runs_on_cpu(host_device())


class HostCallback:
    """A Python function nutpie calls through a C function pointer (``address``).

    Holds the :mod:`ctypes` object, whose lifetime is the pointer's.
    """

    def __init__(self, function: Callable, signature: type):
        self._c_function = signature(function)  # holds ``function``
        self.address: int = ctypes.cast(self._c_function, ctypes.c_void_p).value


def array_views(length: int) -> Callable[[int], np.ndarray]:
    """NumPy views of ``length`` doubles at an address, one made per address.

    nutpie reuses its buffers, so a chain's calls find their views in the
    memo; it is cleared when it grows past a few hundred addresses.
    """
    views: dict[int, np.ndarray] = {}
    array_type = ctypes.c_double * length

    def view(address: int) -> np.ndarray:
        array = views.get(address)
        if array is None:
            if len(views) > 512:
                views.clear()
            array = views[address] = np.frombuffer(
                array_type.from_address(address), dtype=np.float64
            )
        return array

    return view


#: Where an output lies in a flat function's buffers: ``(buffer, start, stop)``.
Slot = tuple[int, int, int | None]


def flat_function(
    function: Any,
) -> tuple[Callable[..., Sequence[np.ndarray]], list[Slot]]:
    """Return a compiled PyTensor ``function`` as flat buffers of its inputs' values.

    Without its storage, so that threads may call it at once. A graph that is
    one JAX op of static output shapes is the op's packed buffers (read-only
    views of JAX's), which the callbacks copy straight into nutpie's, and the
    slot of each output in them; its first input, nutpie's point, reaches XLA
    as a JAX array (:func:`_point_as_jax_array`). Any other graph is its
    outputs, each its own raveled buffer.
    """
    fgraph = function.maker.fgraph
    node = one_jax_op(fgraph)
    op = node.op if node is not None else None
    if op is None or any(None in t.shape for t in op.output_types):
        outputs = pure_function(function)
        return (
            lambda *inputs: [np.ravel(x) for x in outputs(*inputs)],
            [(i, 0, None) for i in range(len(fgraph.outputs))],
        )
    plan = op.packing.plan(
        [t.shape for t in op.output_types], [t.dtype for t in op.output_types]
    )
    slots = [plan[node.outputs.index(out)][:3] for out in fgraph.outputs]
    function = _of_graph_inputs(op.buffers_function(), node, fgraph)
    return _point_as_jax_array(function, fgraph.inputs[0].type), slots


#: XLA's CPU client aliases host memory aligned to this many bytes.
_XLA_ALIGNMENT = 64


def aliased_buffer(
    shape: tuple[int, ...], dtype: str, device: jax.Device | None = None
) -> tuple[np.ndarray, Any]:
    """Return a NumPy buffer and a JAX array of the same memory, or ``(None, None)``.

    ``(None, None)`` where JAX copies the buffer instead (another backend).
    The array is on ``device`` (JAX's default device if None), uncommitted
    to it, as JAX's arrays of NumPy arguments are: a jitted function first
    called with a NumPy array takes it without compiling again (a committed
    array, such as :func:`jax.dlpack.from_dlpack` gives, added 0.45 s to the
    first call of ``examples/stan_ode.py``'s log-density in a second process).
    """
    buffer = _aligned_empty(shape, dtype)
    array = _aliasing(buffer, device)
    if array is None:
        _log.debug("JAX copies host memory here: points are passed as NumPy arrays")
        return None, None
    return buffer, array


def _aligned_empty(shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """Return a zeroed NumPy array whose data XLA's CPU client can alias."""
    size = math.prod(shape) * np.dtype(dtype).itemsize
    raw = np.zeros(size + _XLA_ALIGNMENT, dtype=np.uint8)
    start = -raw.ctypes.data % _XLA_ALIGNMENT
    return raw[start : start + size].view(dtype).reshape(shape)


def _aliasing(buffer: np.ndarray, device: jax.Device | None) -> Any:
    """Return a JAX array on ``device`` of ``buffer``'s memory, or None if JAX copies."""
    with _on(device):
        array = jax.device_put(buffer, may_alias=True)
    return array if array.unsafe_buffer_pointer() == buffer.ctypes.data else None


def _point_as_jax_array(function: Callable, point_type: Any) -> Callable:
    """Return ``function`` of a point and more, given the point as a JAX array.

    JAX takes a NumPy argument through a transfer that made a call of
    ``examples/stan_ode.py``'s log-density about 10% slower than with a JAX
    array (another thread's work, waited for). Each calling thread keeps a
    JAX array that aliases a NumPy buffer of its own (:func:`aliased_buffer`)
    and copies the point into the buffer: the calls return only once XLA has
    read it (their outputs are read), and no other thread writes it. The
    array is on the device of the runtime of the thread's CPU, if it is
    pinned to one (:mod:`~pytensor.compile._jax_ofg.cores.threads`). A point
    of unknown shape is passed as it is.
    """
    if None in point_type.shape:
        return function
    shape, dtype = tuple(point_type.shape), point_type.dtype
    per_thread = _PerThread(lambda device: aliased_buffer(shape, dtype, device))

    def of_point(point: np.ndarray, *rest: Any) -> Any:
        buffer, array = per_thread.get()
        if buffer is None:
            return function(point, *rest)
        buffer[...] = point
        return function(array, *rest)

    return of_point


class _Slot(threading.local):
    """A value per thread; None until set (a class default: no raise and catch)."""

    value: Any = None


class _PerThread:
    """A value made once per calling thread and device, by ``make(device)``.

    Found on the thread's Python state; a thread that lost it (nutpie's
    threads past :data:`MAX_KEPT_THREAD_STATES`) finds it by its native id.
    The values of exited threads are dropped when another thread's is made
    (Linux's ``/proc``; elsewhere they stay).
    """

    def __init__(self, make: Callable[[jax.Device | None], Any]):
        self._make = make
        self._made: dict[tuple[int, jax.Device | None], Any] = {}
        self._slot = _Slot()

    def get(self) -> Any:
        value = self._slot.value
        if value is None:
            device = _home_device()
            key = (threading.get_native_id(), device)
            value = self._made.get(key)
            if value is None:
                self._forget_exited_threads()
                value = self._made[key] = self._make(device)
            self._slot.value = value
        return value

    def _forget_exited_threads(self) -> None:
        """Drop the values of threads that exited: they live as long as the thread."""
        if not os.path.isdir("/proc/self/task"):
            return
        alive = {int(tid) for tid in os.listdir("/proc/self/task")}
        for key in [key for key in self._made if key[0] not in alive]:
            del self._made[key]


def _of_graph_inputs(
    op_function: Callable, node: Apply, fgraph: FunctionGraph
) -> Callable[..., Any]:
    """Return ``op_function`` of ``node``'s inputs as a function of ``fgraph``'s inputs.

    ``node``'s constants (an island's data) are kept once, in memory aligned
    for XLA, and given to each device that calls use (JAX's default one, or
    the runtime of the calling thread's CPU) as arrays of that same memory,
    never copied per device, as the Numba linker's thunks hold them.
    """
    if list(node.inputs) == list(fgraph.inputs):
        return op_function
    position = {x: i for i, x in enumerate(fgraph.inputs)}
    data = [
        _aligned_copy(x.data) if isinstance(x, Constant) else None for x in node.inputs
    ]
    placed: dict[jax.Device | None, list] = {}

    def place(device: jax.Device | None) -> list:
        if device not in placed:
            placed[device] = [None if x is None else _placed(x, device) for x in data]
        return placed[device]

    template = _PerThread(place)
    sources = [(i, position[x]) for i, x in enumerate(node.inputs) if x in position]
    if sources == [(0, 0)] and len(fgraph.inputs) == 1:  # a point, then data
        return lambda point: op_function(point, *template.get()[1:])

    def call(*inputs):
        arguments = template.get().copy()
        for i, source in sources:
            arguments[i] = inputs[source]
        return op_function(*arguments)

    return call


def _aligned_copy(value: Any) -> np.ndarray:
    """Return ``value`` copied into memory XLA's CPU client can alias.

    Writeable (JAX copies a read-only array instead of aliasing it), and
    private: nothing but the arrays that alias it holds it.
    """
    value = np.asarray(value)
    copy = _aligned_empty(value.shape, value.dtype)
    copy[...] = value
    return copy


def _placed(value: np.ndarray, device: jax.Device | None) -> Any:
    """Return ``value`` on ``device``: its own memory where JAX can alias it."""
    array = _aliasing(value, device)
    if array is None:
        with _on(device):
            array = jax.device_put(value)
    return array


def _home_device() -> jax.Device | None:
    """Return the device of the runtime of the calling thread's CPU, if it is pinned."""
    pin = cores.thread_pin()
    return None if pin is None or pin.runtime is None else pin.runtime.device


def _on(device: jax.Device | None) -> contextlib.AbstractContextManager:
    """Make ``device`` JAX's default device in the block (no change if None)."""
    return contextlib.nullcontext() if device is None else jax.default_device(device)


def pure_function(function: Any) -> Callable[..., Sequence[Any]]:
    """Return a compiled PyTensor ``function``'s outputs as a function of its inputs' values.

    Without its storage, so that threads may call it at once: the host
    function of the graph's one JAX op, or else PyTensor's Numba function.
    """
    fgraph = function.maker.fgraph
    node = one_jax_op(fgraph)
    if node is None:
        return function.vm.jit_fn
    # Read-only views of JAX's buffers: the callbacks copy them into nutpie's.
    host_call = _of_graph_inputs(
        node.op.with_copied_outputs((False,) * len(node.outputs)).host_function(),
        node,
        fgraph,
    )
    picks = [node.outputs.index(out) for out in fgraph.outputs]
    if picks == list(range(len(node.outputs))):
        return host_call

    def picked_outputs(*inputs):
        outputs = host_call(*inputs)
        return [outputs[i] for i in picks]

    return picked_outputs


def logp_callback(
    flat_logp_dlogp: tuple[Callable, Sequence[Slot]],
    n_dim: int,
    shared: Sequence[np.ndarray],
) -> HostCallback:
    """Build nutpie's log-density callback over a :func:`flat_function` of ``(x, *shared)``.

    The function's outputs are the log-density and its gradient.
    """
    logp_dlogp, ((value_in, value_at, _), (gradient_in, start, stop)) = flat_logp_dlogp
    view, value_view = array_views(n_dim), array_views(1)
    # Where the value lies just before the gradient in one buffer (the usual
    # plan), one check of both is enough until one of them is not finite.
    together = value_in == gradient_in and value_at == start - 1

    def logp(dim, x, gradient_out, logp_out, user_data):
        if not getattr(_THREADS, "entered", False):
            _enter_thread(user_data)
        if dim != n_dim:
            return _WRONG_SIZE
        try:
            buffers = logp_dlogp(view(x), *shared)
            gradient, values = buffers[gradient_in], buffers[value_in]
            view(gradient_out)[:] = gradient[start:stop]
            value_view(logp_out)[0] = values[value_at]
            if together and np.isfinite(gradient[value_at:stop]).all():
                return _OK
            if not np.isfinite(gradient[start:stop]).all():
                return _NONFINITE_GRADIENT
            if not math.isfinite(values[value_at]):
                return _NONFINITE_LOGP
        except BaseException:  # a rejected proposal, as in nutpie's own function
            _log.debug("The log-density raised; nutpie rejects it", exc_info=True)
            return _RAISED
        return _OK

    return HostCallback(logp, LOGP_SIGNATURE)


def expand_callback(
    flat_expand: tuple[Callable, Sequence[Slot]],
    n_dim: int,
    n_expanded: int,
    shared: Sequence[np.ndarray],
) -> HostCallback:
    """Build nutpie's callback from a point to a draw over a :func:`flat_function`.

    The function, of ``(x, *shared)``, has one output: the draw's values.
    """
    expand, ((values_in, start, stop),) = flat_expand
    view = array_views(n_dim)
    out_view = array_views(n_expanded)

    def expand_draw(dim, expanded, x, out, user_data):
        if not getattr(_THREADS, "entered", False):
            _enter_thread(user_data)
        if dim != n_dim or expanded != n_expanded:
            return _WRONG_SIZE
        try:
            out_view(out)[:] = expand(view(x), *shared)[values_in][start:stop]
        except BaseException:
            _log.debug("Expanding a draw raised", exc_info=True)
            return _EXPAND_RAISED
        return _OK

    return HostCallback(expand_draw, EXPAND_SIGNATURE)


def _shared_values(model: Any, function: Any) -> list[np.ndarray]:
    """Return the values nutpie holds for ``function``'s shared variables, in input
    order.
    """
    return [model.shared_data[model.shared_var_keys[v]] for v in function.get_shared()]


def with_host_callbacks(model: Any) -> Any:
    """Return nutpie's compiled ``model`` with its functions called through host
    callbacks.
    """
    logp = logp_callback(
        flat_function(model.logp_func),
        model.n_dim,
        _shared_values(model, model.logp_func),
    )
    flat_expand = flat_function(model.expand_func)
    expand_shared = _shared_values(model, model.expand_func)
    expand = expand_callback(flat_expand, model.n_dim, model.n_expanded, expand_shared)
    if not graph_holds_jax_ops(model.expand_func.maker.fgraph.outputs):
        # Numba compiles it (or loads it from its cache) at its first call, on
        # the first chain's thread, holding the GIL the other chains' calls
        # need: done instead while the log-density's program compiles.
        point = np.zeros(model.n_dim)
        cores.beside_next_compile(lambda: flat_expand[0](point, *expand_shared))
    return dataclasses.replace(
        model, compiled_logp_func=logp, compiled_expand_func=expand
    )


@functools.cache
def host_callback_model_class(base: type) -> type:
    """Return nutpie's ``CompiledPyMCModel`` (``base``), whose ``with_data`` keeps host
    callbacks.
    """

    @dataclasses.dataclass(frozen=True)
    class HostCallbackPyMCModel(base):
        """A compiled PyMC model whose functions nutpie calls through host callbacks."""

        holds_jax_ops = True

        def with_data(self, **updates):
            return with_host_callbacks(super().with_data(**updates))

        def _make_sampler(self, settings, init_mean, cores_, *args, **kwargs):
            # nutpie's chains run on a thread per core it is given, at most one
            # per chain.
            chains = getattr(settings, "num_chains", cores_)
            model = start_session(self, min(cores_, chains))
            return super(HostCallbackPyMCModel, model)._make_sampler(
                settings, init_mean, cores_, *args, **kwargs
            )

    return HostCallbackPyMCModel


def compile_with_host_callbacks(
    nutpie_module: ModuleType,
    model: Any,
    pymc_initial_point_fn: Callable,
    var_names: Sequence[str] | None = None,
) -> Any:
    """Return nutpie's Numba-backend compilation of ``model``, with host callbacks for
    cfuncs.

    What ``nutpie.compile_pymc._compile_pymc_model_numba`` does, up to the
    two ``numba.cfunc`` calls: PyTensor's Numba functions, nutpie's copies of
    the shared variables' values (``with_data`` replaces them), dims and coords.
    """
    api = compat.nutpie_numba_api(nutpie_module)
    n_dim, n_expanded, logp_func, expand_func, initial_point, shape_info, renamed = (
        api.make_functions(
            model,
            mode="NUMBA",
            compute_grad=True,
            join_expanded=True,
            pymc_initial_point_fn=pymc_initial_point_fn,
            var_names=var_names,
        )
    )
    shared_data, shared_var_keys = {}, {}
    for variable in [*logp_func.get_shared(), *expand_func.get_shared()]:
        if variable in shared_var_keys:
            continue
        key = shared_var_keys[variable] = f"shared_{len(shared_var_keys)}"
        value = shared_data[key] = np.array(variable.get_value(), order="C", copy=True)
        value.flags.writeable = False
    dims, coords = api.prepare_dims_and_coords(model, shape_info, renamed)
    compiled = host_callback_model_class(api.compiled_model)(
        _n_dim=n_dim,
        dims=dims,
        _coords=coords,
        _shapes={name: tuple(shape) for name, _, shape in zip(*shape_info)},
        compiled_logp_func=None,
        compiled_expand_func=None,
        initial_point_func=initial_point,
        shared_data=shared_data,
        shared_var_keys=shared_var_keys,
        user_data=api.make_user_data(shared_var_keys, shared_data),
        n_expanded=n_expanded,
        shape_info=shape_info,
        logp_func=logp_func,
        expand_func=expand_func,
        reparameterized_names=renamed,
    )
    return with_host_callbacks(compiled)
