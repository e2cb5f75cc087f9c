// RUN: loom-opt %s --loom-raise-router -canonicalize -split-input-file | FileCheck %s

// Mixtral and Qwen3-MoE: a softmax, its top-k, the values normalized.
// CHECK-LABEL: func.func @softmax_normalized
// CHECK: %[[W:.*]], %[[IDS:.*]], %[[P:.*]] = nn.router %arg0 k = 2 {normalize} : (tensor<6x4xf32>) -> (tensor<6x2xf32>, tensor<6x2xi64>, tensor<6x4xf32>)
// CHECK-NOT: nn.topk
// CHECK-NOT: nn.softmax
// CHECK: return %[[W]], %[[IDS]], %[[P]]
func.func @softmax_normalized(%logits: tensor<6x4xf32>) -> (tensor<6x2xf32>, tensor<6x2xi64>, tensor<6x4xf32>) {
  %p = nn.softmax %logits dim = 1 : tensor<6x4xf32>
  %v, %ids = nn.topk %p k = 2 : (tensor<6x4xf32>) -> (tensor<6x2xf32>, tensor<6x2xi64>)
  %sum = nn.reduce_sum %v dims = [1] keepdim : tensor<6x2xf32> -> tensor<6x1xf32>
  %w = nn.div %v, %sum : (tensor<6x2xf32>, tensor<6x1xf32>) -> tensor<6x2xf32>
  return %w, %ids, %p : tensor<6x2xf32>, tensor<6x2xi64>, tensor<6x4xf32>
}

// -----

// Qwen2-MoE without norm_topk_prob: the top-k's values are the weights.
// CHECK-LABEL: func.func @softmax_plain
// CHECK: %[[W:.*]], %[[IDS:.*]], %{{.*}} = nn.router %arg0 k = 3 : (tensor<6x8xf32>) -> (tensor<6x3xf32>, tensor<6x3xi64>, tensor<6x8xf32>)
// CHECK: return %[[W]], %[[IDS]]
func.func @softmax_plain(%logits: tensor<6x8xf32>) -> (tensor<6x3xf32>, tensor<6x3xi64>) {
  %p = nn.softmax %logits dim = 1 : tensor<6x8xf32>
  %v, %ids = nn.topk %p k = 3 : (tensor<6x8xf32>) -> (tensor<6x3xf32>, tensor<6x3xi64>)
  return %v, %ids : tensor<6x3xf32>, tensor<6x3xi64>
}

// -----

// DeepSeek-V3 as transformers exports it: sigmoid affinities, a correction
// bias for the choice, the group mask (groups scored by their two best,
// the two best groups kept, the others' scores set to 0), the chosen
// experts' unbiased affinities gathered, normalized with 1e-20 and scaled
// by 2.5.
// CHECK-LABEL: func.func @deepseek_v3
// CHECK: %[[W:.*]], %[[IDS:.*]], %{{.*}} = nn.router %arg0 bias %arg1 k = 2 {epsilon = 9.{{[0-9]*}}E-21 : f64, group_k = 2 : i64, groups = 4 : i64, normalize, scale = 2.5{{0*}}e+00 : f64, sigmoid}
// CHECK-NOT: nn.topk
// CHECK-NOT: nn.where
// CHECK: return %[[W]], %[[IDS]]
func.func @deepseek_v3(%logits: tensor<6x8xf32>, %bias: tensor<8xf32>) -> (tensor<6x2xf32>, tensor<6x2xi64>) {
  %groups = nn.constant dense<[[[0, 1, 2, 3]]]> : tensor<1x1x4xi64>
  %experts = nn.constant dense<[[[0, 1, 2, 3, 4, 5, 6, 7]]]> : tensor<1x1x8xi64>
  %zero_i = nn.constant dense<0> : tensor<i64>
  %one = nn.constant dense<1.0> : tensor<f32>
  %zero = nn.constant dense<0.0> : tensor<f32>
  %false = nn.constant dense<false> : tensor<i1>
  %eps = nn.constant dense<1.0e-20> : tensor<f32>
  %scale = nn.constant dense<2.5> : tensor<f32>
  %s = nn.sigmoid %logits : tensor<6x8xf32>
  %c = nn.add %s, %bias : (tensor<6x8xf32>, tensor<8xf32>) -> tensor<6x8xf32>
  %cg = nn.reshape %c : tensor<6x8xf32> -> tensor<6x4x2xf32>
  %gv, %gi = nn.topk %cg k = 2 : (tensor<6x4x2xf32>) -> (tensor<6x4x2xf32>, tensor<6x4x2xi64>)
  %gs = nn.reduce_sum %gv dims = [2] : tensor<6x4x2xf32> -> tensor<6x4xf32>
  %bv, %bi = nn.topk %gs k = 2 : (tensor<6x4xf32>) -> (tensor<6x2xf32>, tensor<6x2xi64>)
  %bic = nn.reshape %bi : tensor<6x2xi64> -> tensor<6x2x1xi64>
  %hit = nn.compare eq, %bic, %groups : (tensor<6x2x1xi64>, tensor<1x1x4xi64>) -> tensor<6x2x4xi1>
  %hiti = nn.cast %hit : tensor<6x2x4xi1> -> tensor<6x2x4xi64>
  %any = nn.reduce_max %hiti dims = [1] : tensor<6x2x4xi64> -> tensor<6x4xi64>
  %sel = nn.compare gt, %any, %zero_i : (tensor<6x4xi64>, tensor<i64>) -> tensor<6x4xi1>
  %gm = nn.where %sel, %one, %zero : (tensor<6x4xi1>, tensor<f32>, tensor<f32>) -> tensor<6x4xf32>
  %gm3 = nn.reshape %gm : tensor<6x4xf32> -> tensor<6x4x1xf32>
  %gmb = nn.broadcast %gm3 : tensor<6x4x1xf32> -> tensor<6x4x2xf32>
  %em = nn.reshape %gmb : tensor<6x4x2xf32> -> tensor<6x8xf32>
  %emb = nn.cast %em : tensor<6x8xf32> -> tensor<6x8xi1>
  %masked = nn.compare eq, %emb, %false : (tensor<6x8xi1>, tensor<i1>) -> tensor<6x8xi1>
  %x = nn.where %masked, %zero, %c : (tensor<6x8xi1>, tensor<f32>, tensor<6x8xf32>) -> tensor<6x8xf32>
  %v, %ids = nn.topk %x k = 2 : (tensor<6x8xf32>) -> (tensor<6x2xf32>, tensor<6x2xi64>)
  %idc = nn.reshape %ids : tensor<6x2xi64> -> tensor<6x2x1xi64>
  %ehit = nn.compare eq, %idc, %experts : (tensor<6x2x1xi64>, tensor<1x1x8xi64>) -> tensor<6x2x8xi1>
  %srow = nn.reshape %s : tensor<6x8xf32> -> tensor<6x1x8xf32>
  %sb = nn.broadcast %srow : tensor<6x1x8xf32> -> tensor<6x2x8xf32>
  %picked = nn.where %ehit, %sb, %zero : (tensor<6x2x8xi1>, tensor<6x2x8xf32>, tensor<f32>) -> tensor<6x2x8xf32>
  %w0 = nn.reduce_sum %picked dims = [2] : tensor<6x2x8xf32> -> tensor<6x2xf32>
  %sum = nn.reduce_sum %w0 dims = [1] keepdim : tensor<6x2xf32> -> tensor<6x1xf32>
  %den = nn.add %sum, %eps : (tensor<6x1xf32>, tensor<f32>) -> tensor<6x1xf32>
  %wn = nn.div %w0, %den : (tensor<6x2xf32>, tensor<6x1xf32>) -> tensor<6x2xf32>
  %w = nn.mul %wn, %scale : (tensor<6x2xf32>, tensor<f32>) -> tensor<6x2xf32>
  return %w, %ids : tensor<6x2xf32>, tensor<6x2xi64>
}

// -----

// The mask turned around (the chosen groups' experts masked) is not
// DeepSeek's choice: running it shows so, and the top-k stays.
// CHECK-LABEL: func.func @mask_inverted
// CHECK-NOT: nn.router
// CHECK: nn.topk
func.func @mask_inverted(%logits: tensor<6x8xf32>) -> (tensor<6x2xf32>, tensor<6x2xi64>) {
  %groups = nn.constant dense<[[[0, 1, 2, 3]]]> : tensor<1x1x4xi64>
  %zero_i = nn.constant dense<0> : tensor<i64>
  %one = nn.constant dense<1.0> : tensor<f32>
  %zero = nn.constant dense<0.0> : tensor<f32>
  %s = nn.sigmoid %logits : tensor<6x8xf32>
  %cg = nn.reshape %s : tensor<6x8xf32> -> tensor<6x4x2xf32>
  %gv, %gi = nn.topk %cg k = 2 : (tensor<6x4x2xf32>) -> (tensor<6x4x2xf32>, tensor<6x4x2xi64>)
  %gs = nn.reduce_sum %gv dims = [2] : tensor<6x4x2xf32> -> tensor<6x4xf32>
  %bv, %bi = nn.topk %gs k = 2 : (tensor<6x4xf32>) -> (tensor<6x2xf32>, tensor<6x2xi64>)
  %bic = nn.reshape %bi : tensor<6x2xi64> -> tensor<6x2x1xi64>
  %hit = nn.compare eq, %bic, %groups : (tensor<6x2x1xi64>, tensor<1x1x4xi64>) -> tensor<6x2x4xi1>
  %hiti = nn.cast %hit : tensor<6x2x4xi1> -> tensor<6x2x4xi64>
  %any = nn.reduce_max %hiti dims = [1] : tensor<6x2x4xi64> -> tensor<6x4xi64>
  %sel = nn.compare gt, %any, %zero_i : (tensor<6x4xi64>, tensor<i64>) -> tensor<6x4xi1>
  %sel3 = nn.reshape %sel : tensor<6x4xi1> -> tensor<6x4x1xi1>
  %selb = nn.broadcast %sel3 : tensor<6x4x1xi1> -> tensor<6x4x2xi1>
  %em = nn.reshape %selb : tensor<6x4x2xi1> -> tensor<6x8xi1>
  %x = nn.where %em, %zero, %s : (tensor<6x8xi1>, tensor<f32>, tensor<6x8xf32>) -> tensor<6x8xf32>
  %v, %ids = nn.topk %x k = 2 : (tensor<6x8xf32>) -> (tensor<6x2xf32>, tensor<6x2xi64>)
  return %v, %ids : tensor<6x2xf32>, tensor<6x2xi64>
}

// -----

// GPT-OSS and Granite-MoE take the softmax after the top-k of the logits:
// not a router of this form; the top-k stays.
// CHECK-LABEL: func.func @softmax_after
// CHECK-NOT: nn.router
// CHECK: nn.topk
func.func @softmax_after(%logits: tensor<6x8xf32>) -> (tensor<6x2xf32>, tensor<6x2xi64>) {
  %v, %ids = nn.topk %logits k = 2 : (tensor<6x8xf32>) -> (tensor<6x2xf32>, tensor<6x2xi64>)
  %w = nn.softmax %v dim = 1 : tensor<6x2xf32>
  return %w, %ids : tensor<6x2xf32>, tensor<6x2xi64>
}
