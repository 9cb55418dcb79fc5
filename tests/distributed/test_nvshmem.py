"""The nvshmem backend with several PEs on one GPU (NVSHMEM's multi-PE-per-GPU mode): the same
logits and gradients as one process for every fetch policy, and bit-identical repetitions in
deterministic mode. One torchrun per (graph, PEs) runs every fetch policy after one NVSHMEM
start-up, and the single-process reference is computed once per graph. Skipped without a GPU;
run on the H100/H200 (bench/gpu_verify.sh)."""

import pickle

import pytest

from mgg.testing import requires_cuda
from tests.distributed.test_distributed import PARTITIONS, compare, references, run_worker

pytestmark = [requires_cuda, pytest.mark.gpu]

NVSHMEM_ENV = {
    "NVSHMEM_REMOTE_TRANSPORT": "none",
    "NVSHMEM_SYMMETRIC_SIZE": "512M",
    "NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME": "lo",
}
FETCHES = ["get-warp", "get-thread", "get-block", "direct"]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The single-process logits and gradients of a case on the GPU, computed once per module."""
    return references(tmp_path_factory, "--device", "cuda")


@pytest.mark.parametrize("nproc", [2, 4])
@pytest.mark.parametrize("kind", ["cora-gcn", "directed-gin", "cora-sage", "cora-gat"])
def test_pes_on_one_gpu_match_single_process(reference, tmp_path, kind, nproc):
    out = tmp_path / "dist.pkl"
    run_worker(
        [kind, str(out), "--device", "cuda", "--backend", "nvshmem", "--fetch", ",".join(FETCHES)],
        nproc,
        env=NVSHMEM_ENV,
    )
    for fetch in FETCHES:
        compare(reference(kind), f"{out}.{fetch}")


@pytest.mark.parametrize("remote_reads", ["once", "auto"])
@pytest.mark.parametrize("nproc", [2, 4])
@pytest.mark.parametrize("kind", ["cora-gcn", "directed-gin", "cora-sage"])
def test_remote_rows_read_once_match_single_process(reference, tmp_path, kind, nproc, remote_reads):
    """Issue 34's once mode (and auto, which measures both first) on the GPU: every fetch policy
    gathers each halo row once, forward and backward, and equals one process."""
    out = tmp_path / "dist.pkl"
    run_worker(
        [kind, str(out), "--device", "cuda", "--backend", "nvshmem", "--fetch", ",".join(FETCHES)]
        + ["--remote-reads", remote_reads],
        nproc,
        env=NVSHMEM_ENV,
    )
    for fetch in FETCHES:
        compare(reference(kind), f"{out}.{fetch}")


@pytest.mark.parametrize("partition", [p for p in PARTITIONS if p != "range"])
@pytest.mark.parametrize("kind", ["cora-gcn", "directed-gin"])
def test_pes_on_one_gpu_with_a_partition(tmp_path, kind, partition):
    """The PEs own the nodes of a relabelled graph (mgg.partition): the symmetric tables hold
    the relabelled rows, the results come back in the user's node order."""
    ref_path, dist_path = tmp_path / "ref.pkl", tmp_path / "dist.pkl"
    run_worker([kind, str(ref_path), "--single", "--device", "cuda"])
    run_worker(
        [kind, str(dist_path), "--device", "cuda", "--backend", "nvshmem", "--partition", partition],
        4,
        env=dict(NVSHMEM_ENV, MGG_PARTITION_CACHE=str(tmp_path / "partitions")),
    )
    compare(ref_path, dist_path)


@pytest.mark.parametrize("nproc", [2, 4])
def test_deterministic_100_iterations_bit_identical(tmp_path, nproc):
    out = tmp_path / "det.pkl"
    run_worker(
        ["cora-gcn", str(out), "--device", "cuda", "--backend", "nvshmem", "--deterministic", "--repeat", "100"],
        nproc,
        env=NVSHMEM_ENV,
    )
    assert pickle.load(open(out, "rb"))[3] is True


def test_halo_backend_on_one_gpu_matches(reference, tmp_path):
    out = tmp_path / "dist.pkl"
    run_worker(["cora-gcn", str(out), "--device", "cuda", "--backend", "halo"], 2)
    compare(reference("cora-gcn"), out)


@pytest.mark.parametrize("kind", ["cora-gcn", "directed-gin", "cora-sage", "cora-gat"])
def test_two_machines_of_two_pes_on_one_gpu(reference, tmp_path, kind):
    """node-nvshmem: four PEs on the GPU as two "machines" of two (two NVSHMEM jobs, one per
    machine; the network stage over gloo), MGG's fused kernel inside each reading its machine's
    own and received rows, for every fetch policy, against one process."""
    out = tmp_path / "dist.pkl"
    run_worker(
        [kind, str(out), "--device", "cuda", "--backend", "node-nvshmem", "--gpus-per-node", "2"]
        + ["--partition", "range", "--fetch", ",".join(FETCHES)],
        4,
        env=NVSHMEM_ENV,
    )
    for fetch in FETCHES:
        compare(reference(kind), f"{out}.{fetch}")
