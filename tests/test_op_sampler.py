"""The sampled instrument for the time inside operators (benchmarks/op_sampler.py): which of
py-spy's samples are inside an operator, and the instrument on a real step and its replay."""

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from op_sampler import classify, inside_operators_sampled, py_spy  # noqa: E402

from pytest_mystique import capture_step  # noqa: E402
from pytest_mystique.measure import torch_threads  # noqa: E402
from pytest_mystique.replay import Replay  # noqa: E402
from pytest_mystique.trace import load_trace  # noqa: E402

# Samples as py-spy writes them (frames outermost first), shortened from runs of a loop of small
# products and of OPT's inference step and its replay.
IN_DISPATCHER = ("<module> (x.py:6);loop (x.py:11);torch::autograd::THPVariable_mul (libtorch_python.so);"
                 "at::_ops::mul_Tensor::call (libtorch_cpu.so);at::native::mul (libtorch_cpu.so)")  # fmt: skip
KERNEL_LEAF = "replay_iteration (<mystique replay>:192);mkl_blas_avx512_sgemm_kernel_0_b0 (libtorch_cpu.so)"
PARSING = ("replay_iteration (<mystique replay>:64);torch::autograd::THPVariable_add (libtorch_python.so);"
           "torch::PythonArgParser::raw_parse (libtorch_python.so);torch::FunctionSignature::parse (libtorch_python.so)")  # fmt: skip
MODULE_CODE = "Module._call_impl (torch/nn/modules/module.py:1789);Linear.forward (torch/nn/modules/linear.py:134)"
FREEING = ("replay_iteration (<mystique replay>:50);c10::TensorImpl::decref_pyobject (libc10.so);"
           "torch::detail::ConcretePyInterpreterVTable::decref (libtorch_python.so)")  # fmt: skip


@pytest.mark.parametrize("stack, inside", [(IN_DISPATCHER, True), (KERNEL_LEAF, True), (PARSING, False),
                                           (MODULE_CODE, False), (FREEING, False)])  # fmt: skip
def test_a_sample_is_inside_an_operator_in_the_dispatcher_or_a_kernel_and_nowhere_else(stack, inside):
    assert classify(stack) is inside


@pytest.mark.skipif(py_spy() is None, reason="py-spy is not installed (the bench extra installs it)")
def test_the_sampler_sees_a_step_s_python_outside_and_its_replay_inside(tmp_path):
    """A step that spends most of its time in Python between two products has a small share of
    its samples inside operators; its replay, which runs the products alone, a large one."""
    import time

    a = torch.randn(256, 256)

    def step():
        y = a @ a
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < 0.003:
            pass
        return (y @ a).relu()

    with torch_threads(1):
        res = capture_step(step, tmp_path / "s.json.gz", warmup=1, runs=1, min_warmup_s=0)
        replay = Replay(load_trace(res.path), "cpu").prepare()
        got = inside_operators_sampled((step, replay.run), 3.0, (None, replay.between_iterations), calls=5)
    if isinstance(got, str):  # (no leave to read this process: a container without ptrace)
        pytest.skip(got)
    original, replayed = got
    assert original.share < 0.5 < replayed.share, got
    # the replay's time inside operators is most of its step, and less than the original's whole step
    assert 0 < replayed.ops_s < original.ops_s / original.share, got
