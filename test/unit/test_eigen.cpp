// test/unit/test_eigen.cpp — adjit/eigen.h: Eigen matrices viewed and copied
// in both storage orders, results written into Eigen matrices in place.
#include <adjit/adjit.h>
#include <adjit/eigen.h>

#include <doctest/doctest.h>

using namespace adjit;

TEST_CASE("Eigen: row-major matrices and vectors are viewed in place, column-major ones transposed or copied") {
  using RowMat = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  RowMat a(2, 3);
  a << 1, 2, 3, 4, 5, 6;
  Eigen::VectorXd v(3);
  v << 1, 0, -1;
  const Array va = eigen::view(a), vv = eigen::view(v);
  CHECK(va.shape() == Shape{2, 3});
  CHECK(va.raw() == a.data());
  CHECK(vv.shape() == Shape{3});
  auto mv = jit([](Tensor m, Tensor x) { return matmul(m, x); });
  CHECK(mv(va, vv).to_vector<double>() == std::vector<double>{-2, -2});
  // Column-major (Eigen's default): its data is the row-major transpose.
  Eigen::MatrixXd c = a; // same values, column-major storage
  const Array vt = eigen::view_transposed(c);
  CHECK(vt.shape() == Shape{3, 2});
  CHECK(vt.raw() == c.data());
  CHECK(eigen::to_array(c).to_vector<double>() == std::vector<double>{1, 2, 3, 4, 5, 6});
  CHECK(eigen::to_array(c.transpose()).shape() == Shape{3, 2});
  // Results into an Eigen matrix without a copy, and copies back out.
  RowMat out(2, 3);
  jit([](Tensor m) { return m * 2.0; }).into(eigen::view(out), va);
  CHECK(out(1, 2) == 12);
  Array r = mv(va, vv);
  CHECK(eigen::map<double>(r)(1, 0) == -2);
  const Eigen::Vector2d fixed = eigen::to_matrix<Eigen::Vector2d>(r);
  CHECK(fixed(0) == -2);
  const Eigen::MatrixXd back = eigen::to_matrix<Eigen::MatrixXd>(va);
  CHECK(back(1, 0) == 4);
  CHECK_THROWS_WITH_AS(eigen::to_matrix<Eigen::Matrix3d>(va), "error: adjit::eigen::to_matrix: f64[2,3] does not fit a 3x3 matrix", Error);
  // A map over the caller's buffer, and a block that is not contiguous.
  double buffer[4] = {1, 2, 3, 4};
  Eigen::Map<RowMat> m(buffer, 2, 2);
  CHECK(eigen::view(m).raw() == buffer);
  Eigen::Map<RowMat, 0, Eigen::OuterStride<>> strided(buffer, 2, 1, Eigen::OuterStride<>(2));
  CHECK_THROWS_WITH_AS(eigen::view(strided), doctest::Contains("not contiguous"), Error);
}
