func.func @main(%a: tensor<2xf32>) -> tensor<2xf32> {
  %0 = stablehlo.custom_call @t(%a) {mhlo.backend_config = {"\FF \t\00c" = [160765836250 : i64], "a" = {"" = {}}}, api_version = 4 : i32} : (tensor<2xf32>) -> tensor<2xf32>
  return %0 : tensor<2xf32>
}
