"""Hypothesis property of ``_amp_update_scale_``: over random sequences of finite and
non-finite steps and random factors, the kernel follows the pure-Python model of
``kernels.model_update`` after every call.

The declarative sequences of ``cases.UPDATE_CASES`` pin the known corners (growth at the
interval, back-off, overflow refused); the property looks for the ones nobody listed.
Factors are drawn exactly representable in float32, so double and float32 arithmetic
round the same and the comparison can be bitwise.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given
from hypothesis import settings as Settings
from hypothesis import strategies as st

from amp_conformance.checks.gradscaler.cases import UpdateCase
from amp_conformance.checks.gradscaler.kernels import f32, run_update_sequence


@dataclass(frozen=True)
class UpdateExample:
    init_scale: float
    growth_factor: float
    backoff_factor: float
    growth_interval: int
    init_tracker: int
    found_inf: tuple[float, ...]

    def as_case(self) -> UpdateCase:
        return UpdateCase("generated", "a generated sequence", self.found_inf,
                          self.init_scale, self.growth_factor, self.backoff_factor,
                          self.growth_interval, self.init_tracker)


#: mostly finite steps, so that growth happens; 2.0 is several optimizers' found_inf summed
_FLAGS = st.sampled_from((0.0, 0.0, 0.0, 1.0, 2.0))


@st.composite
def update_examples(draw) -> UpdateExample:
    interval = draw(st.integers(1, 6))
    return UpdateExample(
        init_scale=f32(draw(st.one_of(
            st.sampled_from((65536.0, 1.0, 3.0, 2.0**-20, 1e38, 2.0**127)),
            st.floats(2.0**-30, 2.0**127, width=32)))),
        growth_factor=draw(st.sampled_from((2.0, 1.5, 4.0, 16.0, 1.25))),
        backoff_factor=draw(st.sampled_from((0.5, 0.25, 0.75, 0.125))),
        growth_interval=interval,
        init_tracker=draw(st.integers(0, interval - 1)),
        found_inf=tuple(draw(st.lists(_FLAGS, min_size=1, max_size=20))),
    )


def check_update_property(device: str, numerics: str, settings: Settings) -> None:
    """Run the property; a failure raises the shrunk example's ConformanceFailure."""
    def update_scale_follows_model(example: UpdateExample) -> None:
        run_update_sequence(device, example.as_case(), numerics)

    update_scale_follows_model.__name__ = update_scale_follows_model.__qualname__ = (
        f"amp_update_scale_follows_model_{device}")
    settings(given(example=update_examples())(update_scale_follows_model))()
