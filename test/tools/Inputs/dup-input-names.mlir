func.func @main(%a: tensor<4xf32> {loom.name = "x"}, %b: tensor<4xf32> {loom.name = "x"}) -> tensor<4xf32> {
  %y = nn.add %a, %b : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %y : tensor<4xf32>
}
