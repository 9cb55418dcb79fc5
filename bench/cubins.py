"""The CUDA kernels compiled as the extension compiles them: csrc/kernels/*.cu with its own flags
(csrc/build_flags.json) and the NVSHMEM wheel's headers, so the NVSHMEM-get variants are in it, to
one cubin per source and arch, with ptxas's -v log. What the compiler checks read (bench.resources:
registers and spills from the log; bench.sass: the loads in flight from the cubin's SASS); one
compile serves both. Needs nvcc, not a GPU.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KERNELS = ROOT / "csrc" / "kernels"
FLAGS = json.loads((ROOT / "csrc" / "build_flags.json").read_text())
DEFINES = ["-DMGG_WITH_CUDA", "-DMGG_WITH_NVSHMEM"]  # as setup.py builds the CUDA extension


@dataclass(frozen=True)
class Cubin:
    source: str  # the .cu file's name: table.cu
    arch: str  # the SM version: "90"
    path: Path
    ptxas_log: str  # ptxas -v on stderr: the resources of every entry function


def find_nvcc() -> str | None:
    """nvcc where setup.py looks for it: CUDA_HOME, else CUDA_PATH; /usr/local/cuda; PATH."""
    for d in (os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if d and os.access(os.path.join(d, "bin", "nvcc"), os.X_OK):
            return os.path.join(d, "bin", "nvcc")
    return shutil.which("nvcc")


def nvshmem_include() -> Path:
    spec = importlib.util.find_spec("nvidia.nvshmem")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(
            "bench.cubins: the NVSHMEM wheel is not installed (pip install nvidia-nvshmem-cu13): "
            "without its headers the NVSHMEM-get kernels, the ones that spill, are not compiled"
        )
    return Path(spec.submodule_search_locations[0]) / "include"


def compile_flags(arch: str) -> list[str]:
    return (
        FLAGS["nvcc"]
        + DEFINES
        + [f"-U{m}" for m in FLAGS["nvcc_undefine"]]
        + [f"-I{nvshmem_include()}", f"-gencode=arch=compute_{arch},code=sm_{arch}", "-Xptxas", "-v"]
    )


def compile_kernels(nvcc: str, archs: list[str], folder: Path, log=print) -> list[Cubin]:
    """Every csrc/kernels/*.cu for every arch, into folder/<stem>.sm_<arch>.cubin."""
    out = []
    for source in sorted(KERNELS.glob("*.cu")):
        for arch in archs:
            log(f"bench.cubins: {source.name} for sm_{arch}", file=sys.stderr)
            path = folder / f"{source.stem}.sm_{arch}.cubin"
            cmd = [nvcc, "-cubin", "-o", str(path), *compile_flags(arch), str(source)]
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                raise SystemExit(f"bench.cubins: nvcc failed on {source.name} (sm_{arch}):\n{r.stderr[-3000:]}")
            out.append(Cubin(source.name, arch, path, r.stderr))
    return out


def demangle(names: list[str]) -> list[str]:
    if not names or shutil.which("c++filt") is None:
        return names
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True, check=True).stdout
    return out.splitlines()


def short_name(name: str) -> str:
    """A demangled kernel without namespaces, argument list or enum casts:
    aggregate_blocks_kernel<float, TableFetch, NvshmemGetFetch<1>>."""
    name = re.sub(r"^__nv_static_\w+?_(?=_Z)", "", name)  # nvcc's prefix of internal-linkage kernels
    if name.startswith("_Z"):
        name = demangle([name])[0]
    name = re.sub(r"^void ", "", name)
    name = re.sub(r"\([^()]*(\([^()]*\)[^()]*)*\)$", "", name)  # the argument list
    name = re.sub(r"(mgg::kernels::|\(anonymous namespace\)::|mgg::)", "", name)
    name = re.sub(r"\(\w+\)(\d+)", r"\1", name)  # (GetScope)1 -> 1
    return name.replace("> >", ">>").replace(" >", ">")
