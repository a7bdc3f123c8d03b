"""The batch-1 bf16 CUDA GEMV that `gpu_cuda_gemv_probe.py` measures against the Triton
kernels, and its build (torch.utils.cpp_extension.load_inline; nvcc and ninja, as on the lent
H200's image). Each warp owns R rows, each lane streams 16-byte pieces of them with the
non-coherent, no-L1 load, the first U pieces of every row issued before the PDL wait (they
do not depend on the previous kernel), x read at L2 after it, fp32 sums, a shuffle
reduction, and three epilogues: plain, residual add (in place), and SiLU(gate) * up for
paired rows. Every launch is a cudaLaunchKernelEx with programmatic stream serialisation.
Not used by the engine."""

from __future__ import annotations

import itertools
import time

CUDA_SRC = r"""
#include <cuda_bf16.h>
#include <cuda_runtime.h>

__device__ __forceinline__ uint4 ld_stream(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}
__device__ __forceinline__ uint4 ld_l2(const void* p) {
  uint4 v;
  asm volatile("ld.global.cg.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ float dot8(uint4 w, uint4 x) {
  const __nv_bfloat162* a = reinterpret_cast<const __nv_bfloat162*>(&w);
  const __nv_bfloat162* b = reinterpret_cast<const __nv_bfloat162*>(&x);
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    float2 fa = __bfloat1622float2(a[i]);
    float2 fb = __bfloat1622float2(b[i]);
    s = fmaf(fa.x, fb.x, s);
    s = fmaf(fa.y, fb.y, s);
  }
  return s;
}

// out[n] = round(sum_k w[n, k] x[k])                         MODE 0
// out[n] = round(res[n] + round(sum_k w[n, k] x[k]))          MODE 1 (res may be out)
// out[i] = round(silu(round(g_i)) * round(u_i)), g_i = row i, u_i = row I + i   MODE 2
// R rows a warp (MODE 2: R pairs), WARPS warps a CTA, K the row length, U pieces of 8
// elements a lane keeps in flight per row (the first U before the PDL wait).
template <int MODE, int R, int WARPS, int K, int U>
__global__ void __launch_bounds__(WARPS * 32) gemv_kernel(
    const __nv_bfloat16* __restrict__ w, const __nv_bfloat16* x, const __nv_bfloat16* res,
    __nv_bfloat16* out, int n_out) {
  constexpr int ROWS = MODE == 2 ? 2 * R : R;
  constexpr int PIECES = K / 256;  // 16-byte pieces a lane reads per row
  constexpr int UU = U < PIECES ? U : PIECES;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int first = (blockIdx.x * WARPS + warp) * R;  // first output this warp owns
  const __nv_bfloat16* rows[ROWS];
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    int o = first + (MODE == 2 ? (r % R) : r);
    o = o < n_out ? o : n_out - 1;
    int row = MODE == 2 && r >= R ? o + n_out : o;
    rows[r] = w + (size_t)row * K + lane * 8;
  }
  uint4 wv[ROWS][UU];
#pragma unroll
  for (int r = 0; r < ROWS; ++r)
#pragma unroll
    for (int u = 0; u < UU; ++u) wv[r][u] = ld_stream(rows[r] + u * 256);
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;");
  float acc[ROWS];
#pragma unroll
  for (int r = 0; r < ROWS; ++r) acc[r] = 0.f;
#pragma unroll
  for (int p0 = 0; p0 < PIECES; p0 += UU) {
    uint4 xv[UU];
#pragma unroll
    for (int u = 0; u < UU; ++u) xv[u] = ld_l2(x + (p0 + u) * 256 + lane * 8);
    uint4 nv[ROWS][UU];
    if (p0 + UU < PIECES) {
#pragma unroll
      for (int r = 0; r < ROWS; ++r)
#pragma unroll
        for (int u = 0; u < UU; ++u) nv[r][u] = ld_stream(rows[r] + (p0 + UU + u) * 256);
    }
#pragma unroll
    for (int r = 0; r < ROWS; ++r)
#pragma unroll
      for (int u = 0; u < UU; ++u) acc[r] += dot8(wv[r][u], xv[u]);
    if (p0 + UU < PIECES) {
#pragma unroll
      for (int r = 0; r < ROWS; ++r)
#pragma unroll
        for (int u = 0; u < UU; ++u) wv[r][u] = nv[r][u];
    }
  }
#pragma unroll
  for (int r = 0; r < ROWS; ++r)
#pragma unroll
    for (int m = 16; m > 0; m >>= 1) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], m);
  if (lane == 0) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
      int o = first + r;
      if (o >= n_out) break;
      float y = __bfloat162float(__float2bfloat16(acc[r]));
      if (MODE == 1) y = __bfloat162float(__float2bfloat16(__bfloat162float(res[o]) + y));
      if (MODE == 2) {
        float u = __bfloat162float(__float2bfloat16(acc[R + r]));
        y = y / (1.f + __expf(-y)) * u;
      }
      out[o] = __float2bfloat16(y);
    }
  }
}

template <int MODE, int R, int WARPS, int K, int U>
void launch(const void* w, const void* x, const void* res, void* out, int n_out, bool pdl,
            cudaStream_t stream) {
  constexpr int per = R * WARPS;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3((n_out + per - 1) / per);
  cfg.blockDim = dim3(WARPS * 32);
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = pdl ? 1 : 0;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  cudaLaunchKernelEx(&cfg, gemv_kernel<MODE, R, WARPS, K, U>, (const __nv_bfloat16*)w,
                     (const __nv_bfloat16*)x, (const __nv_bfloat16*)res, (__nv_bfloat16*)out,
                     n_out);
}
"""

# (R, WARPS, U) variants compiled for each (MODE, K)
VARIANTS = [(1, 4, 8), (2, 4, 8), (4, 4, 4), (2, 8, 8), (4, 8, 4), (1, 8, 8), (2, 2, 8),
            (4, 2, 8)]  # fmt: skip
SHAPES = [(0, 2048), (1, 2048), (2, 2048), (1, 8192)]  # (MODE, K) the stages use


def build():
    """The compiled extension: run(name, w, x, res, out, n_out, pdl) -> whether `name` exists."""
    from torch.utils.cpp_extension import load_inline

    cases = []
    for (mode, k), (r, wp, u) in itertools.product(SHAPES, VARIANTS):
        name = key(mode, k, (r, wp, u))
        cases.append(
            f'  if (name == "{name}") {{ launch<{mode}, {r}, {wp}, {k}, {u}>(w.data_ptr(), '
            f"x.data_ptr(), res.data_ptr(), out.data_ptr(), n_out, pdl, s); ok = true; }}"
        )
    cpp = (
        r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
"""
        + CUDA_SRC
        + r"""
bool run(std::string name, torch::Tensor w, torch::Tensor x, torch::Tensor res,
         torch::Tensor out, int64_t n_out, bool pdl) {
  cudaStream_t s = at::cuda::getCurrentCUDAStream();
  bool ok = false;
"""
        + "\n".join(cases)
        + r"""
  cudaError_t err = cudaGetLastError();
  TORCH_CHECK(err == cudaSuccess, "launch: ", cudaGetErrorString(err));
  return ok;
}
"""
    )
    t0 = time.time()
    mod = load_inline(
        name="ll_gemv_probe",
        cpp_sources="bool run(std::string name, torch::Tensor w, torch::Tensor x, "
        "torch::Tensor res, torch::Tensor out, int64_t n_out, bool pdl);",
        cuda_sources=cpp,
        functions=["run"],
        extra_cuda_cflags=["-O3", "-gencode=arch=compute_90a,code=sm_90a", "-std=c++17"],
        verbose=False,
    )
    print(f"built in {time.time() - t0:.0f} s", flush=True)
    return mod


def key(mode: int, k: int, variant: tuple[int, int, int]) -> str:
    """The name `build()`'s `run` dispatches on: epilogue MODE, row length K, (R, warps, U)."""
    r, warps, u = variant
    return f"m{mode}_k{k}_r{r}_w{warps}_u{u}"
