"""Running an AOTInductor library through its C interface (`AOTInductorModelContainerRun`, the
interface its C++ runners use) by ctypes, which releases the GIL for the call: torch's own
Python runner (`aoti_load_package`) holds the GIL for the whole forward, which would stop the
event loop and the tokenizer threads for every batch. The container holds one model instance
per runner, so several runners run the one library at once, with no guards to check."""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Any

import torch


class AotUnavailableError(RuntimeError):
    """The model cannot be compiled ahead of time (export failed, or the C interface is missing)."""


class AotModel:
    """One compiled library behind AOTInductor's C interface, callable from `instances` threads
    at once (each call holds one of the container's model instances, without the GIL)."""

    def __init__(self, library: Path, instances: int) -> None:
        aoti: Any = getattr(torch._C, "_aoti", None)
        if aoti is None or not hasattr(aoti, "unsafe_alloc_void_ptrs_from_tensors"):
            raise AotUnavailableError("this torch build has no AOTInductor runtime")
        self._aoti = aoti
        self._library = ctypes.CDLL(str(library))
        self._run = self._library.AOTInductorModelContainerRun
        self._run.restype = ctypes.c_int32
        self._handle = ctypes.c_void_p()
        _check(
            self._library.AOTInductorModelContainerCreateWithDevice(
                ctypes.byref(self._handle), ctypes.c_size_t(instances), b"cpu", None
            ),
            "create the model container",
        )
        outputs = ctypes.c_size_t()
        _check(
            self._library.AOTInductorModelContainerGetNumOutputs(
                self._handle, ctypes.byref(outputs)
            ),
            "read the number of outputs",
        )
        self._outputs = outputs.value

    def __call__(self, *tensors: torch.Tensor) -> torch.Tensor:
        if not self._handle:
            raise RuntimeError("this compiled model was closed")
        # The container steals the input handles (fresh references to our tensors) and hands
        # back new ones for the outputs, which become ordinary tensors again.
        # The library reads raw memory as it was exported: int64, contiguous, on the CPU.
        # Converted only where needed: `.to()` and `.contiguous()` let go of the GIL, and a
        # runner that does waits to get it back behind the event loop's Python (tokenizer.py);
        # the attribute reads keep it.
        inputs_checked = [
            t
            if t.dtype == torch.long and t.device.type == "cpu" and t.is_contiguous()
            else t.to("cpu", torch.long).contiguous()
            for t in tensors
        ]
        handles = self._aoti.unsafe_alloc_void_ptrs_from_tensors(inputs_checked)
        inputs = (ctypes.c_void_p * len(handles))(*[_pointer(handle) for handle in handles])
        outputs = (ctypes.c_void_p * self._outputs)()
        _check(
            self._run(
                self._handle,
                inputs,
                ctypes.c_size_t(len(handles)),
                outputs,
                ctypes.c_size_t(self._outputs),
                None,
                None,
            ),
            "run the model",
        )
        results = self._aoti.alloc_tensors_by_stealing_from_void_ptrs(
            [_capsule(pointer) for pointer in outputs]
        )
        result: torch.Tensor = results[0]
        return result

    def close(self) -> None:
        if self._handle:
            self._library.AOTInductorModelContainerDelete(self._handle)
            self._handle = ctypes.c_void_p()


def _check(code: int, what: str) -> None:
    if code != 0:
        raise RuntimeError(f"AOTInductor could not {what} (error {code})")


_capsule_api = ctypes.pythonapi
_capsule_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_capsule_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_capsule_api.PyCapsule_New.restype = ctypes.py_object
_capsule_api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


def _pointer(capsule: object) -> int | None:
    pointer: int | None = _capsule_api.PyCapsule_GetPointer(capsule, None)
    return pointer


def _capsule(pointer: int | None) -> object:
    return _capsule_api.PyCapsule_New(pointer, None, None)
