"""What a run runs on and in which arithmetic: the device, the precision and the hardware facts they are chosen from.

Named for the hardware, not for one of the options: the ``device`` option (:func:`resolve_device`) and the
``precision`` option (:func:`resolve_precision`: ``auto`` is chosen from the device's :class:`Hardware` facts and
from what was measured on it) are both read against what the machine has. The shared epoch loop
(:mod:`engine.loop`) resolves them for every family and applies the precision around a task's forward pass
(:func:`autocast`); specs, presets, forms and the command line check them here. Nothing here imports torch at
import time, so specs and presets that check an option load fast.
"""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.errors import GaptuiError

if TYPE_CHECKING:
    import torch

#: The ``precision`` run option: ``fp32``, ``bf16`` (the model's forward pass under bf16 autocast; similarities,
#: softmax, losses, evaluation, weights and optimiser state in fp32) or ``auto`` (:func:`resolve_precision`).
PRECISIONS = ("auto", "fp32", "bf16")
#: The ``compile`` run option: whether the model trains through ``torch.compile``, applied by the shared epoch loop
#: (``on``; ``auto``: where the task says it pays: alignment's long CPU runs, ``alignment.training.wants_compile``).
COMPILE_MODES = ("auto", "on", "off")
#: The ``device`` run option: ``auto`` (CUDA when there is one), ``cpu``, ``cuda`` or ``cuda:N``.
DEVICE_PATTERN = r"auto|cpu|cuda(:\d+)?"


@dataclass(frozen=True)
class RunOptions:
    """How a run uses the machine: ``precision`` (:data:`PRECISIONS`), ``device`` (:data:`DEVICE_PATTERN`) and
    ``compile`` (:data:`COMPILE_MODES`), none of them resolved yet (``auto`` stays ``auto``).

    A family's spec keeps them as its own fields, under these names, hashed as they always were; it hands them to
    the shared epoch loop as this one object (:meth:`engine.tasks.TaskSpec.run_options`), which resolves the device
    and the precision. :meth:`check` is the one check of these options, wherever a value comes from: a spec's
    ``validate``, a preset's ``[run]`` table, ``gaptui train --precision``, ``--device``.
    """

    precision: str = "auto"
    device: str = "auto"
    compile: str = "auto"

    def check(self, where: str = "") -> RunOptions:
        """These options when each is one of its choices; else a one-line :class:`GaptuiError` naming ``where``,
        the option, the value and its choices (with the nearest choice, for a misspelt name)."""
        import re

        from engine.errors import did_you_mean

        at = f"{where}: " if where else ""
        for key, choices in (("precision", PRECISIONS), ("compile", COMPILE_MODES)):
            value = getattr(self, key)
            if value not in choices:
                hint = did_you_mean(value, choices) if isinstance(value, str) else ""
                raise GaptuiError(f"{at}{key} {value!r} is not one of {', '.join(choices)}{hint}")
        if not isinstance(self.device, str) or not re.fullmatch(DEVICE_PATTERN, self.device):
            raise GaptuiError(f"{at}device '{self.device}': expected auto, cpu, cuda or cuda:N")
        return self


def resolve_device(name: str) -> torch.device:
    """``auto`` (CUDA when there is one), ``cpu``, ``cuda``, ``cuda:N``; one-line error when CUDA is missing."""
    import torch

    RunOptions(device=name).check("--device")
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise GaptuiError(f"device '{name}' requested but no CUDA device is available; use --device cpu")
    return torch.device(name)


def cpu_name() -> str:
    """The CPU model (``/proc/cpuinfo``), else the architecture."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def device_fields(device: torch.device) -> dict[str, str]:
    """``device`` and ``device_name`` (the GPU's or the CPU's model) for ``result.json``."""
    import torch

    name = torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_name()
    return {"device": str(device), "device_name": name}


#: What ``auto`` chooses on hardware with native bf16, per device type, from the measurements recorded in
#: ``docs/performance.md`` (``benchmarks/bench_precision.py``): True only where bf16 was measured faster per epoch
#: for every model *and* its accuracy equal to fp32's within the seed spread. A device type not measured is False.
#: CPU (AVX-512 bf16, no AMX, 2 cores, 2026-12-01, bf16 on the sparse path): bf16 faster per epoch for every
#: model (1.09-1.40x on one thread), but 3 of 12 model x noise cells outside the seed spread (GCN -0.6 and +0.3,
#: GIN -1.3 points): fp32. CUDA: not measured yet: fp32.
AUTO_BF16: dict[str, bool] = {"cpu": False, "cuda": False}
#: Whether ``auto`` lets fp32 matrix products use TF32 on a CUDA device that has it (compute capability >= 8.0),
#: by the same rule; ``fp32`` set explicitly always means full fp32 products.
AUTO_TF32 = False


@dataclass(frozen=True)
class Hardware:
    """What :func:`choose_precision` needs to know about a device: its type (``cpu``, ``cuda``), whether it has
    native bf16 arithmetic (:func:`native_bf16`) and TF32 matrix units (CUDA compute capability >= 8.0)."""

    kind: str
    bf16: bool
    tf32: bool = False


def cpu_has_bf16(cpuinfo: str | None = None) -> bool:
    """Whether the CPU has native bf16 arithmetic: the ``amx_bf16`` or ``avx512_bf16`` flag of ``/proc/cpuinfo``
    (``cpuinfo`` is its text; read when None). False where the file cannot be read."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return False
    for line in cpuinfo.splitlines():
        if line.startswith("flags") and {"amx_bf16", "avx512_bf16"} & set(line.split(":", 1)[-1].split()):
            return True
    return False


def hardware_of(device: torch.device | str) -> Hardware:
    """The :class:`Hardware` facts of ``device``: CUDA compute capability >= 8.0 (bf16 and TF32), CPU flags."""
    import torch

    device = device if isinstance(device, torch.device) else torch.device(device)
    if device.type == "cuda":
        major, _ = torch.cuda.get_device_capability(device)
        return Hardware("cuda", bf16=major >= 8, tf32=major >= 8)
    if device.type == "cpu":
        return Hardware("cpu", bf16=cpu_has_bf16())
    return Hardware(device.type, bf16=False)


def choose_precision(
    precision: str,
    hardware: Hardware,
    measured: dict[str, bool] | None = None,
    tf32_measured: bool | None = None,
) -> tuple[str, bool]:
    """The precision a run trains in and whether fp32 matrix products may use TF32, from the asked ``precision``
    and the device's :class:`Hardware` facts (a pure function: the facts and the measurements are arguments).

    ``fp32`` and ``bf16`` are taken as asked (``fp32``: no TF32). ``auto`` is ``bf16`` only where the hardware has
    native bf16 **and** ``measured[hardware.kind]`` (default :data:`AUTO_BF16`) says bf16 was measured as accurate
    and faster; otherwise ``fp32``, with TF32 where the device has it and ``tf32_measured`` (default
    :data:`AUTO_TF32`) says so.
    """
    RunOptions(precision=precision).check()
    measured = AUTO_BF16 if measured is None else measured
    tf32_measured = AUTO_TF32 if tf32_measured is None else tf32_measured
    if precision != "auto":
        return precision, False
    if hardware.bf16 and measured.get(hardware.kind, False):
        return "bf16", False
    return "fp32", bool(hardware.tf32 and tf32_measured)


def resolve_precision(precision: str, device: torch.device | str = "cpu") -> str:
    """The precision a run on ``device`` trains in (``fp32`` or ``bf16``): :func:`choose_precision` with the
    device's :func:`hardware_of` facts. On a CUDA device it also sets ``torch.backends.cuda.matmul.allow_tf32``
    (and cuDNN's) to the TF32 choice, so that an fp32 run's products are what was chosen, not a library default.
    """
    RunOptions(precision=precision).check()
    if precision != "auto" and str(device) == "cpu":
        return precision  # nothing to look up
    hardware = hardware_of(device)
    # GAPTUI_AUTO_TF32=1/0 overrides AUTO_TF32 for a measurement (benchmarks/gpu_check.py times TF32 this way)
    override = os.environ.get("GAPTUI_AUTO_TF32")
    chosen, tf32 = choose_precision(precision, hardware, tf32_measured=None if override is None else override == "1")
    if hardware.kind == "cuda":
        import torch

        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32
    return chosen


def autocast(precision: str, device: torch.device | str = "cpu") -> Any:
    """The context of a forward pass in ``precision``: bf16 autocast on ``device``'s type, or nothing (fp32).

    Parameters stay fp32 (they are the master weights the optimiser updates); a family computes what must stay
    exact (similarities, softmax, loss) outside this context, from the forward pass's output cast to fp32.
    """
    import contextlib

    import torch

    if precision != "bf16":
        return contextlib.nullcontext()
    kind = device.type if isinstance(device, torch.device) else torch.device(device).type
    return torch.autocast(kind, dtype=torch.bfloat16)
