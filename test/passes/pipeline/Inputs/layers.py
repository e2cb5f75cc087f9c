"""Prints a synthetic nn forward with N transformer-like layers (embedding,
N x [rms_norm, matmul, add], final norm, head) for pipeline-partition tests."""
import sys

n = int(sys.argv[1])
# --shared: every layer also reads one unnumbered frozen table (like RoPE's).
shared = "--shared" in sys.argv
d, v = 8, 16
t = f"tensor<2x4x{d}xf32>"
print(f"func.func @main(%ids: tensor<2x4xi64>) -> tensor<2x4x{v}xf32> {{")
print(f'  %emb = nn.parameter "embed.weight" init(normal, 0.02) : tensor<{v}x{d}xf32>')
if shared:
    print(f'  %rot = nn.parameter "rotary.table" frozen init(ones) : {t}')
print(f"  %h0 = nn.embedding %emb, %ids : (tensor<{v}x{d}xf32>, tensor<2x4xi64>) -> {t}")
for i in range(n):
    print(f'  %n{i}w = nn.parameter "layers.{i}.norm.weight" init(ones) : tensor<{d}xf32>')
    print(f'  %f{i}w = nn.parameter "layers.{i}.fc.weight" init(normal, 0.02) : tensor<{d}x{d}xf32>')
    print(f"  %n{i} = nn.rms_norm %h{i}, weight %n{i}w epsilon = 1.0e-05 : ({t}, tensor<{d}xf32>) -> {t}")
    print(f"  %m{i} = nn.matmul %n{i}, %f{i}w {{transpose_rhs}} : ({t}, tensor<{d}x{d}xf32>) -> {t}")
    if shared:
        print(f"  %r{i} = nn.mul %m{i}, %rot : ({t}, {t}) -> {t}")
        print(f"  %h{i + 1} = nn.add %h{i}, %r{i} : ({t}, {t}) -> {t}")
    else:
        print(f"  %h{i + 1} = nn.add %h{i}, %m{i} : ({t}, {t}) -> {t}")
print(f'  %nw = nn.parameter "norm.weight" init(ones) : tensor<{d}xf32>')
print(f'  %hw = nn.parameter "head.weight" init(normal, 0.02) : tensor<{v}x{d}xf32>')
print(f"  %nf = nn.rms_norm %h{n}, weight %nw epsilon = 1.0e-05 : ({t}, tensor<{d}xf32>) -> {t}")
print(f"  %out = nn.matmul %nf, %hw {{transpose_rhs}} : ({t}, tensor<{v}x{d}xf32>) -> tensor<2x4x{v}xf32>")
print(f"  return %out : tensor<2x4x{v}xf32>")
print("}")
