"""kornia's float32 islands (``pip install kornia``): an image metric, the loss made from
it, and a geometric fit, each computed with autocast left, declared as their docstrings
state them (kornia 0.9.0).

- ``kornia.metrics.ssim(img1, img2, window_size)`` (metrics/ssim.py:150-260): "Half-precision
  inputs are evaluated in float32 for numerical stability ... Filtering runs with autocast
  disabled; the result uses the promoted input dtype" (:163-166): a float32 island returning
  its input's dtype.
- ``kornia.losses.ssim_loss(img1, img2, window_size)`` (losses/ssim.py:26-83): the SSIM map,
  then ``clamp((1 - ssim) / 2, 0, 1)`` and its mean (:77-80) in the map's dtype, the input's:
  ``ending="input"``.
- ``kornia.geometry.homography.find_homography_dlt(points1, points2, weights)``
  (geometry/homography.py:500-545): "A caller's autocast region does not change the fit"
  (:518); the DLT system is built and solved inside ``_autocast_disabled`` (:541) in the
  points' dtype, and the homography has it. Declared for float32 points and weights
  (``arguments``), as kornia's matchers give them: there the region must not lower the fit.
  Half points are fitted in their own dtype by design (no float32 core is promised).

Not declared: ``gaussian_blur2d`` and ``rgb_to_lab`` (filters/gaussian.py:106-107,
color/lab.py:43) promise float32 for float16 and bfloat16 inputs only; a float32 input
inside a region is left to the region's autocast by design, which no island shape states.
"""

from __future__ import annotations

import importlib.metadata

import kornia
import torch

from amp_conformance.checks.wrappers.declare import Float32Island, tensor

VERSION = importlib.metadata.version("kornia")
DEVICES = ("cpu", "cuda")


def _images(device: str) -> tuple[torch.Tensor, torch.Tensor]:
    return (tensor(1, 3, 16, 16, device=device).sigmoid(),
            tensor(1, 3, 16, 16, device=device, seed=6).sigmoid())


def _correspondences(device: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    points1 = tensor(1, 8, 2, device=device) * 50
    shift = torch.tensor([3.0, -2.0], device=device)
    return points1, points1 * 1.1 + shift, torch.ones(1, 8, device=device)


WRAPPERS = [
    Float32Island(name="kornia.metrics.ssim", devices=DEVICES,
                  build=lambda device: lambda a, b: kornia.metrics.ssim(a, b, 5),
                  inputs=_images, returns="input", library="kornia", version=VERSION),
    Float32Island(name="kornia.losses.ssim_loss", devices=DEVICES,
                  build=lambda device: lambda a, b: kornia.losses.ssim_loss(a, b, 5),
                  inputs=_images, returns="input", ending="input", library="kornia",
                  version=VERSION),
    Float32Island(name="kornia.geometry.find_homography_dlt", devices=DEVICES,
                  build=lambda device: kornia.geometry.homography.find_homography_dlt,
                  inputs=_correspondences, arguments=(torch.float32,) * 3, returns="input",
                  library="kornia", version=VERSION),
]
