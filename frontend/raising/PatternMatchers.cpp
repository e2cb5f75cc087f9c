#include "frontend/raising/PatternMatchers.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <string>

using namespace mlir;

namespace loom::raising {

std::optional<double> splatValue(Value v) {
  while (true) {
    if (auto b = v.getDefiningOp<nn::BroadcastOp>())
      v = b.getInput();
    else if (auto r = v.getDefiningOp<nn::ReshapeOp>())
      v = r.getInput();
    else if (auto c = v.getDefiningOp<nn::CastOp>())
      v = c.getInput();
    else
      break;
  }
  auto constant = v.getDefiningOp<nn::ConstantOp>();
  if (!constant)
    return std::nullopt;
  auto dense = dyn_cast<DenseElementsAttr>(constant.getValue());
  if (!dense || !dense.isSplat())
    return std::nullopt;
  Type element = dense.getElementType();
  if (isa<FloatType>(element)) {
    double value = dense.getSplatValue<APFloat>().convertToDouble();
    if (element.getIntOrFloatBitWidth() > 32)
      return value;
    // The shortest decimal that rounds to the same float: an epsilon written
    // as 1e-5 reads back as 1e-5, not as its f32 neighbour 9.99999974e-6.
    char text[32];
    auto [end, ec] = std::to_chars(text, text + sizeof(text), static_cast<float>(value));
    if (ec == std::errc())
      return std::strtod(std::string(text, end).c_str(), nullptr);
    return value;
  }
  if (element.isInteger(1))
    return dense.getSplatValue<bool>() ? 1.0 : 0.0;
  if (isa<IntegerType>(element))
    return static_cast<double>(dense.getSplatValue<APInt>().getSExtValue());
  return std::nullopt;
}

bool isSplat(Value v, double expected, double tolerance) {
  std::optional<double> value = splatValue(v);
  return value && std::fabs(*value - expected) <= tolerance * std::max(1.0, std::fabs(expected));
}

bool isBroadcastableShape(ArrayRef<int64_t> from, ArrayRef<int64_t> to) {
  return nn::isBroadcastableTo(from, to);
}

SmallVector<int64_t> withoutLeadingOnes(ArrayRef<int64_t> shape) {
  size_t i = 0;
  while (i < shape.size() && shape[i] == 1)
    ++i;
  return SmallVector<int64_t>(shape.drop_front(i));
}

Value stripUnitReshapes(Value v) {
  while (auto r = v.getDefiningOp<nn::ReshapeOp>()) {
    SmallVector<int64_t> from, to;
    for (int64_t d : r.getInput().getType().getShape())
      if (d != 1)
        from.push_back(d);
    for (int64_t d : r.getType().getShape())
      if (d != 1)
        to.push_back(d);
    if (from != to)
      break;
    v = r.getInput();
  }
  return v;
}

} // namespace loom::raising
