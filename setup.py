"""Builds mgg._C. Compiler flags come from csrc/build_flags.json (shared with CMakeLists.txt).

With nvcc available the CUDA kernels and the NVSHMEM runtime are compiled (for the archs in
TORCH_CUDA_ARCH_LIST, default sm_90), even on a machine without a GPU; otherwise, or with
MGG_CPU_ONLY=1, a CPU-only extension is built and the build says so.
"""
import glob
import importlib.util
import json
import os
import shutil
from importlib.metadata import PackageNotFoundError, requires, version
from pathlib import Path

from setuptools import setup

ROOT = Path(__file__).parent
FLAGS = json.loads((ROOT / "csrc" / "build_flags.json").read_text())


def find_nvcc():
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    candidates = [home] if home else []
    candidates += ["/usr/local/cuda"]
    for c in candidates:
        if c and (Path(c) / "bin" / "nvcc").exists():
            return c
    nvcc = shutil.which("nvcc")
    return str(Path(nvcc).resolve().parent.parent) if nvcc else None


def nvshmem_dir():
    """The nvidia-nvshmem wheel that the installed torch requires (headers + device library)."""
    wanted = [r for r in (requires("torch") or []) if r.startswith("nvidia-nvshmem")]
    spec = importlib.util.find_spec("nvidia.nvshmem")
    if spec is None:
        raise SystemExit(f"mgg setup: NVSHMEM wheel not found; torch requires {wanted or 'nvidia-nvshmem-cu13'}")
    path = Path(list(spec.submodule_search_locations)[0])
    if wanted:
        name = wanted[0].split(";")[0].split("==")[0].strip()
        pinned = wanted[0].split(";")[0].split("==")[1].strip() if "==" in wanted[0] else None
        try:
            have = version(name)
        except PackageNotFoundError:
            have = None
        if pinned and have != pinned:
            raise SystemExit(f"mgg setup: torch requires {name}=={pinned} but {have} is installed")
    return path


def cuda_wheel_includes():
    """Headers of the CUDA libraries torch was built with (cusparse.h, cublas_v2.h ...): torch's
    CUDA wheels ship them under nvidia/cu13/include, which a bare nvcc install may lack."""
    spec = importlib.util.find_spec("nvidia")
    dirs = []
    for base in (spec.submodule_search_locations if spec else []):
        dirs += sorted(str(p) for p in Path(base).glob("cu*/include"))
    return dirs


def extension():
    cuda_home = None if os.environ.get("MGG_CPU_ONLY") == "1" else find_nvcc()
    if cuda_home is not None:
        os.environ["CUDA_HOME"] = cuda_home  # torch reads it when cpp_extension is imported
    from torch.utils.cpp_extension import CppExtension, CUDAExtension

    sources = ["csrc/ops.cpp", "csrc/plan_check.cpp", "csrc/bindings.cpp"]
    sources += sorted(glob.glob("csrc/plan/*.cpp")) + sorted(glob.glob("csrc/cpu/*.cpp"))
    if cuda_home is None:
        print("mgg setup: nvcc not found (or MGG_CPU_ONLY=1): building the CPU-only extension")
        return CppExtension("mgg._C", sources, extra_compile_args={"cxx": FLAGS["cxx"]})

    os.environ.setdefault("TORCH_CUDA_ARCH_LIST", FLAGS["cuda_archs_default"])
    shm = nvshmem_dir()
    archs = os.environ["TORCH_CUDA_ARCH_LIST"].replace(";", " ").split()
    gencode = []
    for a in archs:
        a = a.replace(".", "").replace("+PTX", "")
        gencode += [f"-gencode=arch=compute_{a},code=sm_{a}"]
    defines = ["-DMGG_WITH_CUDA", "-DMGG_WITH_NVSHMEM"]
    sources += sorted(glob.glob("csrc/kernels/*.cu")) + sorted(glob.glob("csrc/nvshmem/*.cu"))
    print(f"mgg setup: building CUDA kernels with {cuda_home}/bin/nvcc for {archs}, NVSHMEM from {shm}")
    return CUDAExtension(
        "mgg._C",
        sources,
        include_dirs=[str(shm / "include")] + cuda_wheel_includes(),
        library_dirs=[str(shm / "lib")],
        extra_compile_args={
            "cxx": FLAGS["cxx"] + defines,
            "nvcc": FLAGS["nvcc"] + defines + [f"-U{m}" for m in FLAGS["nvcc_undefine"]],
            "nvcc_dlink": ["-dlink", f"-L{shm / 'lib'}", f"-l{FLAGS['nvshmem_device_lib']}"] + gencode,
        },
        extra_link_args=[f"-l{FLAGS['nvshmem_device_lib']}", f"-l:{FLAGS['nvshmem_host_lib']}", f"-Wl,-rpath,{shm / 'lib'}"],
    )


def build_ext_cls():
    from torch.utils.cpp_extension import BuildExtension

    return BuildExtension.with_options(use_ninja=True)


setup(ext_modules=[extension()], cmdclass={"build_ext": build_ext_cls()})
