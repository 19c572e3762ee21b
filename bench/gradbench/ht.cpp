// bench/gradbench/ht.cpp — GradBench's `ht` eval (ADBench's hand tracking):
// the residuals between observed points and a skinned hand model posed by 26
// angles (`objective`), and their Jacobian (`jacobian`), computed by adjit's
// forward mode. An input with `us` is the "complicated" variant (each point is
// matched to a point inside a mesh triangle, at barycentric coordinates us);
// an empty `us` is the "simple" one (each point matched to a vertex).
//
// The model (ADBench's): the 22 bones' rotations come from Euler angles in
// theta, chain down the bone tree (unrolled at trace time, one batched
// product per depth: the tree is the input's structure), and blend the base vertex positions by the skinning
// weights; a global angle-axis rotation and translation follow. Only the
// vertices a correspondence reads are skinned: the residuals read no other.
#include "tool.h"

#include <cstdio>
#include <stdexcept>

using namespace adjit;

namespace {

constexpr int64_t kThetas = 26;
constexpr int64_t kBones = 22;

/// What is fixed by the model, known at trace time: the bone tree, whether
/// the model is mirrored, and which entry of theta drives each bone's Euler
/// angles (kThetas for "none": that angle is 0).
struct Rig {
  std::vector<int> parents;
  bool mirrored = false;
  Array angleSource; ///< i32 [3, kBones]: per bone, theta's index for its x, z, y angles
};

/// The rig of a model; the layout of theta is ADBench's (global rotation 0-2,
/// global translation 3-5, then 4 per finger: two angles at its second bone,
/// one at each of the next two; the wrist, the fingers' first bones and the
/// forearm stay unposed).
Rig makeRig(const gradbench::json& model) {
  Rig rig;
  rig.parents = model.at("parents").get<std::vector<int>>();
  rig.mirrored = model.at("is_mirrored").get<bool>();
  if (int64_t(rig.parents.size()) != kBones || model.at("bone_count").get<int64_t>() != kBones)
    throw Error("ht: the model must have " + std::to_string(kBones) + " bones (the theta layout is ADBench's), got " +
                std::to_string(rig.parents.size()));
  for (int b = 0; b < kBones; ++b)
    if (rig.parents[b] >= b)
      throw Error("ht: bone " + std::to_string(b) + "'s parent " + std::to_string(rig.parents[b]) +
                  " must come before it (parents are listed first)");
  std::vector<int32_t> source(3 * kBones, int32_t(kThetas));
  int t = 6;
  for (int finger = 0; finger < 5; ++finger) {
    const int first = 2 + 4 * finger;
    source[first] = t++;         // x angle of the finger's second bone
    source[kBones + first] = t++; // its z angle
    source[first + 1] = t++;
    source[first + 2] = t++;
  }
  rig.angleSource = Array(source, {3, kBones});
  return rig;
}

/// [..., 9] laid out as [..., 3, 3] (row-major entries).
Tensor matrices(const std::vector<Tensor>& entries) {
  Tensor flat = stack(entries, -1);
  std::vector<int64_t> shape = flat.shape();
  shape.back() = 3;
  shape.push_back(3);
  return reshape(flat, shape);
}

/// Rodrigues' rotation of a 3-vector angle-axis; the identity below an angle
/// of 1e-4 (as ADBench), where the axis is not defined.
Tensor angleAxisRotation(const Tensor& aa) {
  Tensor sq = sum(aa * aa);
  Tensor tiny = sq < 1e-8;
  Tensor angle = sqrt(where(tiny, ones_like(sq), sq)); // no 1/0 in either branch's derivative
  Tensor k = aa / angle;
  Tensor x = k[0], y = k[1], z = k[2], s = sin(angle), c = cos(angle), zero = zeros_like(x);
  Tensor cross = matrices({zero, -z, y, z, zero, -x, -y, x, zero});
  Tensor outer = reshape(k, {3, 1}) * reshape(k, {1, 3});
  Tensor eye = constant(Array(std::vector<double>{1, 0, 0, 0, 1, 0, 0, 0, 1}, {3, 3}));
  return where(tiny, eye, c * eye + (1.0 - c) * outer + s * cross);
}

/// Each bone's rotation Rz(z) Ry(y) Rx(x) from its Euler angles, [kBones, 3, 3],
/// the product written out (one stack of entries rather than two batched
/// matrix products: fewer kernels to compile).
Tensor eulerRotations(const Tensor& x, const Tensor& z, const Tensor& y) {
  Tensor cx = cos(x), sx = sin(x), cy = cos(y), sy = sin(y), cz = cos(z), sz = sin(z);
  return matrices({cz * cy, cz * sy * sx - sz * cx, sz * sx + cz * sy * cx,  //
                   sz * cy, cz * cx + sz * sy * sx, sz * sy * cx - cz * sx,  //
                   -sy, cy * sx, cy * cx});
}

/// The model's data, as the jitted functions take it.
struct Model {
  Tensor baseRelatives;         ///< [kBones, 4, 4]
  Tensor inverseBaseAbsolutes;  ///< [kBones, 4, 4]
  Tensor basePositions;         ///< [vertices, 4] (homogeneous)
  Tensor weights;               ///< [vertices, kBones]
};

/// The posed positions [m, 3] of the vertices `ids` ([m] integers).
Tensor skinnedVertices(const Rig& rig, const Tensor& theta, const Model& model, const Tensor& ids) {
  // Euler angles per bone, picked from theta (an appended 0 for unposed ones).
  Tensor padded = concatenate({theta, full({1}, 0.0, DType::f64)});
  Tensor angles = take(padded, reshape(constant(rig.angleSource), {3 * kBones}));
  Tensor rotations = eulerRotations(angles(range(0, kBones)), angles(range(kBones, 2 * kBones)),
                                    angles(range(2 * kBones, 3 * kBones)));
  // base_relative @ [[R, 0], [0, 1]]: the first three columns turn, the last stays.
  Tensor turned = matmul(model.baseRelatives(all, all, range(0, 3)), rotations);
  Tensor relatives = concatenate({turned, model.baseRelatives(all, all, range(3, 4))}, 2);
  // Down the tree: each bone's absolute transform is its parent's times its
  // own, one batched product per depth of the tree (4 here, not 21 products:
  // fewer kernels for LLVM to compile).
  auto indices = [](const std::vector<int32_t>& v) { return constant(Array(v, {int64_t(v.size())})); };
  std::vector<int> depth(kBones, 0), slot(kBones, 0);
  std::vector<std::vector<int32_t>> levels;
  for (int b = 0; b < kBones; ++b) {
    depth[b] = rig.parents[b] < 0 ? 0 : depth[rig.parents[b]] + 1;
    if (int(levels.size()) <= depth[b]) levels.emplace_back();
    slot[b] = int(levels[depth[b]].size());
    levels[depth[b]].push_back(b);
  }
  std::vector<Tensor> absolutes; // per level, [bones at that depth, 4, 4]
  std::vector<int32_t> order(kBones); // bone b's row in the levels concatenated
  int32_t row = 0;
  for (size_t l = 0; l < levels.size(); ++l) {
    Tensor own = take(relatives, indices(levels[l]));
    if (l == 0) {
      absolutes.push_back(own);
    } else {
      std::vector<int32_t> parentSlots;
      for (int32_t b : levels[l]) parentSlots.push_back(slot[rig.parents[b]]);
      absolutes.push_back(matmul(take(absolutes[l - 1], indices(parentSlots)), own));
    }
    for (int32_t b : levels[l]) order[b] = row++;
  }
  Tensor boneAbsolutes = take(concatenate(absolutes), indices(order));
  // Bone transforms' first three rows, one row of 12 per bone.
  Tensor transforms = matmul(boneAbsolutes, model.inverseBaseAbsolutes)(all, range(0, 3), all);
  // Linear blend skinning: each vertex's transform is its weighted sum of the bones'.
  Tensor blended = reshape(matmul(take(model.weights, ids), reshape(transforms, {kBones, 12})), {-1, 3, 4});
  Tensor base = take(model.basePositions, ids);
  Tensor positions = sum(blended * reshape(base, {-1, 1, 4}), {2});
  if (rig.mirrored) positions = positions * constant(Array(std::vector<double>{-1, 1, 1}, {3}));
  // Global rotation (angle-axis theta[0:3], unit scale) and translation theta[3:6].
  Tensor global = angleAxisRotation(theta(range(0, 3)));
  return matmul(positions, global, {.transpose_b = true}) + theta(range(3, 6));
}

/// Simple variant: point i minus vertex correspondences[i], flattened [3n].
Tensor simpleResiduals(const Rig& rig, const Tensor& theta, const Model& model, const Tensor& correspondences,
                       const Tensor& points) {
  return reshape(points - skinnedVertices(rig, theta, model, correspondences), {-1});
}

/// Complicated variant: point i minus the point at barycentric coordinates
/// (u0, u1, 1 - u0 - u1) in triangle correspondences[i], flattened [3n].
Tensor complicatedResiduals(const Rig& rig, const Tensor& theta, const Tensor& us, const Model& model,
                            const Tensor& triangles, const Tensor& correspondences, const Tensor& points) {
  Tensor corners = take(triangles, correspondences);                      // [n, 3] vertex ids
  Tensor vertices = reshape(skinnedVertices(rig, theta, model, reshape(corners, {-1})), {-1, 3, 3});
  Tensor u0 = us(all, range(0, 1)), u1 = us(all, range(1, 2));
  Tensor hand = u0 * vertices(all, 0, all) + u1 * vertices(all, 1, all) + (1.0 - u0 - u1) * vertices(all, 2, all);
  return reshape(points - hand, {-1});
}

/// The input's arrays.
struct Input {
  Rig rig;
  Array theta, us, baseRelatives, inverseBaseAbsolutes, basePositions, weights, triangles, correspondences, points;
  int64_t n = 0;
  bool complicated = false;
};

Array ints(const gradbench::json& j, std::vector<int64_t> shape) {
  std::vector<int32_t> v;
  for (double x : gradbench::numbers(j)) v.push_back(int32_t(x));
  return Array(v, std::move(shape));
}

Input readInput(const gradbench::json& in) {
  Input input;
  const gradbench::json& data = in.at("data");
  const gradbench::json& model = data.at("model");
  input.rig = makeRig(model);
  input.theta = gradbench::array(in.at("theta"), {kThetas});
  if (gradbench::numbers(in.at("theta")).size() != size_t(kThetas))
    throw Error("ht: theta must have " + std::to_string(kThetas) + " entries");
  input.n = int64_t(data.at("correspondences").size());
  const int64_t vertices = int64_t(model.at("base_positions").size());
  input.baseRelatives = gradbench::array(model.at("base_relatives"), {kBones, 4, 4});
  input.inverseBaseAbsolutes = gradbench::array(model.at("inverse_base_absolutes"), {kBones, 4, 4});
  input.basePositions = gradbench::array(model.at("base_positions"), {vertices, 4});
  input.weights = gradbench::array(model.at("weights"), {vertices, kBones});
  input.triangles = ints(model.at("triangles"), {int64_t(model.at("triangles").size()), 3});
  input.correspondences = ints(data.at("correspondences"), {input.n});
  input.points = gradbench::array(data.at("points"), {input.n, 3});
  const auto& us = in.at("us");
  input.complicated = !us.empty();
  if (input.complicated) {
    if (int64_t(us.size()) != input.n)
      throw Error("ht: us must have one pair per correspondence (" + std::to_string(input.n) + "), got " +
                  std::to_string(us.size()));
    input.us = gradbench::array(us, {input.n, 2});
  }
  return input;
}

/// The objective or the Jacobian, compiled on the first evaluation.
class HandTracking : public gradbench::Function {
public:
  HandTracking(Input input, bool jacobian) : in_(std::move(input)), jacobian_(jacobian) {
    // The result's buffer is made once: each run writes into it (a fresh one
    // per run would cost its page faults every time, 17 MB at c = 25600).
    const int64_t cols = kThetas + (in_.complicated ? 2 : 0);
    result_ = jacobian_ ? Array(DType::f64, {3 * in_.n, cols}) : Array(DType::f64, {3 * in_.n});
    const Rig& rig = in_.rig;
    auto model = [](Tensor br, Tensor iba, Tensor bp, Tensor w) { return Model{br, iba, bp, w}; };
    if (!in_.complicated) {
      auto f = [rig, model](Tensor theta, Tensor br, Tensor iba, Tensor bp, Tensor w, Tensor corr, Tensor pts) {
        return simpleResiduals(rig, theta, model(br, iba, bp, w), corr, pts);
      };
      if (jacobian_)
        run_ = [j = jit(jacfwd(f), gradbench::jitOptions("ht_jacobian"))](const Input& i, Array& out) {
          j.into(out, i.theta, i.baseRelatives, i.inverseBaseAbsolutes, i.basePositions, i.weights, i.correspondences,
                   i.points);
        };
      else
        run_ = [j = jit(f, gradbench::jitOptions("ht_objective"))](const Input& i, Array& out) {
          j.into(out, i.theta, i.baseRelatives, i.inverseBaseAbsolutes, i.basePositions, i.weights, i.correspondences,
                   i.points);
        };
    } else {
      auto f = [rig, model](Tensor theta, Tensor us, Tensor br, Tensor iba, Tensor bp, Tensor w, Tensor tri,
                            Tensor corr, Tensor pts) {
        return complicatedResiduals(rig, theta, us, model(br, iba, bp, w), tri, corr, pts);
      };
      // The Jacobian's columns are the eval's: d/du0 and d/du1 of each residual
      // (each residual reads its own pair of us only), then d/dtheta. Shifting
      // every pair by the same (s0, s1) gives exactly those two columns as the
      // derivatives in s0 and s1 at s = 0: one dense Jacobian in p = (s, theta).
      auto shifted = [f](Tensor p, Tensor us, Tensor br, Tensor iba, Tensor bp, Tensor w, Tensor tri, Tensor corr,
                         Tensor pts) {
        return f(p(range(2, {})), us + p(range(0, 2)), br, iba, bp, w, tri, corr, pts);
      };
      if (jacobian_) {
        std::vector<double> p(2, 0.0);
        for (double t : in_.theta.to_vector<double>()) p.push_back(t);
        in_.theta = Array(p, {kThetas + 2});
        run_ = [j = jit(jacfwd(shifted), gradbench::jitOptions("ht_jacobian"))](const Input& i, Array& out) {
          j.into(out, i.theta, i.us, i.baseRelatives, i.inverseBaseAbsolutes, i.basePositions, i.weights, i.triangles,
                   i.correspondences, i.points);
        };
      } else {
        run_ = [j = jit(f, gradbench::jitOptions("ht_objective"))](const Input& i, Array& out) {
          j.into(out, i.theta, i.us, i.baseRelatives, i.inverseBaseAbsolutes, i.basePositions, i.weights, i.triangles,
                   i.correspondences, i.points);
        };
      }
    }
  }

  void evaluate() override { run_(in_, result_); }

  gradbench::json output() const override {
    const std::vector<double> v = result_.to_vector<double>();
    if (!jacobian_) return v;
    const size_t cols = size_t(result_.shape().back());
    gradbench::json rows = gradbench::json::array();
    for (size_t r = 0; r * cols < v.size(); ++r)
      rows.push_back(std::vector<double>(v.begin() + long(r * cols), v.begin() + long((r + 1) * cols)));
    return rows;
  }

private:
  Input in_;
  bool jacobian_;
  std::function<void(const Input&, Array&)> run_;
  Array result_;
};

} // namespace

int main(int argc, char** argv) {
  const std::map<std::string, gradbench::Prepare> functions = {
      {"objective", [](const gradbench::json& in) { return std::make_unique<HandTracking>(readInput(in), false); }},
      {"jacobian", [](const gradbench::json& in) { return std::make_unique<HandTracking>(readInput(in), true); }},
  };
  return gradbench::main(argc, argv, functions);
}
