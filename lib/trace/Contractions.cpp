// trace/Contractions.cpp — einsum, matmul and dot: contractions recorded as
// the IR's matmul (batched, with transposes) or as products and sums.
#include "ir/OpInfo.h"
#include "trace/OpsShared.h"

#include <adjit/tensor.h>

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <optional>
#include <string>

namespace adjit {

Tensor einsum(const std::string& spec, const std::vector<Tensor>& operands0, SrcLoc l) {
  Location loc = Location::from(l);
  const std::vector<Tensor> operands = metDtypes("einsum", operands0, loc);
  auto fail = [&](const std::string& why) -> Error { return Error(fmt::format("einsum \"{}\": {}", spec, why), loc); };
  if (spec.find("...") != std::string::npos) throw fail("'...' is not supported; name every axis");
  const std::size_t arrow = spec.find("->");
  std::string lhs = spec.substr(0, arrow);
  std::vector<std::string> ins;
  for (std::size_t start = 0;;) {
    const std::size_t comma = lhs.find(',', start);
    ins.push_back(lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  auto letters = [&](std::string& s) {
    s.erase(std::remove(s.begin(), s.end(), ' '), s.end());
    for (char ch : s)
      if (!std::isalpha(static_cast<unsigned char>(ch))) throw fail(fmt::format("'{}' is not an axis letter", ch));
  };
  for (std::string& in : ins) letters(in);
  if (ins.size() != operands.size())
    throw fail(fmt::format("the spec names {} operand{}, got {}", ins.size(), ins.size() == 1 ? "" : "s", operands.size()));
  // Each letter's size, checked across operands.
  std::map<char, int64_t> size;
  std::map<char, int> uses;
  for (std::size_t i = 0; i < ins.size(); ++i) {
    const Tensor& x = operands[i];
    if (static_cast<int64_t>(ins[i].size()) != x.rank())
      throw fail(fmt::format("operand {} is {}, but '{}' names {} axes", i, x.type().str(), ins[i], ins[i].size()));
    for (std::size_t d = 0; d < ins[i].size(); ++d) {
      const char ch = ins[i][d];
      if (ins[i].find(ch) != d) throw fail(fmt::format("'{}' repeats in operand {} (diagonals are not supported)", ch, i));
      auto [it, fresh] = size.emplace(ch, x.shape()[d]);
      if (!fresh && it->second != x.shape()[d])
        throw fail(fmt::format("'{}' is {} in operand {} but {} before", ch, x.shape()[d], i, it->second));
      ++uses[ch];
    }
  }
  std::string out;
  if (arrow == std::string::npos) {
    for (const auto& [ch, n] : uses)
      if (n == 1) out += ch;
  } else {
    out = spec.substr(arrow + 2);
    letters(out);
    for (std::size_t d = 0; d < out.size(); ++d) {
      if (!size.count(out[d])) throw fail(fmt::format("output letter '{}' names no input axis", out[d]));
      if (out.find(out[d]) != d) throw fail(fmt::format("output letter '{}' repeats", out[d]));
    }
  }
  // All letters: the output's, then the summed ones in order of appearance.
  std::string all = out;
  for (const std::string& in : ins)
    for (char ch : in)
      if (all.find(ch) == std::string::npos) all += ch;
  Shape full;
  for (char ch : all) full.push_back(size[ch]);
  std::optional<Tensor> product;
  for (std::size_t i = 0; i < ins.size(); ++i) {
    // Transpose to the order of `all`, then insert unit axes for the letters it lacks.
    std::vector<int64_t> perm;
    Shape shape;
    for (char ch : all) {
      const std::size_t d = ins[i].find(ch);
      if (d == std::string::npos) {
        shape.push_back(1);
      } else {
        perm.push_back(static_cast<int64_t>(d));
        shape.push_back(size[ch]);
      }
    }
    Tensor t = transpose(operands[i], perm, l);
    t = broadcast_to(reshape(t, shape, l), full, l);
    product = product ? mul(*product, t, l) : t;
  }
  std::vector<int64_t> summed;
  for (std::size_t d = out.size(); d < all.size(); ++d) summed.push_back(static_cast<int64_t>(d));
  return summed.empty() ? *product : sum(*product, summed, false, l);
}

Tensor matmul(const Tensor& a, const Tensor& b, SrcLoc l) { return matmul(a, b, MatmulOptions{}, l); }

Tensor matmul(const Tensor& a0, const Tensor& b0, MatmulOptions o, SrcLoc l) {
  Location loc = Location::from(l);
  TraceState& s = stateOf({&a0, &b0}, "matmul", loc);
  Tensor a = a0, b = b0;
  meetDtypes(s, "matmul", {&a, &b}, loc);
  auto flags = [&] {
    return std::string(o.transpose_a ? " with transpose_a" : "") +
           (o.transpose_b ? (o.transpose_a ? " and transpose_b" : " with transpose_b") : "");
  };
  if (a.rank() == 0 || b.rank() == 0)
    throw Error(fmt::format("matmul: operands must have rank >= 1, got {} and {}", a.type().str(), b.type().str()), loc);
  if ((o.transpose_a && a.rank() < 2) || (o.transpose_b && b.rank() < 2))
    throw Error(fmt::format("matmul: a transposed operand must have rank >= 2, got {} and {}{}", a.type().str(),
                            b.type().str(), flags()),
                loc);
  Tensor x = a.rank() == 1 ? reshape(a, {1, a.shape()[0]}, l) : a;
  Tensor y = b.rank() == 1 ? reshape(b, {b.shape()[0], 1}, l) : b;
  const Shape as = a.shape(), bs = b.shape(), xsh = x.shape(), ysh = y.shape();
  const std::size_t xr = xsh.size(), yr = ysh.size();
  const int64_t m = o.transpose_a ? xsh[xr - 1] : xsh[xr - 2], xk = o.transpose_a ? xsh[xr - 2] : xsh[xr - 1];
  const int64_t n = o.transpose_b ? ysh[yr - 2] : ysh[yr - 1], yk = o.transpose_b ? ysh[yr - 1] : ysh[yr - 2];
  if (xk != yk) { // name the axes in the operands as given (a 1-D operand's only axis)
    const int64_t ak = a.rank() == 1 ? 0 : a.rank() - (o.transpose_a ? 2 : 1);
    const int64_t bk = b.rank() == 1 ? 0 : b.rank() - (o.transpose_b ? 1 : 2);
    throw Error(fmt::format("matmul: the contracting axes disagree: axis {} of {}{} has {}, but axis {} of {}{} has {}", ak,
                            a.type().str(), o.transpose_a ? " (transpose_a)" : "", xk, bk, b.type().str(),
                            o.transpose_b ? " (transpose_b)" : "", yk),
                loc);
  }
  // Broadcast batch dimensions.
  Shape xb(xsh.begin(), xsh.end() - 2), yb(ysh.begin(), ysh.end() - 2);
  std::size_t rank = std::max(xb.size(), yb.size());
  Shape batch(rank, 1);
  for (const Shape* sh : {&xb, &yb})
    for (std::size_t i = 0; i < sh->size(); ++i) {
      int64_t& d0 = batch[rank - sh->size() + i];
      int64_t d = (*sh)[i];
      if (d == d0 || d == 1) continue;
      if (d0 != 1) throw Error(fmt::format("matmul: incompatible batch shapes {} and {}", a.type().str(), b.type().str()), loc);
      d0 = d;
    }
  Shape xs = batch, ys = batch;
  xs.insert(xs.end(), xsh.end() - 2, xsh.end());
  ys.insert(ys.end(), ysh.end() - 2, ysh.end());
  x = broadcastTo(s, x, xs, loc);
  y = broadcastTo(s, y, ys, loc);
  ir::Attrs attrs;
  if (o.transpose_a) attrs.set("transpose_a", true);
  if (o.transpose_b) attrs.set("transpose_b", true);
  Tensor r = emit(s, OpKind::Matmul, {x, y}, std::move(attrs), loc);
  Shape out = batch;
  if (as.size() > 1) out.push_back(m);
  if (bs.size() > 1) out.push_back(n);
  return reshape(r, out, l);
}

Tensor dot(const Tensor& a, const Tensor& b, SrcLoc l) {
  Location loc = Location::from(l);
  if (a.rank() == 1 && b.rank() == 1) {
    if (a.shape() != b.shape())
      throw Error(fmt::format("dot: incompatible shapes {} and {}", a.type().str(), b.type().str()), loc);
    return sum(mul(a, b, l), {}, false, l);
  }
  return matmul(a, b, l);
}

} // namespace adjit
