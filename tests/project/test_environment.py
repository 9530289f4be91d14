"""The set-up installs no CUDA package and no vLLM: the CPU dry run needs neither."""

from __future__ import annotations

from importlib import metadata

import pytest
import torch

pytestmark = pytest.mark.unit


def test_no_cuda_packages_and_no_vllm_installed():
    names = sorted({(dist.metadata["Name"] or "").lower() for dist in metadata.distributions()})
    cuda = [n for n in names if n.startswith(("nvidia-", "cuda-", "cupy-")) or n in ("triton", "vllm", "flash-attn")]
    assert cuda == [], f"the set-up installed GPU packages: {cuda}"
    assert torch.version.cuda is None, f"torch {torch.__version__} is a CUDA build"
