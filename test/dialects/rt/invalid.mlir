// RUN: loom-opt %s -split-input-file -verify-diagnostics

// Every verifier rule of the rt dialect (dialects/rt/RtDialect.cpp).

// A kernel must be listed in runtime/executable/Kernels.def.
rt.program @unknown_kernel rank = 0 streams = ["compute"] {
  %x = rt.input "x" : memref<4xf32>
  %y = rt.alloc : memref<4xf32>
  // expected-error @+1 {{'rt.kernel' op unknown kernel 'nn.frobnicate'}}
  rt.kernel "nn.frobnicate" (%x) -> (%y) : (memref<4xf32>) -> memref<4xf32>
}

// -----

// Too few inputs for a kernel of fixed arity.
rt.program @too_few_inputs rank = 0 streams = ["compute"] {
  %x = rt.input "x" : memref<4xf32>
  %y = rt.alloc : memref<4xf32>
  // expected-error @+1 {{kernel 'nn.add' takes 2 to 2 inputs, got 1}}
  rt.kernel "nn.add" (%x) -> (%y) : (memref<4xf32>) -> memref<4xf32>
}

// -----

// Too many inputs for a kernel with optional inputs.
rt.program @too_many_inputs rank = 0 streams = ["compute"] {
  %x = rt.input "x" : memref<4xf32>
  %y = rt.alloc : memref<4xf32>
  // expected-error @+1 {{kernel 'nn.layer_norm' takes 1 to 3 inputs, got 4}}
  rt.kernel "nn.layer_norm" (%x, %x, %x, %x) -> (%y) : (memref<4xf32>, memref<4xf32>, memref<4xf32>, memref<4xf32>) -> memref<4xf32>
}

// -----

// A kernel that takes no inputs given one.
rt.program @iota_with_input rank = 0 streams = ["compute"] {
  %x = rt.input "x" : memref<4xf32>
  %y = rt.alloc : memref<4xf32>
  // expected-error @+1 {{kernel 'nn.iota' takes 0 to 0 inputs, got 1}}
  rt.kernel "nn.iota" (%x) -> (%y) attrs {dim = 0 : i64} : (memref<4xf32>) -> memref<4xf32>
}

// -----

// A variadic kernel (concat) still needs its minimum.
rt.program @concat_no_inputs rank = 0 streams = ["compute"] {
  %y = rt.alloc : memref<4xf32>
  // expected-error @+1 {{kernel 'nn.concat' takes 1 to any number of inputs, got 0}}
  rt.kernel "nn.concat" () -> (%y) attrs {dim = 0 : i64} : () -> memref<4xf32>
}

// -----

// A kernel with one output given two.
rt.program @too_many_outputs rank = 0 streams = ["compute"] {
  %x = rt.input "x" : memref<4xf32>
  %y = rt.alloc : memref<4xf32>
  %z = rt.alloc : memref<4xf32>
  // expected-error @+1 {{kernel 'nn.relu' writes 1 outputs, got 2}}
  rt.kernel "nn.relu" (%x) -> (%y, %z) : (memref<4xf32>) -> (memref<4xf32>, memref<4xf32>)
}

// -----

// A kernel with one output given none.
rt.program @no_outputs rank = 0 streams = ["compute"] {
  %x = rt.input "x" : memref<4xf32>
  // expected-error @+1 {{kernel 'nn.relu' writes 1 outputs, got 0}}
  rt.kernel "nn.relu" (%x) -> () : (memref<4xf32>) -> ()
}

// -----

// A kernel with "one or more" outputs (split) given none.
rt.program @split_no_outputs rank = 0 streams = ["compute"] {
  %x = rt.input "x" : memref<4xf32>
  // expected-error @+1 {{kernel 'nn.split' writes one or more outputs, got 0}}
  rt.kernel "nn.split" (%x) -> () attrs {dim = 0 : i64} : (memref<4xf32>) -> ()
}

// -----

// Kernel attributes must be integers, floats, strings or i64/f64 arrays: not
// an ArrayAttr.
rt.program @bad_attr_array rank = 0 streams = ["compute"] {
  %x = rt.input "x" : memref<4xf32>
  %y = rt.alloc : memref<4xf32>
  // expected-error @+1 {{kernel attribute 'dims' must be an integer, float, string or i64/f64 array, got [0]}}
  rt.kernel "nn.reduce_sum" (%x) -> (%y) attrs {dims = [0]} : (memref<4xf32>) -> memref<4xf32>
}

// -----

// ... nor a unit attribute (lowering gives flags as 0/1).
rt.program @bad_attr_unit rank = 0 streams = ["compute"] {
  %x = rt.input "x" : memref<4xf32>
  %y = rt.alloc : memref<4xf32>
  // expected-error @+1 {{kernel attribute 'causal' must be an integer, float, string or i64/f64 array, got unit}}
  rt.kernel "nn.relu" (%x) -> (%y) attrs {causal} : (memref<4xf32>) -> memref<4xf32>
}

// -----

// ... nor an i32 array.
rt.program @bad_attr_i32_array rank = 0 streams = ["compute"] {
  %x = rt.input "x" : memref<4xf32>
  %y = rt.alloc : memref<4xf32>
  // expected-error @+1 {{kernel attribute 'permutation' must be an integer, float, string or i64/f64 array}}
  rt.kernel "nn.transpose" (%x) -> (%y) attrs {permutation = array<i32: 0>} : (memref<4xf32>) -> memref<4xf32>
}

// -----

// A kernel must run on a stream the program lists.
rt.program @kernel_unlisted_stream rank = 0 streams = ["compute"] {
  %x = rt.input "x" : memref<4xf32>
  %y = rt.alloc : memref<4xf32>
  // expected-error @+1 {{'rt.kernel' op runs on stream 'tp_comm', which the program does not list}}
  rt.kernel "nn.relu" (%x) -> (%y) on "tp_comm" : (memref<4xf32>) -> memref<4xf32>
}

// -----

// So must a copy.
rt.program @copy_unlisted_stream rank = 0 streams = ["compute"] {
  %x = rt.input "x" : memref<4xf32>
  %y = rt.alloc : memref<4xf32>
  // expected-error @+1 {{'rt.copy' op runs on stream 'host_copy', which the program does not list}}
  rt.copy %x -> %y on "host_copy" : memref<4xf32> -> memref<4xf32>
}

// -----

// So must an event record.
rt.program @record_unlisted_stream rank = 0 streams = ["compute"] {
  // expected-error @+1 {{'rt.record_event' op runs on stream 'host_copy', which the program does not list}}
  rt.record_event 0 on "host_copy"
}

// -----

// So must an event wait.
rt.program @wait_unlisted_stream rank = 0 streams = ["compute"] {
  // expected-error @+1 {{'rt.wait_event' op runs on stream 'host_copy', which the program does not list}}
  rt.wait_event 0 on "host_copy"
}

// -----

// A stream is listed at most once.
// expected-error @+1 {{'rt.program' op stream 'compute' is listed twice}}
rt.program @duplicate_stream rank = 0 streams = ["compute", "host_copy", "compute"] {
}

// -----

// A program needs at least one stream.
// expected-error @+1 {{'rt.program' op needs at least one stream}}
rt.program @no_streams rank = 0 streams = [] {
}

// -----

// The rank is non-negative.
// expected-error @+1 {{'rt.program' op rank must be non-negative}}
rt.program @negative_rank rank = -1 streams = ["compute"] {
}

// -----

// arena_sizes holds [persistent, scratch], or with a host arena (offloaded
// activations) [persistent, scratch, host]: not one entry...
// expected-error @+1 {{'rt.program' op arena_sizes holds [persistent, scratch] or [persistent, scratch, host], got 1 entries}}
rt.program @arena_sizes_short rank = 0 streams = ["compute"] attributes {arena_sizes = array<i64: 256>} {
}

// -----

// ... nor four.
// expected-error @+1 {{'rt.program' op arena_sizes holds [persistent, scratch] or [persistent, scratch, host], got 4 entries}}
rt.program @arena_sizes_long rank = 0 streams = ["compute"] attributes {arena_sizes = array<i64: 256, 512, 0, 8>} {
}

// -----

// An alias shows the same number of bytes.
rt.program @alias_size rank = 0 streams = ["compute"] {
  %x = rt.input "x" : memref<4x8xf32>
  // expected-error @+1 {{'rt.alias' op aliases 128 bytes as 64 bytes}}
  %a = rt.alias %x : memref<4x8xf32> -> memref<16xf32>
}

// -----

// Bytes, not elements, must match: 8 f32 are not 8 f16.
rt.program @alias_element_size rank = 0 streams = ["compute"] {
  %x = rt.input "x" : memref<8xf32>
  // expected-error @+1 {{'rt.alias' op aliases 32 bytes as 16 bytes}}
  %a = rt.alias %x : memref<8xf32> -> memref<8xf16>
}

// -----

// A copy moves the whole buffer into one of the same size.
rt.program @copy_size rank = 0 streams = ["compute"] {
  %x = rt.input "x" : memref<4x8xf32>
  %y = rt.alloc : memref<4x4xf32>
  // expected-error @+1 {{'rt.copy' op copies 128 bytes into a buffer of 64 bytes}}
  rt.copy %x -> %y : memref<4x8xf32> -> memref<4x4xf32>
}

// -----

// A parameter's initializer is one of zeros, ones, normal, uniform.
rt.program @param_bad_init rank = 0 streams = ["compute"] {
  // expected-error @+1 {{'rt.param' op unknown initializer 'xavier'}}
  %w = rt.param "w" {init = "xavier"} : memref<4xf32>
}

// -----

// A parameter's value has the buffer's shape...
rt.program @param_value_shape rank = 0 streams = ["compute"] {
  // expected-error @+1 {{'rt.param' op value of type 'tensor<2xf32>' does not match the buffer 'memref<4xf32>'}}
  %w = rt.param "w" frozen {value = dense<1.0> : tensor<2xf32>} : memref<4xf32>
}

// -----

// ... and its element type.
rt.program @param_value_element_type rank = 0 streams = ["compute"] {
  // expected-error @+1 {{'rt.param' op value of type 'tensor<4xf16>' does not match the buffer 'memref<4xf32>'}}
  %w = rt.param "w" frozen {value = dense<1.0> : tensor<4xf16>} : memref<4xf32>
}

// -----

// A parameter has a name (checkpoints and weight files use it).
rt.program @param_empty_name rank = 0 streams = ["compute"] {
  // expected-error @+1 {{'rt.param' op needs a non-empty name}}
  %w = rt.param "" : memref<4xf32>
}

// -----

// Each kernel reads the attributes its contract declares (NNKernels.td):
// an attribute it does not read is an error, not silently carried ...
rt.program @unknown_kernel_attr rank = 0 streams = ["compute"] {
  %x = rt.input "x" : memref<4x4xf32>
  %y = rt.alloc : memref<4x4xf32>
  // expected-error @+1 {{kernel 'nn.transpose': attribute 'weights' is not one nn.transpose reads}}
  rt.kernel "nn.transpose" (%x) -> (%y) attrs {permutation = array<i64: 1, 0>, weights = array<f64: 0.5>} : (memref<4x4xf32>) -> memref<4x4xf32>
}

// -----

// ... and one of the wrong kind is too.
rt.program @kernel_attr_kind rank = 0 streams = ["compute"] {
  %x = rt.input "x" : memref<4x4xf32>
  %y = rt.alloc : memref<4x4xf32>
  // expected-error @+1 {{kernel 'nn.softmax': attribute 'dim' must be an integer, not a string}}
  rt.kernel "nn.softmax" (%x) -> (%y) attrs {dim = "last"} : (memref<4x4xf32>) -> memref<4x4xf32>
}

// -----

// A fusion group's call carries its body: text that does not parse is an
// error saying where ...
rt.program @fused_bad_body rank = 0 streams = ["compute"] {
  %x = rt.input "x" : memref<4xf32>
  %y = rt.alloc : memref<4xf32>
  // expected-error @+1 {{kernel 'nn.fused': body: at character 28: expected ')', found ':'}}
  rt.kernel "nn.fused" (%x) -> (%y) attrs {body = "(f32[4]) { %0 = nn.exp(%i0 : f32[4]; yield %0 }"} : (memref<4xf32>) -> memref<4xf32>
}

// -----

// ... and buffers of other types than the body reads and yields are too.
rt.program @fused_buffer_types rank = 0 streams = ["compute"] {
  %x = rt.input "x" : memref<4xf32>
  %y = rt.alloc : memref<4xbf16>
  // expected-error @+1 {{kernel 'nn.fused': output 0 is bf16[4], the body yields f32[4] (%0)}}
  rt.kernel "nn.fused" (%x) -> (%y) attrs {body = "(f32[4]) { %0 = nn.exp(%i0) : f32[4]; yield %0 }"} : (memref<4xf32>) -> memref<4xbf16>
}

// -----

rt.program @fused_without_body rank = 0 streams = ["compute"] {
  %x = rt.input "x" : memref<4xf32>
  %y = rt.alloc : memref<4xf32>
  // expected-error @+1 {{kernel 'nn.fused' needs its body (string attribute 'body')}}
  rt.kernel "nn.fused" (%x) -> (%y) : (memref<4xf32>) -> memref<4xf32>
}

// -----

// The FP8 scale epilogue names one of the kernel's own outputs.
rt.program @scale_of_bad_output rank = 0 streams = ["compute"] {
  %x = rt.input "x" : memref<4x8xbf16>
  %y = rt.alloc : memref<4x8xbf16>
  %s = rt.alloc : memref<f32>
  // expected-error @+1 {{fp8_scale_of names output 1, not one of the kernel's 1}}
  rt.kernel "nn.silu" (%x) -> (%y, %s) attrs {fp8_scale_of = array<i64: 1>, fp8_format = "e4m3"} on "compute" : (memref<4x8xbf16>) -> (memref<4x8xbf16>, memref<f32>)
}

// -----

// Its outputs are rank-0 f32.
rt.program @scale_of_bad_type rank = 0 streams = ["compute"] {
  %x = rt.input "x" : memref<4x8xbf16>
  %y = rt.alloc : memref<4x8xbf16>
  %s = rt.alloc : memref<2xf32>
  // expected-error @+1 {{an FP8 scale epilogue output must be memref<f32>, got 'memref<2xf32>'}}
  rt.kernel "nn.silu" (%x) -> (%y, %s) attrs {fp8_scale_of = array<i64: 0>, fp8_format = "e4m3"} on "compute" : (memref<4x8xbf16>) -> (memref<4x8xbf16>, memref<2xf32>)
}
