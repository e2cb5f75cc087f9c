// The kernel conformance suite: every kernel of runtime/abi/Kernels.def run
// through a backend on the cases in Inputs/ (inputs, attributes and
// expected outputs computed independently in NumPy by make_cases.py, on
// edge shapes) and compared with the expected outputs at per-dtype
// tolerances. One test per kernel and backend:
//  - cpu: the CPU backend (the CPU kernels) against NumPy;
//  - cuda: the CUDA backend against NumPy, and against the CPU kernels on
//    the same inputs. Skipped, saying why, where there is no GPU or Loom was
//    built without CUDA.
// A case may name a backend's known gap ("unsupported": the CUDA GEMM and
// norms take no f64): that backend must refuse it with an error, and the
// test prints the gap ("[  GAP     ]") instead of comparing.
// EveryKernelHasACase fails when a kernel of Kernels.def has no case.
//
// Regenerate the cases: /usr/bin/python3 test/unit/conformance/make_cases.py

#include "kernels/cpu/CpuKernels.h"
#include "runtime/backends/Backend.h"
#include "runtime/support/FloatTypes.h"
#include "test/unit/runtime/BackendFactories.h"

#include "llvm/Support/Base64.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include "gtest/gtest.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

using namespace loom;

namespace {

struct KernelSignature {
  const char *name;
  int minInputs, maxInputs, numOutputs; // -1: one or more
};

/// The kernel list, read only through Kernels.def's macro.
const std::vector<KernelSignature> &kernelList() {
  static const std::vector<KernelSignature> list = {
#define LOOM_KERNEL(NAME, MIN_IN, MAX_IN, NUM_OUT) {NAME, MIN_IN, MAX_IN, NUM_OUT},
#include "runtime/abi/Kernels.def"
#undef LOOM_KERNEL
  };
  return list;
}

struct CaseTensor {
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> data; // inputs: the values; outputs: the expected values
  int alias = -1;            // outputs: the input whose buffer it is written into
  bool scratch = false;      // outputs: the kernel's working memory, not compared
  int64_t count() const {
    int64_t n = 1;
    for (int64_t d : shape)
      n *= d;
    return n;
  }
};

struct ConformanceCase {
  std::string kernel, name;
  std::vector<NamedAttr> attrs;
  std::vector<CaseTensor> inputs, outputs;
  bool exact = false;
  std::optional<double> rtol, atol;
  /// Known gaps: backend name -> why it does not run this case.
  std::map<std::string, std::string> unsupported;
  /// A backend's documented latitude beyond the case's (backend name ->
  /// atol), e.g. the FP8 tensor cores' limited accumulation precision.
  std::map<std::string, double> backendAtol;
};

/// Where the cases are: $LOOM_CONFORMANCE_INPUTS, else under $LOOM_SRC_ROOT
/// (lit sets it), else this source tree as configured.
std::string inputsDir() {
  if (const char *dir = std::getenv("LOOM_CONFORMANCE_INPUTS"))
    return dir;
  if (const char *root = std::getenv("LOOM_SRC_ROOT"))
    return std::string(root) + "/test/unit/conformance/Inputs";
  return LOOM_CONFORMANCE_INPUTS_DIR;
}

std::string casePath(llvm::StringRef kernel) { return inputsDir() + "/" + kernel.str() + ".json"; }

llvm::Error caseError(const llvm::Twine &what) {
  return llvm::createStringError(what);
}

llvm::Expected<CaseTensor> parseTensor(const llvm::json::Object &obj, const char *dataKey) {
  CaseTensor t;
  auto dtypeName = obj.getString("dtype");
  if (!dtypeName)
    return caseError("a tensor without dtype");
  auto dtype = parseDType(*dtypeName);
  if (!dtype)
    return caseError("unknown dtype '" + *dtypeName + "'");
  t.dtype = *dtype;
  const llvm::json::Array *shape = obj.getArray("shape");
  if (!shape)
    return caseError("a tensor without shape");
  for (const llvm::json::Value &d : *shape) {
    auto dim = d.getAsInteger();
    if (!dim || *dim < 0)
      return caseError("a bad dim in a shape");
    t.shape.push_back(*dim);
  }
  auto data = obj.getString(dataKey);
  if (!data)
    return caseError(llvm::Twine("a tensor without '") + dataKey + "'");
  std::vector<char> bytes;
  if (llvm::Error err = llvm::decodeBase64(*data, bytes))
    return std::move(err);
  t.data.assign(bytes.begin(), bytes.end());
  if (t.data.size() != size_t(t.count()) * dtypeSize(t.dtype))
    return caseError("tensor data has " + llvm::Twine(t.data.size()) + " bytes, expected " +
                     llvm::Twine(t.count() * dtypeSize(t.dtype)));
  if (auto alias = obj.getInteger("alias"))
    t.alias = static_cast<int>(*alias);
  t.scratch = obj.getBoolean("scratch").value_or(false);
  return t;
}

llvm::Expected<NamedAttr> parseAttr(const llvm::json::Object &obj) {
  auto name = obj.getString("name");
  if (!name)
    return caseError("an attribute without name");
  if (auto v = obj.getInteger("int"))
    return NamedAttr{name->str(), *v};
  if (auto v = obj.getNumber("f64"))
    return NamedAttr{name->str(), *v};
  if (auto v = obj.getString("str"))
    return NamedAttr{name->str(), v->str()};
  if (const llvm::json::Array *list = obj.getArray("ints")) {
    std::vector<int64_t> values;
    for (const llvm::json::Value &v : *list)
      values.push_back(v.getAsInteger().value_or(0));
    return NamedAttr{name->str(), values};
  }
  if (const llvm::json::Array *list = obj.getArray("f64s")) {
    std::vector<double> values;
    for (const llvm::json::Value &v : *list)
      values.push_back(v.getAsNumber().value_or(0));
    return NamedAttr{name->str(), values};
  }
  return caseError("attribute '" + *name + "' has no value of a known type");
}

/// The cases of one kernel, from Inputs/<kernel>.json.
llvm::Expected<std::vector<ConformanceCase>> loadCases(llvm::StringRef kernel) {
  const std::string path = casePath(kernel);
  auto buffer = llvm::MemoryBuffer::getFile(path);
  if (!buffer)
    return caseError("cannot read " + path + ": " + buffer.getError().message());
  auto json = llvm::json::parse((*buffer)->getBuffer());
  if (!json)
    return caseError(path + ": " + llvm::toString(json.takeError()));
  const llvm::json::Object *root = json->getAsObject();
  if (!root || root->getString("kernel") != kernel || !root->getArray("cases"))
    return caseError(path + " is not a case file of " + kernel);
  std::vector<ConformanceCase> cases;
  for (const llvm::json::Value &c : *root->getArray("cases")) {
    const llvm::json::Object *obj = c.getAsObject();
    if (!obj)
      return caseError(path + ": a case is not an object");
    ConformanceCase kc;
    kc.kernel = kernel.str();
    kc.name = obj->getString("name").value_or("").str();
    auto fail = [&](llvm::Error err) {
      return caseError(path + ", case '" + kc.name + "': " + llvm::toString(std::move(err)));
    };
    if (const llvm::json::Array *attrs = obj->getArray("attrs"))
      for (const llvm::json::Value &a : *attrs) {
        auto attr = a.getAsObject() ? parseAttr(*a.getAsObject()) : caseError("bad attribute");
        if (!attr)
          return fail(attr.takeError());
        kc.attrs.push_back(std::move(*attr));
      }
    for (auto [key, dataKey, into] : {std::tuple{"inputs", "data", &kc.inputs},
                                      std::tuple{"outputs", "expected", &kc.outputs}}) {
      const llvm::json::Array *list = obj->getArray(key);
      if (!list)
        return fail(caseError(llvm::Twine("no '") + key + "'"));
      for (const llvm::json::Value &v : *list) {
        auto t = v.getAsObject() ? parseTensor(*v.getAsObject(), dataKey)
                                 : caseError("a tensor is not an object");
        if (!t)
          return fail(t.takeError());
        into->push_back(std::move(*t));
      }
    }
    for (const CaseTensor &out : kc.outputs)
      if (out.alias >= static_cast<int>(kc.inputs.size()) ||
          (out.alias >= 0 && kc.inputs[out.alias].data.size() != out.data.size()))
        return fail(caseError("an output aliases no input of its size"));
    kc.exact = obj->getBoolean("exact").value_or(false);
    kc.rtol = obj->getNumber("rtol");
    kc.atol = obj->getNumber("atol");
    if (const llvm::json::Object *latitude = obj->getObject("backend_atol"))
      for (const auto &[backend, value] : *latitude)
        if (std::optional<double> atol = value.getAsNumber())
          kc.backendAtol[backend.str()] = *atol;
    if (const llvm::json::Object *gaps = obj->getObject("unsupported"))
      for (const auto &[backend, reason] : *gaps)
        kc.unsupported[backend.str()] = reason.getAsString().value_or("").str();
    cases.push_back(std::move(kc));
  }
  return cases;
}

/// Tolerances against the NumPy references (float64 math rounded once to
/// the output's dtype): |have - want| <= atol + rtol |want|. The CPU kernels
/// compute narrow floats in f32 (and round again where they chain kernels,
/// as matmul's epilogues do), so a couple of ulps of the dtype.
struct Tolerance {
  double rtol, atol;
};
Tolerance numpyTolerance(DType t) {
  switch (t) {
  case DType::F32: return {1e-5, 1e-6};
  case DType::F64: return {1e-12, 1e-14};
  case DType::F16: return {std::ldexp(1.0, -9), 1e-5};
  case DType::BF16: return {std::ldexp(1.0, -6), 1e-4};
  case DType::F8E4M3FN: return {0.25, std::ldexp(1.0, -9)};
  case DType::F8E5M2: return {0.5, std::ldexp(1.0, -16)};
  default: return {0, 0}; // integers and i1: exact
  }
}

/// Compares `count` elements of `have` with `want` (both `dtype`); returns
/// "" or a description of the mismatches.
std::string compare(DType dtype, int64_t count, const uint8_t *want, const uint8_t *have,
                    bool exact, Tolerance tol) {
  int64_t mismatches = 0;
  std::ostringstream first;
  const size_t size = dtypeSize(dtype);
  for (int64_t i = 0; i < count; ++i) {
    bool same;
    double w = loadAsDouble(want, dtype, i), h = loadAsDouble(have, dtype, i);
    if (dtype == DType::I1)
      same = (want[i] != 0) == (have[i] != 0);
    else if (!isFloat(dtype))
      same = std::memcmp(want + i * size, have + i * size, size) == 0;
    else if (std::isnan(w) || std::isnan(h))
      same = std::isnan(w) && std::isnan(h);
    else if (exact || std::isinf(w))
      same = std::memcmp(want + i * size, have + i * size, size) == 0;
    else
      same = std::fabs(h - w) <= tol.atol + tol.rtol * std::fabs(w);
    if (!same && mismatches++ == 0) {
      first.precision(9);
      first << "first at element " << i << ": got " << h << ", expected " << w;
      if (dtype == DType::I64) {
        int64_t hw, ww;
        std::memcpy(&hw, have + i * 8, 8);
        std::memcpy(&ww, want + i * 8, 8);
        first << " (" << hw << " vs " << ww << ")";
      }
    }
  }
  if (mismatches == 0)
    return "";
  std::ostringstream out;
  out << mismatches << " of " << count << " elements differ (" << dtypeName(dtype)
      << (exact ? ", exact" : "") << ", rtol " << tol.rtol << ", atol " << tol.atol
      << "); " << first.str();
  return out.str();
}

/// The outputs of a case run by the CPU kernels directly, on host memory.
llvm::Expected<std::vector<std::vector<uint8_t>>> runOnCpuKernels(const ConformanceCase &c) {
  std::vector<std::vector<uint8_t>> inData, outData;
  for (const CaseTensor &t : c.inputs)
    inData.push_back(t.data);
  for (const CaseTensor &t : c.outputs)
    outData.emplace_back(t.data.size());
  std::vector<cpu::Tensor> in, out;
  for (size_t i = 0; i < c.inputs.size(); ++i)
    in.push_back({inData[i].data(), c.inputs[i].dtype, c.inputs[i].shape});
  for (size_t o = 0; o < c.outputs.size(); ++o) {
    const CaseTensor &t = c.outputs[o];
    void *data = t.alias >= 0 ? inData[t.alias].data() : outData[o].data();
    out.push_back({data, t.dtype, t.shape});
  }
  if (llvm::Error err = cpu::runKernel(c.kernel, in, out, cpu::KernelAttrs(c.attrs)))
    return std::move(err);
  for (size_t o = 0; o < c.outputs.size(); ++o)
    if (c.outputs[o].alias >= 0)
      outData[o] = inData[c.outputs[o].alias];
  return outData;
}

/// The outputs of a case run by `backend`, through its memory.
llvm::Expected<std::vector<std::vector<uint8_t>>> runOnBackend(Backend &backend,
                                                               const ConformanceCase &c) {
  std::vector<void *> allocations;
  auto release = [&] {
    for (void *p : allocations)
      backend.deallocate(p);
  };
  auto run = [&]() -> llvm::Expected<std::vector<std::vector<uint8_t>>> {
    std::vector<DeviceTensor> in, out;
    for (const CaseTensor &t : c.inputs) {
      auto p = backend.allocate(t.data.size());
      if (!p)
        return p.takeError();
      allocations.push_back(*p);
      if (llvm::Error err = backend.copyToDevice(*p, t.data.data(), t.data.size()))
        return std::move(err);
      in.push_back({*p, t.dtype, t.shape});
    }
    for (const CaseTensor &t : c.outputs) {
      if (t.alias >= 0) {
        out.push_back({in[t.alias].data, t.dtype, t.shape});
        continue;
      }
      auto p = backend.allocate(t.data.size());
      if (!p)
        return p.takeError();
      allocations.push_back(*p);
      out.push_back({*p, t.dtype, t.shape});
    }
    if (llvm::Error err = backend.launch(c.kernel, in, out, cpu::KernelAttrs(c.attrs), 0))
      return std::move(err);
    if (llvm::Error err = backend.synchronize())
      return std::move(err);
    std::vector<std::vector<uint8_t>> results;
    for (size_t o = 0; o < out.size(); ++o) {
      results.emplace_back(c.outputs[o].data.size());
      if (llvm::Error err =
              backend.copyToHost(results.back().data(), out[o].data, results.back().size()))
        return std::move(err);
    }
    return results;
  };
  auto results = run();
  release();
  return results;
}

/// A backend under test, created once per process (with one stream).
struct BackendUnderTest {
  Backend *backend = nullptr;
  std::string whyNot;
  /// Tolerance against the CPU kernels; null for the CPU backend (it runs them).
  double (*cpuTolerance)(DType) = nullptr;
};

template <typename Factory> BackendUnderTest makeBackend() {
  static std::unique_ptr<Backend> backend = Factory::create();
  BackendUnderTest b;
  if (!backend) {
    b.whyNot = std::string("the ") + Factory::kName +
               " conformance tests need a GPU, and there is none here: " +
               Factory::unavailableReason();
    return b;
  }
  static bool streams = [] {
    return !static_cast<bool>(backend->createStreams(1, 0));
  }();
  if (!streams) {
    b.whyNot = std::string("the ") + Factory::kName + " backend could not create a stream";
    return b;
  }
  b.backend = backend.get();
  return b;
}

BackendUnderTest backendNamed(const std::string &name) {
  if (name == "cpu")
    return makeBackend<test::CpuBackendFactory>();
#ifdef LOOM_HAVE_CUDA_BACKEND
  BackendUnderTest b = makeBackend<test::CudaBackendFactory>();
  b.cpuTolerance = &test::CudaBackendFactory::tolerance;
  return b;
#else
  BackendUnderTest b;
  b.whyNot = "Loom was built without the CUDA backend (no CUDA toolkit, or "
             "-DLOOM_WITH_CUDA=OFF), so there is no CUDA backend to test";
  return b;
#endif
}

using Param = std::tuple<std::string, std::string>; // backend, kernel

class KernelConformance : public ::testing::TestWithParam<Param> {};

TEST_P(KernelConformance, MatchesNumPyReferences) {
  const auto &[backendName, kernel] = GetParam();
  BackendUnderTest b = backendNamed(backendName);
  if (!b.backend)
    GTEST_SKIP() << b.whyNot;
  auto cases = loadCases(kernel);
  ASSERT_TRUE(static_cast<bool>(cases)) << llvm::toString(cases.takeError());
  ASSERT_FALSE(cases->empty()) << "no conformance case for " << kernel;
  for (const ConformanceCase &c : *cases) {
    SCOPED_TRACE(kernel + " case '" + c.name + "' on " + backendName);
    auto gap = c.unsupported.find(backendName);
    if (gap != c.unsupported.end()) {
      // A known gap: the backend must refuse the case, not compute garbage.
      auto got = runOnBackend(*b.backend, c);
      EXPECT_FALSE(static_cast<bool>(got))
          << "the " << backendName << " backend now runs this case; remove its 'unsupported' "
          << "entry in make_cases.py";
      if (!got)
        std::cerr << "[  GAP     ] " << kernel << " case '" << c.name << "' is not run on "
                  << backendName << ": " << gap->second << " (it reports: "
                  << llvm::toString(got.takeError()) << ")\n";
      continue;
    }
    auto got = runOnBackend(*b.backend, c);
    if (!got) {
      ADD_FAILURE() << llvm::toString(got.takeError());
      continue;
    }
    std::optional<std::vector<std::vector<uint8_t>>> cpuGot;
    if (b.cpuTolerance) {
      auto ref = runOnCpuKernels(c);
      if (!ref)
        ADD_FAILURE() << "the CPU kernels failed: " << llvm::toString(ref.takeError());
      else
        cpuGot = std::move(*ref);
    }
    for (size_t o = 0; o < c.outputs.size(); ++o) {
      const CaseTensor &want = c.outputs[o];
      if (want.scratch)
        continue;
      Tolerance tol = numpyTolerance(want.dtype);
      if (c.rtol)
        tol.rtol = *c.rtol;
      if (c.atol)
        tol.atol = *c.atol;
      if (auto latitude = c.backendAtol.find(backendName); latitude != c.backendAtol.end())
        tol.atol = std::max(tol.atol, latitude->second);
      if (b.cpuTolerance) { // the backend's own latitude, on top
        tol.rtol = std::max(tol.rtol, b.cpuTolerance(want.dtype));
        tol.atol = std::max(tol.atol, b.cpuTolerance(want.dtype));
      }
      std::string diff =
          compare(want.dtype, want.count(), want.data.data(), (*got)[o].data(), c.exact, tol);
      EXPECT_EQ(diff, "") << "output " << o << " against NumPy";
      if (cpuGot) {
        const double t = b.cpuTolerance(want.dtype);
        double atol = t;
        if (auto latitude = c.backendAtol.find(backendName); latitude != c.backendAtol.end())
          atol = std::max(atol, latitude->second);
        std::string cpuDiff = compare(want.dtype, want.count(), (*cpuGot)[o].data(),
                                      (*got)[o].data(), c.exact, {t, atol});
        EXPECT_EQ(cpuDiff, "") << "output " << o << " against the CPU kernels";
      }
    }
  }
}

std::vector<std::string> kernelNames() {
  std::vector<std::string> names;
  for (const KernelSignature &k : kernelList())
    names.push_back(k.name);
  return names;
}

std::string paramName(const ::testing::TestParamInfo<Param> &info) {
  std::string name = std::get<0>(info.param) + "_" + std::get<1>(info.param);
  for (char &ch : name)
    if (!std::isalnum(static_cast<unsigned char>(ch)))
      ch = '_';
  return name;
}

INSTANTIATE_TEST_SUITE_P(Kernels, KernelConformance,
                         ::testing::Combine(::testing::Values("cpu", "cuda"),
                                            ::testing::ValuesIn(kernelNames())),
                         paramName);

// Every kernel of Kernels.def has a case file with at least one case, every
// case has an operand count the kernel takes, and no case file names a
// kernel that is not in the list.
TEST(KernelConformanceCases, EveryKernelHasACase) {
  std::set<std::string> listed;
  for (const KernelSignature &k : kernelList()) {
    listed.insert(k.name);
    auto cases = loadCases(k.name);
    if (!cases) {
      ADD_FAILURE() << "no conformance case for " << k.name << ": "
                    << llvm::toString(cases.takeError());
      continue;
    }
    EXPECT_FALSE(cases->empty()) << "no conformance case for " << k.name;
    for (const ConformanceCase &c : *cases) {
      const int in = static_cast<int>(c.inputs.size());
      int out = static_cast<int>(c.outputs.size());
      // The FP8 scale epilogue's outputs come after the kernel's own.
      for (const NamedAttr &a : c.attrs)
        if (a.name == kFp8ScaleOfAttr)
          if (const auto *list = std::get_if<std::vector<int64_t>>(&a.value))
            out -= static_cast<int>(list->size());
      EXPECT_TRUE(in >= k.minInputs && (k.maxInputs < 0 || in <= k.maxInputs))
          << k.name << " case '" << c.name << "' has " << in << " inputs";
      EXPECT_TRUE(k.numOutputs < 0 ? out >= 1 : out == k.numOutputs)
          << k.name << " case '" << c.name << "' has " << out << " outputs";
    }
  }
  std::error_code ec;
  int files = 0;
  for (llvm::sys::fs::directory_iterator it(inputsDir(), ec), end; it != end && !ec;
       it.increment(ec)) {
    llvm::StringRef file = llvm::sys::path::filename(it->path());
    if (!file.consume_back(".json"))
      continue;
    ++files;
    EXPECT_TRUE(listed.count(file.str()))
        << it->path() << " has cases of " << file.str() << ", which Kernels.def does not list";
  }
  EXPECT_FALSE(ec) << inputsDir() << ": " << ec.message();
  EXPECT_EQ(files, static_cast<int>(listed.size()));
}

} // namespace
