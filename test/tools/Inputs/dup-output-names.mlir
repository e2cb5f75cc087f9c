func.func @main(%a: tensor<4xf32>) -> (tensor<4xf32> {loom.name = "y"}, tensor<4xf32> {loom.name = "y"}) {
  %y = nn.exp %a : tensor<4xf32>
  %z = nn.exp %y : tensor<4xf32>
  return %y, %z : tensor<4xf32>, tensor<4xf32>
}
