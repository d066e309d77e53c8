"""The ``mode`` fixture: every linker the op claims."""

import pytest
from _linkers import LINKER_MODES

from pytensor.compile.jax_ofg import OpFromJax


@pytest.fixture(
    params=[mode for _, mode in LINKER_MODES], ids=[i for i, _ in LINKER_MODES]
)
def mode(request, monkeypatch):
    """A compile mode; under JAX, any host call into an op fails the test."""
    if request.param == "JAX":

        def no_host_call(self, *args):
            raise AssertionError(f"{self} ran as a host call under the JAX linker")

        monkeypatch.setattr(OpFromJax, "host_function", no_host_call)
        monkeypatch.setattr(OpFromJax, "buffers_function", no_host_call)
    return request.param


@pytest.fixture(
    params=[mode for _, mode in LINKER_MODES if mode != "JAX"],
    ids=[i for i, mode in LINKER_MODES if mode != "JAX"],
)
def host_mode(request):
    """The linkers that call the op from the host (all but JAX)."""
    return request.param
