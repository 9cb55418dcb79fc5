"""The device an entry point runs on when the user does not say (mgg.devices): CUDA where a GPU is
visible and mgg's CUDA kernels run on it, else the CPU with a one-line reason; each entry point says
which in its first line. torch's CUDA is faked here where no GPU exists."""

import subprocess
import sys

import pytest
import torch

import mgg
from mgg import devices
from mgg.errors import MggError
from mgg.training import TrainConfig


@pytest.fixture
def gpu(monkeypatch):
    """Fakes a visible GPU (an H200, sm_90) and an extension built for given archs, with or without
    CUDA kernels: gpu(with_cuda, archs)."""

    def fake(with_cuda=True, archs=("9.0",), capability=(9, 0), count=1):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
        monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: "NVIDIA H200")
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i=0: capability)
        monkeypatch.setattr(mgg._C, "with_cuda", with_cuda)
        monkeypatch.setattr(mgg._extension, "build_facts", lambda: {"archs": list(archs)} if archs else {})

    return fake


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


def test_no_gpu_means_the_cpu(no_gpu):
    choice = mgg.default_device()
    assert choice.device == torch.device("cpu") and choice.why == "no CUDA device"
    assert choice.line("mgg train") == "mgg train: device cpu (no CUDA device)"


def test_a_gpu_and_cuda_kernels_mean_the_gpu(gpu):
    gpu()
    choice = mgg.default_device()
    assert choice.device == torch.device("cuda", 0) and choice.why == "NVIDIA H200"
    assert choice.line("mgg tune") == "mgg tune: device cuda (NVIDIA H200)"
    assert TrainConfig().device == "cuda"  # the training loop's default follows


def test_a_gpu_with_a_cpu_only_build_falls_back_saying_why(gpu):
    gpu(with_cuda=False)
    choice = mgg.default_device()
    assert choice.device == torch.device("cpu")
    assert "NVIDIA H200 present, but mgg was built without CUDA kernels" in choice.why
    assert "\n" not in choice.line("mgg train")
    assert TrainConfig().device == "cpu"
    with pytest.raises(MggError, match="'cuda' asked for, but NVIDIA H200 present, but mgg was built without"):
        devices.choose_device("cuda")


@pytest.mark.parametrize(
    "archs, capability, runs",
    [
        (["9.0"], (9, 0), True),
        (["8.0"], (9, 0), False),  # an sm_80 cubin does not run on sm_90
        (["8.0+PTX"], (9, 0), True),  # its PTX does, JIT-compiled
        (["8.0"], (8, 6), True),  # the same major, a higher minor
        (["9.0"], (8, 0), False),
        (["9.0a"], (9, 0), True),
        (["9.0a"], (10, 0), False),
        (["8.0", "9.0+PTX"], (8, 0), True),  # the default list on an A100
    ],
)
def test_kernels_for_other_archs_fall_back(gpu, archs, capability, runs):
    gpu(archs=archs, capability=capability)
    assert devices.runs_on(archs, capability) is runs
    choice = mgg.default_device()
    assert (choice.device.type == "cuda") is runs
    if not runs:
        assert f"sm_{capability[0]}{capability[1]} but mgg's CUDA kernels were built for" in choice.why


def test_an_unknown_build_record_trusts_the_build(gpu):
    gpu(archs=())  # a build without its record: nothing says the archs do not match
    assert mgg.default_device().device.type == "cuda"


def test_what_the_user_asks_for_is_checked(gpu, no_gpu):
    assert devices.choose_device("cpu").device == torch.device("cpu")
    assert devices.choose_device(None).device == torch.device("cpu")
    for bad, msg in [("cuda", "'cuda' asked for, but no CUDA device"), ("tpu", "not a device"), ("mps", "cpu or cuda")]:
        with pytest.raises(MggError, match=msg):
            devices.choose_device(bad)
    gpu(count=2)
    assert devices.choose_device("cuda:1").device == torch.device("cuda", 1)
    with pytest.raises(MggError, match="only 2 CUDA device"):
        devices.choose_device("cuda:2")


def _first_line(*args) -> tuple:
    r = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=600)
    return r, (r.stdout.splitlines() or [""])[0]


@pytest.mark.full  # over 15 s on 2 cores: make test-full runs it
@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU's line; a GPU machine prints its own")
def test_entry_points_say_their_device_first(tmp_path):
    r, first = _first_line("-m", "mgg", "train", "--epochs", "1", "--seeds", "1", "--quiet")
    assert r.returncode == 0, r.stderr[-2000:]
    assert first == "mgg train: device cpu (no CUDA device)"
    assert "order user: off: x (169 KB) fits the" in r.stdout  # --order auto (the default) says what it kept
    r, first = _first_line(
        "-m",
        "mgg",
        "tune",
        "--dataset",
        "rmat:200:800",
        "--dim",
        "8",
        "--iterations",
        "2",
        "--repeat",
        "1",
        "--quiet",
        "--cache",
        str(tmp_path / "tuned.json"),
    )
    assert first == "mgg tune: device cpu (no CUDA device)", r.stdout + r.stderr[-2000:]
    r = subprocess.run(
        [sys.executable, "-m", "mgg", "train", "--device", "cuda"], capture_output=True, text=True, timeout=600
    )
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "mgg train: error: device 'cuda' asked for, but no CUDA device"
    ]
