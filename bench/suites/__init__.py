"""The suites, one module each, over the shared toolkit of common.py. Each suite is a function
Options -> rows (dicts with the CSV columns), yielded as it measures them; SUITES names them."""

from .ablation import ablation
from .common import Options
from .dist import dist
from .dlrm import dlrm
from .e2e import e2e
from .fetch import fetch
from .kernel import kernel
from .load import load
from .scaling import scaling
from .tta import tta
from .tune import tune

SUITES = {
    "kernel": kernel,
    "ablation": ablation,
    "scaling": scaling,
    "dist": dist,
    "e2e": e2e,
    "tune": tune,
    "load": load,
    "fetch": fetch,
    "tta": tta,
    "dlrm": dlrm,
}

__all__ = ["SUITES", "Options"]
