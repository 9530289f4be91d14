"""The GPU smoke run's network and dtypes against vLLM's and flash-attn's own rules, read from their releases.

The versions are the ones the installed verl pins (verl 0.9.1's metadata: ``vllm==0.24.0``, ``flash-attn==2.8.3``).
Their sdists come from PyPI once per test run (``tests/support/pypi_sdists.py``, about 45 MB), are never installed, and
nothing of them is imported: the rules are read from the files.

* vLLM: the backends a model without MLA can get on CUDA (``vllm/platforms/cuda.py``, ``_get_backend_priorities``:
  the lists of its ``use_mla`` test's else branch), each one's class (``vllm/v1/attention/backends/registry.py``,
  ``AttentionBackendEnum``), and from each class, found with ``ast`` in its file and its bases' files (up to
  ``AttentionBackend`` in ``vllm/v1/attention/backend.py``): ``supported_dtypes``, ``supports_dtype``,
  ``get_supported_head_sizes`` and ``supports_head_size``, the nearest definition of each, run alone in a class
  of their own with ``torch`` stood in by a namespace that names dtypes. A backend refuses what vLLM's
  ``AttentionBackend.validate_configuration`` would list as "head_size not supported" or "dtype not supported".
* flash-attn: the ``TORCH_CHECK``s of ``mha_fwd``, ``mha_varlen_fwd``, ``mha_bwd`` and ``mha_varlen_bwd`` in
  ``csrc/flash_attn/flash_api.cpp`` that test only the head size, the heads or the query's dtype, evaluated for
  the run's values; and the head size's compiled kernels (``csrc/flash_attn/src/flash_fwd_hdim*_sm80.cu``).

What the run asks of them: ``GPU_SHAPE`` (``verl_split/dryrun/assets.py``) and the dtypes ``scripts/gpu_smoke.py``
sets (``REPLACED``'s rollout dtype for vLLM; ``MIXED_PRECISION``'s parameter dtype, which verl's autocast hands
flash-attn). ``tests/project/test_gpu_smoke_config.py`` checks that verl's composed config carries them. Each reader is
also run on a planted source that refuses, so every check here can fail.
"""

from __future__ import annotations

import ast
import builtins
import copy
import importlib.util
import re
from dataclasses import dataclass
from importlib.metadata import requires
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from support import pypi_sdists
from support.paths import ROOT

from verl_split.core import compat
from verl_split.dryrun.assets import CPU_SHAPE, GPU_SHAPE

pytestmark = [
    pytest.mark.network,
    pytest.mark.skipif(compat.family_of(compat.installed_version()) != "0.9", reason="the smoke run is verl 0.9's"),
]

#: What the tests read of each sdist (paths inside its top folder).
VLLM_FILES = (
    "vllm/platforms/cuda.py",
    "vllm/v1/attention/",
    "vllm/config/model.py",
    "vllm/config/scheduler.py",
    "vllm/config/cache.py",
    "vllm/v1/worker/utils.py",
    "cmake/external_projects/vllm_flash_attn.cmake",
)
FLASH_API = "csrc/flash_attn/flash_api.cpp"
#: The entry points verl's training reaches: transformers' flash_attention_2 and verl's padding removal call
#: flash_attn_func / flash_attn_varlen_func, whose forward and backward are these.
FLASH_FUNCTIONS = ("mha_fwd", "mha_varlen_fwd", "mha_bwd", "mha_varlen_bwd")
#: The backends that refuse the CPU network's head size (16): the reason the GPU network exists.
REFUSE_CPU_HEAD_SIZE = {"FLASHINFER", "TRITON_ATTN"}
#: Names only: verl's precision strings, torch's dtype names and ATen's scalar types, for one dtype.
TORCH_NAME = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
ATEN_NAME = {"bfloat16": "kBFloat16", "float16": "kFloat16", "float32": "kFloat32"}


def load_gpu_smoke():
    """scripts/gpu_smoke.py as a module: importing it needs no GPU and no verl."""
    spec = importlib.util.spec_from_file_location("gpu_smoke", ROOT / "scripts" / "gpu_smoke.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SMOKE = load_gpu_smoke()
#: The dtype vLLM runs the model in, and the one flash-attn gets in training (bf16 autocast).
ROLLOUT_DTYPE = SMOKE.REPLACED["actor_rollout_ref.rollout.dtype="]
TRAINING_DTYPE = TORCH_NAME[SMOKE.MIXED_PRECISION["param_dtype"]]


def pinned(name: str) -> str:
    """The version of ``name`` the installed verl pins (any extra), from its metadata."""
    found = {str(r.specifier) for r in map(Requirement, requires("verl") or []) if r.name == name}
    assert len(found) == 1 and next(iter(found)).startswith("=="), f"verl asks for {name} as {found}, not one version"
    return next(iter(found))[2:]


@pytest.fixture(scope="session")
def sources(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """vLLM's and flash-attn's sdists, at verl's pins, partly unpacked: {"vllm": top folder, "flash-attn": ...}."""
    base = tmp_path_factory.mktemp("gpu_sources")
    why = "these tests read vLLM's and flash-attn's rules from their sdists"
    (vllm,) = pypi_sdists.download("vllm", [pinned("vllm")], base, why).values()
    (flash,) = pypi_sdists.download("flash-attn", [pinned("flash-attn")], base, why).values()
    kernels = [n for n in pypi_sdists.names(flash) if n.startswith("csrc/flash_attn/src/flash_")]
    return {
        "vllm": pypi_sdists.unpack(vllm, base / "vllm", only=VLLM_FILES),
        "flash-attn": pypi_sdists.unpack(flash, base / "flash-attn", only=(FLASH_API, *kernels)),
    }


# ---------------------------------------------------------------------------------------- vLLM's backends


def find_def(body: list[ast.stmt], name: str) -> ast.FunctionDef | ast.ClassDef:
    found = [n for n in body if isinstance(n, ast.FunctionDef | ast.ClassDef) and n.name == name]
    assert len(found) == 1, f"{name}: {len(found)} definitions at this level, not one"
    return found[0]


def backend_priorities(root: Path) -> list[list[str]]:
    """Each list of backends ``_get_backend_priorities`` returns for a model without MLA, in its order."""
    func = find_def(ast.parse((root / "vllm/platforms/cuda.py").read_text()).body, "_get_backend_priorities")
    (no_mla,) = [n.orelse for n in func.body if isinstance(n, ast.If) and ast.unparse(n.test) == "use_mla"]
    lists = [
        n.value for s in no_mla for n in ast.walk(s) if isinstance(n, ast.Return) and isinstance(n.value, ast.List)
    ]
    assert lists, "_get_backend_priorities: no list returned without MLA"
    return [[e.attr for e in found.elts] for found in lists]


def backend_classes(root: Path) -> dict[str, str]:
    """``AttentionBackendEnum``'s members: name -> the class's dotted path."""
    enum = find_def(
        ast.parse((root / "vllm/v1/attention/backends/registry.py").read_text()).body, "AttentionBackendEnum"
    )
    return {
        n.targets[0].id: n.value.value
        for n in enum.body
        if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str)
    }


def class_chain(root: Path, dotted: str) -> list[ast.ClassDef]:
    """The class at ``dotted`` and its bases that are vLLM's (their files read in turn), nearest first."""
    module, _, name = dotted.rpartition(".")
    tree = ast.parse((root / (module.replace(".", "/") + ".py")).read_text())
    cls = find_def(tree.body, name)
    imported = {
        a.asname or a.name: f"{n.module}.{a.name}" for n in tree.body if isinstance(n, ast.ImportFrom) for a in n.names
    }
    chain = [cls]
    for base in (b.id for b in cls.bases if isinstance(b, ast.Name)):
        if any(isinstance(n, ast.ClassDef) and n.name == base for n in tree.body):
            chain += class_chain(root, f"{module}.{base}")
        elif imported.get(base, "").startswith("vllm."):
            chain += class_chain(root, imported[base])
    return chain


#: What vLLM's selector asks of a backend about the model's head size and dtype, and what answers it.
RULES = ("supported_dtypes", "supports_dtype", "get_supported_head_sizes", "supports_head_size")


class _DtypeNames:
    """``torch`` for the rules: ``torch.bfloat16`` is ``"bfloat16"``."""

    def __getattr__(self, name: str) -> str:
        return name


def _no_annotations(node: ast.stmt) -> ast.stmt:
    """The definition without its annotations (they name vLLM's types, which are not here)."""
    node = copy.deepcopy(node)
    if isinstance(node, ast.AnnAssign):
        return ast.copy_location(ast.Assign(targets=[node.target], value=node.value), node)
    if not isinstance(node, ast.FunctionDef):
        return node
    args = node.args
    for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]:
        if arg is not None:
            arg.annotation = None
    node.returns = None
    return node


def _defines(cls: ast.ClassDef, name: str) -> ast.stmt | None:
    for node in cls.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
        target = (
            node.target
            if isinstance(node, ast.AnnAssign)
            else (node.targets[0] if isinstance(node, ast.Assign) else None)
        )
        if isinstance(target, ast.Name) and target.id == name:
            return node
    return None


@dataclass
class Backend:
    """One backend's rules on the head size and dtype, as its release defines them, runnable on their own."""

    name: str
    rules: type
    where: dict[str, str]  # rule -> the class that defines it

    def refusals(self, head_size: int, dtype: str) -> list[str]:
        """What vLLM's validate_configuration would list for these two (its words)."""
        reasons = []
        if not self.rules.supports_head_size(head_size):
            reasons.append("head_size not supported")
        if not self.rules.supports_dtype(dtype):
            reasons.append("dtype not supported")
        return reasons


def read_backend(root: Path, name: str, dotted: str) -> Backend:
    chain = class_chain(root, dotted)
    body, where = [], {}
    for rule in RULES:
        owner = next((c for c in chain if _defines(c, rule) is not None), None)
        assert owner is not None, f"{name}: no {rule} in {[c.name for c in chain]}"
        body.append(_no_annotations(_defines(owner, rule)))
        where[rule] = owner.name
    params = {"type_params": []} if "type_params" in ast.ClassDef._fields else {}  # Python 3.12 on
    rules = ast.ClassDef(name=name, bases=[], keywords=[], body=body, decorator_list=[], **params)
    module = ast.fix_missing_locations(ast.Module(body=[rules], type_ignores=[]))
    namespace = {"torch": _DtypeNames(), "__builtins__": builtins}
    exec(compile(module, f"<{dotted}'s rules>", "exec"), namespace)  # the release's own methods, nothing else
    return Backend(name, namespace[name], where)


def read_backends(root: Path) -> dict[str, Backend]:
    """Every backend a model without MLA can get on CUDA, with its rules."""
    classes = backend_classes(root)
    names = dict.fromkeys(name for found in backend_priorities(root) for name in found)
    return {name: read_backend(root, name, classes[name]) for name in names}


@pytest.fixture(scope="session")
def backends(sources) -> dict[str, Backend]:
    return read_backends(sources["vllm"])


def test_vllms_cuda_backends_are_read_from_its_selector(sources, backends):
    """Whichever backend vLLM picks comes from these lists (FLASHINFER first on compute capability 10)."""
    orders = backend_priorities(sources["vllm"])
    assert {"FLASH_ATTN", "FLASHINFER", "TRITON_ATTN", "FLEX_ATTENTION"} <= set(backends)
    assert any(order[0] == "FLASHINFER" for order in orders) and any(order[0] == "FLASH_ATTN" for order in orders)


def test_every_vllm_cuda_backend_takes_the_gpu_head_size_and_dtype(backends):
    refused = {name: b.refusals(GPU_SHAPE.head_size, ROLLOUT_DTYPE) for name, b in backends.items()}
    assert {name: reasons for name, reasons in refused.items() if reasons} == {}, (GPU_SHAPE, ROLLOUT_DTYPE)


def test_the_cpu_head_size_is_why_the_gpu_shape_exists(backends):
    """Head size 16: FLASH_ATTN takes it (a multiple of 8), so vLLM would not stop on Hopper or Ampere, but
    FLASHINFER (first on compute capability 10) and TRITON_ATTN refuse it: 64 leaves no backend out."""
    refused = {name for name, b in backends.items() if b.refusals(CPU_SHAPE.head_size, ROLLOUT_DTYPE)}
    assert refused == REFUSE_CPU_HEAD_SIZE


def test_vllms_flash_attention_build_is_the_one_cited(sources):
    """Restated by hand, not read: vLLM's FA3 build on Hopper has a head-size-64 kernel (vllm-project/
    flash-attention, hopper/flash_api.cpp, the head-dimension switch of ``run_mha_fwd``); that repository is
    fetched by vLLM's build, not shipped in its sdist. Read: the commit vLLM 0.24.0 builds it from is that one."""
    cmake = (sources["vllm"] / "cmake/external_projects/vllm_flash_attn.cmake").read_text()
    assert re.findall(r"GIT_TAG\s+([0-9a-f]{40})", cmake) == ["803020a8fa15407871341d41eba4919ade2ee1ee"]


#: The vLLM rules ``tests/project/test_gpu_smoke_config.py`` restates by hand, each with the condition that raises
#: (a short anchor): the file, the class or function, the anchor. Read here so a restated rule's citation holds.
RESTATED = [
    (
        "vllm/config/model.py",
        "ModelConfig.verify_with_parallel_config",
        "total_num_attention_heads % tensor_parallel_size != 0",
    ),
    (
        "vllm/config/scheduler.py",
        "SchedulerConfig.verify_max_model_len",
        "self.max_num_batched_tokens < self.max_num_seqs",
    ),
    ("vllm/config/cache.py", "CacheConfig", "gpu_memory_utilization: float = Field(default=0.92, gt=0, le=1)"),
    ("vllm/v1/worker/utils.py", "request_memory", "init_snapshot.free_memory < requested_memory"),
]


def source_of(path: Path, qualname: str) -> str:
    """The source of the class or function ``qualname`` (dotted for a method) in ``path``."""
    text = path.read_text()
    node = ast.parse(text)
    for part in qualname.split("."):
        node = find_def(node.body, part)
    return ast.get_source_segment(text, node)


@pytest.mark.parametrize("path, qualname, anchor", RESTATED, ids=[r[1] for r in RESTATED])
def test_each_restated_vllm_rule_is_where_it_is_cited(sources, path, qualname, anchor):
    assert anchor in " ".join(source_of(sources["vllm"] / path, qualname).split()), f"{path}: {qualname}"


# ------------------------------------------------------------------------------------------- flash-attn


_FUNCTION = re.compile(r"^(mha_\w+)\(", re.M)
_CHECK = re.compile(r'TORCH_CHECK\((?P<cond>[^,;"]+?),\s*"(?P<message>[^"]*)"\s*\);')
_WORD = re.compile(r"[A-Za-z_][\w:]*")
#: The variables of a check the run decides, each set from the run's values; a check naming any other is left.
VARIABLES = ("head_size", "num_heads", "num_heads_k", "q_dtype")


@dataclass(frozen=True)
class Check:
    function: str
    condition: str  # C++, as written
    message: str

    def holds(self, values: dict[str, object]) -> bool:
        """The condition evaluated for ``values``: ``||``/``&&``/``!`` as Python's, ``torch::kX`` as ``"kX"``."""
        python = re.sub(r"torch::(k\w+)", r'"\1"', self.condition).replace("||", " or ").replace("&&", " and ")
        python = re.sub(r"!(?!=)", " not ", python)
        return bool(eval(python, {"__builtins__": {}}, values))  # names checked by read_flash_checks

    @property
    def about(self) -> str:
        return "dtype" if "q_dtype" in self.condition else "heads" if "num_heads" in self.condition else "head size"


def read_flash_checks(flash_api: Path) -> dict[str, list[Check]]:
    """Each function's TORCH_CHECKs on the head size, the heads or the query's dtype, and on nothing else."""
    text = flash_api.read_text()
    starts = [(m.start(), m.group(1)) for m in _FUNCTION.finditer(text)] + [(len(text), "")]
    found = {}
    for (start, name), (end, _) in zip(starts, starts[1:], strict=False):
        checks = []
        for m in _CHECK.finditer(text, start, end):
            words = {w for w in _WORD.findall(m["cond"]) if not w.startswith("torch::")}
            if words and words <= set(VARIABLES):
                checks.append(Check(name, " ".join(m["cond"].split()), m["message"]))
        found[name] = checks
    return found


def flash_refusals(checks: list[Check], head_size: int, heads: int, kv_heads: int, dtype: str) -> list[str]:
    values = {"head_size": head_size, "num_heads": heads, "num_heads_k": kv_heads, "q_dtype": ATEN_NAME[dtype]}
    return [f"{c.function}: {c.message}" for c in checks if not c.holds(values)]


@pytest.fixture(scope="session")
def flash_checks(sources) -> dict[str, list[Check]]:
    return read_flash_checks(sources["flash-attn"] / FLASH_API)


@pytest.mark.parametrize("function", FLASH_FUNCTIONS)
def test_flash_attn_2_takes_the_gpu_shape_forward_and_backward(flash_checks, function):
    """Head size, heads (query heads a multiple of the key/value heads) and dtype, each checked where the
    release checks them; a function whose checks the reader did not find fails here too."""
    checks = flash_checks[function]
    assert {c.about for c in checks} == {"head size", "heads", "dtype"}, function
    shape = (GPU_SHAPE.head_size, GPU_SHAPE.num_attention_heads, GPU_SHAPE.num_key_value_heads)
    assert flash_refusals(checks, *shape, TRAINING_DTYPE) == []


def test_flash_attn_2_has_kernels_for_the_gpu_head_size(sources):
    kernels = {p.name for p in (sources["flash-attn"] / "csrc/flash_attn/src").iterdir()}
    short = {v: k for k, v in TORCH_NAME.items()}[TRAINING_DTYPE]
    for direction in ("fwd", "bwd"):
        assert f"flash_{direction}_hdim{GPU_SHAPE.head_size}_{short}_sm80.cu" in kernels, direction


# ------------------------------------------------------------------------------ the readers can refuse


PLANTED_VLLM = {
    "vllm/platforms/cuda.py": """
def _get_backend_priorities(use_mla, device_capability):
    if use_mla:
        return [AttentionBackendEnum.PLANTED_MLA]
    else:
        return [AttentionBackendEnum.PLANTED, AttentionBackendEnum.OPEN]
""",
    "vllm/v1/attention/backends/registry.py": """
class AttentionBackendEnum(Enum):
    PLANTED = "vllm.v1.attention.backends.planted.PlantedBackend"
    OPEN = "vllm.v1.attention.backends.planted.OpenBackend"
""",
    "vllm/v1/attention/backend.py": """
class AttentionBackend(ABC):
    supported_dtypes: ClassVar[list[torch.dtype]] = [torch.float16, torch.bfloat16]
    @classmethod
    def get_supported_head_sizes(cls) -> list[int]:
        return []
    @classmethod
    def supports_head_size(cls, head_size: int) -> bool:
        return not cls.get_supported_head_sizes() or head_size in cls.get_supported_head_sizes()
    @classmethod
    def supports_dtype(cls, dtype: torch.dtype) -> bool:
        return dtype in cls.supported_dtypes
""",
    "vllm/v1/attention/backends/planted.py": """
from vllm.v1.attention.backend import AttentionBackend
class PlantedBackend(AttentionBackend):
    supported_dtypes = [torch.float16]
    @classmethod
    def get_supported_head_sizes(cls) -> list[int]:
        return [128, 256]
class OpenBackend(AttentionBackend):
    pass
""",
}
PLANTED_FLASH_API = """
std::vector<at::Tensor>
mha_fwd(at::Tensor &q) {
    TORCH_CHECK(q_dtype == torch::kFloat16, "planted: fp16 only");
    TORCH_CHECK(batch_size > 0, "not the run's: left");
    TORCH_CHECK(head_size <= 32, "planted: head dimension at most 32");
    TORCH_CHECK(num_heads % num_heads_k == 0, "planted: heads");
}
"""


def test_the_readers_report_a_planted_refusal(tmp_path):
    for path, text in PLANTED_VLLM.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    backends = read_backends(tmp_path)
    assert backends["PLANTED"].where == {
        "supported_dtypes": "PlantedBackend",
        "supports_dtype": "AttentionBackend",
        "get_supported_head_sizes": "PlantedBackend",
        "supports_head_size": "AttentionBackend",
    }
    refused = {name: b.refusals(GPU_SHAPE.head_size, ROLLOUT_DTYPE) for name, b in backends.items()}
    assert refused == {"PLANTED": ["head_size not supported", "dtype not supported"], "OPEN": []}

    (tmp_path / "flash_api.cpp").write_text(PLANTED_FLASH_API)
    checks = read_flash_checks(tmp_path / "flash_api.cpp")["mha_fwd"]
    shape = (GPU_SHAPE.head_size, GPU_SHAPE.num_attention_heads, GPU_SHAPE.num_key_value_heads)
    assert flash_refusals(checks, *shape, TRAINING_DTYPE) == [
        "mha_fwd: planted: fp16 only",
        "mha_fwd: planted: head dimension at most 32",
    ]
    assert flash_refusals(checks, 64, 4, 3, "float16") == [
        "mha_fwd: planted: head dimension at most 32",
        "mha_fwd: planted: heads",
    ]
