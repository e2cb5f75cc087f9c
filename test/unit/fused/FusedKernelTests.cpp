// nn.fused without a GPU: the body format (runtime/abi/FusedBody.h) and its
// checks, the code generator's output (kernels/fused), the CPU kernel (the
// members one by one, bit for bit the unfused ops), and, where the build has
// CUDA and NVRTC can be opened, that NVRTC compiles every generated kernel
// (NVRTC needs no GPU). Running the generated kernels is the backend
// conformance suite's job (test/unit/runtime, test/unit/conformance).

#include "kernels/cpu/CpuKernels.h"
#include "kernels/fused/FusedKernelSource.h"
#include "runtime/abi/FusedBody.h"
#include "runtime/support/FloatTypes.h"
#ifdef LOOM_HAVE_CUDA_KERNELS
#include "kernels/cuda/CudaKernels.h"
#endif

#include "gtest/gtest.h"

#include <cstring>
#include <random>

using namespace loom;

namespace {

/// The Llama training step's groups, and ones that reach every corner of
/// the generator: broadcasts, small outputs, f16, scalars, every formula.
const char *const kBodies[] = {
    "(bf16[1,64,512], bf16[1,64,512]) { %0 = nn.silu(%i0) : bf16[1,64,512]; "
    "%1 = nn.mul(%0, %i1) : bf16[1,64,512]; yield %0, %1 }",
    "(bf16[1,64,512], bf16[1,64,512], bf16[1,64,512]) { %0 = nn.mul(%i0, %i1) : "
    "bf16[1,64,512]; %1 = nn.silu_grad(%i2, %0) : bf16[1,64,512]; yield %1 }",
    "(f32[], f32[], f32[]) { %0 = nn.add(%i0, %i1) : f32[]; %1 = nn.mul(%0, %i2) : f32[]; "
    "yield %1 }",
    "(f32[4,1,7], bf16[7], f16[]) { %0 = nn.broadcast(%i1) : bf16[4,5,7]; "
    "%1 = nn.cast(%0) : f32[4,5,7]; %2 = nn.add(%i0, %1) : f32[4,5,7]; "
    "%3 = nn.gelu(%2) {approximate = tanh} : f32[4,5,7]; %4 = nn.cast(%3) : f16[4,5,7]; "
    "%5 = nn.mul(%4, %i2) : f16[4,5,7]; %6 = nn.exp(%i0) : f32[4,1,7]; yield %5, %6, %2 }",
    "(f32[2,3,9], f32[3,1]) { %0 = nn.sub(%i0, %i1) : f32[2,3,9]; "
    "%1 = nn.gelu(%0) {approximate = none} : f32[2,3,9]; %2 = nn.maximum(%1, %i1) : f32[2,3,9]; "
    "%3 = nn.minimum(%2, %0) : f32[2,3,9]; %4 = nn.sigmoid(%3) : f32[2,3,9]; "
    "%5 = nn.tanh(%4) : f32[2,3,9]; %6 = nn.neg(%5) : f32[2,3,9]; %7 = nn.abs(%6) : f32[2,3,9]; "
    "%8 = nn.sqrt(%7) : f32[2,3,9]; %9 = nn.rsqrt(%8) : f32[2,3,9]; "
    "%10 = nn.reciprocal(%9) : f32[2,3,9]; %11 = nn.log(%10) : f32[2,3,9]; "
    "%12 = nn.exp(%11) : f32[2,3,9]; %13 = nn.div(%12, %i1) : f32[2,3,9]; "
    "%14 = nn.relu(%13) : f32[2,3,9]; %15 = nn.erf(%0) : f32[2,3,9]; "
    "%16 = nn.pow(%7, %i1) : f32[2,3,9]; "
    "%17 = nn.gelu_grad(%0, %4) {approximate = none} : f32[2,3,9]; "
    "%18 = nn.gelu_grad(%0, %2) {approximate = tanh} : f32[2,3,9]; "
    "%19 = nn.add(%14, %15) : f32[2,3,9]; yield %19, %16, %17, %18, %11 }",
    "(f16[2,3,11], f16[11]) { %0 = nn.mul(%i0, %i1) : f16[2,3,11]; "
    "%1 = nn.silu(%0) : f16[2,3,11]; yield %1, %0 }",
    "(f32[5,67], f32[67], i1[5,67]) { %0 = nn.compare(%i0, %i1) {predicate = lt} : i1[5,67]; "
    "%1 = nn.where(%0, %i0, %i1) : f32[5,67]; %2 = nn.where(%i2, %1, %i0) : f32[5,67]; "
    "yield %2, %0 }",
};

FusedBody parsed(const std::string &text) {
  llvm::Expected<FusedBody> body = parseFusedBody(text);
  EXPECT_TRUE(static_cast<bool>(body)) << llvm::toString(body.takeError());
  return body ? std::move(*body) : FusedBody();
}

std::string parseError(const std::string &text) {
  llvm::Expected<FusedBody> body = parseFusedBody(text);
  if (body)
    return "";
  return llvm::toString(body.takeError());
}

//===----------------------------------------------------------------------===//
// The body format
//===----------------------------------------------------------------------===//

TEST(FusedBody, PrintsWhatItParsesAndParsesWhatItPrints) {
  for (const char *text : kBodies) {
    FusedBody body = parsed(text);
    std::string printed = printFusedBody(body);
    EXPECT_EQ(printed, text);
    EXPECT_EQ(printFusedBody(parsed(printed)), printed);
  }
  FusedBody body = parsed(kBodies[3]);
  ASSERT_EQ(body.inputs.size(), 3u);
  EXPECT_EQ(body.inputs[1].dtype, DType::BF16);
  EXPECT_EQ(body.inputs[2].shape, std::vector<int64_t>{});
  ASSERT_EQ(body.steps.size(), 7u);
  EXPECT_EQ(body.steps[3].kernel, KernelId::Gelu);
  ASSERT_EQ(body.steps[3].attrs.size(), 1u);
  EXPECT_EQ(std::get<std::string>(body.steps[3].attrs[0].value), "tanh");
  EXPECT_EQ(body.yields, (std::vector<uint32_t>{5, 6, 2}));
  EXPECT_EQ(describeFusedBody(body),
            "nn.broadcast, nn.cast, nn.add, nn.gelu, nn.cast, nn.mul, nn.exp -> f16[4,5,7], "
            "f32[4,1,7], f32[4,5,7]");
}

TEST(FusedBody, CarriesEveryAttributeKind) {
  // Not a body the code generator takes (a reduction), but one the format
  // and the CPU kernel do: integer lists and flags.
  FusedBody body;
  body.inputs.push_back({DType::F32, {2, 3}});
  FusedStep step;
  step.kernel = KernelId::ReduceSum;
  step.operands.push_back({true, 0});
  step.attrs = {{"dims", std::vector<int64_t>{-1}}, {"keepdim", int64_t(1)}};
  step.result = {DType::F32, {2, 1}};
  body.steps.push_back(step);
  FusedStep pad;
  pad.kernel = KernelId::Pad;
  pad.operands.push_back({false, 0});
  pad.attrs = {{"high", std::vector<int64_t>{0, 1}}, {"interior", std::vector<int64_t>{0, 0}},
               {"low", std::vector<int64_t>{1, 0}}, {"value", -2.5e-7}};
  pad.result = {DType::F32, {3, 2}};
  body.steps.push_back(pad);
  body.yields = {1};
  ASSERT_EQ(checkFusedBody(body), "");
  std::string text = printFusedBody(body);
  EXPECT_NE(text.find("{dims = [-1], keepdim = 1}"), std::string::npos) << text;
  EXPECT_NE(text.find("value = -2.5e-07"), std::string::npos) << text;
  FusedBody back = parsed(text);
  EXPECT_EQ(printFusedBody(back), text);
  EXPECT_EQ(std::get<double>(back.steps[1].attrs[3].value), -2.5e-7);
  EXPECT_NE(fusedCodegenProblem(body).find("member %0 (nn.reduce_sum) has no scalar formula"),
            std::string::npos)
      << fusedCodegenProblem(body);
}

TEST(FusedBody, BadTextIsAOneLineErrorSayingWhere) {
  struct Case {
    const char *text, *error;
  } cases[] = {
      {"", "at character 1: expected '(', found the end"},
      {"(f32[4]) { %0 = nn.exp(%i0) : f32[4]; yield %0", "expected '}', found the end"},
      {"(f33[4]) { %0 = nn.exp(%i0) : f32[4]; yield %0 }",
       "at character 2: expected an element type (f32, bf16, ...), found 'f33'"},
      {"(f32[4]) { %1 = nn.exp(%i0) : f32[4]; yield %1 }", "expected member %0 here"},
      {"(f32[4]) { %0 = nn.nope(%i0) : f32[4]; yield %0 }", "unknown kernel 'nn.nope'"},
      {"(f32[4]) { %0 = nn.exp(%i1) : f32[4]; yield %0 }",
       "member %0 (nn.exp) reads %i1, which is not an input of the group"},
      {"(f32[4]) { %0 = nn.exp(%0) : f32[4]; yield %0 }",
       "member %0 (nn.exp) reads %0, which is not an earlier member"},
      {"(f32[4]) { %0 = nn.add(%i0) : f32[4]; yield %0 }", "member %0 (nn.add) takes 2 inputs"},
      {"(f32[4]) { %0 = nn.exp(%i0) {approximate = tanh} : f32[4]; yield %0 }",
       "'approximate' is not an attribute nn.exp reads"},
      {"(f32[4]) { %0 = nn.gelu(%i0) {approximate = } : f32[4]; yield %0 }", "expected a word"},
      {"(f32[4]) { %0 = nn.exp(%i0) : f32[4]; yield %i0 }",
       "a group yields its members' values, not its inputs"},
      {"(f32[4]) { %0 = nn.exp(%i0) : f32[4]; yield %0, %0 }", "%0 is yielded twice"},
      {"(f32[4]) { %0 = nn.exp(%i0) : f32[4]; yield %3 }", "yield of %3, which is not a member"},
      {"(f32[-4]) { %0 = nn.exp(%i0) : f32[4]; yield %0 }", "a negative dim"},
      {"(f32[99999999999,99999999999]) { %0 = nn.exp(%i0) : f32[4]; yield %0 }",
       "too many elements"},
      {"(f32[4]) { %0 = nn.exp(%i0) : f32[4]; yield %0 } trailing",
       "unexpected text after the body"},
      {"(f32[4]) { %0 = nn.fused(%i0) {body = x} : f32[4]; yield %0 }",
       "a group cannot hold another"},
      {"(f32[4]) { %0 = nn.exp(%i99999999999) : f32[4]; yield %0 }", "an input number out of range"},
      {"(f32[4]) { yield %0 }", "a body needs at least one member"},
  };
  for (const Case &c : cases) {
    std::string error = parseError(c.text);
    EXPECT_NE(error.find(c.error), std::string::npos) << c.text << "\n  gave: " << error;
    EXPECT_EQ(error.find('\n'), std::string::npos) << error;
  }
}

TEST(FusedBody, DamagedTextNeverCrashesTheParser) {
  // Every body cut short, and with characters overwritten or deleted at
  // random: a parse or a one-line error, never a crash (ASan builds check
  // the reads).
  std::mt19937 rng(7);
  const std::string alphabet = "()[]{}%=,;: 0123456789ifnbmx.-e";
  int parsedCount = 0, errors = 0;
  for (const char *original : kBodies) {
    std::string text = original;
    for (size_t cut = 0; cut <= text.size(); ++cut) {
      std::string error = parseError(text.substr(0, cut));
      (error.empty() ? parsedCount : errors)++;
    }
    for (int trial = 0; trial < 400; ++trial) {
      std::string damaged = text;
      for (int k = 0; k < 3; ++k) {
        size_t at = rng() % damaged.size();
        if (rng() % 2)
          damaged[at] = alphabet[rng() % alphabet.size()];
        else
          damaged.erase(at, 1 + rng() % 4);
        if (damaged.empty())
          break;
      }
      std::string error = parseError(damaged);
      (error.empty() ? parsedCount : errors)++;
      EXPECT_EQ(error.find('\n'), std::string::npos) << error;
    }
  }
  EXPECT_GT(errors, 1000);
}

TEST(FusedBody, ChecksACallAgainstItsBody) {
  FusedBody body = parsed(kBodies[0]);
  std::vector<FusedTensorType> in = body.inputs;
  std::vector<FusedTensorType> out = {body.steps[0].result, body.steps[1].result};
  EXPECT_EQ(checkFusedCall(body, in, out), "");
  EXPECT_EQ(checkFusedCall(body, {in[0]}, out), "the body reads 2 inputs, the call passes 1");
  std::vector<FusedTensorType> wrong = out;
  wrong[1].dtype = DType::F32;
  EXPECT_EQ(checkFusedCall(body, in, wrong),
            "output 1 is f32[1,64,512], the body yields bf16[1,64,512] (%1)");
}

TEST(FusedBody, SaysWhatTheCodeGeneratorCannotTake) {
  EXPECT_EQ(fusedCodegenProblem(parsed("(i64[4], i64[4]) { %0 = nn.add(%i0, %i1) : i64[4]; "
                                       "yield %0 }")),
            "input %i0 is i64[4]: generated kernels take f32, bf16, f16 and i1");
  EXPECT_EQ(fusedCodegenProblem(parsed("(f32[4]) { %0 = nn.cast(%i0) : f64[4]; yield %0 }")),
            "member %0 (nn.cast) gives f64[4]: generated kernels take f32, bf16, f16 and i1");
  EXPECT_EQ(fusedCodegenProblem(parsed("(f32[4]) { %0 = nn.gelu(%i0) {approximate = other} : "
                                       "f32[4]; yield %0 }")),
            "member %0 (nn.gelu) has no scalar formula for its attributes (NN_ScalarFormula in "
            "its ODS)");
  EXPECT_EQ(fusedCodegenProblem(parsed("(f32[4,3]) { %0 = nn.exp(%i0) : f32[3,4]; yield %0 }")),
            "member %0 (nn.exp): operand 0 (f32[4,3]) does not broadcast to its result f32[3,4]");
  EXPECT_EQ(fusedCodegenProblem(parsed("(f32[4], f32[3]) { %0 = nn.exp(%i0) : f32[4]; "
                                       "%1 = nn.exp(%i1) : f32[3]; yield %0, %1 }")),
            "the members' shapes do not broadcast to one shape");
  // A value nothing uses could be larger than every output: the kernel's
  // work would not be bounded by its buffers.
  EXPECT_EQ(fusedCodegenProblem(parsed("(f32[4]) { %0 = nn.broadcast(%i0) : f32[1000000,4]; "
                                       "%1 = nn.exp(%i0) : f32[4]; yield %1 }")),
            "member %0 (nn.broadcast) gives a value nothing yields or reads");
  for (const char *text : kBodies)
    EXPECT_EQ(fusedCodegenProblem(parsed(text)), "") << text;
}

TEST(FusedBody, FindsEachKernelsScalarFormulaByItsAttributes) {
  EXPECT_EQ(scalarFormula(KernelId::Add, {}).value_or(""), "$0 + $1");
  EXPECT_EQ(scalarFormula(KernelId::Silu, {}).value_or(""), "$0 * loom_sigmoid($0)");
  std::vector<NamedAttr> tanh = {{"approximate", std::string("tanh")}};
  std::vector<NamedAttr> none = {{"approximate", std::string("none")}};
  EXPECT_NE(scalarFormula(KernelId::Gelu, tanh).value_or("").find("tanhf"), std::string::npos);
  EXPECT_NE(scalarFormula(KernelId::Gelu, none).value_or("").find("erff"), std::string::npos);
  EXPECT_FALSE(scalarFormula(KernelId::Gelu, {}));
  EXPECT_FALSE(scalarFormula(KernelId::ReduceSum, {}));
  EXPECT_FALSE(scalarFormula(KernelId::Matmul, {}));
}

//===----------------------------------------------------------------------===//
// The code generator
//===----------------------------------------------------------------------===//

fused::FusedKernelSource generated(const std::string &text) {
  llvm::Expected<fused::FusedKernelSource> kernel = fused::generateFusedKernel(parsed(text));
  EXPECT_TRUE(static_cast<bool>(kernel)) << llvm::toString(kernel.takeError());
  return kernel ? std::move(*kernel) : fused::FusedKernelSource();
}

bool contains(const std::string &text, const std::string &piece) {
  return text.find(piece) != std::string::npos;
}

TEST(FusedKernelSource, VectorizesWholeBf16TensorsEightAtATime) {
  fused::FusedKernelSource k = generated(kBodies[0]);
  EXPECT_EQ(k.entry, "loom_fused");
  EXPECT_EQ(k.elements, 64 * 512);
  EXPECT_EQ(k.vectorWidth, 8);
  EXPECT_EQ(k.vectorInputs, (std::vector<bool>{true, true}));
  EXPECT_EQ(k.vectorOutputs, (std::vector<bool>{true, true}));
  const std::string &s = k.source;
  EXPECT_TRUE(contains(s, "extern \"C\" __global__ void __launch_bounds__(256) loom_fused("
                          "const unsigned short *__restrict__ in0, const unsigned short "
                          "*__restrict__ in1, unsigned short *out0, unsigned short *out1, "
                          "int vectorized)"))
      << s;
  // One 16-byte load per input and store per output, per 8 elements.
  EXPECT_TRUE(contains(s, "reinterpret_cast<const loom_vec16 *>(in0) + v * 1u")) << s;
  EXPECT_TRUE(contains(s, "reinterpret_cast<loom_vec16 *>(out1) + v * 1u")) << s;
  EXPECT_TRUE(contains(s, "const unsigned int vectors = vectorized ? n / 8u : 0;")) << s;
  // The members' formulas, rounded to bf16 as their kernels store them.
  EXPECT_TRUE(contains(s, "const float v0 = loom_round_bf16((a0) * loom_sigmoid((a0))); // nn.silu"))
      << s;
  EXPECT_TRUE(contains(s, "const float v1 = loom_round_bf16((v0) * (a1)); // nn.mul")) << s;
  // The scalar tail, for what the vectors leave.
  EXPECT_TRUE(contains(s, "for (unsigned int i = vectors * 8u + first; i < n; i += stride)")) << s;
  EXPECT_TRUE(contains(s, "out1[i] = loom_store_bf16(v1);")) << s;
}

TEST(FusedKernelSource, KeepsIntermediatesInRegisters) {
  // silu_grad(x, g * u): the product is never stored.
  fused::FusedKernelSource k = generated(kBodies[1]);
  EXPECT_EQ(k.vectorOutputs.size(), 1u);
  EXPECT_FALSE(contains(k.source, "out1")) << k.source;
  EXPECT_TRUE(contains(k.source, "const float v1 = loom_round_bf16((v0) * (loom_sigmoid((a2)) * "
                                 "(1.0f + (a2) * (1.0f - loom_sigmoid((a2)))))); // nn.silu_grad"))
      << k.source;
}

TEST(FusedKernelSource, F32AloneTakesFourPerThread) {
  fused::FusedKernelSource k =
      generated("(f32[1001], f32[1001]) { %0 = nn.add(%i0, %i1) : f32[1001]; yield %0 }");
  EXPECT_EQ(k.vectorWidth, 4);
  EXPECT_TRUE(contains(k.source, "n / 4u")) << k.source;
  EXPECT_TRUE(contains(k.source, "x0[3] = __uint_as_float(r0.w[3]);")) << k.source;
  // Mixed with bf16: 8 per thread, two 16-byte accesses of f32.
  fused::FusedKernelSource mixed = generated(
      "(f32[1001]) { %0 = nn.cast(%i0) : bf16[1001]; yield %0 }");
  EXPECT_EQ(mixed.vectorWidth, 8);
  EXPECT_TRUE(contains(mixed.source, "reinterpret_cast<const loom_vec16 *>(in0) + v * 2u"))
      << mixed.source;
  EXPECT_TRUE(contains(mixed.source, "const loom_vec16 r1 = p[1];")) << mixed.source;
}

TEST(FusedKernelSource, ReadsBroadcastInputsAtTheirOffsets) {
  fused::FusedKernelSource k = generated(kBodies[3]);
  // [4,5,7] with f32[4,1,7], bf16[7] and a scalar: coordinates per element,
  // the whole-shape outputs still vectorized.
  EXPECT_EQ(k.vectorInputs, (std::vector<bool>{false, false, false}));
  EXPECT_EQ(k.vectorOutputs, (std::vector<bool>{true, false, true}));
  const std::string &s = k.source;
  EXPECT_TRUE(contains(s, "const unsigned int c2 = q % 7u;")) << s;
  EXPECT_TRUE(contains(s, "const float a0 = loom_load_f32(in0[c0 * 7u + c2]);")) << s;
  EXPECT_TRUE(contains(s, "const float a1 = loom_load_bf16(in1[c2]);")) << s;
  EXPECT_TRUE(contains(s, "const float a2 = loom_load_f16(in2[0]);")) << s;
  // exp(x) is [4,1,7]: written once per element, by the positions of column 0.
  EXPECT_TRUE(contains(s, "if (c1 == 0) out1[c0 * 7u + c2] = loom_store_f32(v6);")) << s;
  EXPECT_TRUE(contains(s, "const float v4 = loom_round_f16((v3)); // nn.cast")) << s;
}

TEST(FusedKernelSource, ReadsAndWritesMasksOneByteAtATime) {
  fused::FusedKernelSource k = generated(kBodies[6]);
  EXPECT_EQ(k.vectorWidth, 4);
  EXPECT_EQ(k.vectorInputs, (std::vector<bool>{true, false, false}));
  EXPECT_EQ(k.vectorOutputs, (std::vector<bool>{true, false}));
  const std::string &s = k.source;
  EXPECT_TRUE(contains(s, "const float a2 = loom_load_i1(in2[i]);")) << s;
  EXPECT_TRUE(contains(s, "const float v0 = loom_round_i1(((a0) < (a1) ? 1.0f : 0.0f)); // nn.compare"))
      << s;
  EXPECT_TRUE(contains(s, "const float v2 = ((a2) != 0.0f ? (v1) : (a0)); // nn.where")) << s;
  EXPECT_TRUE(contains(s, "out1[i] = loom_store_i1(v0);")) << s;
}

TEST(FusedKernelSource, MergesDimsEveryTensorStepsThroughAlike) {
  // [8,16,64] + [64]: the bias repeats every 64, so two dims do.
  fused::FusedKernelSource k = generated(
      "(bf16[8,16,64], bf16[64]) { %0 = nn.add(%i0, %i1) : bf16[8,16,64]; yield %0 }");
  EXPECT_TRUE(contains(k.source, "const unsigned int c1 = q % 64u;")) << k.source;
  EXPECT_TRUE(contains(k.source, "const unsigned int c0 = q;")) << k.source;
  EXPECT_TRUE(contains(k.source, "in1[c1]")) << k.source;
  EXPECT_FALSE(contains(k.source, "c2")) << k.source;
}

TEST(FusedKernelSource, CountsPositionsIn64BitsWhenThereAreMany) {
  fused::FusedKernelSource k = generated(
      "(bf16[65536,65536]) { %0 = nn.neg(%i0) : bf16[65536,65536]; yield %0 }");
  EXPECT_EQ(k.elements, int64_t(1) << 32);
  EXPECT_TRUE(contains(k.source, "const long long n = 4294967296ll;")) << k.source;
}

TEST(FusedKernelSource, AnEmptyGroupHasNothingToCompute) {
  fused::FusedKernelSource k =
      generated("(f32[0,5]) { %0 = nn.exp(%i0) : f32[0,5]; yield %0 }");
  EXPECT_EQ(k.elements, 0);
  EXPECT_FALSE(contains(k.source, "for (")) << k.source;
  EXPECT_FALSE(contains(k.source, "% 0")) << k.source;
}

TEST(FusedKernelSource, RefusesWhatItCannotGenerate) {
  llvm::Expected<fused::FusedKernelSource> k = fused::generateFusedKernel(
      parsed("(f32[4,8]) { %0 = nn.mul(%i0, %i0) : f32[4,8]; "
             "%1 = nn.reduce_sum(%0) {dims = [1], keepdim = 0} : f32[4]; yield %1 }"));
  ASSERT_FALSE(static_cast<bool>(k));
  EXPECT_EQ(llvm::toString(k.takeError()),
            "member %1 (nn.reduce_sum) has no scalar formula (NN_ScalarFormula in its ODS)");
}

//===----------------------------------------------------------------------===//
// The CPU kernel: the members one by one
//===----------------------------------------------------------------------===//

std::vector<uint8_t> randomBytes(const FusedTensorType &t, std::mt19937 &rng) {
  int64_t n = 1;
  for (int64_t d : t.shape)
    n *= d;
  std::vector<uint8_t> bytes(n * dtypeSize(t.dtype));
  std::uniform_real_distribution<double> value(-3, 3);
  for (int64_t i = 0; i < n; ++i)
    storeFromDouble(bytes.data(), t.dtype, i, value(rng));
  return bytes;
}

TEST(FusedCpuKernel, IsBitForBitTheMembersRunOneByOne) {
  std::mt19937 rng(11);
  for (const char *text : kBodies) {
    SCOPED_TRACE(text);
    FusedBody body = parsed(text);
    std::vector<std::vector<uint8_t>> inputs;
    std::vector<cpu::Tensor> in;
    for (const FusedTensorType &t : body.inputs) {
      inputs.push_back(randomBytes(t, rng));
      in.push_back({inputs.back().data(), t.dtype, t.shape});
    }
    // Reference: each member through its own kernel, every value stored.
    std::vector<std::vector<uint8_t>> values(body.steps.size());
    std::vector<cpu::Tensor> tensors(body.steps.size());
    for (size_t j = 0; j < body.steps.size(); ++j) {
      const FusedStep &s = body.steps[j];
      cpu::Tensor out{nullptr, s.result.dtype, s.result.shape};
      values[j].resize(std::max<size_t>(out.sizeInBytes(), 1));
      out.data = values[j].data();
      std::vector<cpu::Tensor> operands;
      for (const FusedRef &r : s.operands)
        operands.push_back(r.isInput ? in[r.index] : tensors[r.index]);
      ASSERT_EQ(llvm::toString(cpu::runKernel(s.kernel, operands, {out}, cpu::KernelAttrs(s.attrs))),
                "");
      tensors[j] = out;
    }
    std::vector<std::vector<uint8_t>> outputs;
    std::vector<cpu::Tensor> out;
    for (uint32_t y : body.yields)
      outputs.emplace_back(values[y].size(), 0xA5);
    for (size_t o = 0; o < body.yields.size(); ++o)
      out.push_back({outputs[o].data(), body.steps[body.yields[o]].result.dtype,
                     body.steps[body.yields[o]].result.shape});
    cpu::KernelAttrs attrs;
    attrs.set("body", std::string(text));
    ASSERT_EQ(llvm::toString(cpu::runKernel("nn.fused", in, out, attrs)), "");
    for (size_t o = 0; o < body.yields.size(); ++o)
      EXPECT_EQ(std::memcmp(outputs[o].data(), values[body.yields[o]].data(), outputs[o].size()),
                0)
          << "output " << o;
  }
}

TEST(FusedCpuKernel, RefusesScratchFarBeyondItsBuffers) {
  std::vector<float> x(4, 1.0f), y(1);
  cpu::Tensor in{x.data(), DType::F32, {4}}, out{y.data(), DType::F32, {}};
  cpu::KernelAttrs attrs;
  attrs.set("body", std::string("(f32[4]) { %0 = nn.broadcast(%i0) : f32[1000000000,4]; "
                                "%1 = nn.reduce_max(%0) {dims = [0, 1], keepdim = 0} : f32[]; "
                                "yield %1 }"));
  std::string error = llvm::toString(cpu::runKernel("nn.fused", {in}, {out}, attrs));
  EXPECT_EQ(error, "nn.fused: the body's values that are not yielded need 16000000000 bytes, "
                   "far more than its call's buffers (20 bytes): a damaged body?");
}

TEST(FusedCpuKernel, RejectsABadBodyOrMismatchedBuffersInOneLine) {
  std::vector<float> x(4, 1.0f), y(4);
  cpu::Tensor in{x.data(), DType::F32, {4}}, out{y.data(), DType::F32, {4}};
  cpu::KernelAttrs attrs;
  attrs.set("body", std::string("(f32[4]) { %0 = nn.exp(%i0) : f32[4]; yield"));
  std::string error = llvm::toString(cpu::runKernel("nn.fused", {in}, {out}, attrs));
  EXPECT_EQ(error, "nn.fused: body: at character 44: expected '%', found the end");
  attrs.set("body", std::string("(f32[5]) { %0 = nn.exp(%i0) : f32[5]; yield %0 }"));
  error = llvm::toString(cpu::runKernel("nn.fused", {in}, {out}, attrs));
  EXPECT_EQ(error, "nn.fused: input 0 is f32[4], the body declares f32[5]");
  error = llvm::toString(cpu::runKernel("nn.fused", {in}, {out}, cpu::KernelAttrs()));
  EXPECT_NE(error.find("body"), std::string::npos) << error;
}

//===----------------------------------------------------------------------===//
// NVRTC (no GPU needed)
//===----------------------------------------------------------------------===//

#ifdef LOOM_HAVE_CUDA_KERNELS
TEST(FusedKernelNvrtc, CompilesEveryGeneratedKernelForHopper) {
  if (std::string why = cuda::nvrtcUnavailableReason(); !why.empty())
    GTEST_SKIP() << "NVRTC cannot be opened here: " << why;
  std::vector<std::string> sources;
  for (const char *text : kBodies)
    sources.push_back(generated(text).source);
  sources.push_back(generated("(bf16[65536,65536]) { %0 = nn.neg(%i0) : bf16[65536,65536]; "
                              "yield %0 }")
                        .source);
  sources.push_back(generated("(f32[0,5]) { %0 = nn.exp(%i0) : f32[0,5]; yield %0 }").source);
  for (const std::string &source : sources) {
    llvm::Expected<std::string> cubin = cuda::compileWithNvrtc(source, "sm_90");
    ASSERT_TRUE(static_cast<bool>(cubin)) << llvm::toString(cubin.takeError()) << "\n" << source;
    // An ELF image.
    ASSERT_GT(cubin->size(), 4u);
    EXPECT_EQ(cubin->substr(0, 4), "\x7f" "ELF");
  }
}

TEST(FusedKernelNvrtc, ACompileErrorIsOneLine) {
  if (std::string why = cuda::nvrtcUnavailableReason(); !why.empty())
    GTEST_SKIP() << "NVRTC cannot be opened here: " << why;
  llvm::Expected<std::string> cubin =
      cuda::compileWithNvrtc("extern \"C\" __global__ void k() { undefined_thing(); }", "sm_90");
  ASSERT_FALSE(static_cast<bool>(cubin));
  std::string error = llvm::toString(cubin.takeError());
  EXPECT_NE(error.find("could not compile its kernel"), std::string::npos) << error;
  EXPECT_NE(error.find("undefined_thing"), std::string::npos) << error;
  EXPECT_EQ(error.find('\n'), std::string::npos) << error;
}
#endif

} // namespace
