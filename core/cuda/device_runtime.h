// What core/runtime.cpp needs from the CUDA backend: device discovery, the CudaState (streams,
// cuBLASLt handle, workspace), and the device and pinned-host allocators. Plain C++ declarations.
#pragma once
#include <memory>
#include <string>

#include "core/alloc.h"

namespace trellis {
struct CudaState;
}

namespace trellis::gpu {

int device_count();  // 0 when there is no driver or no GPU
CudaState* create_state(int device, bool deterministic);
void destroy_state(CudaState* s);
// Caching allocator of device memory (blocks reused by size, current/peak statistics, an
// out-of-memory message naming the request, the usage and the knobs that help).
std::unique_ptr<Allocator> make_device_allocator(int device);
std::unique_ptr<Allocator> make_pinned_allocator();
void synchronize(CudaState* s);
std::string device_name(CudaState* s);
double peak_flops(CudaState* s);  // dense bf16/fp16 FLOP/s; 0 if the GPU is not in our table
size_t free_memory(CudaState* s);  // cudaMemGetInfo's free bytes on the state's device
// Timing events on the compute stream (PhaseMarks): create, record, milliseconds between two
// recorded events (both must have completed), destroy.
void* create_timing_event();
void record_on_compute(CudaState* s, void* event);
float event_ms(void* from, void* to);
void event_synchronize(void* event);  // blocks the host until the recorded work is done
void destroy_timing_event(void* event);
// CUDA graphs of the compute stream's work (core/step_graph.h): begin_capture, then the work is
// queued as usual but not run; end_capture instantiates it (an executable graph, destroy with
// destroy_graph); launch_graph queues one run of it on the compute stream. Events recorded while
// capturing (record_on_compute) become nodes of the graph, recorded at each of its runs.
// abandon_capture leaves capture mode after an error, dropping what was captured.
void begin_capture(CudaState* s);
void* end_capture(CudaState* s);
void abandon_capture(CudaState* s);
void launch_graph(CudaState* s, void* graph);
void destroy_graph(void* graph);

}  // namespace trellis::gpu
