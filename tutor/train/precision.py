"""How a run computes on its device: which half precision autocast takes, whether the loss is scaled, whether
``torch.compile`` runs. One place decides, from what the preset asks (``config.bf16``: "mixed precision, please";
``config.half``; ``config.compile``) and what the device can do; ``fit`` prints the choice once, with its reason.

- **bfloat16** where the GPU has it in hardware (compute capability 8.0 and up: A100, H100, RTX 30xx and later):
  float32's exponent range, so no loss scaling.
- **float16 with loss scaling** on capability 7.x (Colab's free T4 is 7.5, the V100 7.0): their tensor cores take
  float16, and bfloat16 there is emulated (slow), and refused by ``torch.compile``'s Inductor (pytorch/pytorch#118122).
  float16's small exponent range makes small gradients underflow to 0, so the loss is multiplied by a large factor
  before the backward pass and the gradients divided by it before the step (``torch.amp.GradScaler``, which also
  skips a step whose gradients overflowed and lowers the factor).
- **float32** on older GPUs, on Apple's MPS, and on a CPU unless the preset asks (a CPU takes either half type).
- ``torch.compile`` where Inductor runs: a CPU, or a CUDA GPU of capability 7.0 or more with Triton installed.

The loss is scaled without touching the learner's ``train_step``: the runner's output carries the factor into the
backward pass (``ScaledBackward``), the clipping threshold ``fit`` passes is multiplied by it (clipping scaled
gradients at ``clip * scale`` is clipping the true ones at ``clip``), and the optimizer's ``step`` is
``GradScaler.step`` then ``update`` (``ScaledOptimizer``), which divides the gradients back first.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

import torch
import torch.nn as nn

HALF_TYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True)
class Precision:
    """What a run computes in: ``autocast`` (None: float32 throughout), ``scaled`` (float16's loss scaling),
    ``compile``, and why, in words."""

    autocast: torch.dtype | None
    scaled: bool
    compile: bool
    reason: str

    def describe(self) -> str:
        what = {None: "float32", torch.bfloat16: "bfloat16 autocast",
                torch.float16: "float16 autocast"}[self.autocast]
        if self.scaled:
            what += " with loss scaling (torch.amp.GradScaler)"
        return f"{what}, torch.compile {'on' if self.compile else 'off'}: {self.reason}"


def capability(device) -> tuple[int, int] | None:
    """A CUDA device's compute capability, e.g. (7, 5) for a T4; None for any other device."""
    device = torch.device(device)
    if device.type != "cuda":
        return None
    return tuple(torch.cuda.get_device_capability(device))


def has_triton() -> bool:
    return importlib.util.find_spec("triton") is not None


def choose(config, device) -> Precision:
    """The precision and compilation a run of ``config`` gets on ``device`` (see the module's docstring)."""
    device = torch.device(device)
    wants_half, wants_compile = getattr(config, "bf16", False), getattr(config, "compile", False)
    forced = getattr(config, "half", "auto")
    if forced not in ("auto", *HALF_TYPES):
        raise ValueError(f"config.half is {forced!r}: use 'auto', 'bfloat16' or 'float16'")
    if device.type == "cuda":
        major, minor = capability(device)
        name = f"{torch.cuda.get_device_name(device)}, compute capability {major}.{minor}"
        compiles = wants_compile and major >= 7 and has_triton()
        if wants_compile and not compiles:
            name += ("; torch.compile needs Triton, which is not installed" if major >= 7 else
                     "; torch.compile's Triton needs capability 7.0 or more")
        if not wants_half:
            return Precision(None, False, compiles, f"the preset asks for float32 ({name})")
        if forced == "float16" or (forced == "auto" and (7, 0) <= (major, minor) < (8, 0)):
            why = "forced by config.half" if forced == "float16" else "no bfloat16 in hardware below 8.0"
            return Precision(torch.float16, True, compiles, f"{why} ({name})")
        if forced == "bfloat16" or major >= 8:
            if major < 8:  # asked for by name: emulated, and Inductor refuses it
                return Precision(torch.bfloat16, False, False, f"forced by config.half, emulated below 8.0 ({name}; "
                                                               "no torch.compile for bfloat16 there)")
            return Precision(torch.bfloat16, False, compiles, f"bfloat16 in hardware ({name})")
        return Precision(None, False, compiles, f"no fast half precision below 7.0 ({name})")
    if device.type == "cpu":
        if not wants_half:
            return Precision(None, False, wants_compile, "the preset asks for float32 on a CPU")
        dtype = HALF_TYPES["float16" if forced == "float16" else "bfloat16"]
        return Precision(dtype, dtype == torch.float16, wants_compile, "asked for by the preset on a CPU")
    return Precision(None, False, False, f"{device.type}: float32, not compiled (neither measured there)")


class Autocast(nn.Module):
    """Wraps a model so that its forward pass runs under autocast in ``dtype`` (on ``device_type``). The parameters
    stay float32 (the optimizer updates them in full precision), matrix products run in ``dtype``, and the logits
    come back in float32, so that the loss (computed outside, by ``train_step`` or ``evaluate``) is full precision."""

    def __init__(self, model, device_type: str = "cuda", dtype: torch.dtype = torch.bfloat16):
        super().__init__()
        self.model = model
        self.device_type, self.dtype = device_type, dtype
        self.config = getattr(model, "config", None)

    def forward(self, *args, **kwargs):
        with torch.autocast(device_type=self.device_type, dtype=self.dtype):
            logits = self.model(*args, **kwargs)
        return logits.float()


class _TimesScale(torch.autograd.Function):
    """The identity going forwards; multiplies the gradient by ``scale`` going backwards: the same gradients, for
    every parameter, as ``(scale * loss).backward()``, whatever loss the caller computes from the output."""

    @staticmethod
    def forward(ctx, x, scale):
        ctx.scale = scale
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.scale, None


class ScaledBackward(nn.Module):
    """A runner whose output scales the backward pass by ``scaler``'s current factor (float16's loss scaling)."""

    def __init__(self, runner, scaler: torch.amp.GradScaler):
        super().__init__()
        self.runner, self.scaler = runner, scaler
        self.config = getattr(runner, "config", None)

    def forward(self, *args, **kwargs):
        out = self.runner(*args, **kwargs)
        if not torch.is_grad_enabled():
            return out
        self.scaler.scale(out.new_zeros(()))  # the scaler's own first call puts its factor on out's device
        return _TimesScale.apply(out, self.scaler.get_scale())


class ScaledOptimizer:
    """``optimizer`` whose ``step`` is ``GradScaler.step`` (divide the gradients by the factor; skip the step if
    any is inf or NaN) then ``GradScaler.update`` (lower the factor after an overflow, raise it after a run of
    good steps). Everything else is the optimizer's own."""

    def __init__(self, optimizer, scaler: torch.amp.GradScaler):
        self.optimizer, self.scaler = optimizer, scaler

    @property
    def param_groups(self):
        return self.optimizer.param_groups

    @property
    def state(self):
        return self.optimizer.state

    def zero_grad(self, set_to_none: bool = True):
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def step(self, closure=None):
        self.scaler.step(self.optimizer)
        self.scaler.update()

    def state_dict(self):
        return {"optimizer": self.optimizer.state_dict(), "scaler": self.scaler.state_dict()}

    def load_state_dict(self, state):
        self.optimizer.load_state_dict(state["optimizer"])
        self.scaler.load_state_dict(state["scaler"])


_SAID = set()


def say_once(precision: Precision, write=print) -> None:
    """Print the choice, once per process and choice."""
    text = f"precision: {precision.describe()}"
    if text not in _SAID:
        _SAID.add(text)
        write(text)
