#ifndef LOOM_NN_FP8_OPS_TD
#define LOOM_NN_FP8_OPS_TD

// FP8 quantization as typed IR (issue 20): values carry MLIR's f8E4M3FN and
// f8E5M2 element types, and every scale is an explicit operand whose shape
// is the quantization's tiling. A scale of rank 0 is one scale for the
// tensor (tensorwise); otherwise it has the tensor's rank and cuts each dim
// of X elements into S tiles of T elements, T the smallest power of two
// with T * S >= X, the last tile holding what is left
// (runtime/abi/Fp8Tiling.h). So [M, 1] is one scale per row (rowwise),
// [M, ceil(K/128)] one per 1x128 tile and [ceil(N/128), ceil(K/128)] one
// per 128x128 block (DeepSeek-V3's blockwise scheme). Scales are
// dequantization scales: x ~ q * scale.

def NN_F32ScaleTensor : StaticShapeTensorOf<[F32]>;
def NN_Fp8Tensor : RankedTensorOf<[F8E4M3FN, F8E5M2]>;

def NN_QuantizeOp : NN_KernelOp<"quantize", [Pure]> {
  let kernelDoc = [{
    x (f32, bf16 or f16), scale (f32: [] or a tiling of x) and, with a
    second output, an optional transposed_scale (a tiling of the transposed
    copy; absent with one scale, which serves both) -> q (f8E4M3FN or
    f8E5M2, x's shape) = x / scale in f32, saturated to the format's largest
    finite value, rounded to nearest even; NaN stays NaN. The optional
    second output is x with its last two dims swapped, quantized by
    transposed_scale (or scale), written in the same pass: the copy a
    weight-gradient GEMM reads.
  }];
  let summary = "casts to FP8 with explicit scales, saturating";
  let description = [{
    `q = saturate(x / scale)` rounded to nearest even in the result's FP8
    format, with `x / scale` an f32 division and the scale of each element
    taken from the tiling `scale`'s shape gives (see the FP8 section of
    NNFp8Ops.td). Values past the format's largest finite value (448 for
    e4m3, 57344 for e5m2) become it, with their sign; NaN stays NaN.

    With a second result, the op also writes `x` with its last two dims
    swapped, quantized, in the same pass over `x`: the transposed copy a
    weight-gradient GEMM reads, since FP8 tensor cores take both operands
    with the contracted dim innermost. One scale for the tensor serves both
    copies; a tiled quantization gives the copy its own tiles
    (`transposed_scale`, a tiling of the copy), as rowwise and blockwise
    scaling tile along the dim each GEMM contracts.

    ```mlir
    %q = nn.quantize %x, %s : (tensor<4x256xbf16>, tensor<4x2xf32>) -> tensor<4x256xf8E4M3FN>
    %q2, %qt = nn.quantize %x, %t : (tensor<4x256xbf16>, tensor<f32>) -> (tensor<4x256xf8E4M3FN>, tensor<256x4xf8E4M3FN>)
    %q3, %qt3 = nn.quantize %x, %r, %c : (tensor<4x256xbf16>, tensor<4x1xf32>, tensor<256x1xf32>) -> (tensor<4x256xf8E4M3FN>, tensor<256x4xf8E4M3FN>)
    ```
  }];
  let arguments = (ins NN_FloatTensor:$input, NN_F32ScaleTensor:$scale,
                   Optional<NN_F32ScaleTensor>:$transposed_scale);
  let results = (outs NN_Fp8Tensor:$result, Optional<NN_Fp8Tensor>:$transposed);
  let assemblyFormat = [{
    $input `,` $scale (`,` $transposed_scale^)? attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def NN_DequantizeOp : NN_KernelOp<"dequantize", [Pure]> {
  let kernelDoc = [{
    q (f8E4M3FN or f8E5M2) and scale (f32, tiled as nn.quantize's) -> x
    (f32, bf16 or f16, q's shape) = q * scale in f32, rounded once to x's
    type.
  }];
  let summary = "FP8 values times their scales";
  let description = [{
    ```mlir
    %x = nn.dequantize %q, %s : (tensor<4x256xf8E4M3FN>, tensor<4x2xf32>) -> tensor<4x256xbf16>
    ```
  }];
  let arguments = (ins NN_Fp8Tensor:$input, NN_F32ScaleTensor:$scale);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = "$input `,` $scale attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def NN_AmaxOp : NN_KernelOp<"amax", [Pure]> {
  let kernelDoc = [{
    x (f32, bf16 or f16) -> amax (f32, the tiling's shape: [] or x's rank,
    each dim dividing x's) = the largest |x| of each tile; NaN if the tile
    holds a NaN.
  }];
  let summary = "the largest magnitude of each tile, for FP8 scales";
  let description = [{
    The result's shape is the tiling, as a scale's shape is for
    `nn.quantize`. A tile holding a NaN has amax NaN, so an overflow in the
    step shows in its scales rather than being clipped away.

    ```mlir
    %a = nn.amax %x : (tensor<4x256xbf16>) -> tensor<4x2xf32>
    ```
  }];
  let arguments = (ins NN_FloatTensor:$input);
  let results = (outs NN_F32ScaleTensor:$result);
  let assemblyFormat = "$input attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def NN_Fp8ScaleOp : NN_KernelOp<"fp8_scale", [Pure, AllTypesMatch<["amax", "result"]>]> {
  let kernelDoc = [{
    amax (f32) -> scale (f32, amax's shape) = amax * 2^margin / the format's
    largest finite value (attr format "e4m3" | "e5m2", margin int >= 0) in
    f32; 1 where amax is 0; NaN where amax is NaN or infinite.
  }];
  let summary = "dequantization scales from amax: amax maps to the format's largest value";
  let description = [{
    The scale that maps each tile's amax onto the FP8 format's largest
    finite value, less `margin` binades of headroom (TransformerEngine's
    margin). An all-zero tile gets scale 1; a tile whose amax is not finite
    gets NaN, which every value quantized with it then carries.

    ```mlir
    %s = nn.fp8_scale %a format = "e4m3" : tensor<4x2xf32>
    ```
  }];
  let arguments = (ins NN_F32ScaleTensor:$amax, StrAttr:$format,
                   DefaultValuedAttr<I64Attr, "0">:$margin);
  let results = (outs NN_F32ScaleTensor:$result);
  let assemblyFormat = [{
    $amax `format` `=` $format (`margin` `=` $margin^)? attr-dict `:` type($amax)
  }];
  let hasVerifier = 1;
}

def NN_ScaledMatmulOp : NN_KernelOp<"scaled_matmul", [Pure,
    DeclareOpInterfaceMethods<NN_FlopCountOpInterface>]> {
  let kernelDoc = [{
    FP8 GEMM: a [M, K] and b [N, K] (f8E4M3FN or f8E5M2, not both f8E5M2),
    scale_a and scale_b (f32, each [] or a tiling of its operand, their
    tiles along K one or of one size) -> out [M, N] (f32, bf16 or f16) =
    the sum over K tiles t of (sum over t of a * b, in f32) * (scale_a *
    scale_b of row i, column j and tile t, in f32), in tile order, rounded
    once to out's type. b is always [N, K] (a weight as stored), the layout
    FP8 tensor cores take.
  }];
  let summary = "an FP8 GEMM: (lhs * lhs_scale) @ (rhs * rhs_scale)^T, accumulated in f32";
  let description = [{
    `lhs` is `[M, K]` and `rhs` `[N, K]` (a weight as stored: the layout FP8
    tensor cores read), in `f8E4M3FN` or `f8E5M2` (not both `f8E5M2`, which
    no FP8 GEMM takes). The scales are the dequantization scales of
    `nn.quantize`: one per tensor, one per row (`[M, 1]`, `[N, 1]`), or per
    tile (`[M, ceil(K/128)]` and `[ceil(N/128), ceil(K/128)]`, DeepSeek-V3's
    blockwise). Along K both scales have one tile, or tiles of one size.
    The products of the FP8 values are summed in f32 within each K tile;
    each tile's sum is multiplied, in f32, by the product of its two scales
    (itself rounded to f32), and the tiles' results are summed in f32 in
    order; that f32 value is then rounded to the result's type (f32, bf16
    or f16). cuBLASLt runs it on CUDA with the matching scale modes:
    scalar, outer vector, VEC128 and BLK128x128.

    ```mlir
    %y = nn.scaled_matmul %qx, %qw, %sx, %sw : (tensor<8x256xf8E4M3FN>, tensor<64x256xf8E4M3FN>, tensor<f32>, tensor<f32>) -> tensor<8x64xbf16>
    %z = nn.scaled_matmul %qx, %qw, %bx, %bw : (tensor<8x256xf8E4M3FN>, tensor<64x256xf8E4M3FN>, tensor<8x2xf32>, tensor<1x2xf32>) -> tensor<8x64xbf16>
    ```
  }];
  let arguments = (ins NN_Fp8Tensor:$lhs, NN_Fp8Tensor:$rhs,
                   NN_F32ScaleTensor:$lhs_scale, NN_F32ScaleTensor:$rhs_scale);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = [{
    $lhs `,` $rhs `,` $lhs_scale `,` $rhs_scale attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

#endif // LOOM_NN_FP8_OPS_TD
