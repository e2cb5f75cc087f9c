// Counts the GPU kernels a program runs, through CUPTI's activity API, with
// no change to the program: the CUDA driver loads this library at cuInit
// when CUDA_INJECTION64_PATH names it. At exit it prints, to stderr, the
// kernels (and memcpys, memsets) launched outside CUDA graphs and, for each
// CUDA graph replayed, its distinct kernel nodes and how often they ran. For
// `loom-run --steps N` (the step captured as one graph after the first and
// replayed, the default), the step graph's kernel nodes are the kernels a
// training step launches.
//
//   c++ -O2 -std=c++17 -shared -fPIC -I/usr/local/cuda/include bench/cuda/kernel_count.cpp \
//       -L/usr/local/cuda/lib -lcupti -Wl,-rpath,'$ORIGIN' -o libkernel_count.so
//   CUDA_INJECTION64_PATH=$PWD/libkernel_count.so loom-run ...
//
// KERNEL_COUNT_NAMES=FILE also writes, for the graph with the most kernel
// nodes, one line per kernel name: its nodes in the graph and the name.
#include <cupti.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>

namespace {

struct GraphStats {
  std::set<uint64_t> kernelNodes, otherNodes;
  uint64_t kernelRecords = 0, otherRecords = 0;
  std::map<uint64_t, std::string> nodeName;
};

std::mutex mutex;
uint64_t eagerKernels = 0, eagerCopies = 0, eagerSets = 0, dropped = 0;
std::map<uint32_t, GraphStats> graphs;
bool reported = false;

void CUPTIAPI requestBuffer(uint8_t **buffer, size_t *size, size_t *maxRecords) {
  *size = 8 << 20;
  *buffer = static_cast<uint8_t *>(aligned_alloc(8, *size));
  *maxRecords = 0;
}

void CUPTIAPI completeBuffer(CUcontext, uint32_t, uint8_t *buffer, size_t, size_t validSize) {
  std::lock_guard<std::mutex> lock(mutex);
  CUpti_Activity *record = nullptr;
  while (cuptiActivityGetNextRecord(buffer, validSize, &record) == CUPTI_SUCCESS) {
    switch (record->kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
      auto *k = reinterpret_cast<CUpti_ActivityKernel10 *>(record);
      if (k->graphId == 0) {
        ++eagerKernels;
      } else {
        GraphStats &g = graphs[k->graphId];
        ++g.kernelRecords;
        if (g.kernelNodes.insert(k->graphNodeId).second && k->name)
          g.nodeName[k->graphNodeId] = k->name;
      }
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
      auto *m = reinterpret_cast<CUpti_ActivityMemcpy6 *>(record);
      if (m->graphId == 0) {
        ++eagerCopies;
      } else {
        ++graphs[m->graphId].otherRecords;
        graphs[m->graphId].otherNodes.insert(m->graphNodeId);
      }
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
      auto *m = reinterpret_cast<CUpti_ActivityMemset4 *>(record);
      if (m->graphId == 0) {
        ++eagerSets;
      } else {
        ++graphs[m->graphId].otherRecords;
        graphs[m->graphId].otherNodes.insert(m->graphNodeId);
      }
      break;
    }
    default:
      break;
    }
  }
  size_t n = 0;
  cuptiActivityGetNumDroppedRecords(nullptr, 0, &n);
  dropped += n;
  free(buffer);
}

void report() {
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  std::lock_guard<std::mutex> lock(mutex);
  if (reported)
    return;
  reported = true;
  fprintf(stderr,
          "kernel_count: outside graphs: %llu kernels, %llu memcpys, %llu memsets; %llu records "
          "dropped\n",
          (unsigned long long)eagerKernels, (unsigned long long)eagerCopies,
          (unsigned long long)eagerSets, (unsigned long long)dropped);
  uint32_t largest = 0;
  size_t largestNodes = 0;
  for (const auto &[id, g] : graphs) {
    fprintf(stderr,
            "kernel_count: graph %u: %zu kernel nodes, %zu memcpy/memset nodes; %llu kernel runs "
            "(%.2f replays)\n",
            id, g.kernelNodes.size(), g.otherNodes.size(), (unsigned long long)g.kernelRecords,
            g.kernelNodes.empty() ? 0.0 : double(g.kernelRecords) / g.kernelNodes.size());
    if (g.kernelNodes.size() > largestNodes) {
      largestNodes = g.kernelNodes.size();
      largest = id;
    }
  }
  if (const char *path = getenv("KERNEL_COUNT_NAMES"); path && largestNodes) {
    std::map<std::string, size_t> byName;
    for (const auto &[node, name] : graphs[largest].nodeName)
      ++byName[name];
    if (FILE *f = fopen(path, "w")) {
      for (const auto &[name, count] : byName)
        fprintf(f, "%zu\t%s\n", count, name.c_str());
      fclose(f);
    }
  }
}

} // namespace

extern "C" __attribute__((visibility("default"))) int InitializeInjection() {
  if (cuptiActivityRegisterCallbacks(requestBuffer, completeBuffer) != CUPTI_SUCCESS ||
      cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS) {
    fprintf(stderr, "kernel_count: CUPTI could not be set up\n");
    return 0;
  }
  cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY);
  cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET);
  atexit(report);
  return 1;
}
