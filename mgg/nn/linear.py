"""The layers' linear maps as PyG builds them: glorot initialisation, and Linear(-1, out), a lazy
width whose bias exists from the start (so state_dicts load across mgg, PyG and torch)."""

from __future__ import annotations

import math

import torch
from torch import nn

from ..errors import MggError


def glorot(w: torch.Tensor) -> None:
    """PyG's glorot: U(-a, a), a = sqrt(6 / (size(-2) + size(-1)))."""
    a = math.sqrt(6.0 / (w.size(-2) + w.size(-1)))
    with torch.no_grad():
        w.uniform_(-a, a)


class _LazyLinear(nn.LazyLinear):
    """torch's LazyLinear with PyG's Linear(-1, out) parameters before the first call: the weight
    waits for its width, the bias ([out]) exists from the start. A state_dict saved before the
    first call then loads into either library's layer (torch's lazy bias could not take PyG's)."""

    def __init__(self, out_features: int, bias: bool = True):
        super().__init__(out_features, bias=False)
        if bias:
            self.bias = nn.Parameter(torch.zeros(out_features))

    def initialize_parameters(self, input) -> None:
        if self.has_uninitialized_params():
            with torch.no_grad():
                self.in_features = input.shape[-1]
                self.weight.materialize((self.out_features, self.in_features))
                self.reset_parameters()
        elif self.in_features == 0:  # sized by a loaded state_dict: the input must fit it
            if input.shape[-1] != self.weight.shape[-1]:
                raise MggError(
                    f"a lazy linear layer loaded with in_features {self.weight.shape[-1]} got input of width "
                    f"{input.shape[-1]}"
                )
            self.in_features = input.shape[-1]

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        if self.bias is not None and is_lazy(state_dict.get(prefix + "bias")):
            # torch's LazyLinear saved before its first call (mgg's own layers did): its bias has no
            # values to load; this one keeps its own (load_state_dict passes a copy of the dict)
            state_dict[prefix + "bias"] = self.bias.detach()
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)


class _GlorotLazyLinear(_LazyLinear):
    """_LazyLinear initialised by glorot once its width is known, as PyG's
    Linear(weight_initializer='glorot')."""

    def reset_parameters(self):
        if not self.has_uninitialized_params() and self.weight.numel():
            glorot(self.weight)
            if self.bias is not None:
                nn.init.zeros_(self.bias)


def linear(in_features: int, out_features: int, bias: bool = True, glorot: bool = False) -> nn.Module:
    """nn.Linear, or for in_features=-1 (PyG's lazy width) a lazy one, sized on the first call."""
    if in_features == -1:
        return (_GlorotLazyLinear if glorot else _LazyLinear)(out_features, bias=bias)
    if not isinstance(in_features, int) or in_features <= 0:
        raise MggError(f"in_channels must be a positive int or -1 (lazy), got {in_features!r}")
    return nn.Linear(in_features, out_features, bias=bias)


def is_lazy(t) -> bool:
    return isinstance(t, nn.parameter.UninitializedParameter)
