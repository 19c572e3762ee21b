// bench/gradbench/ht.cpp — GradBench's `ht` eval (ADBench's hand tracking):
// the residuals between observed points and a skinned hand model posed by 26
// angles (`objective`), and their Jacobian (`jacobian`), computed by adjit's
// forward mode. An input with `us` is the "complicated" variant (each point is
// matched to a point inside a mesh triangle, at barycentric coordinates us);
// an empty `us` is the "simple" one (each point matched to a vertex).
//
// The model (ADBench's): the 22 bones' rotations come from Euler angles in
// theta, chain down the bone tree, and blend the base vertex positions by the
// skinning weights; a global angle-axis rotation and translation follow. The
// tree is the input's structure, unrolled at trace time: the palm's bones (no
// angle moves them) one batched product per depth, then each finger's chain of
// three posed bones, the five fingers batched by vmap. Only the vertices a
// correspondence reads are skinned: the residuals read no other.
#include "tool.h"

#include <cstdio>
#include <stdexcept>

using namespace adjit;

namespace {

constexpr int64_t kThetas = 26;
constexpr int64_t kBones = 22;
constexpr int64_t kFingers = 5;
constexpr int64_t kFingerThetas = 4; ///< thetas per finger
constexpr int64_t kFingerBones = 3;  ///< posed bones per finger, a chain

/// What is fixed by the model, known at trace time: the bone tree split into
/// the palm (bones no angle moves: their transforms are constants of the
/// model) and the fingers (each a chain of three posed bones below a palm
/// bone, moved by that finger's four thetas only), and whether the model is
/// mirrored. Writing each finger apart is what lets forward mode push a
/// finger's four directions through its own three bones alone.
struct Rig {
  std::vector<int> parents;
  bool mirrored = false;
  std::vector<int32_t> palm;          ///< palm bones, parents before children
  std::vector<int32_t> fingerBones;   ///< [kFingers * kFingerBones]: each chain, root first
  std::vector<int32_t> fingerParents; ///< [kFingers]: the palm bone each chain hangs from
  /// i32 [3, kFingerBones]: per angle (x, z, y) and bone of a chain, the index
  /// of the finger's theta that drives it (kFingerThetas for "none": 0).
  Array fingerAngles;
};

/// The rig of a model; the layout of theta is ADBench's (global rotation 0-2,
/// global translation 3-5, then 4 per finger: two angles (x, z) at its second
/// bone, the x angle at each of the next two; the wrist, the fingers' first
/// bones and the forearm stay unposed).
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
  // Finger f's thetas 6 + 4f .. 9 + 4f pose bones 2 + 4f (x, z), 3 + 4f (x)
  // and 4 + 4f (x): those must be a chain with no other bone below it.
  std::vector<int> finger(kBones, -1);
  for (int f = 0; f < kFingers; ++f) {
    const int first = 2 + 4 * f;
    for (int k = 0; k < kFingerBones; ++k) {
      finger[first + k] = f;
      rig.fingerBones.push_back(first + k);
    }
    rig.fingerParents.push_back(rig.parents[first]);
  }
  for (int b = 0; b < kBones; ++b) {
    const int p = rig.parents[b];
    const bool chained = finger[b] >= 0 && b != 2 + 4 * finger[b];
    if (p >= 0 && finger[p] >= 0 && !(chained && p == b - 1))
      throw Error("ht: bone " + std::to_string(b) + " hangs from finger bone " + std::to_string(p) +
                  ", expected each finger's posed bones " + std::to_string(2 + 4 * finger[p]) + "-" +
                  std::to_string(4 + 4 * finger[p]) + " to be a chain with nothing else below it (ADBench's hand)");
    if (chained && p != b - 1)
      throw Error("ht: bone " + std::to_string(b) + "'s parent is " + std::to_string(p) + ", expected " +
                  std::to_string(b - 1) + " (each finger's posed bones are a chain, ADBench's hand)");
    if (finger[b] < 0) rig.palm.push_back(b);
  }
  const int32_t none = int32_t(kFingerThetas);
  rig.fingerAngles = Array(std::vector<int32_t>{0, 2, 3, 1, none, none, none, none, none}, {3, kFingerBones});
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

/// Each bone's rotation Rz(z) Ry(y) Rx(x) from its Euler angles, [bones, 3, 3],
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

Tensor indices(const std::vector<int32_t>& v) { return constant(Array(v, {int64_t(v.size())})); }

/// The palm bones' absolute transforms, [palm bones, 4, 4] in rig.palm's
/// order: the base relatives chained down the tree, one batched product per
/// depth (no angle moves them).
Tensor palmAbsolutes(const Rig& rig, const Model& model) {
  std::vector<int> depth(kBones, 0), slot(kBones, 0);
  std::vector<std::vector<int32_t>> levels;
  for (int32_t b : rig.palm) {
    depth[b] = rig.parents[b] < 0 ? 0 : depth[rig.parents[b]] + 1;
    if (int(levels.size()) <= depth[b]) levels.emplace_back();
    slot[b] = int(levels[depth[b]].size());
    levels[depth[b]].push_back(b);
  }
  std::vector<Tensor> absolutes; // per level, [bones at that depth, 4, 4]
  std::vector<int32_t> row(kBones, 0);
  int32_t next = 0;
  for (size_t l = 0; l < levels.size(); ++l) {
    Tensor own = take(model.baseRelatives, indices(levels[l]));
    if (l == 0) {
      absolutes.push_back(own);
    } else {
      std::vector<int32_t> parentSlots;
      for (int32_t b : levels[l]) parentSlots.push_back(slot[rig.parents[b]]);
      absolutes.push_back(matmul(take(absolutes[l - 1], indices(parentSlots)), own));
    }
    for (int32_t b : levels[l]) row[b] = next++;
  }
  std::vector<int32_t> back; // rig.palm's bones' rows in the levels concatenated
  for (int32_t b : rig.palm) back.push_back(row[b]);
  return take(concatenate(absolutes), indices(back));
}

/// One finger's bone transforms (first three rows), [kFingerBones, 12]: its
/// chain hangs from `parentAbsolute` [4, 4]; `relatives` and
/// `inverseBaseAbsolutes` are its bones' [kFingerBones, 4, 4], `thetas`
/// [kFingerThetas] its angles, placed by `fingerAngles` (Rig::fingerAngles).
Tensor fingerTransforms(const Array& fingerAngles, const Tensor& thetas, const Tensor& parentAbsolute,
                        const Tensor& relatives, const Tensor& inverseBaseAbsolutes) {
  Tensor padded = concatenate({thetas, full({1}, 0.0, DType::f64)});
  Tensor angles = take(padded, reshape(constant(fingerAngles), {3 * kFingerBones}));
  Tensor rotations = eulerRotations(angles(range(0, kFingerBones)), angles(range(kFingerBones, 2 * kFingerBones)),
                                    angles(range(2 * kFingerBones, 3 * kFingerBones)));
  // base_relative @ [[R, 0], [0, 1]]: the first three columns turn, the last stays.
  Tensor turned = matmul(relatives(all, all, range(0, 3)), rotations);
  Tensor posed = concatenate({turned, relatives(all, all, range(3, 4))}, 2);
  std::vector<Tensor> absolutes{matmul(parentAbsolute, posed(0))};
  for (int64_t k = 1; k < kFingerBones; ++k) absolutes.push_back(matmul(absolutes.back(), posed(k)));
  Tensor transforms = matmul(stack(absolutes), inverseBaseAbsolutes)(all, range(0, 3), all);
  return reshape(transforms, {kFingerBones, 12});
}

/// What the vertices `ids` ([m] integers) need from the model, theta aside.
struct Skin {
  Tensor weights;              ///< [m, kBones]
  Tensor palm;                 ///< [palm bones, 12]: the palm's transforms (first three rows)
  Tensor parentAbsolutes;      ///< [kFingers, 4, 4]: what each finger's chain hangs from
  Tensor relatives;            ///< [kFingers, kFingerBones, 4, 4]
  Tensor inverseBaseAbsolutes; ///< [kFingers, kFingerBones, 4, 4]
  Tensor base;                 ///< [m, 4]: the vertices' base positions
  /// [kFingers * kFingerBones + 4, m] (gatherOnce only): the fingers' bones'
  /// weights (Rig::fingerBones' order) and the base positions, transposed
  Tensor columns;
};

/// The skin of the vertices `ids`; `gatherOnce` copies their rows of the
/// model out once (worth it where many loops read them: the Jacobian).
Skin makeSkin(const Rig& rig, const Model& model, const Tensor& ids, bool gatherOnce) {
  Skin s;
  if (gatherOnce) {
    // The vertices' rows of the model gathered once into one array: its
    // readers (the Jacobian has many over [m] and more) then read it, where
    // each would otherwise gather again through ids.
    Tensor rows = concatenate({take(model.weights, ids), take(model.basePositions, ids)}, 1);
    s.weights = rows(all, range(0, kBones));
    s.base = rows(all, range(kBones, kBones + 4));
    // The same rows transposed, once: the Jacobian's table of weight times
    // base position runs along the vertices, and reading `rows` column-wise
    // for each of its 18,000 entries (two strided loads, a gather each) took
    // a third of the Jacobian's time; this copy reads each of 5,700 once.
    s.columns = concatenate({transpose(take(s.weights, indices(rig.fingerBones), 1)), transpose(s.base)});
  } else {
    s.weights = take(model.weights, ids);
    s.base = take(model.basePositions, ids);
  }
  const int64_t palmBones = int64_t(rig.palm.size());
  Tensor absolutes = palmAbsolutes(rig, model);
  Tensor transforms = matmul(absolutes, take(model.inverseBaseAbsolutes, indices(rig.palm)))(all, range(0, 3), all);
  s.palm = reshape(transforms, {palmBones, 12});
  std::vector<int32_t> palmRow(kBones, 0), parentRows;
  for (size_t i = 0; i < rig.palm.size(); ++i) palmRow[rig.palm[i]] = int32_t(i);
  for (int32_t p : rig.fingerParents) parentRows.push_back(palmRow[p]);
  s.parentAbsolutes = take(absolutes, indices(parentRows));
  s.relatives = reshape(take(model.baseRelatives, indices(rig.fingerBones)), {kFingers, kFingerBones, 4, 4});
  s.inverseBaseAbsolutes =
      reshape(take(model.inverseBaseAbsolutes, indices(rig.fingerBones)), {kFingers, kFingerBones, 4, 4});
  return s;
}

/// Linear blend skinning: the vertices' positions [m, 3] from per-bone
/// transforms (first three rows) [bones, 12] and their weights [m, bones].
Tensor blend(const Tensor& weights, const Tensor& transforms, const Tensor& base) {
  return sum(reshape(matmul(weights, transforms), {-1, 3, 4}) * reshape(base, {-1, 1, 4}), {2});
}

/// The skinned positions [m, 3] (before the global rotation and translation)
/// for the fingers' angles [kFingers, kFingerThetas]: every bone's transform
/// (the five fingers' by one vmap), in bone order, blended by the weights.
Tensor skinned(const Rig& rig, const Skin& s, const Tensor& fingers) {
  auto one = [&rig](const Tensor& t, const Tensor& pa, const Tensor& rel, const Tensor& iba) {
    return fingerTransforms(rig.fingerAngles, t, pa, rel, iba);
  };
  Tensor fingerBones = vmap(one)(fingers, s.parentAbsolutes, s.relatives, s.inverseBaseAbsolutes);
  Tensor transforms = concatenate({s.palm, reshape(fingerBones, {kFingers * kFingerBones, 12})});
  std::vector<int32_t> row(kBones, 0); // bone b's row of `transforms`
  int32_t next = 0;
  for (int32_t b : rig.palm) row[b] = next++;
  for (int32_t b : rig.fingerBones) row[b] = next++;
  return blend(s.weights, take(transforms, indices(row)), s.base);
}

/// The global rotation (angle-axis, unit scale) and translation of skinned
/// positions [m, 3] (mirrored first for a mirrored model).
Tensor placed(const Rig& rig, Tensor positions, const Tensor& rotation, const Tensor& translation) {
  if (rig.mirrored) positions = positions * constant(Array(std::vector<double>{-1, 1, 1}, {3}));
  return matmul(positions, angleAxisRotation(rotation), {.transpose_b = true}) + translation;
}

/// The pieces of theta: the global rotation [3] and translation [3], and the
/// fingers' angles [kFingers, kFingerThetas].
struct Pose {
  Tensor rotation, translation, fingers;
};
Pose pose(const Tensor& theta) {
  return {theta(range(0, 3)), theta(range(3, 6)), reshape(theta(range(6, kThetas)), {kFingers, kFingerThetas})};
}

/// What the posed vertices are matched against: the points [n, 3] and, in
/// the complicated variant, each point's barycentric coordinates us [n, 2] in
/// its triangle (the skin's vertices being the triangles' corners, all first
/// corners, then all second, then all third: m = 3n); an invalid us is the
/// simple variant (vertex i against point i).
struct Matches {
  Tensor points, us;
};

/// Each point's combination of the vertices it is matched with, along the
/// last axis: x [..., m] -> [..., n]. Complicated variant: the corners
/// weighted by (u0, u1, 1 - u0 - u1), `shift` [2] (when valid) added to every
/// pair of us first; simple variant: x itself.
Tensor combine(const Matches& mt, const Tensor& x, const Tensor& shift) {
  if (!mt.us.valid()) return x;
  Tensor u = shift.valid() ? mt.us + shift : mt.us;
  Tensor u0 = u(all, 0), u1 = u(all, 1);
  Tensor coefficients = stack({u0, u1, 1.0 - u0 - u1}); // [3, n]
  std::vector<int64_t> shape = x.shape();
  shape.back() /= 3;
  shape.insert(shape.end() - 1, 3);
  return sum(reshape(x, shape) * coefficients, {int64_t(shape.size()) - 2});
}

/// The residuals [3n] from the combined skinned positions [n, 3] (see
/// `combine`): the barycentric coefficients sum to one, so combining the
/// corners before the global placement (an affine map) is the same as
/// combining them after it, and places n points instead of 3n.
Tensor residualsOf(const Rig& rig, const Matches& mt, const Tensor& combined, const Tensor& rotation,
                   const Tensor& translation) {
  return reshape(mt.points - placed(rig, combined, rotation, translation), {-1});
}

/// The residuals [3n] of the skin's vertices.
Tensor residuals(const Rig& rig, const Skin& s, const Tensor& theta, const Matches& mt) {
  const Pose p = pose(theta);
  Tensor combined = transpose(combine(mt, transpose(skinned(rig, s, p.fingers)), Tensor()));
  return residualsOf(rig, mt, combined, p.rotation, p.translation);
}

/// The residuals' Jacobian [3n, (2 +) kThetas], all of it by adjit's forward
/// mode, with the directions grouped by what they reach (jacfwd over theta
/// would push all 28 through every bone of the skinning):
/// - a finger's four angles move only its three bones: the Jacobian of that
///   finger's share of the combined skinned positions (jacfwd, vmap over the
///   fingers: 3 bones' weights per point instead of 22), pushed on through
///   the global placement and the residuals by one JVP batched over the 20
///   directions;
/// - the global rotation, translation and (complicated variant) the us shift
///   act after the skinning: jacfwd over those three parts as one structure
///   (each part its own JVP) of the residuals of the skinned positions.
/// In the complicated variant a shift [2] is added to every pair of us (so
/// its columns are the eval's d/du0 and d/du1, as each residual reads its own
/// pair only), and those two columns come first.
Tensor residualsJacobian(const Rig& rig, const Skin& s, const Tensor& theta, const Matches& mt) {
  const bool withShift = mt.us.valid();
  const Pose p = pose(theta);
  Tensor positions = transpose(skinned(rig, s, p.fingers)); // [3, m]
  auto ofGlobals = [&](const std::vector<Tensor>& g) {
    Tensor combined = transpose(combine(mt, positions, withShift ? g[2] : Tensor()));
    return residualsOf(rig, mt, combined, g[0], g[1]);
  };
  std::vector<Tensor> globals{p.rotation, p.translation};
  if (withShift) globals.push_back(full({2}, 0.0, DType::f64));
  const std::vector<Tensor> globalColumns = jacfwd(ofGlobals)(globals);
  // A finger's share of the combined skinned positions, transposed [3, n]:
  // its bones' transforms T [3 bones, 3, 4] times `weighted` [3 bones * 4,
  // n], each vertex's weight for that bone times its base position, combined
  // per point like the positions (skinning is linear in that table: it is
  // combined once, and the product runs over the n points, not the 3n
  // corners). No theta in it; made from the model's rows transposed
  // (Skin::columns), read contiguously. Written as T's rows times
  // `weighted`, a batch of directions of T stacks into one product's rows
  // (matmul's batching rule) and nothing else grows.
  auto share = [&rig](const Tensor& t, const Tensor& pa, const Tensor& rel, const Tensor& iba, const Tensor& weighted) {
    Tensor transforms = reshape(fingerTransforms(rig.fingerAngles, t, pa, rel, iba), {kFingerBones, 3, 4});
    return matmul(reshape(transpose(transforms, {1, 0, 2}), {3, kFingerBones * 4}), weighted);
  };
  const int64_t fingerBones = kFingers * kFingerBones;
  Tensor fingerWeights = reshape(s.columns(range(0, fingerBones)), {kFingers, kFingerBones, 1, -1});
  // Combined before its axes are merged: the loop making it then runs over
  // [fingers, bones, 4, n] x 3 corners with no index divided by another.
  Tensor base = reshape(s.columns(range(fingerBones, fingerBones + 4)), {1, 1, 4, -1});
  Tensor weighted = reshape(combine(mt, fingerWeights * base, Tensor()), {kFingers, kFingerBones * 4, -1});
  Tensor shareJacobians = vmap(jacfwd(share))(p.fingers, s.parentAbsolutes, s.relatives, s.inverseBaseAbsolutes,
                                              weighted); // [kFingers, 3, n, kFingerThetas]
  Tensor directions = reshape(transpose(shareJacobians, {0, 3, 2, 1}), {kFingers * kFingerThetas, -1, 3});
  Tensor combined = transpose(combine(mt, positions, Tensor()));
  auto ofCombined = [&](const Tensor& x) { return residualsOf(rig, mt, x, p.rotation, p.translation); };
  auto along = [&](const Tensor& d) { return jvp(ofCombined, std::make_tuple(combined), std::make_tuple(d)).second; };
  Tensor fingerColumns = transpose(vmap(along)(directions)); // [3n, 20]
  std::vector<Tensor> columns;
  if (withShift) columns.push_back(globalColumns[2]);
  columns.insert(columns.end(), {globalColumns[0], globalColumns[1], fingerColumns});
  return concatenate(columns, 1);
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
    const bool jac = jacobian_;
    const JitOptions options = gradbench::jitOptions(jac ? "ht_jacobian" : "ht_objective");
    if (!in_.complicated) {
      auto f = [rig, jac](Tensor theta, Tensor br, Tensor iba, Tensor bp, Tensor w, Tensor corr, Tensor pts) {
        const Skin s = makeSkin(rig, Model{br, iba, bp, w}, corr, jac);
        const Matches mt{pts, Tensor()};
        return jac ? residualsJacobian(rig, s, theta, mt) : residuals(rig, s, theta, mt);
      };
      run_ = [j = jit(f, options)](const Input& i, Array& out) {
        j.into(out, i.theta, i.baseRelatives, i.inverseBaseAbsolutes, i.basePositions, i.weights, i.correspondences,
               i.points);
      };
    } else {
      // The Jacobian's columns are the eval's: d/du0 and d/du1 of each
      // residual, then d/dtheta.
      auto f = [rig, jac](Tensor theta, Tensor us, Tensor br, Tensor iba, Tensor bp, Tensor w, Tensor tri,
                          Tensor corr, Tensor pts) {
        // Corner-major (Matches): combining the corners sums three runs of n.
        const Skin s = makeSkin(rig, Model{br, iba, bp, w}, reshape(transpose(take(tri, corr)), {-1}), jac);
        const Matches mt{pts, us};
        return jac ? residualsJacobian(rig, s, theta, mt) : residuals(rig, s, theta, mt);
      };
      run_ = [j = jit(f, options)](const Input& i, Array& out) {
        j.into(out, i.theta, i.us, i.baseRelatives, i.inverseBaseAbsolutes, i.basePositions, i.weights, i.triangles,
               i.correspondences, i.points);
      };
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
