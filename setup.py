"""Builds mgg._C against the torch that is installed (or, with pip's default build isolation,
the one pip put in the build environment: mgg checks at import that they agree). Compiler flags
come from csrc/build_flags.json (shared with CMakeLists.txt).

With nvcc available the CUDA kernels and the NVSHMEM device code are compiled for the archs in
TORCH_CUDA_ARCH_LIST (default: csrc/build_flags.json), even on a machine without a GPU;
otherwise, or with MGG_CPU_ONLY=1, a CPU-only extension is built and the build says so.

Headers: the CUDA toolkit's own headers come first. torch's CUDA wheels ship newer headers
(nvidia/cu13/include: CCCL, cuda_fp16.h ...) that an older nvcc refuses, and the libraries' headers
(cusparse.h, cublas_v2.h) that a bare toolkit may lack; only the latter are used, through a
folder of links to the wheel headers the toolkit does not have.
"""

import glob
import importlib.util
import json
import os
import re
import shutil
import subprocess
from importlib.metadata import PackageNotFoundError, requires, version
from pathlib import Path

from setuptools import setup

ROOT = Path(__file__).parent
FLAGS = json.loads((ROOT / "csrc" / "build_flags.json").read_text())


def fail(msg: str):
    raise SystemExit(f"mgg setup: {msg}")


def find_cuda_home():
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    for c in ([home] if home else []) + ["/usr/local/cuda"]:
        if c and (Path(c) / "bin" / "nvcc").exists():
            return c
    nvcc = shutil.which("nvcc")
    return str(Path(nvcc).resolve().parent.parent) if nvcc else None


def nvcc_version(cuda_home: str) -> tuple:
    out = subprocess.run([str(Path(cuda_home) / "bin" / "nvcc"), "--version"], capture_output=True, text=True).stdout
    m = re.search(r"release (\d+)\.(\d+)", out)
    if not m:
        fail(f"cannot read the CUDA version of {cuda_home}/bin/nvcc")
    return int(m.group(1)), int(m.group(2))


def check_cuda_versions(cuda_home: str, torch_cuda: str) -> str:
    """nvcc must build for the CUDA major version torch was built with."""
    major, minor = nvcc_version(cuda_home)
    t_major = int(torch_cuda.split(".")[0])
    if major != t_major:
        fail(
            f"nvcc in {cuda_home} is CUDA {major}.{minor} but torch was built with CUDA {torch_cuda}: set CUDA_HOME "
            f"to a CUDA {t_major} toolkit, or `pip install nvidia-cuda-nvcc-cu{t_major}` and point CUDA_HOME at it "
            f"(or MGG_CPU_ONLY=1 for a CPU-only build)"
        )
    return f"{major}.{minor}"


def nvshmem_dir():
    """The installed nvidia-nvshmem wheel (headers and device library). torch loads whichever
    version is installed, so the extension builds against that same one; a version other than
    torch's pin is reported, not refused."""
    spec = importlib.util.find_spec("nvidia.nvshmem")
    pin = [r for r in (requires("torch") or []) if r.startswith("nvidia-nvshmem")]
    if spec is None:
        fail(
            f"the NVSHMEM wheel is not installed; torch asks for {pin or 'nvidia-nvshmem-cu13'} "
            "(pip install nvidia-nvshmem-cu13, or MGG_CPU_ONLY=1)"
        )
    path = Path(list(spec.submodule_search_locations)[0])
    have = installed_nvshmem()
    if pin and "==" in pin[0] and have != pin[0].split(";")[0].split("==")[1].strip():
        print(
            f"mgg setup: note: torch pins {pin[0].split(';')[0].strip()} but {have} is installed; building "
            f"against the installed {have}, which is what torch loads"
        )
    return path, have


def installed_nvshmem() -> str:
    for name in ("nvidia-nvshmem-cu13", "nvidia-nvshmem-cu12"):
        try:
            return version(name)
        except PackageNotFoundError:
            pass
    return "unknown"


def missing_header_links(cuda_home: str) -> list:
    """A folder of links to the CUDA wheel headers (torch's nvidia/*/include) that the toolkit
    lacks, so they never shadow the toolkit's own (which match nvcc)."""
    toolkit = [Path(cuda_home) / "include", Path(cuda_home) / "targets" / "x86_64-linux" / "include"]
    have = {p.name for d in toolkit if d.is_dir() for p in d.iterdir()}
    spec = importlib.util.find_spec("nvidia")
    bases = spec.submodule_search_locations if spec else []
    wheel_dirs = [p for base in bases for p in sorted(Path(base).glob("cu*/include"))]
    links = ROOT / "build" / "cuda-wheel-headers"
    if links.exists():
        shutil.rmtree(links)
    links.mkdir(parents=True)
    for d in wheel_dirs:
        for p in d.iterdir():
            if p.name not in have and not (links / p.name).exists():
                (links / p.name).symlink_to(p.resolve())
    return [str(links)]


def arch_flags(archs: list) -> list:
    """-gencode for each arch of TORCH_CUDA_ARCH_LIST ('9.0', '8.0', '9.0+PTX' adds PTX)."""
    out = []
    for a in archs:
        n = a.replace("+PTX", "").replace(".", "")
        out.append(f"-gencode=arch=compute_{n},code=sm_{n}")
        if a.endswith("+PTX"):
            out.append(f"-gencode=arch=compute_{n},code=compute_{n}")
    return out


def write_build_info(**facts):
    """mgg/_build.py: what this extension was built with (mgg checks torch at import; mgg info
    prints it)."""
    lines = ['"""Written by setup.py: what mgg._C was built with."""'] + [f"{k} = {v!r}" for k, v in facts.items()]
    (ROOT / "mgg" / "_build.py").write_text("\n".join(lines) + "\n")


def extension():
    import torch

    cuda_home = None if os.environ.get("MGG_CPU_ONLY") == "1" else find_cuda_home()
    if cuda_home is not None and torch.version.cuda is None:
        print(f"mgg setup: torch {torch.__version__} is a CPU build: building the CPU-only extension")
        cuda_home = None
    if cuda_home is not None:
        os.environ["CUDA_HOME"] = cuda_home  # torch reads it when cpp_extension is imported
    from torch.utils.cpp_extension import CppExtension, CUDAExtension

    sources = sorted(glob.glob("csrc/ops/*.cpp")) + sorted(glob.glob("csrc/ops/cpu/*.cpp"))
    if cuda_home is None:
        print("mgg setup: nvcc not found (or MGG_CPU_ONLY=1): building the CPU-only extension")
        write_build_info(torch=torch.__version__, cuda=None, nvcc=None, archs=[], nvshmem=None)
        return CppExtension(
            "mgg._C",
            sources,
            extra_compile_args={"cxx": FLAGS["cxx"] + FLAGS["openmp"]},
            extra_link_args=FLAGS["openmp"],
        )

    nvcc = check_cuda_versions(cuda_home, torch.version.cuda)
    os.environ.setdefault("TORCH_CUDA_ARCH_LIST", FLAGS["cuda_archs_default"])
    archs = os.environ["TORCH_CUDA_ARCH_LIST"].replace(";", " ").split()
    shm, shm_version = nvshmem_dir()
    write_build_info(torch=torch.__version__, cuda=torch.version.cuda, nvcc=nvcc, archs=archs, nvshmem=shm_version)
    defines = ["-DMGG_WITH_CUDA", "-DMGG_WITH_NVSHMEM"]
    sources += sorted(glob.glob("csrc/ops/cuda/*.cu")) + sorted(glob.glob("csrc/kernels/*.cu"))
    sources += sorted(glob.glob("csrc/nvshmem/*.cu"))
    print(
        f"mgg setup: building CUDA kernels with {cuda_home}/bin/nvcc (CUDA {nvcc}) for {archs} against torch "
        f"{torch.__version__} (CUDA {torch.version.cuda}), NVSHMEM {shm_version} from {shm}"
    )
    return CUDAExtension(
        "mgg._C",
        sources,
        include_dirs=[str(shm / "include")] + missing_header_links(cuda_home),
        library_dirs=[str(shm / "lib")],
        extra_compile_args={
            "cxx": FLAGS["cxx"] + FLAGS["openmp"] + defines,
            "nvcc": FLAGS["nvcc"] + defines + [f"-U{m}" for m in FLAGS["nvcc_undefine"]],
            "nvcc_dlink": ["-dlink", f"-L{shm / 'lib'}", f"-l{FLAGS['nvshmem_device_lib']}"] + arch_flags(archs),
        },
        # --exclude-libs: the device library's nvshmemi_* stay private, so the attach binds to this
        # module's own copies even where another module (torch's) exports the same names globally
        extra_link_args=FLAGS["openmp"]
        + [
            f"-l{FLAGS['nvshmem_device_lib']}",
            f"-l:{FLAGS['nvshmem_host_lib']}",
            f"-Wl,--exclude-libs,lib{FLAGS['nvshmem_device_lib']}.a",
            f"-Wl,-rpath,{shm / 'lib'}",
        ],
    )


def build_ext_cls():
    from torch.utils.cpp_extension import BuildExtension

    return BuildExtension.with_options(use_ninja=True)


setup(ext_modules=[extension()], cmdclass={"build_ext": build_ext_cls()})
