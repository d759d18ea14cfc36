"""The INT8 path ONNX Runtime takes on a CPU, and what a model quantized for it must respect.

MLAS, ORT's kernel library, reads CPUID once at start-up and picks its U8S8 GEMM/conv kernels:

    amx    AMX-INT8 tiles for GEMMs (AVX512-VNNI for convs): int32 accumulation
    vnni   AVX512-VNNI or AVX-VNNI, `vpdpbusd`: int32 accumulation
    avx2   AVX2, and AVX-512 without VNNI: `vpmaddubsw` adds each pair of u8 x s8 products into a
           *saturating int16*; 255 * 127 * 2 = 64770 overflows, so full-range int8 weights
           silently lose accuracy

Weights come in four formats (`WEIGHT_FORMATS`):

    int8    int8 in [-127, 127]: U8S8 kernels, exact on vnni and amx, saturating on avx2
    paired  int8 in [-127, 127] whose pairs that `vpmaddubsw` multiplies together sum to at most
            128 in magnitude: 255 * 128 = 32640 fits an int16, so MLAS's U8S8 kernels are exact.
            MLAS pairs reduction index 2j with 2j + 1, the reduction of a Conv running over its
            kernel positions with the input channels innermost (its filter reorder and the
            channel packing of its symmetric kernels). Each channel's scale is the finer of
            int7's and its largest pair's / 127
    int7    int8 in [-64, 64]: 255 * 64 * 2 = 32640 fits an int16 however the kernel pairs the
            products (ORT's own weight conversion for AVX2 treats the same range as safe): for
            runtimes that pair otherwise (OpenVINO's oneDNN)
    uint8   uint8 in 128 +- 127: ORT runs them with its U8U8 kernels, which widen to int16 before
            multiplying: all 8 bits, exact on every CPU, slower than U8S8

`vnni` and `amx` models use int8. An `avx2` model uses paired (int7 for OpenVINO) or uint8,
chosen per model (quantize/weight_choice.py): the first is faster, uint8 more accurate. A
depthwise Conv's weights are full int8 in every format with a zero point of 0: MLAS's depthwise
kernel widens to int16 before it multiplies (quantize/passes/insert_qdq.py, `weight_format`).

The path is read from CPUID, as MLAS reads it (so a CPU emulated by qemu reports the emulated
path, where /proc/cpuinfo would report the host's), and confirmed by a behavioural probe: a
MatMulInteger whose exact result a saturating kernel cannot produce.
"""

import ctypes
import functools
import mmap
import platform
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime as ort

TARGETS = ("avx2", "vnni", "amx")
TARGET_KEY = "quantize.target"  # model metadata: the target a quantized model was made for
WEIGHTS_KEY = "quantize.weights"  # model metadata: its weight format


@dataclass(frozen=True)
class WeightFormat:
    name: str
    qmax: int  # the largest |weight - zero point|
    zero_point: int  # 0 for int8 weights; 128 for uint8 ones
    dtype: type
    pair_limit: int = 0  # the largest |w[2j]| + |w[2j + 1]| along the reduction, if bounded


WEIGHT_FORMATS = {
    "int8": WeightFormat("int8", 127, 0, np.int8),
    "int7": WeightFormat("int7", 64, 0, np.int8),
    "uint8": WeightFormat("uint8", 127, 128, np.uint8),
    "paired": WeightFormat("paired", 127, 0, np.int8, pair_limit=128),
}

# ORT's session option that swaps U8S8 kernels for exact (slower) U8U8 ones on a saturating CPU.
EXACT_U8U8_OPTION = "session.x64quantprecision"


def default_weights(target: str, runtime: str = "onnxruntime") -> str:
    """The weight format a model for `target` starts from: the finest of the fastest formats
    that are exact there, in `runtime`'s kernels."""
    if not saturates(target):
        return "int8"
    return "paired" if runtime == "onnxruntime" else "int7"


def check_weights(weights: str, target: str, runtime: str = "onnxruntime") -> None:
    """ValueError if a model for `target` run in `runtime` cannot hold `weights` exactly."""
    if weights not in WEIGHT_FORMATS:
        raise ValueError(
            f"unknown weight format {weights!r}; choose from auto, {', '.join(WEIGHT_FORMATS)}"
        )
    if WEIGHT_FORMATS[weights].pair_limit and runtime != "onnxruntime" and saturates(target):
        raise ValueError(
            f"paired weights follow ONNX Runtime's pairing of products; {runtime} on the "
            f"{target} target may pair them otherwise: choose int7 or uint8 weights"
        )
    if saturated_by(weights, target):
        raise ValueError(
            f"full-range int8 weights saturate in the {target} target's kernels; "
            "choose paired, int7 or uint8 weights"
        )


def saturated_by(weights: str, target: str) -> bool:
    """Do ORT's kernels on `target` saturate on a model with these weights?"""
    return weights == "int8" and saturates(target)


def saturates(target: str) -> bool:
    if target not in TARGETS:
        raise ValueError(f"unknown target {target!r}; choose from {', '.join(TARGETS)}")
    return target == "avx2"


def resolve(target: str) -> str:
    """`auto` -> this machine's target; a named target as it is."""
    if target == "auto":
        return host_target()
    saturates(target)  # validates the name
    return target


@functools.lru_cache(maxsize=1)
def host_target() -> str:
    """This machine's target: from CPUID, overruled by the probe if ORT's kernels saturate."""
    flags = cpu_flags()
    if probe_saturates():
        return "avx2"
    if {"amx_tile", "amx_int8"} <= flags:
        return "amx"
    return "vnni"


def host_isa() -> dict:
    """What benchmarks and reports record: the CPU, its integer ISA flags, the path and ORT."""
    flags = cpu_flags()
    return {
        "cpu": _cpu_name(),
        "isa_flags": sorted(flags),
        "int8_gemm_path": _path_name(flags, host_target()),
        "target": host_target(),
        "u8s8_saturates": probe_saturates(),
        "onnxruntime": ort.__version__,
    }


@functools.lru_cache(maxsize=1)
def cpu_flags() -> frozenset[str]:
    """The integer-relevant ISA features usable here: CPUID bits with the OS's register support."""
    regs = _cpuid_reader()
    if regs is None:  # not x86-64 Linux: fall back to what the kernel reports
        return frozenset(_proc_flags() & set(_FEATURE_BITS))
    max_leaf = regs(0, 0)[0]
    leaf1 = regs(1, 0)
    leaf7 = regs(7, 0) if max_leaf >= 7 else (0, 0, 0, 0)
    leaf7_1 = regs(7, 1) if max_leaf >= 7 and leaf7[0] >= 1 else (0, 0, 0, 0)
    xcr0 = _xgetbv() if leaf1[2] >> 27 & 1 else 0  # OSXSAVE: the OS saves the wide registers
    words = {
        "leaf7_ebx": leaf7[1],
        "leaf7_ecx": leaf7[2],
        "leaf7_edx": leaf7[3],
        "leaf7_1_eax": leaf7_1[0],
        "leaf7_1_edx": leaf7_1[3],
    }
    present = {name for name, (word, bit) in _FEATURE_BITS.items() if words[word] >> bit & 1}
    if xcr0 & 0b110 != 0b110:  # XMM and YMM state
        return frozenset()
    if xcr0 & 0b11100000 != 0b11100000:  # opmask and ZMM state
        present -= {f for f in present if f.startswith("avx512")}
    if "amx_tile" in present and not _amx_permitted():
        present -= {"amx_tile", "amx_int8", "amx_bf16"}
    return frozenset(present)


@functools.lru_cache(maxsize=1)
def probe_saturates() -> bool:
    """Does ORT's U8S8 MatMulInteger here saturate? All-255 activations against all-127 weights
    make every pair of products 64770, which an int16 cannot hold."""
    from onnx import TensorProto, helper

    a = np.full((8, 256), 255, np.uint8)
    w = np.full((256, 64), 127, np.int8)
    graph = helper.make_graph(
        [helper.make_node("MatMulInteger", ["a", "w"], ["y"])],
        "probe",
        [helper.make_tensor_value_info("a", TensorProto.UINT8, a.shape)],
        [helper.make_tensor_value_info("y", TensorProto.INT32, (8, 64))],
        [
            helper.make_tensor(
                name="w", data_type=TensorProto.INT8, dims=w.shape, vals=w.tobytes(), raw=True
            )
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    options = ort.SessionOptions()
    options.log_severity_level = 3
    got = ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    ).run(None, {"a": a})[0]
    return not np.array_equal(got, a.astype(np.int64) @ w.astype(np.int64))


# CPUID leaf 7 bits of the features MLAS dispatches on (Intel SDM vol. 2A, CPUID).
_FEATURE_BITS = {
    "avx2": ("leaf7_ebx", 5),
    "avx512f": ("leaf7_ebx", 16),
    "avx512bw": ("leaf7_ebx", 30),
    "avx512_vnni": ("leaf7_ecx", 11),
    "amx_bf16": ("leaf7_edx", 22),
    "amx_tile": ("leaf7_edx", 24),
    "amx_int8": ("leaf7_edx", 25),
    "avx_vnni": ("leaf7_1_eax", 4),
    "avx_vnni_int8": ("leaf7_1_edx", 4),
    "avx512_bf16": ("leaf7_1_eax", 5),
}

# x86-64 System V machine code, run from an executable page (no compiler needed):
# cpuid(leaf=edi, subleaf=esi, out=rdx): push rbx; mov eax,edi; mov ecx,esi; mov r8,rdx; cpuid;
#   mov [r8],eax; mov [r8+4],ebx; mov [r8+8],ecx; mov [r8+12],edx; pop rbx; ret
_CPUID_CODE = bytes.fromhex("53 89f8 89f1 4989d0 0fa2 418900 41895804 41894808 4189500c 5b c3")
# xgetbv(0): mov ecx,edi; xgetbv; shl rdx,32; or rax,rdx; ret
_XGETBV_CODE = bytes.fromhex("89f9 0f01d0 48c1e220 4809d0 c3")
_pages: list[mmap.mmap] = []  # keeps the code pages alive for the functions made from them


def _machine_function(code: bytes, restype, *argtypes):
    page = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    page.write(code)
    _pages.append(page)
    address = ctypes.addressof(ctypes.c_char.from_buffer(page))
    return ctypes.CFUNCTYPE(restype, *argtypes)(address)


@functools.lru_cache(maxsize=1)
def _cpuid_reader():
    if platform.machine() not in ("x86_64", "AMD64") or platform.system() != "Linux":
        return None
    try:
        call = _machine_function(
            _CPUID_CODE, None, ctypes.c_uint32, ctypes.c_uint32, ctypes.POINTER(ctypes.c_uint32)
        )
    except (OSError, ValueError, PermissionError):  # no executable pages allowed here
        return None

    def regs(leaf: int, subleaf: int) -> tuple[int, int, int, int]:
        out = (ctypes.c_uint32 * 4)()
        call(leaf, subleaf, out)
        return tuple(out)

    return regs


def _xgetbv() -> int:
    return _machine_function(_XGETBV_CODE, ctypes.c_uint64, ctypes.c_uint32)(0)


def _amx_permitted() -> bool:
    """Linux hands AMX tile state to a process that asks (arch_prctl ARCH_REQ_XCOMP_PERM), as
    MLAS does; asking is harmless and tells whether the kernel allows it."""
    arch_prctl = getattr(ctypes.CDLL(None, use_errno=True), "syscall", None)
    if arch_prctl is None:
        return False
    sys_arch_prctl, req_xcomp_perm, xfeature_xtiledata = 158, 0x1023, 18
    return arch_prctl(sys_arch_prctl, req_xcomp_perm, xfeature_xtiledata) == 0


def _proc_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    return set(_first_cpu(text).get("flags", "").split())


def _cpu_name() -> str:
    try:
        return cpu_name(Path("/proc/cpuinfo").read_text())
    except OSError:
        return platform.processor() or "unknown"


def cpu_name(cpuinfo: str) -> str:
    """The first CPU's model name with its CPUID family and model, e.g. "AMD EPYC (family 26,
    model 2)": a hypervisor may pass on only the vendor's brand, which names no generation."""
    fields = _first_cpu(cpuinfo)
    name = fields.get("model name", "unknown")
    if "cpu family" not in fields or "model" not in fields:
        return name
    return f"{name} (family {fields['cpu family']}, model {fields['model']})"


def _first_cpu(cpuinfo: str) -> dict[str, str]:
    """The fields of /proc/cpuinfo's first processor (name -> value)."""
    fields: dict[str, str] = {}
    for row in cpuinfo.splitlines():
        key, _, value = row.partition(":")
        fields.setdefault(key.strip(), value.strip())
    return fields


def _path_name(flags: frozenset[str], target: str) -> str:
    if target == "amx":
        return "AMX-INT8 (GEMM), AVX512-VNNI (conv)"
    if target == "vnni":
        return "AVX512-VNNI" if "avx512_vnni" in flags else "AVX-VNNI"
    return ("AVX512 (no VNNI)" if "avx512bw" in flags else "AVX2") + ", u8s8 saturates in int16"
