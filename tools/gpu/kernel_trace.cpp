// A kernel timeline without Nsight Systems (not installed on the GPU machine): a CUPTI injection
// library. The CUDA driver loads it when CUDA_INJECTION64_PATH names it and calls
// InitializeInjection(); from then on every kernel (graph nodes included) leaves an activity record
// with its GPU start and end, and at exit the records go to KERNEL_TRACE_OUT as CSV
// (start_ns,end_ns,grid_x,block_x,graph_id,name). tools/gpu/kernel_timeline.py reads it.
//
// Build (here): g++ -O2 -shared -fPIC tools/gpu/kernel_trace.cpp -I/usr/local/cuda/include
//               -L/usr/local/cuda/lib -lcupti -o .gpu-bin/lib/libkernel_trace.so
// Run (there):  CUDA_INJECTION64_PATH=$PWD/.gpu-bin/lib/libkernel_trace.so KERNEL_TRACE_OUT=t.csv kvdice ...
#include <cupti.h>
#include <cxxabi.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

namespace {

struct KernelRecord {
  uint64_t start, end;
  int32_t grid_x, block_x;
  uint32_t graph_id;
  std::string name;
};

std::mutex records_mutex;
std::vector<KernelRecord>* records = nullptr;  // never freed: the atexit writer may run late

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *size = 8 << 20;
  *buffer = static_cast<uint8_t*>(aligned_alloc(8, *size));
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid_size) {
  CUpti_Activity* record = nullptr;
  std::lock_guard<std::mutex> lock(records_mutex);
  while (cuptiActivityGetNextRecord(buffer, valid_size, &record) == CUPTI_SUCCESS) {
    if (record->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && record->kind != CUPTI_ACTIVITY_KIND_KERNEL)
      continue;
    const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
    // CUPTI names kernels by their mangled symbol.
    std::string name = k->name ? k->name : "?";
    int status = 0;
    if (char* demangled = abi::__cxa_demangle(name.c_str(), nullptr, nullptr, &status); status == 0) {
      name = demangled;
      free(demangled);
    }
    records->push_back({k->start, k->end, k->gridX, k->blockX, k->graphId, name});
  }
  free(buffer);
}

void write_records() {
  cuptiActivityFlushAll(1);
  const char* path = std::getenv("KERNEL_TRACE_OUT");
  FILE* f = std::fopen(path ? path : "kernel_trace.csv", "w");
  if (f == nullptr) return;
  std::lock_guard<std::mutex> lock(records_mutex);
  std::fprintf(f, "start_ns,end_ns,grid_x,block_x,graph_id,name\n");
  for (const KernelRecord& r : *records) {
    std::string name = r.name;
    for (char& c : name)
      if (c == ',') c = ';';
    std::fprintf(f, "%llu,%llu,%d,%d,%u,%s\n", static_cast<unsigned long long>(r.start),
                 static_cast<unsigned long long>(r.end), r.grid_x, r.block_x, r.graph_id, name.c_str());
  }
  std::fclose(f);
}

}  // namespace

extern "C" int InitializeInjection() {
  records = new std::vector<KernelRecord>();
  records->reserve(1 << 20);
  if (cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS) return 0;
  if (cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS) return 0;
  std::atexit(write_records);
  return 1;
}
