"""A broken autocast kernel for torchvision's roi_align on CPU (planted: the folder's op
list must catch it): it runs the op in the region's dtype instead of float32, as a kernel
registered under the wrong policy would. Imported with ``--backend-module
planted_roi_align`` after torchvision, it replaces torchvision's own AutocastCPU kernel for
the process."""

from __future__ import annotations

import warnings

import torch
import torchvision  # noqa: F401 - defines torchvision::roi_align and its kernels

_LIB = torch.library.Library("torchvision", "IMPL")
_BELOW = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCPU)


def _roi_align_in_region_dtype(input, rois, *args):  # noqa: ANN001, ANN002, ANN202, A002
    dtype = torch.get_autocast_dtype("cpu")
    with torch._C._ExcludeDispatchKeyGuard(_BELOW):
        return torch.ops.torchvision.roi_align(input.to(dtype), rois.to(dtype), *args)


with warnings.catch_warnings():  # torch warns that it overrides torchvision's kernel
    warnings.simplefilter("ignore")
    _LIB.impl("roi_align", _roi_align_in_region_dtype, "AutocastCPU")
